//! The language server's state, and what its handlers share: the client's
//! capabilities, the session the core owns the work in (configuration,
//! completion, model loading, prewarming), status reporting.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use dashmap::DashMap;
use serde_json::Value;
use tower_lsp_server::Client;
use tower_lsp_server::ls_types::*;

use tokio_util::sync::CancellationToken;

use super::documents::DocumentStore;
use super::parked::EditorParking;
use super::position::PositionEncoding;
use super::progress;
use super::wire::{StatusNotification, StatusParams};
use switchyard_completion::CompletionService;
use switchyard_completion::controls::Snooze;
use switchyard_completion::stats::{self, StatsLog};
use switchyard_completion::status::{CompletionState, CompletionStatus};
use switchyard_completion::suitability::unsuitable;
use switchyard_completion::tracking::Tracking;
use switchyard_config::{ConfigError, ConfigLayers};
use switchyard_core::Core;
use switchyard_core::prewarm::{Pause, Place};
use switchyard_core::session::{self, Session};
use switchyard_router::Router;

pub struct Backend {
    pub(super) client: Client,
    pub(super) documents: Arc<DocumentStore>,
    /// The work the core owns: the configuration, health, status and the
    /// router in force; completion, the local engine, prewarming.
    pub(super) session: Arc<Session>,
    /// What became of each suggestion shown, for `switchyard stats`.
    pub(super) tracking: Arc<Tracking>,
    pub(super) encoding: RwLock<PositionEncoding>,
    pub(super) capabilities: RwLock<ClientCapabilities>,
    /// Tells the editor what the session's loads of the model do; started
    /// at `initialized`, once the client's `$/progress` support is known.
    pub(super) load_report: Arc<super::loader::EditorReport>,
    /// Where parked refactors' answers go (the session parks and resumes).
    pub(super) editor_parking: Arc<EditorParking>,
    /// Cancel buttons of running actions, by progress token.
    pub(super) progress_cancels: DashMap<NumberOrString, CancellationToken>,
}

#[allow(deprecated)] // root_uri: older clients send only it.
pub(super) fn workspace_owner(params: &InitializeParams) -> String {
    params
        .workspace_folders
        .as_ref()
        .and_then(|folders| folders.first())
        .map(|f| f.uri.to_string())
        .or_else(|| params.root_uri.as_ref().map(|u| u.to_string()))
        .unwrap_or_default()
}

impl Backend {
    pub(super) fn new(
        client: Client,
        layers: ConfigLayers,
        config_path: Option<PathBuf>,
    ) -> Backend {
        let core = Arc::new(Core::open(layers, Default::default(), config_path));
        for e in core.problems() {
            tracing::warn!("{e}");
        }
        let documents = Arc::new(DocumentStore::default());
        let editor_parking = Arc::new(EditorParking::new(client.clone(), documents.clone()));
        let load_report = Arc::new(super::loader::EditorReport::new(client.clone()));
        let open = documents.clone();
        let session = Session::open(
            core,
            session::Parts {
                report: load_report.clone(),
                snooze: Arc::new(Snooze::kept_in(&switchyard_base::paths::state_dir())),
                open_documents: Some(Arc::new(move || open.texts())),
            },
        );
        Backend {
            client,
            documents,
            session,
            tracking: Arc::new(Tracking::new(StatsLog::at(stats::default_path()))),
            encoding: RwLock::new(PositionEncoding::Utf16),
            capabilities: RwLock::new(ClientCapabilities::default()),
            load_report,
            editor_parking,
            progress_cancels: DashMap::new(),
        }
    }

    pub(super) fn core(&self) -> &Arc<Core> {
        self.session.core()
    }

    pub(super) fn completion(&self) -> &Arc<CompletionService> {
        self.session.completion()
    }

    pub(super) fn router(&self) -> Arc<Router> {
        self.core().router()
    }

    pub(super) async fn cancel_progress(&self, params: WorkDoneProgressCancelParams) {
        if let Some((_, cancel)) = self.progress_cancels.remove(&params.token) {
            cancel.cancel();
        }
    }

    /// Tells the editor about status changes: `switchyard/status` to clients that
    /// opted in, otherwise `window/showMessage` on meaningful changes only.
    pub(super) fn watch_status(&self) {
        let (client, mut rx) = (self.client.clone(), self.core().subscribe());
        let mut completion = self.completion().subscribe_status();
        let shows_progress = self.supports_progress();
        let core = self.core().clone();
        let mut in_force = core.follow();
        tokio::spawn(async move {
            let mut before = rx.borrow_and_update().clone();
            // Loading is what a reader assumes at start; anything else is told.
            let mut completion_before = CompletionStatus::default();
            loop {
                let now = rx.borrow_and_update().clone();
                let completion_now = completion.borrow_and_update().clone();
                // As configured now: turning notifications on applies at once.
                if in_force.borrow_and_update().config.status_notifications {
                    let rule = core.workspace_rule();
                    let params = StatusParams::for_workspace(&now, rule, &completion_now);
                    client.send_notification::<StatusNotification>(params).await;
                } else {
                    if let Some(message) = now.change_message(&before) {
                        let kind = if now.downshifted_from.is_some() {
                            MessageType::WARNING
                        } else {
                            MessageType::INFO
                        };
                        client.show_message(kind, message).await;
                    }
                    if completion_now.differs_for_a_reader(&completion_before) {
                        // Apart, so a client slow to take the progress holds
                        // up none of the messages after it.
                        let (client, now) = (client.clone(), completion_now.clone());
                        tokio::spawn(async move {
                            tell_completion_state(&client, &now, shows_progress).await
                        });
                        completion_before = completion_now;
                    }
                }
                before = now;
                let changed = tokio::select! {
                    changed = rx.changed() => changed.is_ok(),
                    changed = completion.changed() => changed.is_ok(),
                    changed = in_force.changed() => changed.is_ok(),
                };
                if !changed {
                    return;
                }
            }
        });
    }

    pub(super) fn encoding(&self) -> PositionEncoding {
        *self.encoding.read().expect("encoding lock")
    }

    pub(super) fn supports_progress(&self) -> bool {
        let caps = self.capabilities.read().expect("capabilities lock");
        caps.window
            .as_ref()
            .and_then(|w| w.work_done_progress)
            .unwrap_or(false)
    }

    pub(super) fn supports_configuration(&self) -> bool {
        let caps = self.capabilities.read().expect("capabilities lock");
        caps.workspace
            .as_ref()
            .and_then(|w| w.configuration)
            .unwrap_or(false)
    }

    /// The client watches files for the server when asked to.
    pub(super) fn watches_files(&self) -> bool {
        let caps = self.capabilities.read().expect("capabilities lock");
        caps.workspace
            .as_ref()
            .and_then(|w| w.did_change_watched_files)
            .and_then(|w| w.dynamic_registration)
            .unwrap_or(false)
    }

    /// Changes a layer and puts the result in force (the session rebuilds
    /// the router, and reloads the engine where its settings changed), then
    /// tells the user what could not be applied.
    pub(super) async fn apply_layers(&self, change: impl FnOnce(&mut ConfigLayers)) {
        let changed = self.session.reconfigure(change);
        self.report_config_errors(&changed.problems).await;
    }

    pub(super) async fn report_config_errors(&self, errors: &[ConfigError]) {
        for e in errors {
            // An ignored key that decides nothing is a warning; the rest are errors.
            let (kind, then) = match (e.ignored, e.decides_what_leaves()) {
                (_, true) => (
                    MessageType::ERROR,
                    " (only the local model serves until it can be applied)",
                ),
                (true, false) => (MessageType::WARNING, ""),
                (false, false) => (MessageType::ERROR, " (keeping the previous value)"),
            };
            tracing::warn!("{e}");
            let text = format!("switchyard: {e}{then}");
            self.client.show_message(kind, text).await;
        }
    }

    /// Whether the workspace layer was fetched and applied.
    pub(super) async fn fetch_workspace_configuration(&self) -> bool {
        if !self.supports_configuration() {
            return false;
        }
        let item = ConfigurationItem {
            scope_uri: None,
            section: Some("switchyard".into()),
        };
        match self.client.configuration(vec![item]).await {
            Ok(mut values) => {
                let value = values.pop().unwrap_or(Value::Null);
                self.apply_layers(|layers| layers.workspace = Some(value))
                    .await;
                true
            }
            Err(e) => {
                tracing::warn!("workspace/configuration failed: {e}");
                false
            }
        }
    }

    /// The user paused in `uri` (see `core::prewarm`): the session
    /// prewarms there where the document is worth completing in.
    pub(super) fn paused(&self, uri: &Uri, pause: Pause) {
        let place = self
            .documents
            .get(uri)
            .ok()
            .filter(|doc| unsuitable(&doc.rope).is_none())
            .map(|doc| Place {
                rope: doc.rope,
                cursor: doc.cursor,
            });
        self.session.paused(uri.as_str(), place, pause);
    }
}

pub(super) fn negotiate_encoding(caps: &ClientCapabilities) -> PositionEncoding {
    let offered = caps
        .general
        .as_ref()
        .and_then(|g| g.position_encodings.as_ref());
    if offered.is_some_and(|encodings| encodings.contains(&PositionEncodingKind::UTF8)) {
        PositionEncoding::Utf8
    } else {
        PositionEncoding::Utf16
    }
}

/// The completion state for a client without `switchyard/status`: a
/// progress that begins and ends at once, whose end message Helix shows in
/// its status line ("switchyard: completions ⋅ snoozed for 30 more min");
/// a message where the client has no progress.
async fn tell_completion_state(client: &Client, status: &CompletionStatus, shows_progress: bool) {
    let message = status.message(switchyard_base::clock::now_ms());
    let token = progress::numbered_token("completions");
    let begun = match shows_progress {
        true => progress::begin(client, token, "completions".into()).await,
        false => None,
    };
    if let Some(ongoing) = begun {
        ongoing.finish_with_message(message).await;
    } else if status.state != CompletionState::Failed {
        // (A model that failed has had its error message from the loader.)
        let kind = match status.state {
            CompletionState::Late => MessageType::WARNING,
            _ => MessageType::INFO,
        };
        client
            .show_message(kind, format!("switchyard completions: {message}"))
            .await;
    }
}
