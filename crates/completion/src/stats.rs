//! Completion stats, kept on this machine only: one JSON line per suggestion
//! shown, per answer that came back empty or late, and per suggestion
//! settled (accepted, partly accepted, ignored), in `completions.jsonl` in
//! the state directory (0600, rotated as the outbound audit). Never the
//! text: lengths, times, the language, the model. `switchyard stats` sums
//! them by language and model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use switchyard_base::clock::now_ms;
use switchyard_state::jsonl;

/// One line of the stats file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum StatsRecord {
    Shown {
        at_ms: u64,
        id: u64,
        #[serde(flatten)]
        asked: Asked,
        /// `local` (the engine) or `remote` (an autocomplete.chain entry).
        origin: String,
        chars: usize,
        /// Prompt tokens the engine decoded for it, and those it had cached.
        decoded_tokens: Option<usize>,
        cached_tokens: Option<usize>,
    },
    /// No suggestion: `late` (the answer missed the budget), `prompt` (the
    /// prompt was still filling at the deadline) or `nothing` (the model
    /// gave nothing usable).
    Empty {
        at_ms: u64,
        #[serde(flatten)]
        asked: Asked,
        reason: String,
    },
    Settled {
        at_ms: u64,
        id: u64,
        /// `accepted`, `partial` or `ignored`.
        outcome: String,
        /// Characters of the suggestion that went into the document.
        chars: usize,
    },
}

/// What every request record says about the request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    /// The client's name (`clientInfo.name`).
    pub editor: String,
    pub language: String,
    pub model: String,
    pub latency_ms: u64,
    /// The user asked (the editor's trigger-suggestion key).
    pub invoked: bool,
}

/// The stats file of this machine's user.
pub struct StatsLog {
    path: Option<PathBuf>,
    next_id: AtomicU64,
}

impl StatsLog {
    pub fn at(path: PathBuf) -> StatsLog {
        StatsLog {
            path: Some(path),
            // Unique across processes: this process's start, then a count.
            next_id: AtomicU64::new(now_ms() * 1_000),
        }
    }

    /// Nothing written (tests, one-shot commands).
    pub fn in_memory() -> StatsLog {
        StatsLog {
            path: None,
            next_id: AtomicU64::new(0),
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Appends `record`; a file that cannot be written is reported in the
    /// server's log and never stops a completion.
    pub fn record(&self, record: &StatsRecord) {
        if let Some(path) = &self.path
            && let Err(e) = jsonl::append(path, record, jsonl::ROTATE_BYTES)
        {
            tracing::warn!("completion stats {}: {e}", path.display());
        }
    }
}

pub fn default_path() -> PathBuf {
    switchyard_base::paths::state_dir().join("completions.jsonl")
}

/// Every record at or after `since_ms`.
pub fn read_since(path: &Path, since_ms: u64) -> std::io::Result<Vec<StatsRecord>> {
    jsonl::read(path, |r: &StatsRecord| at_ms(r) >= since_ms)
}

fn at_ms(record: &StatsRecord) -> u64 {
    match record {
        StatsRecord::Shown { at_ms, .. }
        | StatsRecord::Empty { at_ms, .. }
        | StatsRecord::Settled { at_ms, .. } => *at_ms,
    }
}

/// The sums for one editor, language and model.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    pub editor: String,
    pub language: String,
    pub model: String,
    /// Requests that came back with a suggestion or empty.
    pub requests: usize,
    pub shown: usize,
    pub accepted: usize,
    pub partial: usize,
    pub ignored: usize,
    /// Shown, but not settled yet (still on screen, or the editor quit).
    pub unsettled: usize,
    pub accepted_chars: usize,
    pub empty: usize,
    /// Of the empty ones, those that missed the budget.
    pub late: usize,
    /// Accepted (whole or partly) of those settled.
    pub acceptance_rate: Option<f64>,
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
}

impl Totals {
    /// Counts one suggestion shown, by how it was settled (`None`: not yet).
    fn count_shown(&mut self, settled: Option<(&str, usize)>) {
        self.shown += 1;
        match settled {
            Some(("accepted", chars)) => {
                self.accepted += 1;
                self.accepted_chars += chars;
            }
            Some(("partial", chars)) => {
                self.partial += 1;
                self.accepted_chars += chars;
            }
            Some(_) => self.ignored += 1,
            None => self.unsettled += 1,
        }
    }
}

/// Sums `records` by editor, language and model.
pub fn totals(records: &[StatsRecord]) -> Vec<Totals> {
    let settled: BTreeMap<u64, (&str, usize)> = records
        .iter()
        .filter_map(|r| match r {
            StatsRecord::Settled {
                id, outcome, chars, ..
            } => Some((*id, (outcome.as_str(), *chars))),
            _ => None,
        })
        .collect();
    let mut groups: BTreeMap<(String, String, String), (Totals, Vec<u64>)> = BTreeMap::new();
    for record in records {
        let (asked, shown) = match record {
            StatsRecord::Shown { asked, id, .. } => (asked, Some(*id)),
            StatsRecord::Empty { asked, .. } => (asked, None),
            StatsRecord::Settled { .. } => continue,
        };
        let key = (
            asked.editor.clone(),
            asked.language.clone(),
            asked.model.clone(),
        );
        let (group, latencies) = groups.entry(key).or_default();
        group.requests += 1;
        match (record, shown) {
            (StatsRecord::Empty { reason, .. }, _) => {
                group.empty += 1;
                group.late += usize::from(reason != "nothing");
            }
            (_, Some(id)) => {
                latencies.push(asked.latency_ms);
                group.count_shown(settled.get(&id).copied());
            }
            _ => {}
        }
    }
    groups
        .into_iter()
        .map(|((editor, language, model), (group, mut latencies))| {
            latencies.sort_unstable();
            let settled = group.accepted + group.partial + group.ignored;
            let pick = |p: f64| {
                latencies
                    .get(((latencies.len() as f64 - 1.0) * p).round() as usize)
                    .copied()
            };
            Totals {
                editor,
                language,
                model,
                acceptance_rate: (settled > 0)
                    .then(|| (group.accepted + group.partial) as f64 / settled as f64),
                p50_ms: pick(0.5),
                p95_ms: pick(0.95),
                ..group
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(latency_ms: u64) -> Asked {
        Asked {
            editor: "Visual Studio Code".into(),
            language: "rust".into(),
            model: "qwen".into(),
            latency_ms,
            invoked: false,
        }
    }

    fn shown(id: u64, latency_ms: u64) -> StatsRecord {
        StatsRecord::Shown {
            at_ms: 1,
            id,
            asked: asked(latency_ms),
            origin: "local".into(),
            chars: 10,
            decoded_tokens: Some(8),
            cached_tokens: Some(200),
        }
    }

    fn settled(id: u64, outcome: &str, chars: usize) -> StatsRecord {
        StatsRecord::Settled {
            at_ms: 2,
            id,
            outcome: outcome.into(),
            chars,
        }
    }

    #[test]
    fn shown_settled_and_empty_answers_sum_up_by_language_and_model() {
        let empty = |reason: &str| StatsRecord::Empty {
            at_ms: 1,
            asked: asked(1000),
            reason: reason.into(),
        };
        let records = [
            shown(1, 300),
            shown(2, 500),
            shown(3, 700),
            shown(4, 900),
            settled(1, "accepted", 10),
            settled(2, "partial", 4),
            settled(3, "ignored", 0),
            empty("late"),
            empty("nothing"),
        ];
        let totals = totals(&records);
        assert_eq!(totals.len(), 1);
        let t = &totals[0];
        assert_eq!(
            (
                t.requests,
                t.shown,
                t.accepted,
                t.partial,
                t.ignored,
                t.unsettled
            ),
            (6, 4, 1, 1, 1, 1)
        );
        assert_eq!((t.accepted_chars, t.empty, t.late), (14, 2, 1));
        assert_eq!(t.acceptance_rate, Some(2.0 / 3.0));
        assert_eq!((t.p50_ms, t.p95_ms), (Some(700), Some(900)));
    }

    #[test]
    fn lines_are_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/completions.jsonl");
        let log = StatsLog::at(path.clone());
        log.record(&shown(log.next_id(), 300));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let read = read_since(&path, 0).unwrap();
        assert_eq!(read.len(), 1);
        assert!(matches!(read[0], StatsRecord::Shown { chars: 10, .. }));
        let line = std::fs::read_to_string(&path).unwrap();
        assert!(
            line.contains("\"event\":\"shown\"") && line.contains("\"language\":\"rust\""),
            "{line}"
        );
    }
}
