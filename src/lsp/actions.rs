//! Code actions and commands: explain, refactor presets, fix diagnostics, the
//! `switchyard.refactor` command, local-only toggles and the status command.
//!
//! Long actions show `$/progress` (with the provider in the message) and can be
//! cancelled from the editor. Refactors apply through `workspace/applyEdit` as
//! minimal, version-checked edits; explanations open as a markdown document.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use tower_lsp_server::jsonrpc::{Error, Result};
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{Cancellable, OngoingProgress, Unbounded};

use super::backend::Backend;
use super::edits;
use super::parked::Target;
use super::position;
use super::wire::{
    self, ExplainResult, LocalOnlyResult, RefactorDone, RefactorParked, RefactorResult,
    SnoozeResult, StatusParams,
};
use switchyard_base::prompts::{EXPLAIN_INSTRUCTION, EXPLAIN_SYSTEM, PRESETS, REFACTOR_SYSTEM};
use switchyard_base::task::TaskKind;
use switchyard_context::chat::{PromptParts, code_block};
use switchyard_core::LocalOnlyError;
use switchyard_core::parking;
use switchyard_core::parking::ParkRequest;
use switchyard_core::session::Parked;
use switchyard_resilience::park::DocumentVersion;
use switchyard_router::{Origin, Progress, RouteError, TaskRequest};

pub const EXPLAIN: &str = "switchyard.explain";
pub const REFACTOR: &str = "switchyard.refactor";
pub const TOGGLE_LOCAL_ONLY: &str = "switchyard.toggleLocalOnly";
pub const SET_LOCAL_ONLY: &str = "switchyard.setLocalOnly";
pub const STATUS: &str = "switchyard.status";
pub const SNOOZE: &str = "switchyard.snooze";
/// `switchyard.snooze 0` for clients whose commands take no arguments (Helix).
pub const RESUME: &str = "switchyard.resumeCompletions";
/// The command on each suggestion: the client runs it when the user accepts it.
pub const ACCEPTED: &str = "switchyard.accepted";
pub const COMMANDS: [&str; 8] = [
    EXPLAIN,
    REFACTOR,
    TOGGLE_LOCAL_ONLY,
    SET_LOCAL_ONLY,
    STATUS,
    SNOOZE,
    RESUME,
    ACCEPTED,
];

/// A snooze asked for without a length (Helix's workspace commands take no
/// arguments).
const DEFAULT_SNOOZE_MINUTES: u64 = 30;

/// LSP's `RequestFailed`: the request was valid but the server could not serve it.
const REQUEST_FAILED: i64 = -32803;

fn command(title: &str, name: &str, arguments: Vec<Value>) -> Command {
    Command {
        title: title.into(),
        command: name.into(),
        arguments: Some(arguments),
    }
}

fn action(title: String, kind: CodeActionKind, cmd: Command) -> CodeActionOrCommand {
    CodeActionOrCommand::CodeAction(CodeAction {
        title,
        kind: Some(kind),
        command: Some(cmd),
        ..Default::default()
    })
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid_params(message.into())
}

impl Backend {
    pub(super) fn code_actions(&self, params: CodeActionParams) -> Vec<CodeActionOrCommand> {
        let uri = json!(params.text_document.uri);
        let range = json!(params.range);
        let mut actions = vec![action(
            "switchyard: Explain".into(),
            CodeActionKind::new("source.switchyard.explain"),
            command("Explain", EXPLAIN, vec![uri.clone(), range.clone()]),
        )];
        for (title, instruction) in PRESETS {
            actions.push(action(
                format!("switchyard: {title}"),
                CodeActionKind::REFACTOR_REWRITE,
                command(
                    title,
                    REFACTOR,
                    vec![uri.clone(), range.clone(), json!(instruction)],
                ),
            ));
        }
        if !params.context.diagnostics.is_empty() {
            let instruction = switchyard_base::prompts::fix_diagnostics_instruction(
                params
                    .context
                    .diagnostics
                    .iter()
                    .map(|d| (d.range.start.line, d.message.as_str())),
            );
            actions.push(action(
                "switchyard: Fix diagnostics".into(),
                CodeActionKind::QUICKFIX,
                command(
                    "Fix diagnostics",
                    REFACTOR,
                    vec![uri, range, json!(instruction)],
                ),
            ));
        }
        actions
    }

    pub(super) async fn run_command(&self, params: ExecuteCommandParams) -> Result<Option<Value>> {
        let args = params.arguments;
        match params.command.as_str() {
            TOGGLE_LOCAL_ONLY => self
                .set_local_only(!self.router().local_only())
                .await
                .map(Some),
            SET_LOCAL_ONLY => {
                let on = args
                    .first()
                    .and_then(Value::as_bool)
                    .ok_or_else(|| invalid("switchyard.setLocalOnly takes one boolean argument"))?;
                self.set_local_only(on).await.map(Some)
            }
            STATUS => {
                let mut status = StatusParams::for_workspace(
                    &self.router().status(),
                    self.core().workspace_rule(),
                    &self.completion().subscribe_status().borrow(),
                );
                let runtime = tokio::runtime::Handle::current().metrics();
                status.runtime_tasks = Some(runtime.num_alive_tasks());
                Ok(Some(wire::result(status)))
            }
            SNOOZE => {
                let minutes = match args.first() {
                    None | Some(Value::Null) => DEFAULT_SNOOZE_MINUTES,
                    Some(minutes) => minutes.as_u64().ok_or_else(|| {
                        invalid("switchyard.snooze takes the minutes to snooze (0 resumes)")
                    })?,
                };
                self.snooze(minutes).map(Some)
            }
            RESUME => self.snooze(0).map(Some),
            ACCEPTED => {
                let id = args
                    .first()
                    .and_then(Value::as_u64)
                    .ok_or_else(|| invalid("switchyard.accepted takes the suggestion's id"))?;
                self.tracking.accepted(id);
                Ok(None)
            }
            EXPLAIN | REFACTOR => self.code_action(&params.command, &args).await,
            other => Err(invalid(format!(
                "unknown command `{other}`; switchyard knows {}",
                COMMANDS.join(", ")
            ))),
        }
    }

    /// `switchyard.explain` or `switchyard.refactor` with its arguments:
    /// the document, the range and (a refactor) the instruction.
    async fn code_action(&self, command: &str, args: &[Value]) -> Result<Option<Value>> {
        let uri: Uri = args
            .first()
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| invalid("first argument: the document URI"))?;
        let range: Range = args
            .get(1)
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| invalid("second argument: the range"))?;
        if command == EXPLAIN {
            return self.explain(uri, range).await;
        }
        let instruction = args
            .get(2)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| invalid("third argument: the refactor instruction"))?;
        self.refactor(uri, range, instruction.to_owned()).await
    }

    /// Snoozes completions for `minutes` (0 resumes them), for every editor
    /// of the user and across restarts; the status says so until it ends.
    fn snooze(&self, minutes: u64) -> Result<Value> {
        let snooze = self.completion().snooze();
        let length = Duration::from_secs(minutes * 60);
        let until = match minutes {
            0 => snooze.resume().map(|()| None),
            _ => snooze.snooze(length).map(Some),
        }
        .map_err(|e| Error {
            code: tower_lsp_server::jsonrpc::ErrorCode::ServerError(REQUEST_FAILED),
            message: format!("the snooze could not be kept: {e}").into(),
            data: None,
        })?;
        self.completion().publish_status();
        if until.is_some() {
            let completion = self.completion().clone();
            tokio::spawn(async move {
                tokio::time::sleep(length).await;
                completion.publish_status();
            });
        }
        Ok(wire::result(SnoozeResult {
            snoozed_until: until,
        }))
    }

    async fn set_local_only(&self, on: bool) -> Result<Value> {
        match self.core().set_local_only(on) {
            Ok(()) => {}
            Err(LocalOnlyError::NotSaved(e)) => tracing::warn!("{e}"),
            Err(LocalOnlyError::FailedClosed(e)) => {
                self.client
                    .show_message(MessageType::WARNING, format!("switchyard: {e}"))
                    .await;
                return Err(invalid(e));
            }
        }
        Ok(wire::result(LocalOnlyResult { local_only: on }))
    }

    /// The prompt parts for a range; an empty range means the enclosing item.
    fn parts(
        &self,
        uri: &Uri,
        range: Range,
        instruction: &str,
    ) -> Result<(PromptParts, usize, usize, i32)> {
        let doc = self
            .documents
            .get(uri)
            .map_err(|e| invalid(e.to_string()))?;
        let encoding = self.encoding();
        let mut start = position::to_char(&doc.rope, range.start, encoding)
            .map_err(|e| invalid(e.to_string()))?;
        let mut end = position::to_char(&doc.rope, range.end, encoding)
            .map_err(|e| invalid(e.to_string()))?;
        // No selection: an empty range, or the one character a Helix or
        // Kakoune cursor always selects. The task takes the enclosing item.
        if end <= start + 1 {
            let (first, last) = edits::enclosing_item(&doc.rope, doc.rope.char_to_line(start));
            start = doc.rope.line_to_char(first);
            end = doc.rope.line_to_char((last + 1).min(doc.rope.len_lines()));
        }
        let file_name = uri.as_str().rsplit('/').next().unwrap_or("").to_owned();
        let parts = PromptParts {
            language: doc.language_id.clone(),
            file_name,
            before: doc.rope.slice(..start).to_string(),
            selection: doc.rope.slice(start..end).to_string(),
            after: doc.rope.slice(end..).to_string(),
            instruction: instruction.to_owned(),
        };
        Ok((parts, start, end, doc.version))
    }

    /// Shows the progress of a routed task as it comes. It begins with the
    /// first provider tried, so its title names it; its cancel button cancels.
    async fn report(
        &self,
        kind: TaskKind,
        token: &NumberOrString,
        cancel: &CancellationToken,
        mut rx: UnboundedReceiver<Progress>,
    ) -> Option<OngoingProgress<Unbounded, Cancellable>> {
        let mut progress = None;
        while let Some(event) = rx.recv().await {
            let message = match &event {
                Progress::Trying { entry, tier } => format!("trying {entry} ({tier} tier)"),
                Progress::Received { chars } => format!("received {chars} characters"),
                // Counted by `Received`; the editor gets the text at the end.
                Progress::Delta(_) => continue,
            };
            if let (None, Progress::Trying { entry, .. }) = (&progress, &event)
                && self.supports_progress()
                && self
                    .client
                    .create_work_done_progress(token.clone())
                    .await
                    .is_ok()
            {
                self.progress_cancels.insert(token.clone(), cancel.clone());
                let title = format!("switchyard: {} with {entry}", kind.as_str());
                progress = Some(
                    self.client
                        .progress(token.clone(), title)
                        .with_cancel_button()
                        .begin()
                        .await,
                );
                continue;
            }
            if let Some(progress) = &progress {
                progress.report_with_message(message, None).await;
            }
        }
        progress
    }

    /// Runs a task in the session with cancellable `$/progress` that names
    /// the provider being tried.
    async fn routed(
        &self,
        kind: TaskKind,
        system: &str,
        (uri, parts): (&Uri, PromptParts),
    ) -> std::result::Result<switchyard_router::Answer, RouteError> {
        let cancel = CancellationToken::new();
        let token = NumberOrString::String(format!("switchyard/{}/{}", kind.as_str(), nanos()));
        let _cancel_button = CancelButton(&self.progress_cancels, &token);
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let report = self.report(kind, &token, &cancel, rx);
        let request = TaskRequest {
            origin: Origin {
                front_end: "lsp",
                subject: uri.as_str().to_owned(),
                document: uri.to_file_path().map(|path| path.into_owned()),
            },
            ..TaskRequest::new(kind, system, parts)
        };
        let run = async {
            let result = self
                .session
                .serve(request, cancel.clone(), &|event| {
                    let _ = events.send(event);
                })
                .await;
            drop(events);
            result
        };
        let (result, progress) = tokio::join!(run, report);
        if let Some(progress) = progress {
            let message = match &result {
                Ok(answer) => format!("done by {}/{}", answer.route.provider, answer.route.model),
                Err(e) if parking::parkable(kind, e) => format!("parked: {e}"),
                Err(e) => e.to_string(),
            };
            progress.finish_with_message(message).await;
        }
        if let Err(e) = &result {
            tracing::warn!("{} failed: {e}", kind.as_str());
        }
        result
    }

    async fn explain(&self, uri: Uri, range: Range) -> Result<Option<Value>> {
        let (parts, ..) = self.parts(&uri, range, EXPLAIN_INSTRUCTION)?;
        let answer = self
            .routed(TaskKind::Explain, EXPLAIN_SYSTEM, (&uri, parts))
            .await
            .map_err(request_failed)?;
        let by = format!(
            "{}/{} ({} tier)",
            answer.route.provider, answer.route.model, answer.route.tier
        );
        let dir = switchyard_base::paths::state_dir().join("explanations");
        let path = dir.join(format!("explain-{}.md", nanos()));
        let markdown = format!(
            "<!-- switchyard: explained by {by} -->\n\n{}\n",
            answer.text
        );
        let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &markdown));
        let shown = match (written, Uri::from_file_path(&path)) {
            (Ok(()), Some(doc_uri)) => self
                .client
                .show_document(ShowDocumentParams {
                    uri: doc_uri,
                    external: Some(false),
                    take_focus: Some(true),
                    selection: None,
                })
                .await
                .unwrap_or(false),
            _ => false,
        };
        if !shown {
            let summary: String = answer.text.chars().take(600).collect();
            self.client
                .show_message(MessageType::INFO, format!("switchyard ({by}): {summary}"))
                .await;
        }
        Ok(Some(wire::result(ExplainResult {
            provider: answer.route.provider,
            model: answer.route.model,
            tier: answer.route.tier.into(),
            path: path.to_string_lossy().into_owned(),
            text: answer.text,
        })))
    }

    async fn refactor(&self, uri: Uri, range: Range, instruction: String) -> Result<Option<Value>> {
        let (parts, start, end, version) = self.parts(&uri, range, &instruction)?;
        let original = parts.selection.clone();
        let answer = match self
            .routed(TaskKind::Refactor, REFACTOR_SYSTEM, (&uri, parts.clone()))
            .await
        {
            Ok(answer) => answer,
            Err(e) => {
                let request = ParkRequest {
                    kind: TaskKind::Refactor,
                    system: REFACTOR_SYSTEM.into(),
                    parts,
                    document: DocumentVersion {
                        uri: uri.to_string(),
                        version,
                    },
                    partial: String::new(),
                    note: String::new(),
                    target: Target { uri, start, end }.to_value(),
                };
                return self.park_or_fail(e, request).await;
            }
        };
        let mut rewritten = code_block(&answer.text);
        if original.ends_with('\n') && !rewritten.ends_with('\n') {
            rewritten.push('\n');
        }
        let (applied, edits) = self
            .apply_rewrite(&uri, version, (start, end), &rewritten)
            .await?;
        Ok(Some(wire::result(RefactorResult::Done(RefactorDone {
            applied,
            edits,
            provider: answer.route.provider,
            model: answer.route.model,
            tier: answer.route.tier.into(),
        }))))
    }

    /// Parks a refactor only temporary trouble stopped (the session decides),
    /// and tells the editor; else its failure.
    async fn park_or_fail(&self, e: RouteError, request: ParkRequest) -> Result<Option<Value>> {
        let Parked { id, note } = self.session.park(e, request).map_err(request_failed)?;
        self.editor_parking.parked(&note).await;
        let parked = RefactorParked {
            parked: id,
            reason: note,
        };
        Ok(Some(wire::result(RefactorResult::Parked(parked))))
    }

    /// Asks the editor to replace `start..end` of `version` of the document
    /// with `rewritten`: whether it did, and in how many edits.
    async fn apply_rewrite(
        &self,
        uri: &Uri,
        version: i32,
        (start, end): (usize, usize),
        rewritten: &str,
    ) -> Result<(bool, usize)> {
        let doc = self
            .documents
            .get(uri)
            .map_err(|e| invalid(e.to_string()))?;
        if doc.version != version {
            return Err(Error {
                code: tower_lsp_server::jsonrpc::ErrorCode::ContentModified,
                message: "the document changed while the refactor ran; run it again".into(),
                data: None,
            });
        }
        let text_edits = edits::minimal_edits(&doc.rope, start, end, rewritten, self.encoding());
        let count = text_edits.len();
        let edit = WorkspaceEdit {
            document_changes: Some(DocumentChanges::Edits(vec![TextDocumentEdit {
                text_document: OptionalVersionedTextDocumentIdentifier {
                    uri: uri.clone(),
                    version: Some(version),
                },
                edits: text_edits.into_iter().map(OneOf::Left).collect(),
            }])),
            ..Default::default()
        };
        let applied = self
            .client
            .apply_edit(edit)
            .await
            .map(|r| r.applied)
            .unwrap_or(false);
        Ok((applied, count))
    }
}

fn request_failed(e: RouteError) -> Error {
    Error {
        code: tower_lsp_server::jsonrpc::ErrorCode::ServerError(REQUEST_FAILED),
        message: e.to_string().into(),
        data: None,
    }
}

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Forgets an action's cancel button when the action ends, however it
/// does: a `$/cancelRequest` drops the request's future mid-way.
struct CancelButton<'a>(
    &'a DashMap<NumberOrString, CancellationToken>,
    &'a NumberOrString,
);

impl Drop for CancelButton<'_> {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}
