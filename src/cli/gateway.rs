//! `switchyard gateway`: the OpenAI-compatible front end, with the local model
//! loaded in the background for the small tier.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use switchyard::config::Config;
use switchyard::gateway::{self, GatewayOptions};
use switchyard::local_setup;
use switchyard::models::NoProgress;
use switchyard::providers::local::LocalEngine;
use switchyard::providers::local::chat::EngineSlot;

pub async fn run(config_file: Option<PathBuf>, listen: SocketAddr, allow_remote: bool) -> ExitCode {
    let local = EngineSlot::default();
    let core = Arc::new(super::open_core(config_file, local.clone()));
    tokio::spawn(load_local(core.config(), local.clone()));
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

/// Loads the local model if it is (or may be fetched) here; without it the
/// small tier has only its remote entries.
async fn load_local(config: Arc<Config>, slot: EngineSlot) {
    let model = match local_setup::resolve(&config) {
        Ok(model) => model,
        Err(e) => return tracing::warn!("gateway: no local model: {e}"),
    };
    match local_setup::ensure_present(&model, config.local.auto_pull, &NoProgress).await {
        Ok(path) => {
            let engine = LocalEngine::spawn(local_setup::engine_options(&model, &path, &config));
            slot.set(Some(engine));
        }
        Err(e) => tracing::warn!("gateway: local model unavailable: {e}"),
    }
}
