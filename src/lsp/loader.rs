//! Starting the local engine from the server: fetch the model if needed and load
//! it, showing both as `$/progress`, and explaining failures with `window/showMessage`.

use std::sync::Arc;

use tokio::sync::mpsc;
use tower_lsp_server::Client;
use tower_lsp_server::ls_types::{MessageType, NumberOrString, ProgressToken};

use crate::completion::CompletionService;
use crate::config::Config;
use crate::local_setup;
use crate::models::PullProgress;
use crate::providers::local::LocalEngine;
use crate::providers::local::chat::EngineSlot;

/// Loads the configured model and hands the engine to the completion service.
/// Until then completions answer empty (the service reports "not ready").
pub async fn load(
    client: Client,
    service: Arc<CompletionService>,
    slot: EngineSlot,
    config: Config,
    progress: bool,
) {
    service.set_engine(None);
    slot.set(None);
    let model = match local_setup::resolve(&config) {
        Ok(model) => model,
        Err(e) => return report_failure(&client, &service, e.to_string()).await,
    };
    let (events, rx) = mpsc::unbounded_channel();
    let reporter = tokio::spawn(drive_download_progress(client.clone(), rx, progress));
    let present =
        local_setup::ensure_present(&model, config.local.auto_pull, &ChannelProgress(events)).await;
    let _ = reporter.await;
    let path = match present {
        Ok(path) => path,
        Err(e) => return report_failure(&client, &service, e.to_string()).await,
    };

    let engine = LocalEngine::spawn(local_setup::engine_options(&model, &path, &config));
    service.set_engine(Some(Arc::new(engine.clone())));
    slot.set(Some(engine.clone()));
    let title = format!("switchyard: loading {}", model.name);
    let ongoing = match progress && create_token(&client, "switchyard/model-load").await {
        true => Some(
            client
                .progress(token("switchyard/model-load"), title)
                .begin()
                .await,
        ),
        false => None,
    };
    let ready = engine.wait_ready().await;
    let message = match &ready {
        Ok(info) => format!("{} ready in {} ms", info.name, info.load_ms),
        Err(e) => e.to_string(),
    };
    if let Some(ongoing) = ongoing {
        ongoing.finish_with_message(message.clone()).await;
    }
    match ready {
        Ok(_) => {
            tracing::info!("{message}");
            service.model_ready();
        }
        Err(e) => report_failure(&client, &service, e.to_string()).await,
    }
}

async fn report_failure(client: &Client, service: &CompletionService, reason: String) {
    tracing::error!("local model unavailable: {reason}");
    service.model_failed(reason.clone());
    let text = format!("switchyard: local completions are off: {reason}");
    client.show_message(MessageType::ERROR, text).await;
}

fn token(name: &str) -> ProgressToken {
    NumberOrString::String(name.to_owned())
}

async fn create_token(client: &Client, name: &str) -> bool {
    client.create_work_done_progress(token(name)).await.is_ok()
}

enum Event {
    Begin(String, Option<u64>),
    Advance(u64),
    Message(String),
    End,
}

/// Bridges the synchronous download progress callbacks to async notifications.
struct ChannelProgress(mpsc::UnboundedSender<Event>);

impl PullProgress for ChannelProgress {
    fn begin(&self, what: &str, total_bytes: Option<u64>) {
        let _ = self.0.send(Event::Begin(what.to_owned(), total_bytes));
    }
    fn advance(&self, bytes: u64) {
        let _ = self.0.send(Event::Advance(bytes));
    }
    fn message(&self, text: &str) {
        let _ = self.0.send(Event::Message(text.to_owned()));
    }
    fn end(&self) {
        let _ = self.0.send(Event::End);
    }
}

/// Shows a download as one `$/progress` with a percentage, reported only when it changes.
async fn drive_download_progress(
    client: Client,
    mut rx: mpsc::UnboundedReceiver<Event>,
    progress: bool,
) {
    let mut ongoing = None;
    let (mut total, mut done, mut shown) = (None, 0u64, u32::MAX);
    while let Some(event) = rx.recv().await {
        match event {
            Event::Begin(what, size) => {
                total = size;
                done = 0;
                tracing::info!("downloading {what}");
                if progress
                    && ongoing.is_none()
                    && create_token(&client, "switchyard/download").await
                {
                    let title = format!("switchyard: downloading {what}");
                    ongoing = Some(
                        client
                            .progress(token("switchyard/download"), title)
                            .with_percentage(0)
                            .begin()
                            .await,
                    );
                }
            }
            Event::Advance(bytes) => {
                done += bytes;
                let percent =
                    total.map_or(0, |t| (done.saturating_mul(100) / t.max(1)).min(100) as u32);
                if let (Some(ongoing), true) = (&ongoing, percent != shown) {
                    ongoing.report(percent).await;
                    shown = percent;
                }
            }
            Event::Message(text) => {
                tracing::info!("{text}");
                if let Some(ongoing) = &ongoing {
                    ongoing.report_with_message(text, shown.min(100)).await;
                }
            }
            Event::End => {
                if let Some(ongoing) = ongoing.take() {
                    ongoing.finish().await;
                }
            }
        }
    }
    if let Some(ongoing) = ongoing {
        ongoing.finish().await;
    }
}
