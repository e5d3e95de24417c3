//! `switchyard gateway`: the OpenAI-compatible front end, with the local model
//! loaded in the background for the small tier.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use switchyard::gateway::{self, GatewayOptions};
use switchyard_models::NoProgress;

pub async fn run(config_file: Option<PathBuf>, listen: SocketAddr, allow_remote: bool) -> ExitCode {
    let session = super::open_session(config_file, Arc::new(NoProgress));
    session.start_engine();
    match gateway::run(
        session,
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
