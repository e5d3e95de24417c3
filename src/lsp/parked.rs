//! The editor side of checkpoint-and-park. A refactor that only temporary
//! trouble stopped (an open breaker, an empty quota, a spent wait budget) is
//! parked with its checkpoint instead of failed. A background loop resumes
//! parked refactors (this window's, including ones a killed server left) as
//! soon as a route serves them, continuing the partial answer, and applies the
//! result: directly when the document is unchanged, after asking when it
//! changed meanwhile.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ropey::Rope;
use tokio_util::sync::CancellationToken;
use tower_lsp_server::Client;
use tower_lsp_server::ls_types::*;

use super::documents::DocumentStore;
use super::edits;
use super::position::PositionEncoding;
use super::progress::{self, Progress};
use super::wire::RefactorParked;
use crate::clock::now_ms;
use crate::config::follow::sleep_or_change;
use crate::context::chat::code_block;
use crate::core::Core;
use crate::resilience::park::{Checkpoint, DocumentVersion, ParkingLot, new_id};
use crate::router::status::ParkedStatus;
use crate::router::{Origin, RouteError, Router, TaskRequest};
use crate::task::TaskKind;

/// Where a parked refactor's answer goes.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Target {
    uri: Uri,
    /// Character offsets of the selection in the version it was made against.
    start: usize,
    end: usize,
    /// The finished answer, once a route served it, waiting to be applied.
    #[serde(default)]
    ready: Option<String>,
}

pub(super) struct Parking {
    lot: ParkingLot,
    client: Client,
    documents: Arc<DocumentStore>,
    /// The routing core, whose path rules in force at resume keep a document
    /// local even when its rule was added after the refactor parked.
    core: Arc<Core>,
    /// What status shows: the core's list, shared with every router it builds.
    listed: Arc<Mutex<Vec<ParkedStatus>>>,
    /// This window's workspace: it resumes only its own parked work.
    owner: RwLock<String>,
    encoding: RwLock<PositionEncoding>,
    /// The client shows `$/progress`.
    progress: AtomicBool,
    /// Checkpoints whose "apply anyway?" question went unanswered in this
    /// process: not asked again until a restart.
    asked: Mutex<HashSet<String>>,
}

/// A refactor the router could not finish now but may later.
pub(super) struct ParkRequest {
    pub system: String,
    pub parts: crate::context::chat::PromptParts,
    pub uri: Uri,
    pub version: i32,
    pub start: usize,
    pub end: usize,
    pub partial: String,
    pub note: String,
}

impl Parking {
    pub(super) fn new(
        lot: ParkingLot,
        client: Client,
        documents: Arc<DocumentStore>,
        core: Arc<Core>,
    ) -> Parking {
        Parking {
            lot,
            client,
            documents,
            listed: core.parked(),
            core,
            owner: RwLock::new(String::new()),
            encoding: RwLock::new(PositionEncoding::Utf16),
            progress: AtomicBool::new(false),
            asked: Mutex::new(HashSet::new()),
        }
    }

    pub(super) fn set_session(&self, owner: String, encoding: PositionEncoding, progress: bool) {
        *self.owner.write().expect("owner lock") = owner;
        *self.encoding.write().expect("encoding lock") = encoding;
        self.progress.store(progress, Ordering::Release);
    }

    fn owner(&self) -> String {
        self.owner.read().expect("owner lock").clone()
    }

    fn router(&self) -> Arc<Router> {
        self.core.router()
    }

    /// Writes the checkpoint; the answer tells the editor it was parked.
    pub(super) async fn park(&self, request: ParkRequest) -> std::io::Result<RefactorParked> {
        let id = new_id();
        let target = Target {
            uri: request.uri.clone(),
            start: request.start,
            end: request.end,
            ready: None,
        };
        let checkpoint = Checkpoint {
            id: id.clone(),
            kind: TaskKind::Refactor,
            system: request.system,
            parts: request.parts,
            documents: vec![DocumentVersion {
                uri: request.uri.to_string(),
                version: request.version,
            }],
            partial: request.partial,
            steps_done: Vec::new(),
            note: request.note.clone(),
            target: serde_json::to_value(&target).expect("target serialises"),
            owner: self.owner(),
            parked_at_ms: now_ms(),
            attempts: 1,
        };
        self.lot.park(&checkpoint)?;
        tracing::info!("parked refactor {id}: {}", request.note);
        self.relist();
        self.client
            .show_message(
                MessageType::WARNING,
                format!(
                    "switchyard: refactor parked, it resumes by itself when a model can serve it ({})",
                    request.note
                ),
            )
            .await;
        Ok(RefactorParked {
            parked: id,
            reason: request.note,
        })
    }

    /// Refreshes the parked list that status shows.
    fn relist(&self) {
        let listed = self
            .lot
            .owned_by(&self.owner())
            .into_iter()
            .map(ParkedStatus::from)
            .collect();
        *self.listed.lock().expect("parked lock") = listed;
        self.router().publish();
    }

    /// Resumes parked work every resume interval (as configured now; an edit
    /// applies at once), and refreshes the shared status.
    pub(super) async fn run(self: Arc<Self>) {
        let mut changes = Some(self.core.follow_config());
        loop {
            let every = self.core.config().resilience.resume_interval_ms;
            if !sleep_or_change(Duration::from_millis(every), &mut changes).await {
                continue;
            }
            self.router().refresh_shared().await;
            self.relist();
            for checkpoint in self.lot.owned_by(&self.owner()) {
                if let Some(_claim) = self.lot.claim(&checkpoint.id).await {
                    let progress = self.begin_progress(&checkpoint).await;
                    let outcome = self.resume(checkpoint).await;
                    if let Some(progress) = progress {
                        progress.finish_with_message(outcome).await;
                    }
                    self.relist();
                }
            }
        }
    }

    /// `$/progress` for one resume attempt, where the client shows it.
    async fn begin_progress(&self, checkpoint: &Checkpoint) -> Option<Progress> {
        if !self.progress.load(Ordering::Acquire) {
            return None;
        }
        let token = NumberOrString::String(format!("switchyard/resume/{}", checkpoint.id));
        let title = format!("switchyard: resuming a parked {}", checkpoint.kind.as_str());
        progress::begin(&self.client, token, title).await
    }

    /// Tries one parked task; says how it went.
    async fn resume(&self, mut checkpoint: Checkpoint) -> String {
        let Ok(mut target) = serde_json::from_value::<Target>(checkpoint.target.clone()) else {
            tracing::warn!(
                "parked task {} has no usable target; dropping it",
                checkpoint.id
            );
            self.lot.finish(&checkpoint.id).await;
            return "dropped: its checkpoint is unusable".into();
        };
        let answer = match target.ready.clone() {
            Some(answer) => answer,
            None => match self.rerun(&mut checkpoint, &target).await {
                Ok(answer) => answer,
                Err(said) => return said,
            },
        };
        target.ready = Some(answer.clone());
        checkpoint.target = serde_json::to_value(&target).expect("target serialises");
        match self.apply(&checkpoint, &target, &answer).await {
            Applied::Done => {
                self.lot.finish(&checkpoint.id).await;
                "resumed and finished".into()
            }
            Applied::Later(note) => {
                checkpoint.note = note.clone();
                self.keep(&checkpoint).await;
                note
            }
        }
    }

    /// Routes a parked task again, under the path rules in force now: its
    /// answer, or how it went where there is none (still parked, or failed).
    async fn rerun(&self, checkpoint: &mut Checkpoint, target: &Target) -> Result<String, String> {
        let request = TaskRequest {
            continuation: checkpoint.partial.clone(),
            local_only_rule: target
                .uri
                .to_file_path()
                .and_then(|path| self.core.kept_local(&path)),
            origin: Origin {
                front_end: "lsp",
                subject: target.uri.as_str().to_owned(),
            },
            ..TaskRequest::new(
                checkpoint.kind,
                checkpoint.system.clone(),
                checkpoint.parts.clone(),
            )
        };
        let routed = self
            .router()
            .run(request, CancellationToken::new(), &|_| {})
            .await;
        match routed {
            Ok(answer) => {
                tracing::info!(
                    "resumed parked refactor {} on {}/{}",
                    checkpoint.id,
                    answer.route.provider,
                    answer.route.model
                );
                Ok(answer.text)
            }
            Err(RouteError::NothingHealthy {
                retry_later: true,
                partial,
                ..
            }) => {
                if partial.len() > checkpoint.partial.len() {
                    checkpoint.partial = partial;
                }
                checkpoint.attempts += 1;
                self.keep(checkpoint).await;
                Err("still parked: no model can serve it yet".into())
            }
            Err(e) => {
                self.lot.finish(&checkpoint.id).await;
                let message = format!("the parked refactor failed: {e}");
                self.client
                    .show_message(MessageType::ERROR, format!("switchyard: {message}"))
                    .await;
                Err(message)
            }
        }
    }

    /// Rewrites the checkpoint and gives up the claim: it stays parked.
    async fn keep(&self, checkpoint: &Checkpoint) {
        if let Err(error) = self.lot.park(checkpoint) {
            tracing::warn!("could not update parked task {}: {error}", checkpoint.id);
        }
        self.lot.unclaim(&checkpoint.id).await;
    }

    async fn apply(&self, checkpoint: &Checkpoint, target: &Target, answer: &str) -> Applied {
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

enum Applied {
    Done,
    /// Stays parked, with a new note.
    Later(String),
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
