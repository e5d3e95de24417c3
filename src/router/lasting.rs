//! What outlives each router: a configuration change builds a new router
//! over the same beacons, status channel, parked list, canary results,
//! local-only mode, shared resilience state and outbound audit.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::beacon::Beacons;
use super::canary::CanaryResult;
use super::status::{ParkedStatus, StatusReport};
use crate::privacy::audit::AuditLog;
use crate::resilience::Resilience;

/// What every router a core builds shares, and what outlives each of them.
#[derive(Clone)]
pub struct Lasting {
    pub beacons: Arc<Beacons>,
    pub status: watch::Sender<StatusReport>,
    pub parked: Arc<Mutex<Vec<ParkedStatus>>>,
    pub canaries: Arc<Mutex<Vec<CanaryResult>>>,
    pub local_only: Arc<AtomicBool>,
    pub resilience: Arc<Resilience>,
    /// The outbound audit (in memory only unless opened on its file).
    pub audit: Arc<AuditLog>,
}

impl Lasting {
    /// Fresh long-lived state over `resilience` (tests, benchmarks).
    pub fn new(resilience: Arc<Resilience>) -> Lasting {
        Lasting {
            beacons: Arc::default(),
            status: watch::channel(StatusReport::default()).0,
            parked: Arc::default(),
            canaries: Arc::default(),
            local_only: Arc::default(),
            resilience,
            audit: Arc::new(AuditLog::in_memory()),
        }
    }
}
