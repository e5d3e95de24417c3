//! Shared state in a directory: every switchyard process of this user on this
//! machine. One JSON file per key, `{"key":…, "value":…, "expires": ms|null}`,
//! on the wall clock (ms since the Unix epoch).
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

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Json, SharedState, StateError, Update};

const RECORD_SUFFIX: &str = ".json";
const LOCK_SUFFIX: &str = ".lock";
const TEMP_SUFFIX: &str = ".tmp";
/// Escaped keys longer than this are cut and suffixed with a hash of the whole
/// key, keeping every file name (temp names included) under the usual 255 bytes.
const MAX_NAME_STEM: usize = 100;
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
    /// Records already reported as unreadable, so each is warned about once.
    reported: Mutex<HashSet<PathBuf>>,
}

impl FileState {
    /// Opens (creating with mode 0700) the directory every process shares.
    pub fn open(dir: PathBuf) -> Result<FileState, String> {
        create_private_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let state = FileState {
            dir,
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
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(e)) => return Err(self.error("cannot lock", e)),
        }
        // Contended: wait on the blocking pool, not on a runtime thread.
        let locked = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime
                .spawn_blocking(move || file.lock().map(|()| file))
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e))),
            Err(_) => file.lock().map(|()| file),
        };
        locked.map_err(|e| self.error("cannot lock", e))
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
            let now = now_ms();
            let next = update(self.read_live(key, now), now);
            let expires = ttl.map(|t| now.saturating_add(t.as_millis() as u64));
            self.write(key, next.as_ref(), expires)
                .map_err(|e| self.error("cannot write", e))?;
            Ok(next)
        })
    }

    fn now_ms(&self) -> BoxFuture<'_, Result<u64, StateError>> {
        Box::pin(async { Ok(now_ms()) })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        // No lock: renames make every read see a whole record.
        Box::pin(async move { Ok(self.read_live(key, now_ms())) })
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
            let now = now_ms();
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
            let now = now_ms();
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
                .read_live(key, now_ms())
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

/// Wall-clock ms since the Unix epoch: the clock every process on the machine shares.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Keys hold '/' and ':'; a file name holds only `[A-Za-z0-9._-]` and `%XX` escapes.
fn escape(key: &str) -> String {
    let mut name = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            name.push(byte as char);
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

/// The file name of `key` without suffix: its escaped form, or for long keys a
/// cut of it plus `~` and a hash (`~` never appears in an escaped key).
fn file_stem(key: &str) -> String {
    let mut stem = escape(key);
    if stem.len() > MAX_NAME_STEM {
        let hash = hex::encode(Sha256::digest(key.as_bytes()));
        stem.truncate(MAX_NAME_STEM);
        stem.push('~');
        stem.push_str(&hash[..32]);
    }
    stem
}

/// Creates `dir` and its parents; new directories are 0700 on Unix.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn private_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    private_file_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Writes `bytes` to a fresh private (0600 on Unix) temp file beside `path`,
/// then renames it over `path`: readers and crashes see the old or the new file.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("record");
    let temp = path.with_file_name(format!(
        ".{name}.{}.{}{TEMP_SUFFIX}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = private_file_options()
        .write(true)
        .create_new(true)
        .open(&temp)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| fs::rename(&temp, path));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BucketOp, BucketSpec};
    use std::sync::Arc;

    fn temp_state() -> (tempfile::TempDir, FileState) {
        let dir = tempfile::tempdir().unwrap();
        let state = FileState::open(dir.path().join("shared")).unwrap();
        (dir, state)
    }

    async fn increment(state: &FileState, key: &str) {
        state
            .update(
                key,
                None,
                Box::new(|n, _| Some((n.and_then(|n| n.as_u64()).unwrap_or(0) + 1).into())),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn update_get_and_remove() {
        let (_dir, state) = temp_state();
        let stored = state
            .update(
                "breaker/openai:gpt",
                None,
                Box::new(|old, _| {
                    assert_eq!(old, None);
                    Some(serde_json::json!({"open": true}))
                }),
            )
            .await
            .unwrap();
        assert_eq!(stored, Some(serde_json::json!({"open": true})));
        assert_eq!(state.get("breaker/openai:gpt").await.unwrap(), stored);
        state
            .update("breaker/openai:gpt", None, Box::new(|_, _| None))
            .await
            .unwrap();
        assert_eq!(state.get("breaker/openai:gpt").await.unwrap(), None);
    }

    #[tokio::test]
    async fn records_expire_on_the_wall_clock() {
        let (_dir, state) = temp_state();
        let ttl = Some(Duration::from_millis(50));
        state
            .update("k", ttl, Box::new(|_, _| Some(1.into())))
            .await
            .unwrap();
        assert_eq!(state.get("k").await.unwrap(), Some(1.into()));
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(state.get("k").await.unwrap(), None);
        assert!(state.scan("").await.unwrap().is_empty());
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn directory_is_0700_and_files_are_0600() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, state) = temp_state();
        state
            .update("a/b:c", None, Box::new(|_, _| Some(1.into())))
            .await
            .unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("shared")), 0o700);
        let files: Vec<_> = fs::read_dir(dir.path().join("shared"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(files.len(), 2, "one record and one lock file: {files:?}");
        for file in files {
            assert_eq!(mode(&file.path()), 0o600, "{:?}", file.path());
        }
    }

    #[tokio::test]
    async fn a_corrupt_record_reads_as_absent_and_is_replaced() {
        let (_dir, state) = temp_state();
        state
            .update("k", None, Box::new(|_, _| Some(1.into())))
            .await
            .unwrap();
        fs::write(state.record_path("k"), b"{\"key\":\"k\",\"val").unwrap();
        assert_eq!(state.get("k").await.unwrap(), None);
        assert!(state.scan("").await.unwrap().is_empty());
        increment(&state, "k").await;
        assert_eq!(state.get("k").await.unwrap(), Some(1.into()));
    }

    /// Judged by the set that decides the warning, not by capturing the log:
    /// tracing caches callsite interest process-wide, so a log capture in one
    /// test races with the other tests' threads.
    #[tokio::test]
    async fn a_corrupt_record_is_reported_once_until_replaced() {
        let (_dir, state) = temp_state();
        let path = state.record_path("k");
        let reported = |state: &FileState| state.reported.lock().unwrap().contains(&path);
        fs::write(&path, b"not json").unwrap();
        assert_eq!(state.get("k").await.unwrap(), None);
        assert!(reported(&state), "reported the first time");
        // `insert` answers false for a path already reported: no second warning.
        assert!(!state.reported.lock().unwrap().insert(path.clone()));
        increment(&state, "k").await;
        assert!(!reported(&state), "a replaced record is forgotten");
        fs::write(&path, b"broken again").unwrap();
        assert_eq!(state.get("k").await.unwrap(), None);
        assert!(reported(&state), "and reported again when it breaks");
    }

    #[tokio::test]
    async fn an_unreadable_record_reads_as_absent_and_is_replaced() {
        let (_dir, state) = temp_state();
        // A directory where the record should be cannot be read as a file.
        fs::create_dir(state.record_path("k")).unwrap();
        assert_eq!(state.get("k").await.unwrap(), None);
        let err = state
            .update("k", None, Box::new(|_, _| Some(1.into())))
            .await
            .unwrap_err();
        assert!(err.reason.contains("cannot write"), "{err}");
        fs::remove_dir(state.record_path("k")).unwrap();
        increment(&state, "k").await;
        assert_eq!(state.get("k").await.unwrap(), Some(1.into()));
    }

    #[tokio::test]
    async fn keys_with_any_characters_and_lengths_round_trip_through_scan() {
        let (_dir, state) = temp_state();
        let long = format!("bucket/{}", "x/".repeat(200));
        let keys = [
            "bucket/a:b",
            "bucket/%2F",
            "bucket/é ~*",
            long.as_str(),
            "breaker/a",
        ];
        for key in keys {
            state
                .update(key, None, Box::new(move |_, _| Some(key.into())))
                .await
                .unwrap();
        }
        let found = state.scan("bucket/").await.unwrap();
        let mut expected: Vec<_> = keys[..4]
            .iter()
            .map(|k| (k.to_string(), Json::from(*k)))
            .collect();
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(found, expected);
        assert_eq!(state.get(&long).await.unwrap(), Some(long.clone().into()));
    }

    #[tokio::test]
    async fn leases_have_one_holder() {
        let (_dir, state) = temp_state();
        let ttl = Duration::from_millis(100);
        assert!(state.try_lease("lease", "a", ttl).await.unwrap());
        assert!(!state.try_lease("lease", "b", ttl).await.unwrap());
        state.release_lease("lease", "b").await.unwrap();
        assert!(!state.try_lease("lease", "b", ttl).await.unwrap());
        state.release_lease("lease", "a").await.unwrap();
        assert!(state.try_lease("lease", "b", ttl).await.unwrap());
        std::thread::sleep(Duration::from_millis(150));
        assert!(
            state.try_lease("lease", "c", ttl).await.unwrap(),
            "an expired lease is free"
        );
    }

    #[tokio::test]
    async fn buckets_go_through_update() {
        let (_dir, state) = temp_state();
        let spec = BucketSpec {
            capacity: 100.0,
            refill_per_sec: 0.0,
        };
        let take = BucketOp::Take {
            amount: 60.0,
            floor: 0.0,
        };
        assert!(state.bucket("b", spec, take).await.unwrap().granted);
        assert!(!state.bucket("b", spec, take).await.unwrap().granted);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_tasks_on_one_thread_count_exactly() {
        let (_dir, state) = temp_state();
        let state = Arc::new(state);
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let state = state.clone();
                tokio::spawn(async move {
                    for _ in 0..10 {
                        increment(&state, "count").await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(state.get("count").await.unwrap(), Some(200.into()));
    }

    #[test]
    fn threads_with_their_own_state_on_one_dir_count_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let path = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let state = FileState::open(path).unwrap();
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    runtime.block_on(async {
                        for _ in 0..50 {
                            increment(&state, "count").await;
                        }
                    });
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let state = FileState::open(dir.path().to_path_buf()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(
            runtime.block_on(state.get("count")).unwrap(),
            Some(400.into())
        );
    }

    #[test]
    fn escaping_keeps_names_distinct_and_short() {
        assert_eq!(
            escape("breaker/openai:gpt-4.1"),
            "breaker%2Fopenai%3Agpt-4.1"
        );
        assert_ne!(file_stem("a/b"), file_stem("a%2Fb"));
        let long = "k".repeat(1000);
        assert!(file_stem(&long).len() < 140);
        assert_ne!(file_stem(&long), file_stem(&"k".repeat(1001)));
    }
}
