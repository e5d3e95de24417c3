//! What the editor is told while the session loads the local model: the
//! download and the load as `$/progress` (where the client shows it), and a
//! failure with `window/showMessage`. The loading itself is the core's
//! (`core::loading`); this only translates.

use std::sync::Mutex;

use tokio::sync::mpsc;
use tower_lsp_server::ls_types::{MessageType, NumberOrString, ProgressToken};
use tower_lsp_server::{Bounded, Client, NotCancellable, OngoingProgress};

use switchyard_core::loading::LoadReport;
use switchyard_engine::ModelInfo;
use switchyard_models::PullProgress;

/// The session's [`LoadReport`] for an editor: events queue until
/// [`EditorReport::start`] knows whether the client shows progress.
pub struct EditorReport {
    events: mpsc::UnboundedSender<Event>,
    waiting: Mutex<Option<(Client, mpsc::UnboundedReceiver<Event>)>>,
}

impl EditorReport {
    pub fn new(client: Client) -> EditorReport {
        let (events, rx) = mpsc::unbounded_channel();
        EditorReport {
            events,
            waiting: Mutex::new(Some((client, rx))),
        }
    }

    /// Starts telling the editor, with `$/progress` where it shows it.
    pub fn start(&self, progress: bool) {
        if let Some((client, rx)) = self.waiting.lock().expect("report lock").take() {
            tokio::spawn(drive(client, rx, progress));
        }
    }

    fn send(&self, event: Event) {
        let _ = self.events.send(event);
    }
}

impl PullProgress for EditorReport {
    fn begin(&self, what: &str, total_bytes: Option<u64>) {
        self.send(Event::Begin(what.to_owned(), total_bytes));
    }
    fn advance(&self, bytes: u64) {
        self.send(Event::Advance(bytes));
    }
    fn message(&self, text: &str) {
        self.send(Event::Message(text.to_owned()));
    }
    fn end(&self) {
        self.send(Event::End);
    }
}

impl LoadReport for EditorReport {
    fn loading(&self, model: &str) {
        self.send(Event::Loading(model.to_owned()));
    }
    fn finished(&self, outcome: &Result<ModelInfo, String>) {
        self.send(Event::Finished(match outcome {
            Ok(info) => Ok(format!("{} ready in {} ms", info.name, info.load_ms)),
            Err(reason) => Err(reason.clone()),
        }));
    }
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
    /// The engine is loading the model.
    Loading(String),
    /// The load's message: the model ready, or why there is none.
    Finished(Result<String, String>),
}

/// Tells the editor each event in turn: a download as one `$/progress` with
/// a percentage, the load as another, a failure as an error message.
async fn drive(client: Client, mut rx: mpsc::UnboundedReceiver<Event>, progress: bool) {
    let mut download = Download::default();
    let mut load = None;
    while let Some(event) = rx.recv().await {
        match event {
            Event::Loading(model) if progress => {
                let title = format!("switchyard: loading {model}");
                load = super::progress::begin(&client, token("switchyard/model-load"), title).await;
            }
            Event::Loading(_) => {}
            Event::Finished(outcome) => {
                let message = match &outcome {
                    Ok(message) | Err(message) => message.clone(),
                };
                if let Some(ongoing) = load.take() {
                    ongoing.finish_with_message(message).await;
                }
                if let Err(reason) = outcome {
                    let text = format!("switchyard: local completions are off: {reason}");
                    client.show_message(MessageType::ERROR, text).await;
                }
            }
            download_event => download.tell(&client, download_event, progress).await,
        }
    }
    download.finish().await;
}

/// A download's `$/progress`, its percentage reported only when it changes.
#[derive(Default)]
struct Download {
    ongoing: Option<OngoingProgress<Bounded, NotCancellable>>,
    total: Option<u64>,
    done: u64,
    shown: Option<u32>,
}

impl Download {
    async fn tell(&mut self, client: &Client, event: Event, progress: bool) {
        match event {
            Event::Begin(what, size) => {
                (self.total, self.done) = (size, 0);
                tracing::info!("downloading {what}");
                if progress
                    && self.ongoing.is_none()
                    && create_token(client, "switchyard/download").await
                {
                    let title = format!("switchyard: downloading {what}");
                    let begun = client
                        .progress(token("switchyard/download"), title)
                        .with_percentage(0);
                    self.ongoing = Some(begun.begin().await);
                }
            }
            Event::Advance(bytes) => {
                self.done += bytes;
                let percent = self.total.map_or(0, |t| {
                    (self.done.saturating_mul(100) / t.max(1)).min(100) as u32
                });
                if let (Some(ongoing), true) = (&self.ongoing, Some(percent) != self.shown) {
                    ongoing.report(percent).await;
                    self.shown = Some(percent);
                }
            }
            Event::Message(text) => {
                tracing::info!("{text}");
                if let Some(ongoing) = &self.ongoing {
                    let percent = self.shown.unwrap_or(0);
                    ongoing.report_with_message(text, percent).await;
                }
            }
            Event::End => self.finish().await,
            Event::Loading(_) | Event::Finished(_) => {}
        }
    }

    async fn finish(&mut self) {
        if let Some(ongoing) = self.ongoing.take() {
            ongoing.finish().await;
        }
    }
}
