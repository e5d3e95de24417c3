//! The editor protocol's own payloads (protocol types live at the edge:
//! ARCHITECTURE.md invariant 13): every custom notification and command
//! result switchyard sends, as explicit wire types (rust-analyzer's
//! `lsp_ext` pattern). The core's types (`router::status::StatusReport` and
//! friends) are free to change; these change only with the protocol, and
//! `docs/lsp-extensions.md` documents each of them. Each is built from the
//! core by an explicit field-by-field conversion and never serialises a core
//! type, so renaming an internal field cannot change what editors read.
//!
//! The test at the bottom pins the JSON: a change to it is a protocol change
//! (update docs/lsp-extensions.md and the clients under editors/).

use serde::{Deserialize, Serialize};
use tower_lsp_server::ls_types::notification::Notification;

use switchyard_router::status as core_status;

/// `switchyard/status`, server → client, sent only to clients that set
/// `statusNotifications` (see docs/lsp-extensions.md).
pub enum StatusNotification {}

impl Notification for StatusNotification {
    type Params = StatusParams;
    const METHOD: &'static str = "switchyard/status";
}

/// A model size class.
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

/// The params of `switchyard/status`, and the result of the `switchyard.status`
/// command. The top-level route is the latest served task's (all `null` before
/// the first explain or refactor).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusParams {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub tier: Option<Tier>,
    pub downshifted_from: Option<Tier>,
    /// Why the latest task downshifted.
    pub reason: Option<String>,
    pub local_only: bool,
    /// Why only the local model serves when the mode was not asked for: the
    /// configuration failed closed (settings that decide what leaves the
    /// machine could not be read).
    #[serde(default)]
    pub local_only_reason: Option<String>,
    /// Explain and refactor, in that order.
    pub tasks: Vec<TaskStatus>,
    /// Each chain entry once, large tier first.
    pub health: Vec<EntryHealth>,
    #[serde(default)]
    pub breakers: Vec<BreakerStatus>,
    #[serde(default)]
    pub quota: Vec<MeterStatus>,
    #[serde(default)]
    pub parked: Vec<ParkedTask>,
    /// Newest last.
    #[serde(default)]
    pub canaries: Vec<CanaryStatus>,
    /// What this server sent each provider in the last hour.
    #[serde(default)]
    pub outbound: Vec<OutboundTotal>,
    /// A rule that keeps this workspace's documents on the local model while
    /// the global mode is off (`privacy.local_only_workspaces`).
    #[serde(default)]
    pub local_only_rule: Option<String>,
    /// Inline completions: loading, ready, off here, snoozed, late or failed.
    #[serde(default)]
    pub completion: Option<CompletionStatus>,
    /// The server's live async tasks, in the `switchyard.status` reply only:
    /// a leak shows as a count that only grows (notifications leave it out,
    /// as it changes with every request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_tasks: Option<usize>,
}

/// The completion state, for the editor's status item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletionStatus {
    /// `loading`, `ready`, `off`, `snoozed`, `late` or `failed`.
    pub state: String,
    /// Why it is off, late or failing.
    pub reason: Option<String>,
    /// When a snooze ends (ms since the epoch).
    pub until_ms: Option<u64>,
}

impl From<&switchyard_completion::status::CompletionStatus> for CompletionStatus {
    fn from(s: &switchyard_completion::status::CompletionStatus) -> CompletionStatus {
        CompletionStatus {
            state: s.state.as_str().to_owned(),
            reason: s.reason.clone(),
            until_ms: s.until_ms,
        }
    }
}

/// Bytes and requests one provider was sent in the last hour.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundTotal {
    pub provider: String,
    pub bytes: usize,
    pub requests: usize,
}

/// One task kind. Its route's fields sit beside `kind` once the kind has been
/// served; before that the object holds `kind` alone.
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
pub struct BreakerStatus {
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
pub struct MeterStatus {
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
    /// Why it is parked.
    pub note: String,
    pub parked_at_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    pub at_ms: u64,
    pub provider: String,
    pub model: String,
    pub ok: bool,
    pub latency_ms: u64,
    pub error: Option<String>,
    /// What sent it.
    pub reason: String,
}

impl StatusParams {
    /// The status as this editor sees it: the router's, and the rule that
    /// keeps the whole workspace local, if one does.
    pub fn for_workspace(
        report: &core_status::StatusReport,
        local_only_rule: Option<String>,
        completion: &switchyard_completion::status::CompletionStatus,
    ) -> StatusParams {
        StatusParams {
            local_only_rule,
            completion: Some(CompletionStatus::from(completion)),
            ..StatusParams::from(report)
        }
    }
}

impl From<&core_status::StatusReport> for StatusParams {
    fn from(r: &core_status::StatusReport) -> StatusParams {
        StatusParams {
            provider: r.provider.clone(),
            model: r.model.clone(),
            tier: r.tier.map(Tier::from),
            downshifted_from: r.downshifted_from.map(Tier::from),
            reason: r.reason.clone(),
            local_only: r.local_only,
            local_only_reason: r.local_only_reason.clone(),
            tasks: r.tasks.iter().map(TaskStatus::from).collect(),
            health: r.health.iter().map(EntryHealth::from).collect(),
            breakers: r.breakers.iter().map(BreakerStatus::from).collect(),
            quota: r.quota.iter().map(MeterStatus::from).collect(),
            parked: r.parked.iter().map(ParkedTask::from).collect(),
            canaries: r.canaries.iter().map(CanaryStatus::from).collect(),
            outbound: r
                .outbound
                .iter()
                .map(|t| OutboundTotal {
                    provider: t.provider.clone(),
                    bytes: t.bytes,
                    requests: t.requests,
                })
                .collect(),
            local_only_rule: None,
            completion: None,
            runtime_tasks: None,
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

impl From<core_status::HealthState> for HealthState {
    fn from(state: core_status::HealthState) -> HealthState {
        match state {
            core_status::HealthState::Healthy => HealthState::Healthy,
            core_status::HealthState::Unknown => HealthState::Unknown,
            core_status::HealthState::Unhealthy => HealthState::Unhealthy,
            core_status::HealthState::NoKey => HealthState::NoKey,
        }
    }
}

impl From<&core_status::EntryHealth> for EntryHealth {
    fn from(h: &core_status::EntryHealth) -> EntryHealth {
        EntryHealth {
            provider: h.provider.clone(),
            model: h.model.clone(),
            tier: h.tier.into(),
            state: h.state.into(),
            reason: h.reason.clone(),
            samples: h.samples,
            p95_first_token_ms: h.p95_first_token_ms,
            error_rate: h.error_rate,
        }
    }
}

impl From<&switchyard_resilience::breaker::BreakerView> for BreakerStatus {
    fn from(b: &switchyard_resilience::breaker::BreakerView) -> BreakerStatus {
        BreakerStatus {
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

impl From<&switchyard_resilience::governor::MeterView> for MeterStatus {
    fn from(m: &switchyard_resilience::governor::MeterView) -> MeterStatus {
        MeterStatus {
            key: m.key.clone(),
            meter: m.meter.clone(),
            limit: m.limit,
            available: m.available,
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

impl From<&switchyard_router::canary::CanaryResult> for CanaryStatus {
    fn from(c: &switchyard_router::canary::CanaryResult) -> CanaryStatus {
        CanaryStatus {
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

// ---- `workspace/executeCommand` results.

/// The result of `switchyard.toggleLocalOnly` and `switchyard.setLocalOnly`:
/// the mode now in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalOnlyResult {
    pub local_only: bool,
}

/// The result of `switchyard.snooze`: when completions resume (ms since
/// the epoch), or `null` when they are on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnoozeResult {
    pub snoozed_until: Option<u64>,
}

/// The result of `switchyard.explain`. The explanation was also opened with
/// `window/showDocument` (or, failing that, summarised in `window/showMessage`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainResult {
    pub provider: String,
    pub model: String,
    pub tier: Tier,
    /// The markdown file holding the explanation.
    pub path: String,
    pub text: String,
}

/// The result of `switchyard.refactor`: applied now, or parked until a model
/// can serve it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RefactorResult {
    Done(RefactorDone),
    Parked(RefactorParked),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefactorDone {
    /// The client's answer to `workspace/applyEdit`.
    pub applied: bool,
    /// How many text edits were sent.
    pub edits: usize,
    pub provider: String,
    pub model: String,
    pub tier: Tier,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefactorParked {
    /// The parked task's id (as in `switchyard/status`'s `parked`).
    pub parked: String,
    /// Why it could not be served now.
    pub reason: String,
}

/// A command result as `workspace/executeCommand` returns it.
pub fn result<T: Serialize>(value: T) -> serde_json::Value {
    serde_json::to_value(value).expect("wire types serialise")
}

#[cfg(test)]
mod tests;
