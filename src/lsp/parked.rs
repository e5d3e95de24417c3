//! The editor's side of checkpoint-and-park (the core parks and resumes,
//! `core::parking`): where a parked refactor's answer goes (the selection it
//! replaces), `$/progress` while a resume runs, and applying the answer:
//! directly when the document is unchanged, after asking when it changed
//! meanwhile.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use ropey::Rope;
use tower_lsp_server::Client;
use tower_lsp_server::ls_types::*;

use super::documents::DocumentStore;
use super::edits;
use super::position::PositionEncoding;
use super::progress::{self, Progress};
use switchyard_context::chat::code_block;
use switchyard_core::parking::{Applied, ParkedFront, Resumed};
use switchyard_resilience::park::Checkpoint;

/// Where a parked refactor's answer goes.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Target {
    pub uri: Uri,
    /// Character offsets of the selection in the version it was made against.
    pub start: usize,
    pub end: usize,
}

impl Target {
    pub(super) fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("target serialises")
    }

    fn of(checkpoint: &Checkpoint) -> Result<Target, String> {
        serde_json::from_value(checkpoint.target.clone())
            .map_err(|e| format!("its target is unusable: {e}"))
    }
}

pub(super) struct EditorParking {
    client: Client,
    documents: Arc<DocumentStore>,
    encoding: RwLock<PositionEncoding>,
    /// The client shows `$/progress`.
    progress: AtomicBool,
    /// Checkpoints whose "apply anyway?" question went unanswered in this
    /// process: not asked again until a restart.
    asked: Mutex<HashSet<String>>,
}

impl EditorParking {
    pub(super) fn new(client: Client, documents: Arc<DocumentStore>) -> EditorParking {
        EditorParking {
            client,
            documents,
            encoding: RwLock::new(PositionEncoding::Utf16),
            progress: AtomicBool::new(false),
            asked: Mutex::new(HashSet::new()),
        }
    }

    pub(super) fn set_session(&self, encoding: PositionEncoding, progress: bool) {
        *self.encoding.write().expect("encoding lock") = encoding;
        self.progress.store(progress, Ordering::Release);
    }

    /// Tells the user a refactor was parked.
    pub(super) async fn parked(&self, note: &str) {
        self.client
            .show_message(
                MessageType::WARNING,
                format!(
                    "switchyard: refactor parked, it resumes by itself when a model can serve it ({note})"
                ),
            )
            .await;
    }
}

impl ParkedFront for EditorParking {
    type Attempt = Option<Progress>;
    const FRONT_END: &'static str = "lsp";

    fn file(&self, checkpoint: &Checkpoint) -> Result<Option<PathBuf>, String> {
        Ok(Target::of(checkpoint)?
            .uri
            .to_file_path()
            .map(|p| p.into_owned()))
    }

    /// `$/progress` for one resume attempt, where the client shows it.
    async fn begin(&self, checkpoint: &Checkpoint) -> Option<Progress> {
        if !self.progress.load(Ordering::Acquire) {
            return None;
        }
        let token = NumberOrString::String(format!("switchyard/resume/{}", checkpoint.id));
        let title = format!("switchyard: resuming a parked {}", checkpoint.kind.as_str());
        progress::begin(&self.client, token, title).await
    }

    async fn end(&self, attempt: Option<Progress>, resumed: &Resumed) {
        if let Resumed::Failed(message) = resumed {
            self.client
                .show_message(MessageType::ERROR, format!("switchyard: {message}"))
                .await;
        }
        if let Some(progress) = attempt {
            progress.finish_with_message(resumed.to_string()).await;
        }
    }

    async fn apply(&self, checkpoint: &Checkpoint, answer: &str) -> Applied {
        match Target::of(checkpoint) {
            Ok(target) => self.apply_at(checkpoint, &target, answer).await,
            Err(why) => Applied::Later(why),
        }
    }
}

impl EditorParking {
    async fn apply_at(&self, checkpoint: &Checkpoint, target: &Target, answer: &str) -> Applied {
        let Ok(doc) = self.documents.get(&target.uri) else {
            return Applied::Later("answer ready; open the file to apply it".into());
        };
        let mut rewritten = code_block(answer);
        if checkpoint.parts.selection.ends_with('\n') && !rewritten.ends_with('\n') {
            rewritten.push('\n');
        }
        let parked_version = checkpoint.documents.first().map(|d| d.version);
        let (start, end) = if parked_version == Some(doc.version) {
            (target.start, target.end)
        } else {
            match self.ask_to_apply(checkpoint, &target.uri).await {
                Some(true) => {}
                Some(false) => return Applied::Done,
                None => {
                    return Applied::Later(
                        "answer ready; waiting for you to apply or discard it".into(),
                    );
                }
            }
            // Find the code the refactor was made for in the changed document.
            match found_once(&doc.rope, &checkpoint.parts.selection) {
                Some(range) => range,
                None => {
                    self.client
                        .show_message(
                            MessageType::WARNING,
                            "switchyard: the code the parked refactor was made for changed too much to apply it; run the refactor again",
                        )
                        .await;
                    return Applied::Done;
                }
            }
        };
        let encoding = *self.encoding.read().expect("encoding lock");
        let text_edits = edits::minimal_edits(&doc.rope, start, end, &rewritten, encoding);
        let edit = WorkspaceEdit {
            document_changes: Some(DocumentChanges::Edits(vec![TextDocumentEdit {
                text_document: OptionalVersionedTextDocumentIdentifier {
                    uri: target.uri.clone(),
                    version: Some(doc.version),
                },
                edits: text_edits.into_iter().map(OneOf::Left).collect(),
            }])),
            ..Default::default()
        };
        match self.client.apply_edit(edit).await {
            Ok(response) if response.applied => {
                self.client
                    .show_message(
                        MessageType::INFO,
                        "switchyard: the parked refactor finished and was applied",
                    )
                    .await;
                Applied::Done
            }
            _ => Applied::Later("answer ready; the editor did not apply it".into()),
        }
    }

    /// `Some(apply?)`, or `None` when the question went unanswered.
    async fn ask_to_apply(&self, checkpoint: &Checkpoint, uri: &Uri) -> Option<bool> {
        if self
            .asked
            .lock()
            .expect("asked lock")
            .contains(&checkpoint.id)
        {
            return None;
        }
        let file = uri.as_str().rsplit('/').next().unwrap_or_default();
        let choice = self
            .client
            .show_message_request(
                MessageType::WARNING,
                format!("switchyard: {file} changed since the refactor was parked. Apply its result anyway?"),
                Some(vec![
                    MessageActionItem { title: "Apply".into(), properties: Default::default() },
                    MessageActionItem { title: "Discard".into(), properties: Default::default() },
                ]),
            )
            .await;
        match choice {
            Ok(Some(item)) => Some(item.title == "Apply"),
            _ => {
                self.asked
                    .lock()
                    .expect("asked lock")
                    .insert(checkpoint.id.clone());
                None
            }
        }
    }
}

/// The char range of `selection` in `rope`, where it occurs exactly once.
fn found_once(rope: &Rope, selection: &str) -> Option<(usize, usize)> {
    let text = rope.to_string();
    match (text.find(selection), text.rfind(selection)) {
        (Some(first), Some(last)) if first == last && !selection.is_empty() => {
            let start = rope.byte_to_char(first);
            Some((start, start + selection.chars().count()))
        }
        _ => None,
    }
}
