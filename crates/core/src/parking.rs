//! Checkpoint-and-park, the same for every front end. A task that only
//! temporary trouble stopped (an open breaker, an empty quota, a spent wait
//! budget) is parked with its checkpoint instead of failed. The resume loop
//! tries this window's parked tasks (including ones a killed process left)
//! every resume interval, under the path rules in force then, continuing the
//! partial answer; the front end that parked a task only says where its answer
//! goes and applies it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Core;
use switchyard_base::clock::now_ms;
use switchyard_base::task::TaskKind;
use switchyard_config::follow::sleep_or_change;
use switchyard_context::chat::PromptParts;
use switchyard_resilience::park::{Checkpoint, DocumentVersion, ParkingLot, new_id};
use switchyard_router::status::ParkedStatus;
use switchyard_router::{Origin, RouteError, Router, TaskRequest};

pub struct Parking {
    lot: ParkingLot,
    /// Whose path rules in force at resume keep a document local, even when
    /// its rule was added after the task parked.
    core: Arc<Core>,
    /// What status shows: the core's list, shared with every router it builds.
    listed: Arc<Mutex<Vec<ParkedStatus>>>,
    /// This window's workspace: it resumes only its own parked work.
    owner: RwLock<String>,
}

/// The note of parked work while local-only mode is on.
const WAITING_FOR_LOCAL_ONLY: &str =
    "waiting: local-only mode is on; it resumes once the mode is off";

/// Whether only temporary trouble stopped a task that waits well: a
/// refactor no model could serve now (open breakers, empty quota, a spent
/// wait budget) waits for a route instead of failing.
pub fn parkable(kind: TaskKind, e: &RouteError) -> bool {
    kind == TaskKind::Refactor
        && matches!(
            e,
            RouteError::NothingHealthy {
                retry_later: true,
                ..
            }
        )
}

/// A task no model could finish now but one may later.
pub struct ParkRequest {
    pub kind: TaskKind,
    pub system: String,
    pub parts: PromptParts,
    pub document: DocumentVersion,
    pub partial: String,
    pub note: String,
    /// Where the answer goes, in the parking front end's own terms.
    pub target: serde_json::Value,
}

/// What a front end does for the parked work it parked.
pub trait ParkedFront: Send + Sync + 'static {
    /// What the front end shows of one resume attempt while it runs.
    type Attempt: Send;
    /// Its name in the request's origin (the audit log).
    const FRONT_END: &'static str;
    /// The file of the task's document, whose path rule the resume follows;
    /// why the checkpoint is unusable where its target cannot be read.
    fn file(&self, checkpoint: &Checkpoint) -> Result<Option<PathBuf>, String>;
    fn begin(&self, checkpoint: &Checkpoint) -> impl Future<Output = Self::Attempt> + Send;
    fn end(&self, attempt: Self::Attempt, resumed: &Resumed) -> impl Future<Output = ()> + Send;
    /// Applies a finished answer where the task's target says.
    fn apply(&self, checkpoint: &Checkpoint, answer: &str) -> impl Future<Output = Applied> + Send;
}

/// How applying a finished answer went.
pub enum Applied {
    Done,
    /// Stays parked, with a new note.
    Later(String),
}

/// How one resume attempt went.
#[derive(Debug)]
pub enum Resumed {
    Finished,
    /// Still parked: no model could serve it yet, or its answer waits.
    Parked(String),
    /// Dropped: the task failed for good, or its checkpoint is unusable.
    Failed(String),
}

impl std::fmt::Display for Resumed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resumed::Finished => f.write_str("resumed and finished"),
            Resumed::Parked(note) | Resumed::Failed(note) => f.write_str(note),
        }
    }
}

impl Parking {
    /// The lot in the state directory; `None` (said in the log) where it
    /// cannot be kept, and then work that cannot be served now fails.
    pub fn open(core: Arc<Core>) -> Option<Arc<Parking>> {
        let dir = switchyard_base::paths::state_dir().join("parked");
        match ParkingLot::open(dir.clone()) {
            Ok(lot) => Some(Arc::new(Parking {
                lot,
                listed: core.parked(),
                core,
                owner: RwLock::new(String::new()),
            })),
            Err(error) => {
                tracing::error!(
                    "cannot keep parked tasks in {}: {error}; refactors that cannot be served now will fail instead",
                    dir.display()
                );
                None
            }
        }
    }

    /// Whose work this process parks and resumes (a workspace root).
    pub fn set_owner(&self, owner: String) {
        *self.owner.write().expect("owner lock") = owner;
    }

    fn owner(&self) -> String {
        self.owner.read().expect("owner lock").clone()
    }

    fn router(&self) -> Arc<Router> {
        self.core.router()
    }

    /// Writes the checkpoint; its id.
    pub fn park(&self, request: ParkRequest) -> std::io::Result<String> {
        let id = new_id();
        let checkpoint = Checkpoint {
            id: id.clone(),
            kind: request.kind,
            system: request.system,
            parts: request.parts,
            documents: vec![request.document],
            partial: request.partial,
            steps_done: Vec::new(),
            note: request.note,
            target: request.target,
            ready: None,
            owner: self.owner(),
            parked_at_ms: now_ms(),
            attempts: 1,
        };
        self.lot.park(&checkpoint)?;
        tracing::info!(
            "parked {} {id}: {}",
            checkpoint.kind.as_str(),
            checkpoint.note
        );
        self.relist();
        Ok(id)
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
    pub async fn run<F: ParkedFront>(self: Arc<Self>, front: Arc<F>) {
        let mut changes = Some(self.core.follow());
        loop {
            let every = self.core.config().resilience.resume_interval_ms;
            if !sleep_or_change(Duration::from_millis(every), &mut changes).await {
                continue;
            }
            self.router().refresh_shared().await;
            self.relist();
            for listed in self.lot.owned_by(&self.owner()) {
                if let Some((_claim, mut checkpoint)) = self.lot.claim(&listed.id).await {
                    if self.waits_for_local_only(&mut checkpoint).await {
                        continue;
                    }
                    let attempt = front.begin(&checkpoint).await;
                    let resumed = self.resume(&*front, checkpoint).await;
                    front.end(attempt, &resumed).await;
                    self.relist();
                }
            }
        }
    }

    /// Whether a claimed task stays parked because this process may send
    /// nothing (local-only mode): another window of the workspace, or this
    /// one once the mode is off, resumes it. Ending it under the rule would
    /// lose the user's work; an answer already in hand is applied, as that
    /// sends nothing.
    async fn waits_for_local_only(&self, checkpoint: &mut Checkpoint) -> bool {
        if checkpoint.ready.is_some() || !self.router().local_only() {
            return false;
        }
        match checkpoint.note == WAITING_FOR_LOCAL_ONLY {
            true => self.lot.unclaim(&checkpoint.id).await,
            false => {
                self.wait_for_local_only(checkpoint, "").await;
                self.relist();
            }
        }
        true
    }

    /// Tries one parked task: runs it again unless its answer is ready, then
    /// has the front end apply the answer.
    async fn resume<F: ParkedFront>(&self, front: &F, mut checkpoint: Checkpoint) -> Resumed {
        let file = match front.file(&checkpoint) {
            Ok(file) => file,
            Err(why) => {
                tracing::warn!(
                    "parked task {} is unusable ({why}); dropping it",
                    checkpoint.id
                );
                self.lot.finish(&checkpoint.id).await;
                return Resumed::Failed(format!("dropped: {why}"));
            }
        };
        let answer = match checkpoint.ready.clone() {
            Some(answer) => answer,
            None => match self.rerun(F::FRONT_END, file, &mut checkpoint).await {
                Ok(answer) => answer,
                Err(resumed) => return resumed,
            },
        };
        checkpoint.ready = Some(answer.clone());
        match front.apply(&checkpoint, &answer).await {
            Applied::Done => {
                self.lot.finish(&checkpoint.id).await;
                Resumed::Finished
            }
            Applied::Later(note) => {
                checkpoint.note = note.clone();
                self.keep(&checkpoint).await;
                Resumed::Parked(note)
            }
        }
    }

    /// Routes a parked task again, under the path rules in force now: its
    /// answer, or how it went where there is none.
    async fn rerun(
        &self,
        front_end: &'static str,
        file: Option<PathBuf>,
        checkpoint: &mut Checkpoint,
    ) -> Result<String, Resumed> {
        let request = self.request_again(front_end, file.clone(), checkpoint);
        let routed = self
            .router()
            .run(request, CancellationToken::new(), &|_| {})
            .await;
        match routed {
            Ok(answer) => {
                tracing::info!(
                    "resumed parked {} {} on {}/{}",
                    checkpoint.kind.as_str(),
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
                Err(Resumed::Parked(
                    "still parked: no model can serve it yet".into(),
                ))
            }
            // Local-only mode on as it resumed, or turned on while it ran
            // (not a path rule, which keeps this document local for good):
            // nothing more is sent, and the work waits for the mode to end.
            Err(RouteError::LocalOnly(_)) => Err(self.wait_for_local_only(checkpoint, "").await),
            Err(RouteError::StoppedByRule { partial, .. })
                if self.router().keeps_local(file.as_deref()).is_none() =>
            {
                Err(self.wait_for_local_only(checkpoint, &partial).await)
            }
            Err(e) => {
                self.lot.finish(&checkpoint.id).await;
                Err(Resumed::Failed(format!(
                    "the parked {} failed: {e}",
                    checkpoint.kind.as_str()
                )))
            }
        }
    }

    /// Keeps a task parked until local-only mode is off, with what it
    /// streamed before the mode stopped it.
    async fn wait_for_local_only(&self, checkpoint: &mut Checkpoint, partial: &str) -> Resumed {
        if partial.len() > checkpoint.partial.len() {
            checkpoint.partial = partial.to_owned();
        }
        checkpoint.note = WAITING_FOR_LOCAL_ONLY.into();
        self.keep(checkpoint).await;
        Resumed::Parked(WAITING_FOR_LOCAL_ONLY.into())
    }

    /// The parked task as a request about its document.
    fn request_again(
        &self,
        front_end: &'static str,
        file: Option<PathBuf>,
        checkpoint: &Checkpoint,
    ) -> TaskRequest {
        let subject = checkpoint
            .documents
            .first()
            .map(|d| d.uri.clone())
            .unwrap_or_default();
        TaskRequest {
            continuation: checkpoint.partial.clone(),
            origin: Origin {
                front_end,
                subject,
                document: file,
            },
            ..TaskRequest::new(
                checkpoint.kind,
                checkpoint.system.clone(),
                checkpoint.parts.clone(),
            )
        }
    }

    /// Rewrites the checkpoint and gives up the claim: it stays parked.
    async fn keep(&self, checkpoint: &Checkpoint) {
        if let Err(error) = self.lot.park(checkpoint) {
            tracing::warn!("could not update parked task {}: {error}", checkpoint.id);
        }
        self.lot.unclaim(&checkpoint.id).await;
    }
}
