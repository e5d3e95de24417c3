//! How long to wait before trying the same model again, and whether the wait
//! fits. Waits are exponential with equal jitter: half the ceiling is always
//! waited, so an overloaded provider is never hit again at once, and the rest
//! is random, so a fleet that failed together does not retry together. A
//! provider's `retry-after` is honoured plus a little jitter. Budgets are time, not attempts: a task may spend its wait
//! budget on waits, and the account's retries are capped as a share of its
//! requests so a fleet cannot hammer a shared limit.

use std::time::Duration;

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Deserialize;

use super::classify::ErrorClass;
use switchyard_state::{BucketOp, BucketSpec, SharedState, StateError};

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackoffConfig {
    pub rate_limit_ms: u64,
    pub overloaded_ms: u64,
    pub transient_ms: u64,
    pub cap_ms: u64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            rate_limit_ms: 2_000,
            overloaded_ms: 10_000,
            transient_ms: 1_000,
            cap_ms: 120_000,
        }
    }
}

/// `retry-after` gets up to this share of itself (at most [`RETRY_AFTER_JITTER_MAX`])
/// added, so the processes it was sent to do not come back in the same instant.
const RETRY_AFTER_JITTER: f64 = 0.1;
const RETRY_AFTER_JITTER_MAX: Duration = Duration::from_secs(1);

impl BackoffConfig {
    fn base(&self, class: &ErrorClass) -> Option<Duration> {
        let ms = match class {
            ErrorClass::RateLimit => self.rate_limit_ms,
            ErrorClass::Overloaded => self.overloaded_ms,
            ErrorClass::Transient => self.transient_ms,
            ErrorClass::Fatal(_) => return None,
        };
        Some(Duration::from_millis(ms))
    }

    /// The wait before retry number `retry` (0 for the first retry) after a
    /// failure of `class`; `None` for fatal errors, which never retry.
    pub fn delay(
        &self,
        class: &ErrorClass,
        retry: u32,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        let base = self.base(class)?;
        let cap = Duration::from_millis(self.cap_ms);
        if let Some(after) = retry_after {
            let jitter = after
                .mul_f64(RETRY_AFTER_JITTER)
                .min(RETRY_AFTER_JITTER_MAX);
            return Some(after.min(cap) + jitter.mul_f64(fastrand::f64()));
        }
        let ceiling = base
            .saturating_mul(1u32.checked_shl(retry.min(20)).unwrap_or(u32::MAX))
            .min(cap);
        Some(ceiling.mul_f64(0.5 + 0.5 * fastrand::f64()))
    }
}

/// What one task may still spend waiting to retry.
#[derive(Clone, Copy, Debug)]
pub struct WaitBudget {
    left: Duration,
}

impl WaitBudget {
    pub fn new(total: Duration) -> WaitBudget {
        WaitBudget { left: total }
    }

    /// Spends `wait` if it fits; a wait that would exceed the budget is not taken.
    pub fn try_spend(&mut self, wait: Duration) -> bool {
        if wait > self.left {
            return false;
        }
        self.left -= wait;
        true
    }

    pub fn left(&self) -> Duration {
        self.left
    }
}

/// Retries per account, shared by every process: each first attempt earns
/// [`EARNED_PER_REQUEST`] of a retry, a trickle refills the rest, and a retry
/// spends one. So in a storm the account retries about a tenth of its traffic,
/// not all of it again. Earnings are counted here and paid in when a retry is
/// asked for, so a first attempt costs no shared write.
#[derive(Default)]
pub struct AccountRetries {
    earned: Mutex<HashMap<String, u32>>,
}

const EARNED_PER_REQUEST: f64 = 0.1;
const RETRY_SPEC: BucketSpec = BucketSpec {
    capacity: 10.0,
    refill_per_sec: 0.1,
};

impl AccountRetries {
    fn key(account: &str) -> String {
        format!("retries/{account}")
    }

    pub fn earn(&self, account: &str) {
        *self
            .earned
            .lock()
            .expect("earned lock")
            .entry(account.to_owned())
            .or_default() += 1;
    }

    /// Whether the account may retry once more now.
    pub async fn spend(&self, state: &dyn SharedState, account: &str) -> Result<bool, StateError> {
        let key = Self::key(account);
        let earned = self
            .earned
            .lock()
            .expect("earned lock")
            .remove(account)
            .unwrap_or(0);
        if earned > 0 {
            let pay_in = BucketOp::Adjust {
                delta: f64::from(earned) * EARNED_PER_REQUEST,
            };
            state.bucket(&key, RETRY_SPEC, pay_in).await?;
        }
        let take = BucketOp::Take {
            amount: 1.0,
            floor: 0.0,
        };
        Ok(state.bucket(&key, RETRY_SPEC, take).await?.granted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Fatal;
    use switchyard_state::memory::MemoryState;

    #[test]
    fn equal_jitter_waits_at_least_half_the_ceiling_and_spreads() {
        let config = BackoffConfig::default();
        for retry in 0..8 {
            let ceiling = Duration::from_secs(1) * 2u32.pow(retry);
            let ceiling = ceiling.min(Duration::from_secs(120));
            let waits: Vec<_> = (0..500)
                .map(|_| config.delay(&ErrorClass::Transient, retry, None).unwrap())
                .collect();
            assert!(
                waits.iter().all(|w| *w <= ceiling && *w >= ceiling / 2),
                "retry {retry}"
            );
            let mean = waits.iter().sum::<Duration>() / waits.len() as u32;
            // Uniform on [ceiling / 2, ceiling]: the mean sits near three quarters.
            assert!(
                mean > ceiling.mul_f64(0.7) && mean < ceiling.mul_f64(0.8),
                "retry {retry}: mean {mean:?}"
            );
        }
    }

    #[test]
    fn bases_follow_the_class_and_the_cap_holds() {
        let config = BackoffConfig::default();
        let max = |class: ErrorClass, retry| {
            (0..300)
                .map(|_| config.delay(&class, retry, None).unwrap())
                .max()
                .unwrap()
        };
        assert!(max(ErrorClass::RateLimit, 0) <= Duration::from_secs(2));
        assert!(max(ErrorClass::RateLimit, 0) > Duration::from_secs(1));
        assert!(max(ErrorClass::Overloaded, 0) > Duration::from_secs(5));
        assert!(max(ErrorClass::Overloaded, 30) <= Duration::from_secs(120));
    }

    #[test]
    fn retry_after_is_honoured_with_a_little_jitter() {
        let config = BackoffConfig::default();
        for _ in 0..200 {
            let wait = config
                .delay(&ErrorClass::RateLimit, 3, Some(Duration::from_secs(2)))
                .unwrap();
            assert!(
                wait >= Duration::from_secs(2) && wait <= Duration::from_millis(2_200),
                "{wait:?}"
            );
        }
    }

    #[test]
    fn fatal_errors_never_wait_to_retry() {
        let config = BackoffConfig::default();
        assert_eq!(config.delay(&ErrorClass::Fatal(Fatal::Auth), 0, None), None);
    }

    #[test]
    fn a_wait_beyond_the_budget_is_not_taken() {
        let mut budget = WaitBudget::new(Duration::from_secs(30));
        assert!(budget.try_spend(Duration::from_secs(20)));
        assert!(!budget.try_spend(Duration::from_secs(11)));
        assert!(budget.try_spend(Duration::from_secs(10)));
        assert!(!WaitBudget::new(Duration::ZERO).try_spend(Duration::from_millis(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_account_retries_a_share_of_its_traffic() {
        let state = MemoryState::new();
        let retries = AccountRetries::default();
        let mut granted = 0;
        for _ in 0..200 {
            retries.earn("acct");
            if retries.spend(&state, "acct").await.unwrap() {
                granted += 1;
            }
        }
        // The first ten come from the initial allowance, then one per ten requests.
        assert!((25..=35).contains(&granted), "{granted}");
    }
}
