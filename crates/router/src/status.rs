//! The status report the editor shows: which provider, model and tier serve each
//! task kind, any downshift and why, local-only mode, and each entry's health.

use super::Router;
use super::canary::CanaryResult;
use super::plan::{Ask, Candidate, Skip};
pub use super::request::Route;
use switchyard_base::entry::ModelRef;
use switchyard_base::task::{TaskKind, TaskProfile, Tier};
use switchyard_resilience::breaker::BreakerView;
use switchyard_resilience::governor::MeterView;

/// A task kind's route and when it was served (ms since the epoch).
#[derive(Clone, Debug)]
pub(crate) struct Served {
    pub route: Route,
    pub at_ms: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TaskStatus {
    pub kind: TaskKind,
    pub route: Option<Route>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthState {
    Healthy,
    /// Fewer samples than a verdict needs: counted as healthy.
    Unknown,
    Unhealthy,
    NoKey,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EntryHealth {
    pub provider: String,
    pub model: String,
    pub tier: Tier,
    pub state: HealthState,
    pub reason: Option<String>,
    pub samples: usize,
    pub p95_first_token_ms: Option<u64>,
    pub error_rate: f64,
}

/// The `switchyard/status` payload. The top-level route is the latest served task's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusReport {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub tier: Option<Tier>,
    pub downshifted_from: Option<Tier>,
    pub reason: Option<String>,
    pub local_only: bool,
    /// Why only the local model serves when the mode was not asked for: the
    /// settings that decide what leaves the machine could not be read.
    pub local_only_reason: Option<String>,
    pub tasks: Vec<TaskStatus>,
    pub health: Vec<EntryHealth>,
    /// Every breaker any switchyard process sharing this state has recorded.
    pub breakers: Vec<BreakerView>,
    /// Governor headroom per governed meter.
    pub quota: Vec<MeterView>,
    /// This editor's parked tasks, waiting for a route to open.
    pub parked: Vec<ParkedStatus>,
    /// The latest canary results, newest last.
    pub canaries: Vec<CanaryResult>,
    /// What this process sent each provider in the last hour (not part of
    /// `same_state`: it changes with every request).
    pub outbound: Vec<switchyard_privacy::audit::ProviderTotal>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedStatus {
    pub id: String,
    pub kind: TaskKind,
    /// Why it is parked.
    pub note: String,
    pub parked_at_ms: u64,
}

impl From<switchyard_resilience::park::Checkpoint> for ParkedStatus {
    fn from(checkpoint: switchyard_resilience::park::Checkpoint) -> ParkedStatus {
        ParkedStatus {
            id: checkpoint.id,
            kind: checkpoint.kind,
            note: checkpoint.note,
            parked_at_ms: checkpoint.parked_at_ms,
        }
    }
}

impl StatusReport {
    /// Same routes, mode and health states (latency figures may differ).
    pub fn same_state(&self, other: &StatusReport) -> bool {
        let states = |r: &StatusReport| {
            r.health
                .iter()
                .map(|h| (h.provider.clone(), h.model.clone(), h.state))
                .collect::<Vec<_>>()
        };
        let phases = |r: &StatusReport| {
            r.breakers
                .iter()
                .map(|b| (b.key.clone(), b.phase))
                .collect::<Vec<_>>()
        };
        self.tasks == other.tasks
            && self.local_only == other.local_only
            && self.local_only_reason == other.local_only_reason
            && states(self) == states(other)
            && phases(self) == phases(other)
            && self.parked == other.parked
    }

    /// One line for `window/showMessage` describing what changed, if it is worth telling.
    pub fn change_message(&self, before: &StatusReport) -> Option<String> {
        if let (Some(reason), true) = (
            &self.local_only_reason,
            self.local_only_reason != before.local_only_reason,
        ) {
            return Some(format!(
                "switchyard: {}",
                switchyard_config::failed_closed_notice(reason)
            ));
        }
        if self.local_only != before.local_only {
            return Some(format!(
                "switchyard: local-only mode {}",
                if self.local_only {
                    "on: only the local model serves"
                } else {
                    "off"
                }
            ));
        }
        for task in &self.tasks {
            let Some(now) = &task.route else { continue };
            let was = before
                .tasks
                .iter()
                .find(|t| t.kind == task.kind)
                .and_then(|t| t.route.clone());
            match was {
                Some(was)
                    if was.provider == now.provider
                        && was.model == now.model
                        && was.tier == now.tier =>
                {
                    continue;
                }
                _ => {}
            }
            let kind = task.kind.as_str();
            return Some(match (&now.downshifted_from, now.reason.as_deref()) {
                (Some(from), reason) => format!(
                    "switchyard: {kind} downshifted from {from} to {} ({}/{}): {}",
                    now.tier,
                    now.provider,
                    now.model,
                    reason.unwrap_or("no healthy entry")
                ),
                (None, None) => format!(
                    "switchyard: {kind} now served by {}/{} ({} tier)",
                    now.provider, now.model, now.tier
                ),
                (None, Some(reason)) => format!(
                    "switchyard: {kind} now served by {}/{} ({} tier): {reason}",
                    now.provider, now.model, now.tier
                ),
            });
        }
        None
    }
}

pub(super) fn report(router: &Router) -> StatusReport {
    let active = router.active_routes();
    let local_only = router.local_only();
    let tasks: Vec<TaskStatus> = [TaskKind::Explain, TaskKind::Refactor]
        .into_iter()
        .map(|kind| TaskStatus {
            kind,
            route: active
                .get(&kind)
                .map(|served| current(router, kind, served)),
        })
        .collect();
    // Health is judged against explain, the task every chain entry can serve.
    let profile = router.config().tasks.get(TaskKind::Explain);
    let health = router
        .planned_entries()
        .candidates()
        .iter()
        .map(|candidate| entry_health(router, candidate, &profile))
        .collect();
    let latest = router.last_kind().and_then(|kind| {
        active
            .get(&kind)
            .map(|served| current(router, kind, served))
    });
    let shared = router.shared_views();
    StatusReport {
        provider: latest.as_ref().map(|r| r.provider.clone()),
        model: latest.as_ref().map(|r| r.model.clone()),
        tier: latest.as_ref().map(|r| r.tier),
        downshifted_from: latest.as_ref().and_then(|r| r.downshifted_from),
        reason: latest.and_then(|r| r.reason),
        local_only,
        local_only_reason: router.config().fail_closed.clone(),
        tasks,
        health,
        breakers: shared.breakers,
        quota: shared.quota,
        parked: router.parked(),
        canaries: router.canaries(),
        outbound: router.outbound_last_hour(),
    }
}

/// An entry's health as the plan stands it for explain: its key, its
/// beacon, its verdict (a breaker or a quota pause is shown apart).
fn entry_health(router: &Router, candidate: &Candidate, profile: &TaskProfile) -> EntryHealth {
    let summary = router.beacons().summary(&candidate.entry);
    let standing = candidate.standing.clone();
    // A breaker or a pause shows apart; the verdict under it is still health.
    let judged = || router.verdict_on(&candidate.key, profile, true);
    let (state, reason) = match standing {
        Some(Skip::NoKey(var)) => (HealthState::NoKey, Some(format!("no API key in ${var}"))),
        Some(Skip::Unhealthy(reason) | Skip::Verdict(reason)) => {
            (HealthState::Unhealthy, Some(reason))
        }
        _ if let Some(reason) = judged() => (HealthState::Unhealthy, Some(reason)),
        _ if summary.samples < summary.min_samples && !candidate.entry.is_local() => {
            (HealthState::Unknown, None)
        }
        _ => (HealthState::Healthy, None),
    };
    let ModelRef { provider, model } = candidate.entry.clone();
    EntryHealth {
        provider,
        model,
        tier: candidate.tier,
        state,
        reason,
        samples: summary.samples,
        p95_first_token_ms: summary.p95_first_token.map(|d| d.as_millis() as u64),
        error_rate: summary.error_rate,
    }
}

/// Who serves a task kind now and next: the plan `run` would walk.
#[derive(Clone, Debug)]
pub struct TaskRunbook {
    pub kind: TaskKind,
    pub tier: Tier,
    /// `provider/model (tier)` that would serve now.
    pub now: Option<String>,
    pub next: Option<String>,
    /// Entries passed over, and why.
    pub skipped: Vec<String>,
}

impl Router {
    pub fn outlook(&self, kind: TaskKind) -> TaskRunbook {
        let plan = self.plan(Ask::task(kind));
        let name = |c: &Candidate| format!("{} ({})", c.entry, c.tier);
        TaskRunbook {
            kind,
            tier: plan.first_tier(),
            now: plan.now().map(|c| name(&c)),
            next: plan.next().map(|c| name(&c)),
            skipped: plan
                .candidates()
                .iter()
                .filter_map(|c| Some(format!("{}: {}", name(c), c.skip.as_ref()?)))
                .collect(),
        }
    }
}

/// A served route as the editor should see it now. A downshift lasts until a
/// canary finds the entry the plan would try first in the tier it left
/// healthy again; then the route is that entry's, and the downshift indicator
/// clears without waiting for the next task.
fn current(router: &Router, kind: TaskKind, served: &Served) -> Route {
    let route = &served.route;
    let Some(from) = route.downshifted_from else {
        return route.clone();
    };
    let plan = router.plan(Ask::task(kind));
    let Some(now) = plan.now().map(|c| Candidate::clone(&c)) else {
        return route.clone();
    };
    let latest_canary = router
        .canaries()
        .into_iter()
        .rev()
        .find(|c| c.provider == now.entry.provider && c.model == now.entry.model);
    let healthy_since = latest_canary.is_some_and(|c| c.ok && c.at_ms >= served.at_ms);
    if now.usable() && now.tier == from && healthy_since {
        Route {
            provider: now.entry.provider,
            model: now.entry.model,
            tier: from,
            downshifted_from: None,
            reason: None,
        }
    } else {
        route.clone()
    }
}
