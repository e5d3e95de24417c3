//! The retry policy: after a failed attempt, whether the same entry is tried
//! again and after how long. Classification says what kind of failure it
//! was, backoff how long to wait, the task's room to wait whether it may; an
//! answer already flowing or a slow entry moves on. The policy only decides:
//! the pipeline acts on its [`Decision`] (pauses the quota, spends the wait
//! and the account's retry budget, waits).

use std::time::Duration;

use super::attempt::Failed;
use switchyard_resilience::backoff::BackoffConfig;
use switchyard_resilience::classify::ErrorClass;

/// What the policy knows of the attempt besides its failure.
#[derive(Clone, Copy)]
pub(super) struct Facts<'a> {
    /// Retries of this entry so far (0 after the first attempt).
    pub retry: u32,
    /// The attempt was the breaker's recovery probe.
    pub was_probe: bool,
    pub interactive: bool,
    /// Another usable entry could take the request now.
    pub alternative: bool,
    /// How long the task may still wait (deadline and wait budget).
    pub room_to_wait: Duration,
    /// The entry's provider, for a fatal error's remedy.
    pub provider: &'a str,
}

/// What the pipeline does next with the entry.
#[derive(Debug, PartialEq)]
pub(super) enum Then {
    /// Ask it again after the delay, if the account's retry budget allows.
    Retry(Duration),
    /// Hand the request to the next entry, with why no retry was taken.
    MoveOn(Failed),
    /// As `MoveOn`, and what stood in the way is temporary: the task may be
    /// parked and resumed.
    Later(Failed),
}

#[derive(Debug, PartialEq)]
pub(super) struct Decision {
    /// A rate limit pauses the entry's quota (for every process) this long.
    pub pause_quota: Option<Duration>,
    pub then: Then,
}

/// The longest a `retry-after` pauses an entry: a provider's own word
/// beyond it is more likely a bad header than a plan.
const LONGEST_PAUSE: Duration = Duration::from_secs(3600);

/// How long every process stays off the entry after `failed`, whatever
/// this request does next: a provider that said when to come back
/// (`retry-after`, on a 429, a 529 or a 503) gets nothing sooner from
/// anyone; a rate limit without it pauses for the backoff.
pub(super) fn pause_after(
    backoff: &BackoffConfig,
    class: &ErrorClass,
    failed: &Failed,
    retry: u32,
) -> Option<Duration> {
    match (failed.retry_after, class) {
        (Some(after), _) => Some(after.min(LONGEST_PAUSE)),
        (None, ErrorClass::RateLimit) => Some(
            backoff
                .delay(class, retry, None)
                .unwrap_or(Duration::from_secs(1)),
        ),
        _ => None,
    }
}

/// The decision after `failed`.
pub(super) fn decide(backoff: &BackoffConfig, failed: Failed, facts: Facts<'_>) -> Decision {
    let Some(class) = failed.class.clone() else {
        return Decision {
            pause_quota: None,
            then: Then::MoveOn(failed),
        };
    };
    let pause_quota = pause_after(backoff, &class, &failed, facts.retry);
    let move_on = |failed| Decision {
        pause_quota,
        then: Then::MoveOn(failed),
    };
    // Slow now, or already part-way through an answer: the next entry
    // (continuing the partial answer) beats another wait here.
    if class.retryable() && (failed.slow || !failed.partial.is_empty()) {
        return move_on(failed);
    }
    let because = |why: &str| Failed {
        reason: format!("{}; {why}", failed.reason),
        ..failed.clone()
    };
    // Interactive work waits for one retry at most, and none when the entry
    // says it is overloaded and another entry can take the request now;
    // batch work (refactors, parked tasks) keeps the long patience.
    if facts.interactive && class.retryable() {
        if facts.retry >= 1 {
            return move_on(because("an interactive task moves on after one retry"));
        }
        if class == ErrorClass::Overloaded && facts.alternative {
            return move_on(because("moving on to the next entry at once"));
        }
    }
    let delay = backoff.delay(&class, facts.retry, failed.retry_after);
    let then = match delay {
        None => {
            let remedy = match &class {
                ErrorClass::Fatal(fatal) => fatal.remedy(facts.provider),
                _ => None,
            };
            Then::MoveOn(match remedy {
                Some(remedy) => Failed {
                    reason: format!("{}: {remedy}", failed.reason),
                    ..failed
                },
                None => failed,
            })
        }
        Some(_) if facts.was_probe => Then::Later(because("the recovery probe failed")),
        Some(delay) if delay > facts.room_to_wait => Then::Later(because(&format!(
            "a retry in {:.1} s would exceed the task's wait budget",
            delay.as_secs_f64()
        ))),
        Some(delay) => Then::Retry(delay),
    };
    Decision { pause_quota, then }
}

/// Why a retry the policy allowed was not taken: the account's shared retry
/// budget is spent.
pub(super) fn budget_spent(failed: Failed) -> Failed {
    Failed {
        reason: format!("{}; the account's retry budget is spent", failed.reason),
        ..failed
    }
}
