//! The `LanguageServer` implementation: lifecycle, document sync, configuration.

use super::kept_local::status_params;
use crate::router::status::StatusReport;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use dashmap::DashMap;
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{Client, LanguageServer, LspService, Server};

use tokio_util::sync::CancellationToken;

use super::actions;
use super::documents::DocumentStore;
use super::parked::Parking;
use super::position::PositionEncoding;
use super::wire::StatusNotification;
use crate::completion::CompletionService;
use crate::config::{Config, ConfigError, ConfigLayers};
use crate::core::Core;
use crate::providers::local::chat::EngineSlot;
use crate::resilience::park::ParkingLot;
use crate::router::Router;

/// Requests the server works on at once. Completion requests wait on the engine,
/// and notifications queue behind them, so leave plenty of room.
const CONCURRENCY: usize = 64;

pub struct Backend {
    pub(super) client: Client,
    pub(super) documents: Arc<DocumentStore>,
    pub(super) completion: Arc<CompletionService>,
    pub(super) encoding: RwLock<PositionEncoding>,
    capabilities: RwLock<ClientCapabilities>,
    /// Edits and cursor moves per document, so a debounced prewarm can tell
    /// whether it is stale, and in all documents, so an idle refresh can.
    activity: Arc<DashMap<Uri, u64>>,
    any_activity: Arc<AtomicU64>,
    local_engine: EngineSlot,
    /// The routing core: the configuration, health, status, parked work,
    /// the router in force.
    pub(super) core: Arc<Core>,
    /// Parked refactors; `None` when the state dir cannot hold them.
    pub(super) parking: Option<Arc<Parking>>,
    /// Cancel buttons of running actions, by progress token.
    pub(super) progress_cancels: DashMap<NumberOrString, CancellationToken>,
}

/// Runs the server on stdin/stdout until the client exits.
pub async fn serve_stdio(layers: ConfigLayers, config_path: Option<PathBuf>) {
    let local_engine = EngineSlot::default();
    let slot = local_engine.clone();
    let (service, socket) =
        LspService::build(|client| Backend::new(client, layers, config_path, slot))
            .custom_method("textDocument/inlineCompletion", Backend::inline_completion)
            .custom_method("window/workDoneProgress/cancel", Backend::cancel_progress)
            .finish();
    let (server_in, client_side_in) = tokio::io::duplex(1 << 16);
    let (client_side_out, server_out) = tokio::io::duplex(1 << 16);
    let relay = super::framing::relay(
        tokio::io::stdin(),
        tokio::io::stdout(),
        client_side_in,
        client_side_out,
    );
    let server = async move {
        Server::new(server_in, server_out, socket)
            .concurrency_level(CONCURRENCY)
            .serve(service)
            .await;
    };
    tokio::join!(relay, server);
    if let Some(engine) = local_engine.get() {
        let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
    }
}

/// Which workspace this window is: parked work belongs to it.
#[allow(deprecated)] // root_uri: older clients send only it.
fn workspace_owner(params: &InitializeParams) -> String {
    params
        .workspace_folders
        .as_ref()
        .and_then(|folders| folders.first())
        .map(|f| f.uri.to_string())
        .or_else(|| params.root_uri.as_ref().map(|u| u.to_string()))
        .unwrap_or_default()
}

impl Backend {
    fn new(
        client: Client,
        layers: ConfigLayers,
        config_path: Option<PathBuf>,
        local_engine: EngineSlot,
    ) -> Backend {
        let core = Arc::new(Core::open(layers, local_engine.clone(), config_path));
        for e in core.problems() {
            tracing::warn!("{e}");
        }
        let documents = Arc::new(DocumentStore::default());
        let parked_dir = crate::paths::state_dir().join("parked");
        let parking = match ParkingLot::open(parked_dir.clone()) {
            Ok(lot) => Some(Arc::new(Parking::new(
                lot,
                client.clone(),
                documents.clone(),
                core.clone(),
            ))),
            Err(error) => {
                tracing::error!(
                    "cannot keep parked tasks in {}: {error}; refactors that cannot be served now will fail instead",
                    parked_dir.display()
                );
                None
            }
        };
        let completion = Arc::new(CompletionService::following(core.follow_config()));
        completion.set_remote(Some(core.clone()));
        let open = documents.clone();
        completion.set_open_documents(Arc::new(move || open.texts()));
        Backend {
            client,
            documents,
            completion,
            encoding: RwLock::new(PositionEncoding::Utf16),
            capabilities: RwLock::new(ClientCapabilities::default()),
            activity: Arc::new(DashMap::new()),
            any_activity: Arc::new(AtomicU64::new(0)),
            local_engine,
            core,
            parking,
            progress_cancels: DashMap::new(),
        }
    }

    pub(super) fn router(&self) -> Arc<Router> {
        self.core.router()
    }

    async fn cancel_progress(&self, params: WorkDoneProgressCancelParams) {
        if let Some((_, cancel)) = self.progress_cancels.remove(&params.token) {
            cancel.cancel();
        }
    }

    /// Tells the editor about status changes: `switchyard/status` to clients that
    /// opted in, otherwise `window/showMessage` on meaningful changes only.
    fn watch_status(&self) {
        let (client, mut rx) = (self.client.clone(), self.core.subscribe());
        let notify = self.config().status_notifications;
        let core = self.core.clone();
        let params = move |report: &StatusReport| status_params(report, &core);
        tokio::spawn(async move {
            let mut before = rx.borrow_and_update().clone();
            if notify {
                client
                    .send_notification::<StatusNotification>(params(&before))
                    .await;
            }
            while rx.changed().await.is_ok() {
                let now = rx.borrow_and_update().clone();
                if notify {
                    client
                        .send_notification::<StatusNotification>(params(&now))
                        .await;
                } else if let Some(message) = now.change_message(&before) {
                    let kind = if now.downshifted_from.is_some() {
                        MessageType::WARNING
                    } else {
                        MessageType::INFO
                    };
                    client.show_message(kind, message).await;
                }
                before = now;
            }
        });
    }

    pub(super) fn encoding(&self) -> PositionEncoding {
        *self.encoding.read().expect("encoding lock")
    }

    pub(super) fn config(&self) -> Arc<Config> {
        self.core.config()
    }

    pub(super) fn supports_progress(&self) -> bool {
        let caps = self.capabilities.read().expect("capabilities lock");
        caps.window
            .as_ref()
            .and_then(|w| w.work_done_progress)
            .unwrap_or(false)
    }

    fn supports_configuration(&self) -> bool {
        let caps = self.capabilities.read().expect("capabilities lock");
        caps.workspace
            .as_ref()
            .and_then(|w| w.configuration)
            .unwrap_or(false)
    }

    /// The client watches files for the server when asked to.
    fn watches_files(&self) -> bool {
        let caps = self.capabilities.read().expect("capabilities lock");
        caps.workspace
            .as_ref()
            .and_then(|w| w.did_change_watched_files)
            .and_then(|w| w.dynamic_registration)
            .unwrap_or(false)
    }

    /// Changes a layer and puts the result in force (the core rebuilds the
    /// router where needed), reloads the engine when the model settings
    /// changed, then tells the user what could not be applied.
    async fn apply_layers(&self, change: impl FnOnce(&mut ConfigLayers)) {
        let changed = self.core.reconfigure(change);
        if changed.engine {
            tracing::info!("model settings changed; reloading the local engine");
            self.start_engine(&changed.config);
        }
        self.report_config_errors(&changed.problems).await;
    }

    async fn report_config_errors(&self, errors: &[ConfigError]) {
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

    fn start_engine(&self, config: &Config) {
        let config = config.clone();
        let (client, service, slot) = (
            self.client.clone(),
            self.completion.clone(),
            self.local_engine.clone(),
        );
        tokio::spawn(super::loader::load(
            client,
            service,
            slot,
            config,
            self.supports_progress(),
        ));
    }

    /// Whether the workspace layer was fetched and applied.
    async fn fetch_workspace_configuration(&self) -> bool {
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

    /// Prewarms the engine's cache where the user is once they pause: after
    /// an edit, or at a cursor the editor revealed.
    fn schedule_prewarm(&self, uri: Uri) {
        let count = {
            let mut entry = self.activity.entry(uri.clone()).or_insert(0);
            *entry += 1;
            *entry
        };
        let debounce = Duration::from_millis(self.completion.config().prewarm_debounce_ms);
        let Ok(doc) = self.documents.get(&uri) else {
            return;
        };
        let any = self.any_activity.fetch_add(1, Ordering::Relaxed) + 1;
        let (counts, all, service) = (
            self.activity.clone(),
            self.any_activity.clone(),
            self.completion.clone(),
        );
        tokio::spawn(async move {
            tokio::time::sleep(debounce).await;
            if counts.get(&uri).is_none_or(|c| *c != count)
                || doc.unsuitable_for_completion().is_some()
            {
                return;
            }
            let cursor = doc.cursor.unwrap_or_else(|| opening_cursor(&doc.rope));
            service.prewarm(uri.as_str(), &doc.rope, cursor);
            // Repository context changes only while the user is idle.
            tokio::time::sleep(service.context_refresh_idle()).await;
            if all.load(Ordering::Relaxed) == any {
                service.refresh_context(uri.as_str(), &doc.rope, cursor);
            }
        });
    }
}

/// Where to prewarm a just-opened document: the end of its first window, so the
/// cache holds the top of the file, which a later window anchored at line 0 shares.
fn opening_cursor(rope: &ropey::Rope) -> usize {
    let chars = 1_500.min(rope.len_chars());
    rope.line_to_char(rope.char_to_line(chars))
}

fn negotiate_encoding(caps: &ClientCapabilities) -> PositionEncoding {
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

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        let encoding = negotiate_encoding(&params.capabilities);
        *self.encoding.write().expect("encoding lock") = encoding;
        let progress = params
            .capabilities
            .window
            .as_ref()
            .and_then(|w| w.work_done_progress)
            .unwrap_or(false);
        if let Some(parking) = &self.parking {
            parking.set_session(workspace_owner(&params), encoding, progress);
        }
        self.core
            .set_roots(super::kept_local::workspace_roots(&params));
        *self.capabilities.write().expect("capabilities lock") = params.capabilities;
        self.core
            .reconfigure(|layers| layers.initialization_options = params.initialization_options);
        let position_encoding = match encoding {
            PositionEncoding::Utf8 => PositionEncodingKind::UTF8,
            PositionEncoding::Utf16 => PositionEncodingKind::UTF16,
        };
        Ok(InitializeResult {
            server_info: Some(ServerInfo {
                name: "switchyard".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            capabilities: ServerCapabilities {
                position_encoding: Some(position_encoding),
                text_document_sync: Some(TextDocumentSyncCapability::Options(
                    TextDocumentSyncOptions {
                        open_close: Some(true),
                        change: Some(TextDocumentSyncKind::INCREMENTAL),
                        ..Default::default()
                    },
                )),
                completion_provider: Some(CompletionOptions::default()),
                code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
                execute_command_provider: Some(ExecuteCommandOptions {
                    commands: actions::COMMANDS.iter().map(|c| c.to_string()).collect(),
                    ..Default::default()
                }),
                inline_completion_provider: Some(OneOf::Left(true)),
                ..Default::default()
            },
            offset_encoding: None,
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        // Status first, so nothing that happens while the configuration is
        // fetched goes untold.
        self.watch_status();
        // Applying the workspace layer reports every layer's errors; without
        // it, report them here (once either way).
        if !self.fetch_workspace_configuration().await {
            self.report_config_errors(&self.core.problems()).await;
        }
        self.start_engine(&self.config());
        let resilience = self.config().resilience.clone();
        if let Some(parking) = &self.parking {
            let every = Duration::from_millis(resilience.resume_interval_ms);
            tokio::spawn(parking.clone().run(every));
        }
        let core = self.core.clone();
        let primary_every = (resilience.primary_canary_ms > 0)
            .then(|| Duration::from_millis(resilience.primary_canary_ms));
        tokio::spawn(crate::router::canary::upkeep(
            move || core.router(),
            Duration::from_millis(resilience.canary_interval_ms),
            primary_every,
            |_| {},
        ));
        // Last: a client slow to answer this holds up nothing else.
        self.watch_ignore_files(self.watches_files()).await;
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let doc = params.text_document;
        self.documents
            .open(doc.uri.clone(), &doc.text, doc.version, doc.language_id);
        self.schedule_prewarm(doc.uri);
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        // Applied before the first await: edits keep their arrival order (ARCHITECTURE.md invariant 3).
        let uri = params.text_document.uri;
        let applied = self.documents.change(
            &uri,
            params.text_document.version,
            params.content_changes,
            self.encoding(),
        );
        match applied {
            Ok(()) => self.schedule_prewarm(uri),
            Err(e) => {
                tracing::warn!("{e}");
                self.client
                    .log_message(MessageType::WARNING, format!("switchyard: {e}"))
                    .await;
            }
        }
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        let uri = params.text_document.uri;
        self.documents.close(&uri);
        self.activity.remove(&uri);
        // Closing is activity: a pending repository refresh must not bring the
        // closed document back.
        self.any_activity.fetch_add(1, Ordering::Relaxed);
        self.completion.forget(uri.as_str());
    }

    async fn did_change_configuration(&self, params: DidChangeConfigurationParams) {
        // Clients either push the settings or expect us to pull them.
        let pushed = match params.settings {
            Value::Object(mut map) if map.contains_key("switchyard") => map.remove("switchyard"),
            Value::Null => None,
            Value::Object(map) if map.is_empty() => None,
            other => Some(other),
        };
        match pushed {
            Some(value) => {
                self.apply_layers(|layers| layers.workspace = Some(value))
                    .await
            }
            None => {
                self.fetch_workspace_configuration().await;
            }
        }
    }

    async fn did_change_watched_files(&self, params: DidChangeWatchedFilesParams) {
        self.ignore_files_changed(&params);
    }

    async fn completion(&self, params: CompletionParams) -> Result<Option<CompletionResponse>> {
        self.completion_items(params).await
    }

    async fn code_action(&self, params: CodeActionParams) -> Result<Option<CodeActionResponse>> {
        // The range is the cursor's (or the selection's, its active end last
        // for a downward selection): the next completion will be asked there.
        let uri = &params.text_document.uri;
        if let Ok(true) = self
            .documents
            .reveal(uri, params.range.end, self.encoding())
        {
            self.schedule_prewarm(uri.clone());
        }
        Ok(Some(self.code_actions(params)))
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> Result<Option<Value>> {
        self.run_command(params).await
    }
}
