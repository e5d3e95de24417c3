//! Pins the wire format: every field name, as clients read it.
use serde_json::{Value, json};

use super::*;
use switchyard_base::task::{TaskKind as CoreKind, Tier as CoreTier};
use switchyard_resilience::breaker::Phase;

fn breaker() -> BreakerView {
    BreakerView {
        key: "anthropic/anthropic/claude-sonnet-4-5".into(),
        phase: Phase::HalfOpen,
        reason: "6 consecutive failures".into(),
        open_for_ms: 0,
        consecutive_failures: 6,
        trips: 2,
        recoveries: 1,
        stale_verdicts: 0,
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
        routes: vec![core_status::TaskRunbook {
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
        status: core_status::StatusReport {
            provider: Some("anthropic".into()),
            model: Some("claude-haiku-4-5".into()),
            tier: Some(CoreTier::Medium),
            downshifted_from: Some(CoreTier::Large),
            reason: Some("no healthy large entry".into()),
            local_only: false,
            local_only_reason: None,
            tasks: vec![core_status::TaskStatus {
                kind: CoreKind::Explain,
                route: Some(core_status::Route {
                    provider: "anthropic".into(),
                    model: "claude-haiku-4-5".into(),
                    tier: CoreTier::Medium,
                    downshifted_from: Some(CoreTier::Large),
                    reason: Some("breaker open".into()),
                }),
            }],
            health: vec![core_status::EntryHealth {
                provider: "anthropic".into(),
                model: "claude-sonnet-4-5".into(),
                tier: CoreTier::Large,
                state: core_status::HealthState::Unhealthy,
                reason: Some("p95 first token 12000 ms over 10000 ms".into()),
                samples: 12,
                p95_first_token_ms: Some(12_000),
                error_rate: 0.5,
            }],
            breakers: vec![breaker()],
            quota: vec![meter()],
            parked: vec![core_status::ParkedStatus {
                id: "p-1".into(),
                kind: CoreKind::Refactor,
                note: "every large entry is down".into(),
                parked_at_ms: 1_700_000_000_000,
            }],
            canaries: vec![canary()],
            outbound: vec![switchyard_privacy::audit::ProviderTotal {
                provider: "anthropic".into(),
                bytes: 20_480,
                requests: 3,
            }],
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
        "localOnlyReason": null,
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
        "canaries": [canary_json()],
        "outbound": [{"provider": "anthropic", "bytes": 20480, "requests": 3}]
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
    runbook.status = core_status::StatusReport {
        tasks: vec![core_status::TaskStatus {
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
        (core_status::HealthState::Healthy, "healthy"),
        (core_status::HealthState::Unknown, "unknown"),
        (core_status::HealthState::Unhealthy, "unhealthy"),
        (core_status::HealthState::NoKey, "no-key"),
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
