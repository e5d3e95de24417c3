//! Turning what a user request saw into a sticky verdict on its entry (see
//! `switchyard_resilience::verdict`): no first token by the task's ceiling is slow; an
//! answer cut mid-stream, or two degraded answers in a row (refused,
//! truncated, empty, malformed), is degraded; an overloaded answer is
//! failing. Only user requests judge; only a canary clears.

use std::time::Duration;

use super::Router;
use super::attempt::Failure;
use super::beacon::Outcome;
use switchyard_base::entry::{EntryKey, ModelRef};
use switchyard_base::task::TaskProfile;
use switchyard_providers::{FailureKind, Usage};
use switchyard_resilience::classify::ErrorClass;
use switchyard_resilience::verdict::{Verdict, VerdictKind};

/// Degraded answers in a row that make an entry degraded.
const STRIKES: u32 = 2;

/// What one attempt showed about its entry.
pub(super) struct Seen<'a> {
    pub result: &'a Result<Usage, Failure>,
    /// When the first token came, if it did.
    pub first_token: Option<Duration>,
    /// How long the attempt ran.
    pub waited: Duration,
    /// Malformed events skipped on the way.
    pub skipped: u32,
    /// It lost a hedge race before its first token: the hedge started at the
    /// ceiling, so it was slow whatever its own admission took.
    pub lost_race: bool,
}

impl Seen<'_> {
    /// How late its first token was, when it was later than `ceiling`.
    fn late(&self, ceiling: Duration) -> Option<Duration> {
        // Cut off by its own first-token deadline: slow, however little of
        // the ceiling was left once it was admitted.
        let timed_out = matches!(self.result, Err(Failure::Failed(f)) if f.slow);
        match self.first_token {
            Some(at) => (at > ceiling).then_some(at),
            None if self.lost_race || timed_out => Some(self.waited.max(ceiling)),
            None => (self.waited >= ceiling).then_some(self.waited),
        }
    }
}

impl Router {
    /// Records a verdict on `entry` when the attempt earned one.
    pub(super) async fn judge(&self, key: &EntryKey, profile: &TaskProfile, seen: Seen<'_>) {
        if let Some(verdict) = self.verdict(&key.model, profile, seen) {
            self.resilience.verdicts.judge(&key.path(), verdict).await;
            self.publish();
        }
    }

    fn verdict(&self, entry: &ModelRef, profile: &TaskProfile, seen: Seen<'_>) -> Option<Verdict> {
        let ceiling = profile.first_token_ceiling();
        if let Some(late) = seen.late(ceiling) {
            let reason = format!(
                "slow: no first token within the {:.1} s ceiling (waited {:.1} s)",
                ceiling.as_secs_f64(),
                late.as_secs_f64()
            );
            return Some(Verdict::slow(reason, late, ceiling));
        }
        let failed = match seen.result {
            // An answer that came through garbage still counts against the entry.
            Ok(_) if seen.skipped > 0 => {
                let strikes = self.beacons.strike(entry);
                return (strikes >= STRIKES).then(|| {
                    Verdict::new(
                        VerdictKind::Degraded,
                        format!(
                            "degraded: {STRIKES} answers in a row, last: malformed events skipped"
                        ),
                    )
                });
            }
            Ok(_) => {
                self.beacons.clear_strikes(entry);
                return None;
            }
            Err(Failure::Failed(failed)) => failed,
            Err(_) => return None,
        };
        if failed.class == Some(ErrorClass::Overloaded) {
            return Some(Verdict::new(
                VerdictKind::Failing,
                format!("overloaded: {}", failed.reason),
            ));
        }
        // An answer cut mid-stream, or cut short by a stop for length below
        // the limit asked, is judged at once: the next request must not start
        // on an entry that cuts its answers.
        if (failed.kind == Some(FailureKind::StreamCut) && !failed.partial.is_empty())
            || failed.cut_short
        {
            return Some(Verdict::new(
                VerdictKind::Degraded,
                format!("degraded: an answer was cut: {}", failed.reason),
            ));
        }
        let degraded = matches!(failed.outcome, Outcome::Degraded(_))
            || failed.kind == Some(FailureKind::Malformed);
        if degraded && self.beacons.strike(entry) >= STRIKES {
            return Some(Verdict::new(
                VerdictKind::Degraded,
                format!(
                    "degraded: {STRIKES} answers in a row, last: {}",
                    failed.reason
                ),
            ));
        }
        None
    }
}
