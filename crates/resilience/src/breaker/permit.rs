//! What an admission grants: closed, open, or the half-open probe permit and its lease.

use std::sync::Arc;
use std::time::Duration;

use switchyard_state::SharedState;

/// What a caller may do with the entry now.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Closed,
    /// This caller holds the probe lease: its request is the probe.
    Probe(ProbePermit),
    /// Route around it.
    Open {
        reason: String,
        retry_in: Duration,
    },
}

impl Admission {
    pub fn is_probe(&self) -> bool {
        matches!(self, Admission::Probe(_))
    }
}

/// The half-open probe lease, held while the probe request runs. Recording
/// the verdict gives it back; so does dropping it (a cancelled or abandoned
/// request), at once rather than when the lease's TTL runs out, so another
/// request or process can probe.
#[derive(Debug)]
pub struct ProbePermit {
    pub(super) lease: Lease,
    /// The fencing token the record gave this probe: a lease can lapse while
    /// its holder stalls, the token tells whether a later probe was granted.
    pub(super) token: u64,
}

impl ProbePermit {
    /// Gives the lease back now.
    pub async fn release(self) {
        self.lease.release().await;
    }
}

/// A lease on the shared state, or the claim to one in flight. It stays
/// armed until its release has completed: dropped at any point before (a
/// future dropped while taking it, confirming it or giving it back), it
/// gives itself back in the background. The holder is this claim's own, so
/// a release never frees another request's lease.
pub(super) struct Lease {
    state: Arc<dyn SharedState>,
    pub(super) key: String,
    pub(super) holder: String,
    armed: bool,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish()
    }
}

impl Lease {
    /// A claim on `key`, armed before the lease is asked for: whatever the
    /// shared state answers, or if the asking is dropped, nothing is left held.
    pub(super) fn claim(state: Arc<dyn SharedState>, key: String, process: &str) -> Lease {
        Lease {
            state,
            key,
            holder: format!("{process}/{:016x}", fastrand::u64(..)),
            armed: true,
        }
    }

    /// The lease was not granted: nothing to give back.
    pub(super) fn not_granted(mut self) {
        self.armed = false;
    }

    pub(super) async fn release(mut self) {
        if let Err(error) = self.state.release_lease(&self.key, &self.holder).await {
            tracing::warn!("{}: could not release the probe lease: {error}", self.key);
        }
        self.armed = false;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (state, key, holder) = (self.state.clone(), self.key.clone(), self.holder.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(error) = state.release_lease(&key, &holder).await {
                        tracing::warn!("{key}: could not release the probe lease: {error}");
                    }
                });
            }
            // No runtime left (process exit): the lease's TTL frees it.
            Err(_) => tracing::debug!("{}: probe lease left to expire", self.key),
        }
    }
}

/// Every permit is the same permit: what matters is that the caller holds one.
impl PartialEq for ProbePermit {
    fn eq(&self, _: &ProbePermit) -> bool {
        true
    }
}

impl Eq for ProbePermit {}
