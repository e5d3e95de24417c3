//! What outlives each router: a configuration change builds a new router
//! over the same beacons, status channel, parked list, canary results,
//! shared resilience state, outbound audit, and what the
//! routers learned from the traffic they served, and the rules in force.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::SharedViews;
use super::beacon::Beacons;
use super::canary::CanaryResult;
use super::status::{ParkedStatus, Served, StatusReport};
use switchyard_base::task::TaskKind;
use switchyard_privacy::audit::AuditLog;
use switchyard_privacy::rules::RulesInForce;
use switchyard_resilience::Resilience;

/// What every router a core builds shares, and what outlives each of them.
#[derive(Clone)]
pub struct Lasting {
    pub beacons: Arc<Beacons>,
    pub status: watch::Sender<StatusReport>,
    pub parked: Arc<Mutex<Vec<ParkedStatus>>>,
    pub canaries: Arc<Mutex<Vec<CanaryResult>>>,
    pub resilience: Arc<Resilience>,
    /// The outbound audit (in memory only unless opened on its file).
    pub audit: Arc<AuditLog>,
    pub learned: Arc<Learned>,
    /// Local-only mode and the path rules as in force now, which every
    /// remote attempt asks as it sends (the core puts changes in force).
    pub rules: RulesInForce,
}

/// What the routers learned from the traffic they served, kept across a
/// rebuild: a change of configuration does not forget a downshift or an
/// open breaker.
#[derive(Default)]
pub struct Learned {
    /// The route each task kind was last served by.
    pub(super) active: Mutex<HashMap<TaskKind, Served>>,
    /// The kind of the latest served task.
    pub(super) last: Mutex<Option<TaskKind>>,
    /// The shared breakers and quota as last read, for status.
    pub(super) shared: Mutex<SharedViews>,
}

impl Lasting {
    /// Fresh long-lived state over `resilience` (tests, benchmarks).
    pub fn new(resilience: Arc<Resilience>) -> Lasting {
        Lasting {
            beacons: Arc::default(),
            status: watch::channel(StatusReport::default()).0,
            parked: Arc::default(),
            canaries: Arc::default(),
            resilience,
            audit: Arc::new(AuditLog::in_memory()),
            learned: Arc::default(),
            rules: RulesInForce::default(),
        }
    }
}
