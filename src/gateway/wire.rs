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

use crate::probe::history::ProbeRecord;
use crate::resilience::breaker::BreakerView;
use crate::resilience::governor::MeterView;
use crate::router::canary::CanaryResult;
use crate::router::history as core_history;
use crate::router::runbook as core_runbook;
use crate::router::status as core;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Small,
    Medium,
    Large,
}

impl From<crate::task::Tier> for Tier {
    fn from(tier: crate::task::Tier) -> Tier {
        match tier {
            crate::task::Tier::Small => Tier::Small,
            crate::task::Tier::Medium => Tier::Medium,
            crate::task::Tier::Large => Tier::Large,
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

impl From<crate::task::TaskKind> for TaskKind {
    fn from(kind: crate::task::TaskKind) -> TaskKind {
        match kind {
            crate::task::TaskKind::Autocomplete => TaskKind::Autocomplete,
            crate::task::TaskKind::Explain => TaskKind::Explain,
            crate::task::TaskKind::Refactor => TaskKind::Refactor,
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

impl From<crate::resilience::breaker::Phase> for BreakerPhase {
    fn from(phase: crate::resilience::breaker::Phase) -> BreakerPhase {
        use crate::resilience::breaker::Phase;
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

impl From<&core::StatusReport> for Status {
    fn from(r: &core::StatusReport) -> Status {
        Status {
            provider: r.provider.clone(),
            model: r.model.clone(),
            tier: r.tier.map(Tier::from),
            downshifted_from: r.downshifted_from.map(Tier::from),
            reason: r.reason.clone(),
            local_only: r.local_only,
            tasks: r
                .tasks
                .iter()
                .map(|t| TaskStatus {
                    kind: t.kind.into(),
                    route: t.route.as_ref().map(|r| TaskRoute {
                        provider: r.provider.clone(),
                        model: r.model.clone(),
                        tier: r.tier.into(),
                        downshifted_from: r.downshifted_from.map(Tier::from),
                        reason: r.reason.clone(),
                    }),
                })
                .collect(),
            health: r
                .health
                .iter()
                .map(|h| EntryHealth {
                    provider: h.provider.clone(),
                    model: h.model.clone(),
                    tier: h.tier.into(),
                    state: match h.state {
                        core::HealthState::Healthy => HealthState::Healthy,
                        core::HealthState::Unknown => HealthState::Unknown,
                        core::HealthState::Unhealthy => HealthState::Unhealthy,
                        core::HealthState::NoKey => HealthState::NoKey,
                    },
                    reason: h.reason.clone(),
                    samples: h.samples,
                    p95_first_token_ms: h.p95_first_token_ms,
                    error_rate: h.error_rate,
                })
                .collect(),
            breakers: r.breakers.iter().map(Breaker::from).collect(),
            quota: r.quota.iter().map(Meter::from).collect(),
            parked: r
                .parked
                .iter()
                .map(|p| ParkedTask {
                    id: p.id.clone(),
                    kind: p.kind.into(),
                    note: p.note.clone(),
                    parked_at_ms: p.parked_at_ms,
                })
                .collect(),
            canaries: r.canaries.iter().map(Canary::from).collect(),
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
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::resilience::breaker::Phase;
    use crate::task::{TaskKind as CoreKind, Tier as CoreTier};

    fn breaker() -> BreakerView {
        BreakerView {
            key: "anthropic/anthropic/claude-sonnet-4-5".into(),
            phase: Phase::HalfOpen,
            reason: "6 consecutive failures".into(),
            open_for_ms: 0,
            consecutive_failures: 6,
            trips: 2,
            recoveries: 1,
        }
    }

    fn meter() -> MeterView {
        MeterView {
            key: "openai/openai/gpt-5-mini".into(),
            meter: "tokens".into(),
            limit: 200_000,
            available: 150_000.5,
        }
    }

    fn canary() -> CanaryResult {
        CanaryResult {
            at_ms: 1_700_000_001_000,
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            ok: true,
            latency_ms: 640,
            error: Some("wrong answer: hi".into()),
            reason: "primary watch".into(),
        }
    }

    fn breaker_json() -> Value {
        json!({
            "key": "anthropic/anthropic/claude-sonnet-4-5",
            "phase": "half-open",
            "reason": "6 consecutive failures",
            "openForMs": 0,
            "consecutiveFailures": 6,
            "trips": 2,
            "recoveries": 1
        })
    }

    fn meter_json() -> Value {
        json!({
            "key": "openai/openai/gpt-5-mini",
            "meter": "tokens",
            "limit": 200000,
            "available": 150000.5
        })
    }

    fn canary_json() -> Value {
        json!({
            "atMs": 1700000001000u64,
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "ok": true,
            "latencyMs": 640,
            "error": "wrong answer: hi",
            "reason": "primary watch"
        })
    }

    /// Every `Option` set and one element in every list.
    fn full_runbook() -> core_runbook::Runbook {
        core_runbook::Runbook {
            shared_state: "redis://127.0.0.1:6379".into(),
            routes: vec![core_runbook::TaskRunbook {
                kind: CoreKind::Explain,
                tier: CoreTier::Medium,
                now: Some("anthropic/claude-haiku-4-5 (medium)".into()),
                next: Some("local/local (small)".into()),
                skipped: vec!["openai/gpt-5-mini (medium): no API key in $OPENAI_API_KEY".into()],
            }],
            last_probes: vec![ProbeRecord {
                at: 1_699_999_999_000,
                provider: "anthropic".into(),
                model: "claude-haiku-4-5".into(),
                ok: false,
                ttft_ms: Some(420),
                total_ms: 1_300,
                error: Some("HTTP 529".into()),
            }],
            status: core::StatusReport {
                provider: Some("anthropic".into()),
                model: Some("claude-haiku-4-5".into()),
                tier: Some(CoreTier::Medium),
                downshifted_from: Some(CoreTier::Large),
                reason: Some("no healthy large entry".into()),
                local_only: false,
                tasks: vec![core::TaskStatus {
                    kind: CoreKind::Explain,
                    route: Some(core::Route {
                        provider: "anthropic".into(),
                        model: "claude-haiku-4-5".into(),
                        tier: CoreTier::Medium,
                        downshifted_from: Some(CoreTier::Large),
                        reason: Some("breaker open".into()),
                    }),
                }],
                health: vec![core::EntryHealth {
                    provider: "anthropic".into(),
                    model: "claude-sonnet-4-5".into(),
                    tier: CoreTier::Large,
                    state: core::HealthState::Unhealthy,
                    reason: Some("p95 first token 12000 ms over 10000 ms".into()),
                    samples: 12,
                    p95_first_token_ms: Some(12_000),
                    error_rate: 0.5,
                }],
                breakers: vec![breaker()],
                quota: vec![meter()],
                parked: vec![core::ParkedStatus {
                    id: "p-1".into(),
                    kind: CoreKind::Refactor,
                    note: "every large entry is down".into(),
                    parked_at_ms: 1_700_000_000_000,
                }],
                canaries: vec![canary()],
            },
        }
    }

    /// `GET /status` and `switchyard status --json`, field for field.
    #[test]
    fn status_response_wire_format_is_pinned() {
        let response = StatusResponse::from(&full_runbook());
        let expected = json!({
            "sharedState": "redis://127.0.0.1:6379",
            "routes": [{
                "kind": "explain",
                "tier": "medium",
                "now": "anthropic/claude-haiku-4-5 (medium)",
                "next": "local/local (small)",
                "skipped": ["openai/gpt-5-mini (medium): no API key in $OPENAI_API_KEY"]
            }],
            "lastProbes": [{
                "at": 1699999999000u64,
                "provider": "anthropic",
                "model": "claude-haiku-4-5",
                "ok": false,
                "ttft_ms": 420,
                "total_ms": 1300,
                "error": "HTTP 529"
            }],
            "provider": "anthropic",
            "model": "claude-haiku-4-5",
            "tier": "medium",
            "downshiftedFrom": "large",
            "reason": "no healthy large entry",
            "localOnly": false,
            "tasks": [{
                "kind": "explain",
                "provider": "anthropic",
                "model": "claude-haiku-4-5",
                "tier": "medium",
                "downshiftedFrom": "large",
                "reason": "breaker open"
            }],
            "health": [{
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "tier": "large",
                "state": "unhealthy",
                "reason": "p95 first token 12000 ms over 10000 ms",
                "samples": 12,
                "p95FirstTokenMs": 12000,
                "errorRate": 0.5
            }],
            "breakers": [breaker_json()],
            "quota": [meter_json()],
            "parked": [{
                "id": "p-1",
                "kind": "refactor",
                "note": "every large entry is down",
                "parkedAtMs": 1700000000000u64
            }],
            "canaries": [canary_json()]
        });
        assert_eq!(serde_json::to_value(&response).unwrap(), expected);
        assert_eq!(
            serde_json::from_value::<StatusResponse>(expected).unwrap(),
            response
        );
    }

    /// A task kind not served yet is its kind alone; the latest route is `null`s.
    #[test]
    fn unserved_status_has_nulls_and_bare_tasks() {
        let mut runbook = full_runbook();
        runbook.status = core::StatusReport {
            tasks: vec![core::TaskStatus {
                kind: CoreKind::Refactor,
                route: None,
            }],
            ..Default::default()
        };
        runbook.routes[0].now = None;
        runbook.routes[0].next = None;
        runbook.last_probes[0].ttft_ms = None;
        runbook.last_probes[0].error = None;
        let value = serde_json::to_value(StatusResponse::from(&runbook)).unwrap();
        for key in ["provider", "model", "tier", "downshiftedFrom", "reason"] {
            assert_eq!(value[key], Value::Null, "{key}");
        }
        assert_eq!(value["tasks"], json!([{"kind": "refactor"}]));
        assert_eq!(value["routes"][0]["now"], Value::Null);
        assert_eq!(value["routes"][0]["next"], Value::Null);
        assert_eq!(value["lastProbes"][0]["ttft_ms"], Value::Null);
        assert_eq!(value["lastProbes"][0]["error"], Value::Null);
        assert_eq!(value["health"], json!([]));
    }

    /// `GET /history`, field for field.
    #[test]
    fn history_response_wire_format_is_pinned() {
        let point = core_history::Point {
            at_ms: 1_700_000_002_000,
            entries: vec![core_history::EntryPoint {
                provider: "anthropic".into(),
                model: "claude-sonnet-4-5".into(),
                samples: 7,
                p95_first_token_ms: Some(900),
                p95_total_ms: Some(4_200),
                error_rate: 0.125,
                degraded_rate: 0.25,
            }],
            breakers: vec![breaker()],
            quota: vec![meter()],
            downshifts: vec![core_history::Downshift {
                kind: CoreKind::Refactor,
                from: CoreTier::Large,
                to: CoreTier::Medium,
                reason: Some("breaker open".into()),
            }],
            canaries: vec![canary()],
            parked: 1,
        };
        let response = HistoryResponse::new(10_000, &[point]);
        let expected = json!({
            "tickMs": 10000,
            "points": [{
                "atMs": 1700000002000u64,
                "entries": [{
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-5",
                    "samples": 7,
                    "p95FirstTokenMs": 900,
                    "p95TotalMs": 4200,
                    "errorRate": 0.125,
                    "degradedRate": 0.25
                }],
                "breakers": [breaker_json()],
                "quota": [meter_json()],
                "downshifts": [{
                    "kind": "refactor",
                    "from": "large",
                    "to": "medium",
                    "reason": "breaker open"
                }],
                "canaries": [canary_json()],
                "parked": 1
            }]
        });
        assert_eq!(serde_json::to_value(&response).unwrap(), expected);
        assert_eq!(
            serde_json::from_value::<HistoryResponse>(expected).unwrap(),
            response
        );
    }

    #[test]
    fn every_state_and_phase_has_its_wire_name() {
        let mut report = full_runbook();
        let states = [
            (core::HealthState::Healthy, "healthy"),
            (core::HealthState::Unknown, "unknown"),
            (core::HealthState::Unhealthy, "unhealthy"),
            (core::HealthState::NoKey, "no-key"),
        ];
        for (state, name) in states {
            report.status.health[0].state = state;
            let value = serde_json::to_value(StatusResponse::from(&report)).unwrap();
            assert_eq!(value["health"][0]["state"], json!(name));
        }
        for (phase, name) in [
            (Phase::Closed, "closed"),
            (Phase::Open, "open"),
            (Phase::HalfOpen, "half-open"),
        ] {
            report.status.breakers[0].phase = phase;
            let value = serde_json::to_value(StatusResponse::from(&report)).unwrap();
            assert_eq!(value["breakers"][0]["phase"], json!(name));
        }
    }
}
