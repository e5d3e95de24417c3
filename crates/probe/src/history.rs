//! The probe history: one JSON line per probe in `probes.jsonl` in the state
//! directory, private to the user (0600). `switchyard probe` appends to it and
//! judges p95s from it; status displays read the last results per entry.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::ProbeResult;
use switchyard_state::file::{create_private_dir, replace_file};

/// p95s are taken over this many most recent probes of an entry.
pub const P95_WINDOW: usize = 20;
/// Past this many lines the file is rewritten keeping the newest `KEEP_LINES`,
/// so a probe every five minutes never fills a disk; compacting only now and
/// then keeps the append cheap.
const COMPACT_ABOVE_LINES: usize = 20_000;
const KEEP_LINES: usize = 10_000;

/// One probe as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// Unix time in milliseconds.
    pub at: u64,
    pub provider: String,
    pub model: String,
    pub ok: bool,
    /// `None` when no text arrived.
    pub ttft_ms: Option<u64>,
    pub total_ms: u64,
    pub error: Option<String>,
}

impl ProbeRecord {
    pub fn new(result: &ProbeResult, at: SystemTime) -> ProbeRecord {
        ProbeRecord {
            at: at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| millis(d).unwrap_or(u64::MAX)),
            provider: result.provider.clone(),
            model: result.model.clone(),
            ok: result.verdict.is_ok(),
            ttft_ms: result.ttft.map(|d| millis(d).unwrap_or(u64::MAX)),
            total_ms: millis(result.total).unwrap_or(u64::MAX),
            error: result.verdict.problem(),
        }
    }

    /// `provider/model`, as chains name it.
    pub fn entry(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

fn millis(d: Duration) -> Option<u64> {
    u64::try_from(d.as_millis()).ok()
}

/// Where probe results are kept.
pub fn default_path() -> PathBuf {
    switchyard_base::paths::state_dir().join("probes.jsonl")
}

/// Appends `records` (one write, so concurrent probes don't interleave
/// lines), creating the file 0600 and its directory 0700.
pub fn append(path: &Path, records: &[ProbeRecord]) -> io::Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    let mut lines = String::new();
    for record in records {
        lines.push_str(&serde_json::to_string(record).map_err(io::Error::other)?);
        lines.push('\n');
    }
    let mut options = OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(lines.as_bytes())?;
    compact_if_long(path)
}

/// Rewrites the file keeping its newest lines once it has grown past the
/// bound. A probe appending during the rewrite may lose its line; the next
/// probe's is kept, which is fine for a health history.
fn compact_if_long(path: &Path) -> io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= COMPACT_ABOVE_LINES {
        return Ok(());
    }
    let mut kept = lines[lines.len() - KEEP_LINES..].join("\n");
    kept.push('\n');
    replace_file(path, kept.as_bytes())
}

/// Every record in the file, oldest first. A missing file is an empty history;
/// lines that do not parse (a torn write, an older format) are skipped.
pub fn read_all(path: &Path) -> io::Result<Vec<ProbeRecord>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}

/// The newest `per_entry` records of each `provider/model`, oldest first: what
/// status displays show as "last probe results".
pub fn recent_by_entry(
    path: &Path,
    per_entry: usize,
) -> io::Result<BTreeMap<String, Vec<ProbeRecord>>> {
    Ok(group_recent(read_all(path)?, per_entry))
}

fn group_recent(records: Vec<ProbeRecord>, per_entry: usize) -> BTreeMap<String, Vec<ProbeRecord>> {
    let mut by_entry: BTreeMap<String, Vec<ProbeRecord>> = BTreeMap::new();
    for record in records {
        by_entry.entry(record.entry()).or_default().push(record);
    }
    for records in by_entry.values_mut() {
        let excess = records.len().saturating_sub(per_entry);
        records.drain(..excess);
    }
    by_entry
}

/// p95 latencies of an entry's recent probes. Only probes that got an answer
/// count: a 503 in 5 ms says nothing about how fast the model answers (and
/// is reported as a failure of its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    pub ttft_ms: Option<u64>,
    pub total_ms: Option<u64>,
    /// How many probes the p95s are over.
    pub samples: usize,
}

impl Percentiles {
    pub fn of(records: &[ProbeRecord]) -> Percentiles {
        let answered: Vec<&ProbeRecord> = records.iter().filter(|r| r.ttft_ms.is_some()).collect();
        Percentiles {
            ttft_ms: p95(answered.iter().filter_map(|r| r.ttft_ms).collect()),
            total_ms: p95(answered.iter().map(|r| r.total_ms).collect()),
            samples: answered.len(),
        }
    }
}

/// Nearest-rank 95th percentile.
fn p95(mut values: Vec<u64>) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = (values.len() * 95).div_ceil(100);
    values.get(rank.saturating_sub(1)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(provider: &str, at: u64, ttft_ms: Option<u64>, total_ms: u64) -> ProbeRecord {
        ProbeRecord {
            at,
            provider: provider.into(),
            model: "m".into(),
            ok: ttft_ms.is_some(),
            ttft_ms,
            total_ms,
            error: None,
        }
    }

    #[test]
    fn p95_is_the_nearest_rank() {
        assert_eq!(p95(vec![]), None);
        assert_eq!(p95(vec![7]), Some(7));
        assert_eq!(p95((1..=20).collect()), Some(19));
        assert_eq!(p95((1..=100).rev().collect()), Some(95));
    }

    #[test]
    fn percentiles_leave_out_probes_without_an_answer() {
        let records = [
            record("a", 1, Some(100), 200),
            record("a", 2, None, 5),
            record("a", 3, Some(300), 900),
        ];
        let p = Percentiles::of(&records);
        assert_eq!(
            (p.ttft_ms, p.total_ms, p.samples),
            (Some(300), Some(900), 2)
        );
    }

    #[test]
    fn appended_records_read_back_grouped_newest_last_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/probes.jsonl");
        let records: Vec<_> = (0..5)
            .map(|at| record(["a", "b"][at as usize % 2], at, Some(at), at))
            .collect();
        append(&path, &records[..3]).unwrap();
        append(&path, &records[3..]).unwrap();
        let recent = recent_by_entry(&path, 2).unwrap();
        let ats = |entry: &str| recent[entry].iter().map(|r| r.at).collect::<Vec<_>>();
        assert_eq!(ats("a/m"), vec![2, 4]);
        assert_eq!(ats("b/m"), vec![1, 3]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_missing_file_is_empty_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probes.jsonl");
        assert!(read_all(&path).unwrap().is_empty());
        let good = serde_json::to_string(&record("a", 1, Some(1), 2)).unwrap();
        std::fs::write(&path, format!("{good}\n{{\"at\": 2, \"prov\n")).unwrap();
        assert_eq!(read_all(&path).unwrap().len(), 1);
    }

    #[test]
    fn a_long_history_is_cut_to_its_newest_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probes.jsonl");
        let line = serde_json::to_string(&record("a", 0, Some(1), 2)).unwrap();
        std::fs::write(&path, format!("{line}\n").repeat(COMPACT_ABOVE_LINES)).unwrap();
        append(&path, &[record("a", 99, Some(1), 2)]).unwrap();
        let all = read_all(&path).unwrap();
        assert_eq!(all.len(), KEEP_LINES);
        assert_eq!(all.last().unwrap().at, 99);
    }
}
