//! Loading the local model, the same for every front end: shut the engine
//! in force down, resolve the configured model, fetch it where the
//! configuration allows, start the engine, hand it to completion and to the
//! router's slot, and wait until it is ready. Each step is said to the front
//! end's [`LoadReport`], which only translates (`$/progress` and messages in
//! the editor, lines on a terminal, the gateway's log).

use std::sync::Arc;

use switchyard_completion::CompletionService;
use switchyard_config::Config;
use switchyard_engine::ModelInfo;
use switchyard_models::{NoProgress, PullProgress, TerminalProgress};
use switchyard_providers::local::chat::EngineSlot;

/// What a front end is told of a load: the download, as [`PullProgress`];
/// the engine starting; how the load ended.
pub trait LoadReport: PullProgress + Send + Sync {
    /// The model is present and the engine is loading it.
    fn loading(&self, _model: &str) {}
    /// The engine is ready, or why there is no local model.
    fn finished(&self, _outcome: &Result<ModelInfo, String>) {}
}

/// Nothing to tell beyond the log (the gateway).
impl LoadReport for NoProgress {}

/// A download's progress bar on the terminal; the rest the caller prints.
impl LoadReport for TerminalProgress {}

/// Loads the model `config` names into `slot` and `completion`, after
/// shutting down the engine there. Until it is ready completions answer
/// "not ready"; a failure is kept as the reason they answer nothing.
pub async fn load(
    config: &Config,
    slot: &EngineSlot,
    completion: &CompletionService,
    report: &dyn LoadReport,
) -> Result<ModelInfo, String> {
    completion.set_engine(None);
    if let Some(old) = slot.get() {
        slot.set(None);
        let _ = tokio::task::spawn_blocking(move || old.shutdown()).await;
    }
    let outcome = start(config, slot, completion, report).await;
    match &outcome {
        Ok(info) => {
            tracing::info!("{} ready in {} ms", info.name, info.load_ms);
            completion.model_ready();
        }
        Err(reason) => {
            tracing::error!("local model unavailable: {reason}");
            completion.model_failed(reason.clone());
        }
    }
    report.finished(&outcome);
    outcome
}

async fn start(
    config: &Config,
    slot: &EngineSlot,
    completion: &CompletionService,
    report: &dyn LoadReport,
) -> Result<ModelInfo, String> {
    let model = switchyard_config::local_setup::resolve(config).map_err(|e| e.to_string())?;
    let path =
        switchyard_config::local_setup::ensure_present(&model, config.local.auto_pull, report)
            .await
            .map_err(|e| e.to_string())?;
    let engine = switchyard_config::local_setup::start_engine(&model, &path, config);
    completion.set_engine(Some(Arc::new(engine.clone())));
    slot.set(Some(engine.clone()));
    report.loading(&model.name);
    engine.wait_ready().await.map_err(|e| e.to_string())
}
