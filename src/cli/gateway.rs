//! `switchyard gateway`: the OpenAI-compatible front end, with the local model
//! loaded in the background for the small tier.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use switchyard::gateway::{self, GatewayOptions};
use switchyard::local_setup;
use switchyard::providers::local::chat::EngineSlot;

pub async fn run(config_file: Option<PathBuf>, listen: SocketAddr, allow_remote: bool) -> ExitCode {
    let local = EngineSlot::default();
    let core = Arc::new(super::open_core(config_file, local.clone()));
    tokio::spawn(local_setup::load_into(core.config(), local.clone()));
    match gateway::run(
        core,
        GatewayOptions {
            listen,
            allow_remote,
        },
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchyard: {message}");
            ExitCode::from(2)
        }
    }
}
