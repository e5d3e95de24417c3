//! Pins the wire format: every field name, as clients read it.
use serde_json::json;

use super::*;
use switchyard_base::task::{TaskKind as CoreKind, Tier as CoreTier};
use switchyard_resilience::breaker::{BreakerView, Phase};
use switchyard_resilience::governor::MeterView;
use switchyard_router::canary::CanaryResult;

/// Every `Option` set and one element in every list.
fn full_report() -> core_status::StatusReport {
    core_status::StatusReport {
        provider: Some("openai".into()),
        model: Some("gpt-5-mini".into()),
        tier: Some(CoreTier::Medium),
        downshifted_from: Some(CoreTier::Large),
        reason: Some("no healthy large entry".into()),
        local_only: true,
        local_only_reason: Some("`privacy.local_only_paths`: invalid type".into()),
        tasks: vec![core_status::TaskStatus {
            kind: CoreKind::Refactor,
            route: Some(core_status::Route {
                provider: "openai".into(),
                model: "gpt-5-mini".into(),
                tier: CoreTier::Medium,
                downshifted_from: Some(CoreTier::Large),
                reason: Some("breaker open".into()),
            }),
        }],
        health: vec![core_status::EntryHealth {
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            tier: CoreTier::Large,
            state: core_status::HealthState::NoKey,
            reason: Some("no API key in $ANTHROPIC_API_KEY".into()),
            samples: 3,
            p95_first_token_ms: Some(850),
            error_rate: 0.25,
        }],
        breakers: vec![BreakerView {
            key: "anthropic/anthropic/claude-sonnet-4-5".into(),
            phase: Phase::Open,
            reason: "6 consecutive failures".into(),
            open_for_ms: 120_000,
            consecutive_failures: 6,
            trips: 2,
            recoveries: 1,
            stale_verdicts: 0,
        }],
        quota: vec![MeterView {
            key: "openai/openai/gpt-5-mini".into(),
            meter: "requests".into(),
            limit: 500,
            available: 412.5,
        }],
        parked: vec![core_status::ParkedStatus {
            id: "p-1".into(),
            kind: CoreKind::Refactor,
            note: "every large entry is down".into(),
            parked_at_ms: 1_700_000_000_000,
        }],
        canaries: vec![CanaryResult {
            at_ms: 1_700_000_001_000,
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            ok: false,
            latency_ms: 930,
            error: Some("HTTP 503".into()),
            reason: "breaker recovery check".into(),
        }],
        outbound: vec![switchyard_privacy::audit::ProviderTotal {
            provider: "anthropic".into(),
            bytes: 20_480,
            requests: 3,
        }],
    }
}

/// The `switchyard/status` payload, field for field. Changing this is
/// changing the protocol: update docs/lsp-extensions.md and editors/.
#[test]
fn status_params_wire_format_is_pinned() {
    let snoozed = switchyard_completion::status::CompletionStatus {
        state: switchyard_completion::status::CompletionState::Snoozed,
        reason: None,
        until_ms: Some(1_700_000_002_000),
    };
    let params = StatusParams::for_workspace(&full_report(), None, &snoozed);
    let expected = json!({
        "provider": "openai",
        "model": "gpt-5-mini",
        "tier": "medium",
        "downshiftedFrom": "large",
        "reason": "no healthy large entry",
        "localOnly": true,
        "localOnlyReason": "`privacy.local_only_paths`: invalid type",
        "tasks": [{
            "kind": "refactor",
            "provider": "openai",
            "model": "gpt-5-mini",
            "tier": "medium",
            "downshiftedFrom": "large",
            "reason": "breaker open"
        }],
        "health": [{
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "tier": "large",
            "state": "no-key",
            "reason": "no API key in $ANTHROPIC_API_KEY",
            "samples": 3,
            "p95FirstTokenMs": 850,
            "errorRate": 0.25
        }],
        "breakers": [{
            "key": "anthropic/anthropic/claude-sonnet-4-5",
            "phase": "open",
            "reason": "6 consecutive failures",
            "openForMs": 120000,
            "consecutiveFailures": 6,
            "trips": 2,
            "recoveries": 1
        }],
        "quota": [{
            "key": "openai/openai/gpt-5-mini",
            "meter": "requests",
            "limit": 500,
            "available": 412.5
        }],
        "parked": [{
            "id": "p-1",
            "kind": "refactor",
            "note": "every large entry is down",
            "parkedAtMs": 1700000000000u64
        }],
        "canaries": [{
            "atMs": 1700000001000u64,
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "ok": false,
            "latencyMs": 930,
            "error": "HTTP 503",
            "reason": "breaker recovery check"
        }],
        "outbound": [{"provider": "anthropic", "bytes": 20480, "requests": 3}],
        "localOnlyRule": null,
        "completion": {"state": "snoozed", "reason": null, "untilMs": 1700000002000u64}
    });
    assert_eq!(serde_json::to_value(&params).unwrap(), expected);
    // Clients parse it back.
    assert_eq!(
        serde_json::from_value::<StatusParams>(expected).unwrap(),
        params
    );
}

/// Before anything is served: `null`s at the top, a task is its kind alone.
#[test]
fn empty_status_has_nulls_and_bare_tasks() {
    let report = core_status::StatusReport {
        tasks: vec![core_status::TaskStatus {
            kind: CoreKind::Explain,
            route: None,
        }],
        ..Default::default()
    };
    let expected = json!({
        "provider": null,
        "model": null,
        "tier": null,
        "downshiftedFrom": null,
        "reason": null,
        "localOnly": false,
        "localOnlyReason": null,
        "tasks": [{"kind": "explain"}],
        "health": [],
        "breakers": [],
        "quota": [],
        "parked": [],
        "canaries": [],
        "outbound": [],
        "localOnlyRule": null,
        "completion": null
    });
    let params = StatusParams::from(&report);
    assert_eq!(serde_json::to_value(&params).unwrap(), expected);
    assert_eq!(
        serde_json::from_value::<StatusParams>(expected).unwrap(),
        params
    );
}

#[test]
fn every_enum_value_has_its_wire_name() {
    let tiers: Vec<_> = [CoreTier::Small, CoreTier::Medium, CoreTier::Large]
        .into_iter()
        .map(|t| result(Tier::from(t)))
        .collect();
    assert_eq!(tiers, [json!("small"), json!("medium"), json!("large")]);
    let kinds: Vec<_> = CoreKind::ALL
        .into_iter()
        .map(|k| result(TaskKind::from(k)))
        .collect();
    assert_eq!(
        kinds,
        [json!("autocomplete"), json!("explain"), json!("refactor")]
    );
    let phases: Vec<_> = [Phase::Closed, Phase::Open, Phase::HalfOpen]
        .into_iter()
        .map(|p| result(BreakerPhase::from(p)))
        .collect();
    assert_eq!(phases, [json!("closed"), json!("open"), json!("half-open")]);
    let names: Vec<_> = [
        core_status::HealthState::Healthy,
        core_status::HealthState::Unknown,
        core_status::HealthState::Unhealthy,
        core_status::HealthState::NoKey,
    ]
    .into_iter()
    .map(|s| result(HealthState::from(s)))
    .collect();
    assert_eq!(
        names,
        [
            json!("healthy"),
            json!("unknown"),
            json!("unhealthy"),
            json!("no-key")
        ]
    );
}

#[test]
fn command_results_wire_formats_are_pinned() {
    assert_eq!(
        StatusNotification::METHOD,
        "switchyard/status",
        "the method name is protocol"
    );
    assert_eq!(
        result(LocalOnlyResult { local_only: true }),
        json!({"localOnly": true})
    );
    assert_eq!(
        result(ExplainResult {
            provider: "anthropic".into(),
            model: "claude-haiku-4-5".into(),
            tier: Tier::Medium,
            path: "/state/explanations/explain-1.md".into(),
            text: "It drains.".into(),
        }),
        json!({
            "provider": "anthropic",
            "model": "claude-haiku-4-5",
            "tier": "medium",
            "path": "/state/explanations/explain-1.md",
            "text": "It drains."
        })
    );
    assert_eq!(
        result(RefactorResult::Done(RefactorDone {
            applied: true,
            edits: 2,
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            tier: Tier::Large,
        })),
        json!({
            "applied": true,
            "edits": 2,
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "tier": "large"
        })
    );
    assert_eq!(
        result(RefactorResult::Parked(RefactorParked {
            parked: "p-1".into(),
            reason: "every large entry is down".into(),
        })),
        json!({"parked": "p-1", "reason": "every large entry is down"})
    );
}
