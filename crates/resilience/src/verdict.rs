//! Sticky health verdicts, shared by every process: an entry a user request
//! found slow, degraded or overloaded stays out of the first choice for the
//! tasks it failed until a canary (never a user request) finds it healthy
//! again. Lack of samples never clears a verdict; only `clear` does
//! (ARCHITECTURE.md invariant 14). Like
//! outlier ejection with an active health check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use switchyard_state::SharedState;

/// Verdicts live this long without a canary's word, then expire (a process
/// that judged and then died must not eject an entry forever).
const TTL: Duration = Duration::from_secs(6 * 3600);

/// How long a scan of every verdict serves this process's plans.
pub const VIEW_TTL: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictKind {
    /// No first token by a task's first-token ceiling.
    Slow,
    /// Answers cut, refused, truncated or malformed twice in a row.
    Degraded,
    /// The provider said it is overloaded.
    Failing,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub kind: VerdictKind,
    pub reason: String,
    /// For `Slow`: how long the first token took (or was waited for). The
    /// verdict holds for tasks whose first-token ceiling is at most this.
    pub first_token_ms: Option<u64>,
    /// For `Slow`: the ceiling it breached, which a canary must beat to end it.
    #[serde(default)]
    pub ceiling_ms: Option<u64>,
}

impl Verdict {
    /// A degraded or failing verdict (a slow one is [`Verdict::slow`]).
    pub fn new(kind: VerdictKind, reason: String) -> Verdict {
        Verdict {
            kind,
            reason,
            first_token_ms: None,
            ceiling_ms: None,
        }
    }

    /// No first token within `ceiling`: it came (or was waited for) at `late`.
    pub fn slow(reason: String, late: Duration, ceiling: Duration) -> Verdict {
        Verdict {
            kind: VerdictKind::Slow,
            reason,
            first_token_ms: Some(late.as_millis() as u64),
            ceiling_ms: Some(ceiling.as_millis() as u64),
        }
    }

    /// Whether this verdict keeps the entry from a task with these limits.
    pub fn applies(&self, first_token_ceiling: Duration, interactive: bool) -> bool {
        match self.kind {
            // A tenth of slack: a task whose ceiling is barely above what the
            // entry took would most likely be breached too.
            VerdictKind::Slow => self
                .first_token_ms
                .is_some_and(|ms| Duration::from_millis(ms + ms / 10) >= first_token_ceiling),
            VerdictKind::Degraded | VerdictKind::Failing => interactive,
        }
    }
}

fn key(entry: &str) -> String {
    format!("verdict/{entry}")
}

pub struct Verdicts {
    state: Arc<dyn SharedState>,
    /// Every verdict as last scanned, by entry path, and when.
    view: Mutex<(HashMap<String, Verdict>, Option<Instant>)>,
}

impl Verdicts {
    pub fn new(state: Arc<dyn SharedState>) -> Verdicts {
        Verdicts {
            state,
            view: Mutex::new((HashMap::new(), None)),
        }
    }

    /// Records a verdict on `entry` (an `EntryKey` path) for every process.
    pub async fn judge(&self, entry: &str, verdict: Verdict) {
        let json = serde_json::to_value(&verdict).expect("verdict serialises");
        let result = self
            .state
            .update(&key(entry), Some(TTL), Box::new(|_, _| Some(json.clone())))
            .await;
        if let Err(error) = result {
            tracing::warn!("verdict on {entry}: could not share it: {error}");
        }
        tracing::info!("{entry} judged {:?}: {}", verdict.kind, verdict.reason);
        self.view
            .lock()
            .expect("verdict view lock")
            .0
            .insert(entry.to_owned(), verdict);
    }

    /// A canary found `entry` healthy: the verdict ends for every process.
    pub async fn clear(&self, entry: &str) {
        let result = self
            .state
            .update(&key(entry), None, Box::new(|_, _| None))
            .await;
        if let Err(error) = result {
            tracing::warn!("verdict on {entry}: could not clear it: {error}");
        }
        self.view.lock().expect("verdict view lock").0.remove(entry);
    }

    /// Re-reads every verdict unless the last scan is younger than [`VIEW_TTL`].
    pub async fn refresh(&self) {
        let fresh = self
            .view
            .lock()
            .expect("verdict view lock")
            .1
            .is_some_and(|at| at.elapsed() < VIEW_TTL);
        if fresh {
            return;
        }
        let scanned = match self.state.scan("verdict/").await {
            Ok(records) => records,
            Err(error) => return tracing::debug!("verdicts: {error}"),
        };
        let verdicts = scanned
            .into_iter()
            .filter_map(|(stored, json)| {
                let entry = stored.strip_prefix("verdict/")?.to_owned();
                Some((entry, serde_json::from_value(json).ok()?))
            })
            .collect();
        *self.view.lock().expect("verdict view lock") = (verdicts, Some(Instant::now()));
    }

    /// The verdict on `entry` as last read.
    pub fn last_known(&self, entry: &str) -> Option<Verdict> {
        self.view
            .lock()
            .expect("verdict view lock")
            .0
            .get(entry)
            .cloned()
    }

    /// Every entry with a verdict, as last read.
    pub fn judged(&self) -> Vec<String> {
        let view = self.view.lock().expect("verdict view lock");
        let mut entries: Vec<String> = view.0.keys().cloned().collect();
        entries.sort();
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_state::memory::MemoryState;

    fn slow(ms: u64) -> Verdict {
        Verdict::slow(
            "no first token within 1.0 s".into(),
            Duration::from_millis(ms),
            Duration::from_secs(1),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_verdict_is_shared_and_lasts_until_cleared() {
        let state = Arc::new(MemoryState::new());
        let (a, b) = (Verdicts::new(state.clone()), Verdicts::new(state.clone()));
        a.judge("acct/p/m", slow(2_500)).await;
        b.refresh().await;
        assert_eq!(b.last_known("acct/p/m"), Some(slow(2_500)));
        // No samples, no time, nothing but a clear ends it.
        tokio::time::advance(Duration::from_secs(3600)).await;
        b.refresh().await;
        assert!(b.last_known("acct/p/m").is_some());
        a.clear("acct/p/m").await;
        tokio::time::advance(VIEW_TTL).await;
        b.refresh().await;
        assert_eq!(b.last_known("acct/p/m"), None);
    }

    #[test]
    fn slowness_holds_for_tasks_with_a_ceiling_it_breached() {
        let verdict = slow(2_500);
        assert!(verdict.applies(Duration::from_secs(1), true));
        assert!(!verdict.applies(Duration::from_secs(20), false));
        let overloaded = Verdict::new(VerdictKind::Failing, "HTTP 529".into());
        assert!(overloaded.applies(Duration::from_secs(1), true));
        assert!(!overloaded.applies(Duration::from_secs(20), false));
    }
}
