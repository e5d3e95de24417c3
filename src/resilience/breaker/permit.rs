//! What an admission grants: closed, open, or the half-open probe permit and its lease.

use std::sync::Arc;
use std::time::Duration;

use crate::state::SharedState;

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
    pub(super) lease: Option<Lease>,
}

pub(super) struct Lease {
    pub(super) state: Arc<dyn SharedState>,
    pub(super) key: String,
    pub(super) holder: String,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish()
    }
}

impl Lease {
    async fn release(self) {
        if let Err(error) = self.state.release_lease(&self.key, &self.holder).await {
            tracing::warn!("{}: could not release the probe lease: {error}", self.key);
        }
    }
}

impl ProbePermit {
    /// Gives the lease back now.
    pub async fn release(mut self) {
        if let Some(lease) = self.lease.take() {
            lease.release().await;
        }
    }
}

impl Drop for ProbePermit {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(lease.release());
            }
            // No runtime left (process exit): the lease's TTL frees it.
            Err(_) => tracing::debug!("{}: probe lease left to expire", lease.key),
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
