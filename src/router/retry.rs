//! The retry policy: after a failed attempt, whether the same entry is tried
//! again and after how long. Classification says what kind of failure it was,
//! backoff how long to wait, the task's wait budget and the account's retry
//! budget whether it may; an answer already flowing or a slow entry moves on.

use std::time::Duration;

use tokio::time::Instant;

use super::Router;
use super::attempt::Failed;
use super::pipeline::RunState;
use crate::entry::EntryKey;
use crate::resilience::classify::ErrorClass;
use crate::state::WhenUnavailable;

impl Router {
    /// `Ok(delay)` to try the same entry again after `delay`; otherwise the
    /// failure to hand to the next entry, with why no retry was taken.
    pub(super) async fn retry_delay(
        &self,
        key: &EntryKey,
        failed: Failed,
        retry: u32,
        was_probe: bool,
        run: &mut RunState,
    ) -> Result<Duration, Failed> {
        let Some(class) = failed.class.clone() else {
            return Err(failed);
        };
        // Slow now, or already part-way through an answer: the next entry
        // (continuing the partial answer) beats another wait here.
        if class.retryable() && (failed.slow || !failed.partial.is_empty()) {
            return Err(failed);
        }
        let resilience = &self.resilience;
        // Interactive work waits for one retry at most, and none when the entry
        // says it is overloaded and another entry can take the request now;
        // batch work (refactors, parked tasks) keeps the long patience.
        if run.interactive && class.retryable() {
            if retry >= 1 {
                return Err(Failed {
                    reason: format!(
                        "{}; an interactive task moves on after one retry",
                        failed.reason
                    ),
                    ..failed
                });
            }
            if class == ErrorClass::Overloaded && run.alternative {
                return Err(Failed {
                    reason: format!("{}; moving on to the next entry at once", failed.reason),
                    ..failed
                });
            }
        }
        let delay = resilience.backoff.delay(&class, retry, failed.retry_after);
        if class == ErrorClass::RateLimit {
            let pause = delay.unwrap_or(Duration::from_secs(1));
            resilience.governor.pause(&key.quota_key(), pause).await;
        }
        let Some(delay) = delay else {
            let reason = match class {
                ErrorClass::Fatal(fatal) => match fatal.remedy(&key.model.provider) {
                    Some(remedy) => format!("{}: {remedy}", failed.reason),
                    None => failed.reason.clone(),
                },
                _ => failed.reason.clone(),
            };
            return Err(Failed { reason, ..failed });
        };
        let give_up = |why: &str| Failed {
            reason: format!("{}; {why}", failed.reason),
            ..failed.clone()
        };
        if was_probe {
            run.retry_later = true;
            return Err(give_up("the recovery probe failed"));
        }
        if Instant::now() + delay > run.deadline || !run.waits.try_spend(delay) {
            run.retry_later = true;
            return Err(give_up(&format!(
                "a retry in {:.1} s would exceed the task's wait budget",
                delay.as_secs_f64()
            )));
        }
        if !self.spend_retry(&key.account).await {
            run.retry_later = true;
            return Err(give_up("the account's retry budget is spent"));
        }
        Ok(delay)
    }

    async fn spend_retry(&self, account: &str) -> bool {
        self.resilience
            .retries
            .spend(self.resilience.state.as_ref(), account)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!("retry budget unavailable: {error}");
                self.config.resilience.when_unavailable == WhenUnavailable::Open
            })
    }
}
