//! Checkpoint and park: a refactor that meets an open breaker or runs out of
//! budget is kept, not failed. Its checkpoint (the request, the document
//! versions it was made against, the partial output so far, completed steps,
//! a note) is written atomically to the state dir, so it survives a restart or
//! a `kill -9`. When a route opens again it resumes from the checkpoint: the
//! partial output is continued, not thrown away.
//!
//! One process resumes a checkpoint at a time: the claim is a lease in a file
//! state beside the checkpoints (the processes that see this directory are the
//! ones that could resume them). The claim is short-lived and renewed while
//! its resumer works, so a resumer killed mid-resume frees it within
//! [`CLAIM_TTL`] and another takes over.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use switchyard_base::clock::{Clock, now_ms};

use serde::{Deserialize, Serialize};

use switchyard_base::task::TaskKind;
use switchyard_context::chat::PromptParts;
use switchyard_state::SharedState;
use switchyard_state::file::{FileState, create_private_dir, replace_file};

/// A document as the parked task saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentVersion {
    pub uri: String,
    pub version: i32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub id: String,
    pub kind: TaskKind,
    pub system: String,
    pub parts: PromptParts,
    pub documents: Vec<DocumentVersion>,
    /// Output streamed before the task was parked; resumed as a continuation.
    pub partial: String,
    /// Completed sub-steps of multi-file work.
    pub steps_done: Vec<String>,
    /// Why it was parked, for the editor.
    pub note: String,
    /// Where the answer goes when it comes: opaque to everything but the front
    /// end that parked it (the LSP keeps the edit range here).
    pub target: serde_json::Value,
    /// The finished answer, once a route served it, waiting to be applied.
    #[serde(default)]
    pub ready: Option<String>,
    /// Which front end may resume it (a workspace root), so a restarted server
    /// picks up its own work and not another window's.
    pub owner: String,
    pub parked_at_ms: u64,
    pub attempts: u32,
}

impl Checkpoint {
    /// As this release keeps it: an older one kept the finished answer in
    /// the LSP's target (`target.ready`), and it is not paid for twice.
    fn upgraded(mut self) -> Checkpoint {
        if self.ready.is_none()
            && let Some(kept) = self.target.get("ready").and_then(|r| r.as_str())
        {
            self.ready = Some(kept.to_owned());
        }
        self
    }
}

pub struct ParkingLot {
    dir: PathBuf,
    claims: Arc<FileState>,
    holder: String,
}

/// How long a claim lives without renewal: how long a resumer killed
/// mid-resume holds up its task. A live resumer renews every quarter of it,
/// however long its refactor runs.
pub const CLAIM_TTL: Duration = Duration::from_secs(10);

/// A claim held by this process, renewed in the background until dropped.
/// Giving the task back (`unclaim`, `finish`) is separate, as it awaits; a
/// dropped claim that was not given back lapses within the TTL.
#[must_use = "the claim lapses when dropped"]
pub struct Claim {
    renewal: tokio::task::JoinHandle<()>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

impl ParkingLot {
    pub fn open(dir: PathBuf) -> std::io::Result<ParkingLot> {
        ParkingLot::open_with_clock(dir, Clock::Wall)
    }

    /// [`ParkingLot::open`] with claims timed on `clock`; every lot on the
    /// directory must use the same one.
    fn open_with_clock(dir: PathBuf, clock: Clock) -> std::io::Result<ParkingLot> {
        create_private_dir(&dir)?;
        let claims =
            FileState::open_with_clock(dir.join("claims"), clock).map_err(std::io::Error::other)?;
        Ok(ParkingLot {
            dir,
            claims: Arc::new(claims),
            holder: format!("{}-{:08x}", std::process::id(), fastrand::u32(..)),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Writes (or rewrites) a checkpoint; atomic and private (0600).
    pub fn park(&self, checkpoint: &Checkpoint) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(checkpoint).map_err(std::io::Error::other)?;
        replace_file(&self.path(&checkpoint.id), &bytes)
    }

    /// Every readable checkpoint, oldest first. A corrupt file is reported and
    /// moved aside (never a crash, never silently deleted).
    pub fn list(&self) -> Vec<Checkpoint> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut parked: Vec<Checkpoint> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter_map(|path| {
                let bytes = std::fs::read(&path).ok()?;
                match serde_json::from_slice::<Checkpoint>(&bytes) {
                    Ok(checkpoint) => Some(checkpoint.upgraded()),
                    Err(error) => {
                        let aside = path.with_extension("corrupt");
                        tracing::warn!(
                            "parked task {} is unreadable ({error}); moved to {}",
                            path.display(),
                            aside.display()
                        );
                        let _ = std::fs::rename(&path, aside);
                        None
                    }
                }
            })
            .collect();
        parked.sort_by_key(|c| c.parked_at_ms);
        parked
    }

    /// Parked tasks of one owner.
    pub fn owned_by(&self, owner: &str) -> Vec<Checkpoint> {
        self.list()
            .into_iter()
            .filter(|c| c.owner == owner)
            .collect()
    }

    /// Claims a checkpoint for resuming, and reads it as it is now: the
    /// list a resumer walks may be stale by the time it claims (another
    /// process resumed the task, finished it and gave the claim back), so
    /// only the file read under the claim says whether the task is still
    /// parked and what it holds. `None` when another process has it or it
    /// is gone.
    pub async fn claim(&self, id: &str) -> Option<(Claim, Checkpoint)> {
        let key = format!("park/{id}");
        match self.claims.try_lease(&key, &self.holder, CLAIM_TTL).await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(error) => {
                tracing::warn!("cannot claim parked task {id}: {error}");
                return None;
            }
        }
        let claim = Claim {
            renewal: tokio::spawn(renew(
                self.claims.clone(),
                key,
                self.holder.clone(),
                CLAIM_TTL,
            )),
        };
        let current = std::fs::read(self.path(id))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Checkpoint>(&bytes).ok());
        match current {
            Some(checkpoint) => Some((claim, checkpoint.upgraded())),
            None => {
                drop(claim);
                self.unclaim(id).await;
                None
            }
        }
    }

    /// Gives a claim back (the task stays parked).
    pub async fn unclaim(&self, id: &str) {
        let _ = self
            .claims
            .release_lease(&format!("park/{id}"), &self.holder)
            .await;
    }

    /// The task is done (or the user discarded it).
    pub async fn finish(&self, id: &str) {
        if let Err(error) = std::fs::remove_file(self.path(id))
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("could not remove parked task {id}: {error}");
        }
        self.unclaim(id).await;
    }
}

/// Keeps a claim alive until aborted or lost.
async fn renew(claims: Arc<FileState>, key: String, holder: String, ttl: Duration) {
    loop {
        tokio::time::sleep(ttl / 4).await;
        match claims.renew_lease(&key, &holder, ttl).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!("stopped renewing the claim on {key}: given back or lapsed");
                return;
            }
            // A failed renewal leaves the lease as it was: try again next time.
            Err(error) => tracing::warn!("cannot renew the claim on {key}: {error}"),
        }
    }
}

pub fn new_id() -> String {
    format!("{}-{:08x}", now_ms(), fastrand::u32(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(owner: &str) -> Checkpoint {
        Checkpoint {
            id: new_id(),
            kind: TaskKind::Refactor,
            system: "s".into(),
            parts: PromptParts {
                language: "rust".into(),
                file_name: "a.rs".into(),
                before: "fn a() {}\n".into(),
                selection: "fn b() {}".into(),
                after: String::new(),
                instruction: "rename".into(),
            },
            documents: vec![DocumentVersion {
                uri: "file:///a.rs".into(),
                version: 3,
            }],
            partial: "fn renamed(".into(),
            steps_done: Vec::new(),
            note: "breaker open".into(),
            target: serde_json::json!({"range": [1, 2]}),
            ready: None,
            owner: owner.into(),
            parked_at_ms: now_ms(),
            attempts: 1,
        }
    }

    fn lot(dir: &Path) -> ParkingLot {
        ParkingLot::open(dir.join("parked")).unwrap()
    }

    #[tokio::test]
    async fn a_parked_task_survives_a_new_lot_on_the_same_dir() {
        let dir = tempfile::tempdir().unwrap();
        let parked = checkpoint("file:///ws");
        lot(dir.path()).park(&parked).unwrap();
        // A restarted process opens the same directory.
        let restarted = lot(dir.path());
        assert_eq!(restarted.owned_by("file:///ws"), vec![parked.clone()]);
        assert!(restarted.owned_by("file:///other").is_empty());
        restarted.finish(&parked.id).await;
        assert!(restarted.list().is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn checkpoints_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let lot = lot(dir.path());
        let parked = checkpoint("o");
        lot.park(&parked).unwrap();
        let mode = std::fs::metadata(lot.path(&parked.id))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_answer_an_older_release_kept_in_the_target_is_read_as_ready() {
        let dir = tempfile::tempdir().unwrap();
        let lot = lot(dir.path());
        let mut older = serde_json::to_value(checkpoint("o")).unwrap();
        older.as_object_mut().unwrap().remove("ready");
        older["target"]["ready"] = "fn renamed() {}".into();
        std::fs::write(lot.dir().join("older.json"), older.to_string()).unwrap();
        let read = lot.list();
        assert_eq!(read[0].ready.as_deref(), Some("fn renamed() {}"));
    }

    #[test]
    fn a_corrupt_checkpoint_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let lot = lot(dir.path());
        std::fs::write(lot.dir().join("broken.json"), b"{\"id\": ").unwrap();
        lot.park(&checkpoint("o")).unwrap();
        assert_eq!(lot.list().len(), 1);
        assert!(lot.dir().join("broken.corrupt").exists());
    }

    #[tokio::test]
    async fn one_process_resumes_a_checkpoint_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (lot(dir.path()), lot(dir.path()));
        let parked = checkpoint("o");
        a.park(&parked).unwrap();
        let claim = a.claim(&parked.id).await;
        assert!(claim.is_some());
        assert!(b.claim(&parked.id).await.is_none());
        a.unclaim(&parked.id).await;
        assert!(b.claim(&parked.id).await.is_some());
    }

    /// Found by the soak: a resumer walks the list it read, and by the time
    /// it claims a task another process may have resumed it, applied it and
    /// given the claim back. Claiming what the stale list says would apply
    /// the refactor a second time; the claim reads the file under it.
    #[tokio::test]
    async fn a_task_finished_since_it_was_listed_cannot_be_claimed() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (lot(dir.path()), lot(dir.path()));
        let parked = checkpoint("o");
        a.park(&parked).unwrap();
        let listed_by_b = b.owned_by("o");
        let (_claim, current) = a.claim(&parked.id).await.expect("free");
        assert_eq!(current.id, parked.id);
        a.finish(&parked.id).await;
        assert_eq!(listed_by_b.len(), 1, "b's list is stale now");
        assert!(
            b.claim(&listed_by_b[0].id).await.is_none(),
            "a finished task was claimed again"
        );
    }

    /// A claim hands over the checkpoint as the last resumer left it (its
    /// answer ready, say), not as the list read it.
    #[tokio::test]
    async fn a_claim_reads_the_checkpoint_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (lot(dir.path()), lot(dir.path()));
        let mut parked = checkpoint("o");
        a.park(&parked).unwrap();
        let listed_by_b = b.owned_by("o");
        parked.ready = Some("fn renamed() {}".into());
        a.park(&parked).unwrap();
        let (_claim, current) = b.claim(&listed_by_b[0].id).await.expect("free");
        assert_eq!(current.ready.as_deref(), Some("fn renamed() {}"));
    }

    /// Two processes' lots on one directory, their claims on one tokio clock
    /// (a test's paused clock moves only when the test waits), and a task
    /// parked there.
    fn two_lots_on_tokio_time(dir: &Path) -> (ParkingLot, ParkingLot, Checkpoint) {
        let clock = Clock::tokio();
        let lot = || ParkingLot::open_with_clock(dir.join("parked"), clock).unwrap();
        let (a, b) = (lot(), lot());
        let parked = checkpoint("o");
        a.park(&parked).unwrap();
        (a, b, parked)
    }

    #[tokio::test(start_paused = true)]
    async fn a_live_resumer_keeps_its_claim_past_the_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, parked) = two_lots_on_tokio_time(dir.path());
        let _claim = a.claim(&parked.id).await.expect("free");
        tokio::time::sleep(CLAIM_TTL * 3).await;
        assert!(b.claim(&parked.id).await.is_none(), "renewed while held");
    }

    #[tokio::test(start_paused = true)]
    async fn a_killed_resumers_claim_lapses_within_the_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, parked) = two_lots_on_tokio_time(dir.path());
        // Dropped without giving it back: what a `kill -9` mid-resume leaves.
        drop(a.claim(&parked.id).await.expect("free"));
        assert!(b.claim(&parked.id).await.is_none());
        tokio::time::sleep(CLAIM_TTL).await;
        assert!(b.claim(&parked.id).await.is_some(), "lapsed");
    }
}
