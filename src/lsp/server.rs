//! The `LanguageServer` implementation: lifecycle, document sync, configuration.

use super::backend::{Backend, negotiate_encoding, workspace_owner};
use std::path::PathBuf;

use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{LanguageServer, LspService, Server};

use super::actions;
use super::documents::Applied;
use super::position::PositionEncoding;
use switchyard_completion::acceptance::Edit;
use switchyard_config::ConfigLayers;
use switchyard_core::prewarm::Pause;

/// Requests the server works on at once. Completion requests wait on the engine,
/// and notifications queue behind them, so leave plenty of room.
const CONCURRENCY: usize = 64;

/// Runs the server on stdin/stdout until the client exits.
pub async fn serve_stdio(layers: ConfigLayers, config_path: Option<PathBuf>) {
    let mut session = None;
    let (service, socket) = LspService::build(|client| {
        let backend = Backend::new(client, layers, config_path);
        session = Some(backend.session.clone());
        backend
    })
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
    if let Some(session) = session {
        session.shutdown().await;
    }
}

/// Which workspace this window is: parked work belongs to it.
impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        let encoding = negotiate_encoding(&params.capabilities);
        *self.encoding.write().expect("encoding lock") = encoding;
        if let Some(client) = &params.client_info {
            self.tracking.set_editor(&client.name);
        }
        let progress = params
            .capabilities
            .window
            .as_ref()
            .and_then(|w| w.work_done_progress)
            .unwrap_or(false);
        self.editor_parking.set_session(encoding, progress);
        if let Some(parking) = self.session.parking() {
            parking.set_owner(workspace_owner(&params));
        }
        self.core()
            .set_roots(super::kept_local::workspace_roots(&params));
        *self.capabilities.write().expect("capabilities lock") = params.capabilities;
        // Through the core, not the session: the engine starts at
        // `initialized`, with these options in force.
        self.core()
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
            self.report_config_errors(&self.core().problems()).await;
        }
        self.load_report.start(self.supports_progress());
        self.session.start_engine();
        self.session.resume_parked(self.editor_parking.clone());
        self.session.keep_routes_known(|_| {});
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
        self.paused(&doc.uri, Pause::Arrived);
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
            Ok(edits) => {
                for edit in &edits {
                    match edit {
                        Applied::Edit { start, end, text } => {
                            let edit = Edit {
                                start: *start,
                                end: *end,
                                text,
                            };
                            self.tracking.edited(uri.as_str(), &edit);
                        }
                        Applied::Replaced => self.tracking.left(uri.as_str()),
                    }
                }
                self.paused(&uri, Pause::Edited)
            }
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
        self.tracking.left(uri.as_str());
        self.session.closed(uri.as_str());
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
            self.paused(uri, Pause::Arrived);
        }
        Ok(Some(self.code_actions(params)))
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> Result<Option<Value>> {
        self.run_command(params).await
    }
}
