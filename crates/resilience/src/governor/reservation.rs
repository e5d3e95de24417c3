//! What a request holds of the quota from admission until it is settled.

use tokio::time::Instant;

use super::Governor;
use super::quota::{Meter, Quota};
use switchyard_providers::Usage;

/// Tokens held for one request until [`Governor::settle`]. It stays armed
/// until everything it holds has been given back or settled: dropped at any
/// point before (the request was cancelled, its future dropped, even while
/// being settled), it gives back the rest in the background. Before the
/// request may leave (a reservation still being taken), everything goes back;
/// after, it is settled as a request that used no output.
#[derive(Debug)]
pub struct Reservation {
    pub(super) key: String,
    /// (meter, amount reserved, ticket), per governed meter still held.
    pub(super) held: Vec<(Meter, f64, f64)>,
    pub(super) quota: Quota,
    /// When it was granted, on this process's clock.
    pub(super) at: Instant,
    /// Every meter was granted: the request may leave.
    pub(super) granted: bool,
    /// What the request used, once known.
    pub(super) usage: Option<Usage>,
    /// Who gives back what is still held if it is dropped: the governor
    /// that granted it.
    pub(super) governor: Option<Governor>,
    /// Granted from this process's own share while the shared state was away.
    pub(super) own_share: bool,
}

impl Reservation {
    /// What goes back to `meter`'s bucket of the `amount` taken from it.
    pub(super) fn refund(&self, meter: Meter, amount: f64) -> f64 {
        let used = match (self.granted, self.usage) {
            (false, _) => 0.0,
            (true, Some(usage)) => meter.amount(usage.input_tokens, usage.output_tokens),
            (true, None) if meter == Meter::Requests => 1.0,
            (true, None) => 0.0,
        };
        amount - used
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some(governor) = self.governor.take() else {
            return;
        };
        if self.held.is_empty() {
            return;
        }
        let mut rest = Reservation {
            key: self.key.clone(),
            held: std::mem::take(&mut self.held),
            quota: self.quota,
            at: self.at,
            granted: self.granted,
            usage: self.usage,
            governor: None,
            own_share: self.own_share,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { governor.give_back(&mut rest).await });
            }
            Err(_) => tracing::debug!("quota {}: reservation dropped at exit", self.key),
        }
    }
}
