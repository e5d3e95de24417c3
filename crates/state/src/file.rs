//! Shared state in a directory: every switchyard process of this user on this
//! machine. It survives crashes (ARCHITECTURE.md invariant 10). One JSON file per key, `{"key":…, "value":…, "expires": ms|null}`,
//! on the wall clock (ms since the Unix epoch), which all those processes
//! share. Tests open it on tokio's clock ([`FileState::open_with_clock`]) to
//! check expiry on a paused clock.
//!
//! - Atomicity across processes: a read-modify-write holds an exclusive lock on
//!   the key's lock file (`std::fs::File::lock`, stable since Rust 1.89: `flock`
//!   on Unix, `LockFileEx` on Windows; no crate needed). Lock files are never
//!   deleted: removing one while another process waits on it would split the lock.
//! - Crash safety: every write goes to a temp file that is then renamed over the
//!   record, so a reader (which takes no lock) and a `kill -9` mid-write only
//!   ever see the old or the new record. No fsync: a record lost to a power cut
//!   reads as absent, which every caller tolerates (breakers close, buckets refill).
//! - A corrupt or unreadable record reads as absent, is reported once with a
//!   warning, and is replaced by the next write.
//!
//! The locked section runs on the calling task's thread: the `Update` closure
//! borrows from the caller (not `'static`), so it cannot move to
//! `spawn_blocking`, and `block_in_place` panics on a current-thread runtime.
//! That section is a few small local file operations with no `.await` inside,
//! so it neither blocks the runtime for long nor deadlocks against another task
//! on the same thread. Only waiting for a contended lock can take long, and that
//! wait runs on the blocking pool.
//!
//! This file owns [`FileState`]: its records and the [`SharedState`] operations
//! on them. File names, private files, locks and atomic writes are in `disk`.

mod disk;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use switchyard_base::clock::Clock;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::{Json, SharedState, StateError, Update};
use disk::{MAX_NAME_STEM, TEMP_SUFFIX, escape, file_stem, open_lock_file};
pub use disk::{create_private_dir, replace_file};

const RECORD_SUFFIX: &str = ".json";
const LOCK_SUFFIX: &str = ".lock";
/// Temp files this old were left by a killed process; `open` removes them.
const STALE_TEMP: Duration = Duration::from_secs(60);

#[derive(Serialize, Deserialize)]
struct StoredRecord {
    /// The key itself: file names of long keys are hashed and cannot be decoded.
    key: String,
    value: Json,
    expires: Option<u64>,
}

impl StoredRecord {
    fn is_live(&self, now: u64) -> bool {
        self.expires.is_none_or(|at| at > now)
    }
}

pub struct FileState {
    dir: PathBuf,
    /// What records' expiry times are on.
    clock: Clock,
    /// Records already reported as unreadable, so each is warned about once.
    reported: Mutex<HashSet<PathBuf>>,
}

impl FileState {
    /// Opens (creating with mode 0700) the directory every process shares.
    pub fn open(dir: PathBuf) -> Result<FileState, String> {
        FileState::open_with_clock(dir, Clock::Wall)
    }

    /// [`FileState::open`] with records timed on `clock`; every state sharing
    /// the directory must use the same one.
    pub fn open_with_clock(dir: PathBuf, clock: Clock) -> Result<FileState, String> {
        create_private_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let state = FileState {
            dir,
            clock,
            reported: Mutex::new(HashSet::new()),
        };
        state.remove_stale_temp_files();
        Ok(state)
    }

    fn error(&self, what: &str, err: io::Error) -> StateError {
        StateError {
            backend: self.describe(),
            reason: format!("{what}: {err}"),
        }
    }

    fn record_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}{RECORD_SUFFIX}", file_stem(key)))
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}{LOCK_SUFFIX}", file_stem(key)))
    }

    /// Takes the key's exclusive lock; it is released when the file is dropped.
    async fn lock(&self, key: &str) -> Result<File, StateError> {
        let path = self.lock_path(key);
        let file = match open_lock_file(&path) {
            // The runtime dir can be cleared while we run (logout, tmp cleaners).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                create_private_dir(&self.dir).and_then(|()| open_lock_file(&path))
            }
            other => other,
        }
        .map_err(|e| self.error("cannot open lock file", e))?;
        disk::lock(file)
            .await
            .map_err(|e| self.error("cannot lock", e))
    }

    /// The record at `path`; `None` when absent, and when unreadable or corrupt
    /// (warned about once).
    fn read(&self, path: &Path) -> Option<StoredRecord> {
        let parsed = match fs::read(path) {
            Ok(bytes) => serde_json::from_slice::<StoredRecord>(&bytes).map_err(|e| e.to_string()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => Err(e.to_string()),
        };
        match parsed {
            Ok(record) => Some(record),
            Err(reason) => {
                let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
                if reported.insert(path.to_path_buf()) {
                    tracing::warn!(
                        path = %path.display(),
                        %reason,
                        "ignoring an unreadable shared state record; the next write replaces it"
                    );
                }
                None
            }
        }
    }

    fn read_live(&self, key: &str, now: u64) -> Option<Json> {
        self.read(&self.record_path(key))
            .filter(|r| r.key == key && r.is_live(now))
            .map(|r| r.value)
    }

    /// Replaces the record (or removes it for `None`). Callers hold the key's lock.
    fn write(&self, key: &str, value: Option<&Json>, expires: Option<u64>) -> io::Result<()> {
        let path = self.record_path(key);
        match value {
            Some(value) => {
                let record = StoredRecord {
                    key: key.to_owned(),
                    value: value.clone(),
                    expires,
                };
                let bytes = serde_json::to_vec(&record).map_err(io::Error::other)?;
                replace_file(&path, &bytes)?;
            }
            None => match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
        }
        // A good record replaced a bad one: warn again if it ever breaks again.
        self.reported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&path);
        Ok(())
    }

    /// Extends `holder`'s live lease at `key` to `ttl` from now; `false` when
    /// it no longer holds one (it lapsed, or was released).
    pub async fn renew_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, StateError> {
        let _lock = self.lock(key).await?;
        let now = self.clock.now_ms();
        let held = self.read_live(key, now);
        if held.as_ref().and_then(Json::as_str) != Some(holder) {
            return Ok(false);
        }
        let expires = now.saturating_add(ttl.as_millis() as u64);
        self.write(key, held.as_ref(), Some(expires))
            .map_err(|e| self.error("cannot write", e))?;
        Ok(true)
    }

    /// Best effort: temp files of processes killed mid-write.
    fn remove_stale_temp_files(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let is_temp = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(TEMP_SUFFIX));
            let age = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| modified.elapsed().ok());
            if is_temp && age.is_some_and(|age| age > STALE_TEMP) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

impl SharedState for FileState {
    fn describe(&self) -> String {
        format!("file {}", self.dir.display())
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        ttl: Option<Duration>,
        mut update: Update<'a>,
    ) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(async move {
            let _lock = self.lock(key).await?;
            let now = self.clock.now_ms();
            let next = update(self.read_live(key, now), now);
            let expires = ttl.map(|t| now.saturating_add(t.as_millis() as u64));
            self.write(key, next.as_ref(), expires)
                .map_err(|e| self.error("cannot write", e))?;
            Ok(next)
        })
    }

    fn now_ms(&self) -> BoxFuture<'_, Result<u64, StateError>> {
        Box::pin(async move { Ok(self.clock.now_ms()) })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        // No lock: renames make every read see a whole record.
        Box::pin(async move { Ok(self.read_live(key, self.clock.now_ms())) })
    }

    fn scan<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(String, Json)>, StateError>> {
        Box::pin(async move {
            let entries = match fs::read_dir(&self.dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(self.error("cannot list", e)),
            };
            // Escaping maps characters one by one, so a key's file name starts
            // with its prefix's escaped form (up to the cut of long names).
            let mut name_prefix = escape(prefix);
            name_prefix.truncate(MAX_NAME_STEM);
            let now = self.clock.now_ms();
            let mut live: Vec<(String, Json)> = entries
                .flatten()
                .filter(|entry| {
                    entry.file_name().to_str().is_some_and(|name| {
                        name.starts_with(&name_prefix) && name.ends_with(RECORD_SUFFIX)
                    })
                })
                .filter_map(|entry| self.read(&entry.path()))
                .filter(|r| r.key.starts_with(prefix) && r.is_live(now))
                .map(|r| (r.key, r.value))
                .collect();
            live.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(live)
        })
    }

    fn try_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(async move {
            let _lock = self.lock(key).await?;
            let now = self.clock.now_ms();
            if self.read_live(key, now).is_some() {
                return Ok(false);
            }
            let expires = now.saturating_add(ttl.as_millis() as u64);
            self.write(key, Some(&Json::String(holder.to_owned())), Some(expires))
                .map_err(|e| self.error("cannot write", e))?;
            Ok(true)
        })
    }

    fn release_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let _lock = self.lock(key).await?;
            if self
                .read_live(key, self.clock.now_ms())
                .as_ref()
                .and_then(Json::as_str)
                == Some(holder)
            {
                self.write(key, None, None)
                    .map_err(|e| self.error("cannot remove", e))?;
            }
            Ok(())
        })
    }
}
