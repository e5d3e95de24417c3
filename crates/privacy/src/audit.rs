//! The outbound audit: one JSON line per remote request, in a file only the
//! user can read, naming what went where and how much, never the text.
//! `switchyard audit` reads it; status shows the last hour's bytes per provider.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use switchyard_base::clock::now_ms;
use switchyard_state::jsonl::{self, ROTATE_BYTES};

const HOUR_MS: u64 = 3_600_000;

/// One remote request as it left.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub task: String,
    /// `lsp` or `gateway`.
    pub front_end: String,
    pub provider: String,
    pub model: String,
    /// The document's path, or the gateway caller.
    pub subject: String,
    pub bytes: usize,
    pub estimated_tokens: usize,
    pub redactions: usize,
}

/// Bytes and requests one provider was sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderTotal {
    pub provider: String,
    pub bytes: usize,
    pub requests: usize,
}

/// The audit file, and this process's last hour of it for status.
pub struct AuditLog {
    path: Option<PathBuf>,
    rotate_bytes: u64,
    recent: Mutex<LastHour>,
}

/// What was sent in the last hour, with each provider's totals kept as
/// records come and go: status asks after every task, and must not walk an
/// hour of a busy gateway's requests each time.
#[derive(Default)]
struct LastHour {
    /// (when, provider, bytes), oldest first.
    records: VecDeque<(u64, String, usize)>,
    totals: BTreeMap<String, ProviderTotal>,
}

impl LastHour {
    fn add(&mut self, at_ms: u64, provider: &str, bytes: usize) {
        self.records.push_back((at_ms, provider.to_owned(), bytes));
        let total = self
            .totals
            .entry(provider.to_owned())
            .or_insert_with(|| ProviderTotal {
                provider: provider.to_owned(),
                ..ProviderTotal::default()
            });
        total.bytes += bytes;
        total.requests += 1;
    }

    /// Forgets what was sent before `since_ms`.
    fn expire(&mut self, since_ms: u64) {
        while self.records.front().is_some_and(|(at, ..)| *at < since_ms) {
            let (_, provider, bytes) = self.records.pop_front().expect("a front record");
            if let Some(total) = self.totals.get_mut(&provider) {
                total.bytes -= bytes;
                total.requests -= 1;
                if total.requests == 0 {
                    self.totals.remove(&provider);
                }
            }
        }
    }
}

impl AuditLog {
    /// The log at the platform state directory's `outbound.jsonl`.
    pub fn open() -> AuditLog {
        AuditLog::at(default_path())
    }

    pub fn at(path: PathBuf) -> AuditLog {
        AuditLog {
            path: Some(path),
            rotate_bytes: ROTATE_BYTES,
            recent: Mutex::default(),
        }
    }

    /// Counts for status only, no file (tests, benchmarks).
    pub fn in_memory() -> AuditLog {
        AuditLog {
            path: None,
            rotate_bytes: ROTATE_BYTES,
            recent: Mutex::default(),
        }
    }

    /// Appends `record`. A log that cannot be written is reported in the
    /// server's log and never stops the request.
    pub fn record(&self, record: &AuditRecord) {
        {
            let mut recent = self.recent.lock().expect("audit lock");
            recent.add(record.at_ms, &record.provider, record.bytes);
            recent.expire(record.at_ms.saturating_sub(HOUR_MS));
        }
        if let Some(path) = &self.path
            && let Err(e) = jsonl::append(path, record, self.rotate_bytes)
        {
            tracing::warn!("outbound audit {}: {e}", path.display());
        }
    }

    /// Per provider, what this process sent in the last hour.
    pub fn last_hour(&self) -> Vec<ProviderTotal> {
        let mut recent = self.recent.lock().expect("audit lock");
        recent.expire(now_ms().saturating_sub(HOUR_MS));
        recent.totals.values().cloned().collect()
    }
}

pub fn default_path() -> PathBuf {
    switchyard_base::paths::state_dir().join("outbound.jsonl")
}

/// Every record at or after `since_ms`, oldest first, from the rotated file
/// and the current one. Lines that do not parse are skipped.
pub fn read_since(path: &Path, since_ms: u64) -> std::io::Result<Vec<AuditRecord>> {
    jsonl::read(path, |r: &AuditRecord| r.at_ms >= since_ms)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use switchyard_state::jsonl::rotated;

    fn record(provider: &str, bytes: usize) -> AuditRecord {
        AuditRecord {
            at_ms: now_ms(),
            task: "explain".into(),
            front_end: "lsp".into(),
            provider: provider.into(),
            model: "m".into(),
            subject: "/w/a.rs".into(),
            bytes,
            estimated_tokens: bytes / 4,
            redactions: 1,
        }
    }

    #[test]
    fn records_are_private_lines_read_back_and_totalled_per_provider() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/outbound.jsonl");
        let log = AuditLog::at(path.clone());
        log.record(&record("a", 100));
        log.record(&record("b", 10));
        log.record(&record("a", 50));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let read = read_since(&path, 0).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[0], record("a", 100).with_at(read[0].at_ms));
        let totals = log.last_hour();
        assert_eq!(
            totals
                .iter()
                .map(|t| (t.provider.as_str(), t.bytes, t.requests))
                .collect::<Vec<_>>(),
            [("a", 150, 2), ("b", 10, 1)]
        );
    }

    #[test]
    fn what_was_sent_over_an_hour_ago_leaves_the_totals() {
        let log = AuditLog::in_memory();
        let now = now_ms();
        log.record(&record("a", 100).with_at(now - HOUR_MS - 1_000));
        log.record(&record("b", 7).with_at(now - HOUR_MS - 500));
        log.record(&record("a", 30).with_at(now - 1_000));
        let totals: Vec<(String, usize, usize)> = log
            .last_hour()
            .into_iter()
            .map(|t| (t.provider, t.bytes, t.requests))
            .collect();
        assert_eq!(totals, [("a".to_owned(), 30, 1)]);
    }

    #[test]
    fn a_full_log_rotates_and_both_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbound.jsonl");
        std::fs::write(&path, "x".repeat(ROTATE_BYTES as usize + 1)).unwrap();
        let log = AuditLog::at(path.clone());
        log.record(&record("a", 1));
        assert!(rotated(&path).exists());
        assert!(std::fs::metadata(&path).unwrap().len() < 1000);
        assert_eq!(read_since(&path, 0).unwrap().len(), 1);
    }

    #[test]
    fn processes_rotating_at_once_keep_the_full_log() {
        const WRITERS: usize = 6;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbound.jsonl");
        let full_log: String = (0..40)
            .map(|_| serde_json::to_string(&record("old", 1)).unwrap() + "\n")
            .collect();
        for round in 0..30 {
            std::fs::write(&path, &full_log).unwrap();
            let _ = std::fs::remove_file(rotated(&path));
            // Each writer opens the files on its own, as another process would.
            let start = std::sync::Barrier::new(WRITERS);
            std::thread::scope(|scope| {
                for _ in 0..WRITERS {
                    scope.spawn(|| {
                        let log = AuditLog {
                            rotate_bytes: full_log.len() as u64 - 1,
                            ..AuditLog::at(path.clone())
                        };
                        start.wait();
                        log.record(&record("new", 1));
                    });
                }
            });
            let read = read_since(&path, 0).unwrap();
            let count = |provider: &str| read.iter().filter(|r| r.provider == provider).count();
            assert_eq!((count("old"), count("new")), (40, WRITERS), "round {round}");
        }
    }

    impl AuditRecord {
        fn with_at(mut self, at_ms: u64) -> AuditRecord {
            self.at_ms = at_ms;
            self
        }
    }
}
