//! Shared resilience across real switchyard processes: several language
//! servers (one per editor window) share one breaker and one quota through the
//! default file backend, against fake providers on loopback. Waits are the
//! fast profile: backoff and cooldowns scaled down with the ceilings.

mod support;

use std::path::Path;
use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};
use support::actions::{DOC, URI, command, whole_function};
use support::fake_provider::{Behaviour, FakeProvider};
use support::lsp_client::{LspClient, ServerOptions};
use support::redis_server::RedisServer;
use support::timing;
use switchyard_state::SharedState;
use switchyard_state::file::FileState;

const REWRITE: &str = "```rust\nfn count(words: &[&str]) -> HashMap<String, usize> {\n    words.iter().fold(HashMap::new(), |mut m, w| { *m.entry(w.to_string()).or_insert(0) += 1; m })\n}\n```";
const KEY: &str = "sk-test-shared-0123456789abcdef";

/// A server sharing `state` with every other server the test starts.
async fn server(
    state: &Path,
    primary: &FakeProvider,
    secondary: &FakeProvider,
    extra: Value,
) -> LspClient {
    let options = ServerOptions {
        model_dir: tempfile::tempdir().unwrap().keep(),
        env: vec![
            ("SY_KEY".into(), KEY.into()),
            (
                "SWITCHYARD_STATE_DIR".into(),
                state.to_str().unwrap().into(),
            ),
        ],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    let mut init = json!({
        "local": {"auto_pull": false},
        "statusNotifications": true,
        "providers": {
            "primary": {"kind": "anthropic", "base_url": primary.anthropic_url(), "api_key_env": "SY_KEY"},
            "secondary": {"kind": "openai", "base_url": secondary.openai_url(), "api_key_env": "SY_KEY"}
        },
        "tiers": {"large": ["primary/big"], "medium": ["primary/mid", "secondary/gpt-test"], "small": []},
        "tasks": {
            "explain": {"first_token_ms": 3000, "total_ms": 10000, "wait_ms": 0},
            "refactor": {"first_token_ms": 3000, "total_ms": 10000, "wait_ms": 300}
        },
        "resilience": {
            "backoff": {"rate_limit_ms": 50, "overloaded_ms": 50, "transient_ms": 50, "cap_ms": 200},
            "breaker": {"failures": 3, "cooldown_ms": 1500},
            "resume_interval_ms": 200
        }
    });
    merge(&mut init, extra);
    let capabilities = json!({"window": {"workDoneProgress": true, "showDocument": {"support": true}}, "workspace": {"applyEdit": true}});
    client.initialize(capabilities, init).await;
    client.open(URI, DOC).await;
    client
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(base.entry(k).or_insert(Value::Null), v);
            }
        }
        (base, extra) => *base = extra,
    }
}

/// The provider that served an explain, or the error.
async fn explain(client: &mut LspClient) -> String {
    let response = command(client, "switchyard.explain", json!([URI, whole_function()])).await;
    match response["result"]["provider"].as_str() {
        Some(provider) => provider.to_owned(),
        None => panic!("explain failed: {response}"),
    }
}

#[tokio::test]
async fn four_processes_share_one_quota_without_a_429_storm() {
    let state = tempfile::tempdir().unwrap();
    let primary = FakeProvider::start().await;
    let secondary = FakeProvider::start().await;
    // The account's quota is not configured: switchyard learns it from the
    // rate-limit headers of the first answers, then governs by them.
    primary.set_quota(20);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server(state.path(), &primary, &secondary, json!({})).await);
    }

    let served = join_all(clients.iter_mut().map(|client| async move {
        let mut served = Vec::new();
        for _ in 0..8 {
            served.push(explain(client).await);
        }
        served
    }))
    .await;

    let served: Vec<String> = served.into_iter().flatten().collect();
    assert_eq!(served.len(), 32, "every request was answered");
    assert_eq!(
        primary.quota_rejections(),
        0,
        "no request was sent without quota in hand"
    );
    let on_primary = served.iter().filter(|p| *p == "primary").count();
    assert_eq!(on_primary, primary.request_count());
    // The account's 20 requests, less the headroom kept for its other users;
    // the rest went to the next entry instead of waiting or hammering.
    assert!(
        (15..=20).contains(&on_primary),
        "{on_primary} on the primary"
    );
    assert_eq!(secondary.request_count(), 32 - on_primary);
    for client in clients {
        client.shutdown().await;
    }
}

#[tokio::test]
async fn after_an_outage_one_process_probes_and_its_verdict_holds_for_all() {
    let state = tempfile::tempdir().unwrap();
    // A transient error: it opens the breaker without a health verdict.
    let primary = FakeProvider::with_default(Behaviour::ServerError).await;
    let secondary = FakeProvider::start().await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server(state.path(), &primary, &secondary, one_probe_settings()).await);
    }
    one_probe_after_an_outage(clients, &primary).await;
}

/// The same across machines: each process has its own state directory and
/// shares only the Redis server.
#[tokio::test]
async fn processes_on_different_machines_share_the_breaker_through_redis() {
    let redis = RedisServer::start();
    // A transient error: it opens the breaker without a health verdict.
    let primary = FakeProvider::with_default(Behaviour::ServerError).await;
    let secondary = FakeProvider::start().await;
    let mut shared = one_probe_settings();
    merge(&mut shared, json!({"resilience": {"state": redis.url()}}));
    let mut clients = Vec::new();
    let mut dirs = Vec::new();
    for _ in 0..4 {
        let own = tempfile::tempdir().unwrap();
        clients.push(server(own.path(), &primary, &secondary, shared.clone()).await);
        dirs.push(own);
    }
    one_probe_after_an_outage(clients, &primary).await;
    let breaker_files = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d.path().join("shared")).ok())
        .flatten()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().contains("breaker"))
        .count();
    assert_eq!(breaker_files, 0, "the breaker lived in Redis, not in files");
}

/// The outage's breaker for [`one_probe_after_an_outage`]: a cooldown long
/// enough that every process has asked again before it ends, and canaries
/// too rare to probe instead of the users.
fn one_probe_settings() -> Value {
    json!({"resilience": {
        "breaker": {"cooldown_ms": 5_000},
        "canary_interval_ms": 600_000
    }})
}

/// Waits until `client`'s status shows the primary's breaker in `phase`:
/// the process has read it so from the shared state.
async fn breaker_shows(client: &mut LspClient, phase: &str) {
    client
        .notification("switchyard/status", |p| {
            p["breakers"].as_array().is_some_and(|b| {
                b.iter()
                    .any(|b| b["key"] == "primary/primary/mid" && b["phase"] == phase)
            })
        })
        .await;
}

async fn one_probe_after_an_outage(mut clients: Vec<LspClient>, primary: &FakeProvider) {
    // One after another, so each failure is counted before the next request:
    // three failures anywhere open the breaker everywhere.
    for client in clients.iter_mut() {
        assert_eq!(explain(client).await, "secondary");
    }
    assert_eq!(
        primary.user_request_count(),
        3,
        "the breaker opened after three failures"
    );
    // Once a process has seen the trip, its next request goes elsewhere: the
    // trip reaches it within the breaker's view lifetime (the paused clock
    // checks that in crates/router/src/tests/fleet.rs; here, the order).
    for client in clients.iter_mut() {
        breaker_shows(client, "open").await;
    }
    for client in clients.iter_mut() {
        assert_eq!(explain(client).await, "secondary", "after the trip");
    }
    assert_eq!(
        primary.user_request_count(),
        3,
        "no process tried the tripped entry"
    );

    // After the cooldown the primary is back, slowly: every window asks at once
    // while the one probe is still in flight.
    for client in clients.iter_mut() {
        breaker_shows(client, "half-open").await;
    }
    primary.set_default(Behaviour::ok("back").after_latency(Duration::from_millis(1_000)));
    let served = join_all(clients.iter_mut().map(explain)).await;
    assert_eq!(
        primary.user_request_count(),
        4,
        "exactly one probe: {served:?}"
    );
    assert_eq!(
        served.iter().filter(|p| *p == "primary").count(),
        1,
        "{served:?}"
    );

    // The probe's success closed the breaker for every process.
    primary.set_default(Behaviour::ok("back"));
    for client in clients.iter_mut() {
        assert_eq!(explain(client).await, "primary");
    }
    let status = clients[0]
        .notification("switchyard/status", |p| {
            p["breakers"].as_array().is_some_and(|b| {
                b.iter().any(|b| {
                    b["key"] == "primary/primary/mid"
                        && b["phase"] == "closed"
                        && b["recoveries"] == 1
                })
            })
        })
        .await;
    assert_eq!(status["params"]["breakers"][0]["trips"], 1, "{status}");
    for client in clients {
        client.shutdown().await;
    }
}

/// Whether a server holds the claim on parked task `id` (it is resuming it),
/// read as the servers read it: the live lease in the claims' file state.
async fn claimed(state: &Path, id: &str) -> bool {
    let claims = FileState::open(state.join("parked").join("claims")).unwrap();
    claims.get(&format!("park/{id}")).await.unwrap().is_some()
}

#[tokio::test]
async fn a_parked_refactor_survives_kill_9_and_resumes_when_the_breaker_closes() {
    let state = tempfile::tempdir().unwrap();
    let primary = FakeProvider::with_default(Behaviour::Unavailable).await;
    let secondary = FakeProvider::start().await;

    // Refactors have only the primary: nowhere to downshift.
    let only_primary = json!({"tiers": {"medium": []}});
    let mut first = server(state.path(), &primary, &secondary, only_primary.clone()).await;
    let response = command(
        &mut first,
        "switchyard.refactor",
        json!([URI, whole_function(), "Simplify this code."]),
    )
    .await;
    let id = response["result"]["parked"]
        .as_str()
        .unwrap_or_else(|| panic!("{response}"))
        .to_owned();
    assert!(
        response["result"]["reason"]
            .as_str()
            .unwrap()
            .contains("HTTP 503"),
        "{response}"
    );
    first
        .notification("switchyard/status", |p| p["parked"][0]["id"] == id.as_str())
        .await;
    let checkpoint = state.path().join("parked").join(format!("{id}.json"));
    assert!(checkpoint.exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&checkpoint).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // Killed mid-resume: its resume loop holds the task's claim. SIGKILL: no
    // shutdown, no chance to give the claim back.
    // Looked for every 2 ms: a resume against the unavailable primary holds
    // the claim only briefly.
    let deadline = tokio::time::Instant::now() + timing::scaled(support::lsp_client::WAIT);
    while !claimed(state.path(), &id).await {
        if tokio::time::Instant::now() >= deadline {
            panic!("the task was never claimed");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    drop(first);

    primary.set_default(Behaviour::ok(REWRITE));
    let mut second = server(state.path(), &primary, &secondary, only_primary).await;
    let edit = second.server_request("workspace/applyEdit").await;
    let edits = &edit["params"]["edit"]["documentChanges"][0]["edits"];
    let inserted: String = edits
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["newText"].as_str().unwrap())
        .collect();
    assert!(inserted.contains("fold"), "{edit}");
    second
        .notification("$/progress", |p| {
            p["value"]["kind"] == "end" && p["value"]["message"] == "resumed and finished"
        })
        .await;
    second
        .notification("switchyard/status", |p| {
            p["parked"].as_array().is_some_and(Vec::is_empty) && p["provider"] == "primary"
        })
        .await;
    assert!(!checkpoint.exists(), "a finished task leaves no checkpoint");
    second.shutdown().await;
}

#[tokio::test]
async fn a_canary_notices_recovery_without_a_users_request() {
    let state = tempfile::tempdir().unwrap();
    // A transient error: it opens the breaker without a health verdict.
    let primary = FakeProvider::with_default(Behaviour::ServerError).await;
    let secondary = FakeProvider::start().await;
    let fast_canaries = json!({"resilience": {"canary_interval_ms": 200}});
    let mut client = server(state.path(), &primary, &secondary, fast_canaries).await;
    for _ in 0..4 {
        assert_eq!(explain(&mut client).await, "secondary");
    }
    // A canary may already have gone to the open breaker (one every 200 ms);
    // the fourth user request did not.
    assert_eq!(primary.user_request_count(), 3, "the breaker opened");

    // The primary recovers; nobody asks anything. Canaries test the open
    // breaker every canary interval, and the first healthy one closes it.
    primary.set_default(Behaviour::ok("SWITCHYARD-CANARY-OK"));
    let status = client
        .notification("switchyard/status", |p| {
            p["breakers"].as_array().is_some_and(|b| {
                b.iter()
                    .any(|b| b["key"] == "primary/primary/mid" && b["phase"] == "closed")
            }) && p["canaries"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["ok"] == true))
        })
        .await;
    let canary = &status["params"]["canaries"][0];
    assert_eq!(canary["reason"], "breaker recovery check", "{status}");
    assert_eq!(primary.user_request_count(), 3, "no user request meanwhile");
    assert!(
        primary.requests().iter().filter(|r| r.is_canary()).count() >= 1,
        "canaries went out"
    );
    assert_eq!(explain(&mut client).await, "primary");
    client.shutdown().await;
}
