//! The gateway's own JSON (besides the OpenAI API in [`super::openai`]):
//! `GET /status` (the runbook, which `switchyard status --json` prints too)
//! and `GET /history` (the dashboard's last hour). Explicit wire types built
//! from the core's by field-by-field conversion, so an internal rename cannot
//! change what the dashboard, scripts or the CLI's users read. Documented in
//! docs/lsp-extensions.md ("Gateway JSON").
//!
//! The tests at the bottom pin the JSON: changing them is changing the API
//! (update the docs and src/gateway/dashboard.html).

use serde::{Deserialize, Serialize};

use switchyard_core::runbook as core_runbook;
use switchyard_probe::history::ProbeRecord;
use switchyard_resilience::breaker::BreakerView;
use switchyard_resilience::governor::MeterView;
use switchyard_router::canary::CanaryResult;
use switchyard_router::history as core_history;
use switchyard_router::status as core_status;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Small,
    Medium,
    Large,
}

impl From<switchyard_base::task::Tier> for Tier {
    fn from(tier: switchyard_base::task::Tier) -> Tier {
        match tier {
            switchyard_base::task::Tier::Small => Tier::Small,
            switchyard_base::task::Tier::Medium => Tier::Medium,
            switchyard_base::task::Tier::Large => Tier::Large,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    Autocomplete,
    Explain,
    Refactor,
}

impl From<switchyard_base::task::TaskKind> for TaskKind {
    fn from(kind: switchyard_base::task::TaskKind) -> TaskKind {
        match kind {
            switchyard_base::task::TaskKind::Autocomplete => TaskKind::Autocomplete,
            switchyard_base::task::TaskKind::Explain => TaskKind::Explain,
            switchyard_base::task::TaskKind::Refactor => TaskKind::Refactor,
        }
    }
}

// ---- `GET /status` and `switchyard status --json`.

/// The runbook: who serves each task kind now and next, the last probes, and
/// (flattened beside them) the same status fields as the editor's
/// `switchyard/status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusResponse {
    /// The shared state's description (`file:…`, `redis://…`, `memory`).
    pub shared_state: String,
    pub routes: Vec<TaskRunbook>,
    /// The latest `switchyard probe` result of each entry on this machine.
    pub last_probes: Vec<ProbeRun>,
    #[serde(flatten)]
    pub status: Status,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRunbook {
    pub kind: TaskKind,
    /// The task's configured tier.
    pub tier: Tier,
    /// `provider/model (tier)` that would serve now.
    pub now: Option<String>,
    pub next: Option<String>,
    /// Entries passed over, and why.
    pub skipped: Vec<String>,
}

/// One stored probe, as `probes.jsonl` spells it (snake_case, unlike the rest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRun {
    /// Unix time in milliseconds.
    pub at: u64,
    pub provider: String,
    pub model: String,
    pub ok: bool,
    pub ttft_ms: Option<u64>,
    pub total_ms: u64,
    pub error: Option<String>,
}

/// The status fields of `/status` (the editor's `switchyard/status` fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub tier: Option<Tier>,
    pub downshifted_from: Option<Tier>,
    pub reason: Option<String>,
    pub local_only: bool,
    /// Why only the local model serves when the mode was not asked for.
    #[serde(default)]
    pub local_only_reason: Option<String>,
    pub tasks: Vec<TaskStatus>,
    pub health: Vec<EntryHealth>,
    #[serde(default)]
    pub breakers: Vec<Breaker>,
    #[serde(default)]
    pub quota: Vec<Meter>,
    #[serde(default)]
    pub parked: Vec<ParkedTask>,
    #[serde(default)]
    pub canaries: Vec<Canary>,
    /// What this gateway sent each provider in the last hour.
    #[serde(default)]
    pub outbound: Vec<Outbound>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outbound {
    pub provider: String,
    pub bytes: usize,
    pub requests: usize,
}

/// A task kind, with its route's fields beside `kind` once it has been served.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub kind: TaskKind,
    #[serde(flatten)]
    pub route: Option<TaskRoute>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRoute {
    pub provider: String,
    pub model: String,
    pub tier: Tier,
    pub downshifted_from: Option<Tier>,
    pub reason: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HealthState {
    Healthy,
    Unknown,
    Unhealthy,
    NoKey,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BreakerPhase {
    Closed,
    /// Routed around until its cooldown ends.
    Open,
    /// Cooled down: one probe (a canary or a request) decides.
    HalfOpen,
}

impl From<switchyard_resilience::breaker::Phase> for BreakerPhase {
    fn from(phase: switchyard_resilience::breaker::Phase) -> BreakerPhase {
        use switchyard_resilience::breaker::Phase;
        match phase {
            Phase::Closed => BreakerPhase::Closed,
            Phase::Open => BreakerPhase::Open,
            Phase::HalfOpen => BreakerPhase::HalfOpen,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Breaker {
    /// `account/provider/model`.
    pub key: String,
    pub phase: BreakerPhase,
    pub reason: String,
    pub open_for_ms: u64,
    pub consecutive_failures: u32,
    pub trips: u64,
    pub recoveries: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meter {
    /// `account/provider/model`.
    pub key: String,
    pub meter: String,
    pub limit: u64,
    pub available: f64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParkedTask {
    pub id: String,
    pub kind: TaskKind,
    pub note: String,
    pub parked_at_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    pub at_ms: u64,
    pub provider: String,
    pub model: String,
    pub ok: bool,
    pub latency_ms: u64,
    pub error: Option<String>,
    pub reason: String,
}

impl From<&core_runbook::Runbook> for StatusResponse {
    fn from(r: &core_runbook::Runbook) -> StatusResponse {
        StatusResponse {
            shared_state: r.shared_state.clone(),
            routes: r
                .routes
                .iter()
                .map(|t| TaskRunbook {
                    kind: t.kind.into(),
                    tier: t.tier.into(),
                    now: t.now.clone(),
                    next: t.next.clone(),
                    skipped: t.skipped.clone(),
                })
                .collect(),
            last_probes: r.last_probes.iter().map(ProbeRun::from).collect(),
            status: Status::from(&r.status),
        }
    }
}

impl From<&ProbeRecord> for ProbeRun {
    fn from(p: &ProbeRecord) -> ProbeRun {
        ProbeRun {
            at: p.at,
            provider: p.provider.clone(),
            model: p.model.clone(),
            ok: p.ok,
            ttft_ms: p.ttft_ms,
            total_ms: p.total_ms,
            error: p.error.clone(),
        }
    }
}

impl From<&core_status::StatusReport> for Status {
    fn from(r: &core_status::StatusReport) -> Status {
        Status {
            provider: r.provider.clone(),
            model: r.model.clone(),
            tier: r.tier.map(Tier::from),
            downshifted_from: r.downshifted_from.map(Tier::from),
            reason: r.reason.clone(),
            local_only: r.local_only,
            local_only_reason: r.local_only_reason.clone(),
            tasks: r.tasks.iter().map(TaskStatus::from).collect(),
            health: r.health.iter().map(EntryHealth::from).collect(),
            breakers: r.breakers.iter().map(Breaker::from).collect(),
            quota: r.quota.iter().map(Meter::from).collect(),
            parked: r.parked.iter().map(ParkedTask::from).collect(),
            canaries: r.canaries.iter().map(Canary::from).collect(),
            outbound: r
                .outbound
                .iter()
                .map(|t| Outbound {
                    provider: t.provider.clone(),
                    bytes: t.bytes,
                    requests: t.requests,
                })
                .collect(),
        }
    }
}

impl From<&core_status::TaskStatus> for TaskStatus {
    fn from(t: &core_status::TaskStatus) -> TaskStatus {
        TaskStatus {
            kind: t.kind.into(),
            route: t.route.as_ref().map(|r| TaskRoute {
                provider: r.provider.clone(),
                model: r.model.clone(),
                tier: r.tier.into(),
                downshifted_from: r.downshifted_from.map(Tier::from),
                reason: r.reason.clone(),
            }),
        }
    }
}

impl From<&core_status::EntryHealth> for EntryHealth {
    fn from(h: &core_status::EntryHealth) -> EntryHealth {
        EntryHealth {
            provider: h.provider.clone(),
            model: h.model.clone(),
            tier: h.tier.into(),
            state: match h.state {
                core_status::HealthState::Healthy => HealthState::Healthy,
                core_status::HealthState::Unknown => HealthState::Unknown,
                core_status::HealthState::Unhealthy => HealthState::Unhealthy,
                core_status::HealthState::NoKey => HealthState::NoKey,
            },
            reason: h.reason.clone(),
            samples: h.samples,
            p95_first_token_ms: h.p95_first_token_ms,
            error_rate: h.error_rate,
        }
    }
}

impl From<&core_status::ParkedStatus> for ParkedTask {
    fn from(p: &core_status::ParkedStatus) -> ParkedTask {
        ParkedTask {
            id: p.id.clone(),
            kind: p.kind.into(),
            note: p.note.clone(),
            parked_at_ms: p.parked_at_ms,
        }
    }
}

impl From<&BreakerView> for Breaker {
    fn from(b: &BreakerView) -> Breaker {
        Breaker {
            key: b.key.clone(),
            phase: b.phase.into(),
            reason: b.reason.clone(),
            open_for_ms: b.open_for_ms,
            consecutive_failures: b.consecutive_failures,
            trips: b.trips,
            recoveries: b.recoveries,
        }
    }
}

impl From<&MeterView> for Meter {
    fn from(m: &MeterView) -> Meter {
        Meter {
            key: m.key.clone(),
            meter: m.meter.clone(),
            limit: m.limit,
            available: m.available,
        }
    }
}

impl From<&CanaryResult> for Canary {
    fn from(c: &CanaryResult) -> Canary {
        Canary {
            at_ms: c.at_ms,
            provider: c.provider.clone(),
            model: c.model.clone(),
            ok: c.ok,
            latency_ms: c.latency_ms,
            error: c.error.clone(),
            reason: c.reason.clone(),
        }
    }
}

// ---- `GET /history`.

/// The last hour of health, one point per upkeep tick, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryResponse {
    pub tick_ms: u64,
    pub points: Vec<HistoryPoint>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryPoint {
    pub at_ms: u64,
    pub entries: Vec<EntryPoint>,
    pub breakers: Vec<Breaker>,
    pub quota: Vec<Meter>,
    pub downshifts: Vec<Downshift>,
    /// Canaries sent since the previous point.
    pub canaries: Vec<Canary>,
    /// How many tasks were parked.
    pub parked: usize,
}

/// One chain entry's beacon at a point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryPoint {
    pub provider: String,
    pub model: String,
    pub samples: usize,
    pub p95_first_token_ms: Option<u64>,
    pub p95_total_ms: Option<u64>,
    pub error_rate: f64,
    pub degraded_rate: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Downshift {
    pub kind: TaskKind,
    pub from: Tier,
    pub to: Tier,
    pub reason: Option<String>,
}

impl HistoryResponse {
    pub fn new(tick_ms: u64, points: &[core_history::Point]) -> HistoryResponse {
        HistoryResponse {
            tick_ms,
            points: points.iter().map(HistoryPoint::from).collect(),
        }
    }
}

impl From<&core_history::Point> for HistoryPoint {
    fn from(p: &core_history::Point) -> HistoryPoint {
        HistoryPoint {
            at_ms: p.at_ms,
            entries: p
                .entries
                .iter()
                .map(|e| EntryPoint {
                    provider: e.provider.clone(),
                    model: e.model.clone(),
                    samples: e.samples,
                    p95_first_token_ms: e.p95_first_token_ms,
                    p95_total_ms: e.p95_total_ms,
                    error_rate: e.error_rate,
                    degraded_rate: e.degraded_rate,
                })
                .collect(),
            breakers: p.breakers.iter().map(Breaker::from).collect(),
            quota: p.quota.iter().map(Meter::from).collect(),
            downshifts: p
                .downshifts
                .iter()
                .map(|d| Downshift {
                    kind: d.kind.into(),
                    from: d.from.into(),
                    to: d.to.into(),
                    reason: d.reason.clone(),
                })
                .collect(),
            canaries: p.canaries.iter().map(Canary::from).collect(),
            parked: p.parked,
        }
    }
}

#[cfg(test)]
mod tests;
