//! The runbook view for `switchyard status` and the gateway's `/status`: for
//! each task kind, which entry serves now and which is next (the plan `run`
//! would walk, after re-reading what every process shares: breakers, quota),
//! and the latest probe of each entry on this machine.

use switchyard_base::task::TaskKind;
use switchyard_probe::history::{self, ProbeRecord};
use switchyard_router::Router;
use switchyard_router::status::{StatusReport, TaskRunbook};

#[derive(Clone, Debug)]
pub struct Runbook {
    pub shared_state: String,
    /// Who serves each task kind now and next (`tasks` is the status report's).
    pub routes: Vec<TaskRunbook>,
    /// The latest `switchyard probe` result of each entry on this machine.
    pub last_probes: Vec<ProbeRecord>,
    pub status: StatusReport,
}

/// Reads the shared state and says who serves what now.
pub async fn runbook(router: &Router) -> Runbook {
    router.refresh_shared().await;
    let status = router.status();
    let routes = [TaskKind::Explain, TaskKind::Refactor]
        .into_iter()
        .map(|kind| router.outlook(kind))
        .collect();
    let last_probes = history::recent_by_entry(&history::default_path(), 1)
        .unwrap_or_default()
        .into_values()
        .flatten()
        .collect();
    Runbook {
        shared_state: router.resilience().state.describe(),
        routes,
        last_probes,
        status,
    }
}
