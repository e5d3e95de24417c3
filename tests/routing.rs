//! Remote routing through the real binary against fake providers on loopback:
//! silent degradation, tier downshift, local-only, complete-or-clear-error,
//! code actions and status reporting.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::actions::{DOC, URI, command, whole_function};
use support::fake_provider::{Behaviour, FakeProvider};
use support::lsp_client::{LspClient, ServerOptions};

const PRIMARY_KEY: &str = "sk-test-primary-0123456789abcdef";
const SECONDARY_KEY: &str = "sk-test-secondary-fedcba9876543210";

struct Setup {
    client: LspClient,
    primary: FakeProvider,
    secondary: FakeProvider,
}

/// primary speaks the Anthropic API, secondary the OpenAI one; `large` is
/// primary alone, `medium` is primary then secondary. Ceilings are scaled down
/// (first token 400 ms) so the suite stays quick.
async fn setup(capabilities: Value, status_notifications: bool) -> Setup {
    setup_with(capabilities, status_notifications, 10_000).await
}

/// `setup` with canaries every `canary_interval_ms`.
async fn setup_with(
    capabilities: Value,
    status_notifications: bool,
    canary_interval_ms: u64,
) -> Setup {
    let primary = FakeProvider::start().await;
    let secondary = FakeProvider::start().await;
    let empty_models = tempfile::tempdir().unwrap().keep();
    let options = ServerOptions {
        model_dir: empty_models,
        env: vec![
            ("SY_PRIMARY_KEY".into(), PRIMARY_KEY.into()),
            ("SY_SECONDARY_KEY".into(), SECONDARY_KEY.into()),
        ],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    let init = json!({
        "local": {"auto_pull": false},
        "statusNotifications": status_notifications,
        "providers": {
            "primary": {"kind": "anthropic", "base_url": primary.anthropic_url(), "api_key_env": "SY_PRIMARY_KEY"},
            "secondary": {"kind": "openai", "base_url": secondary.openai_url(), "api_key_env": "SY_SECONDARY_KEY"}
        },
        "tiers": {"large": ["primary/big-model"], "medium": ["primary/mid-model", "secondary/gpt-test"], "small": ["local"]},
        "tasks": {
            "explain": {"first_token_ms": 400, "total_ms": 10000, "wait_ms": 2000},
            "refactor": {"first_token_ms": 400, "total_ms": 10000, "wait_ms": 2000}
        },
        // The fast profile: backoff scaled down with the ceilings.
        "resilience": {
            "backoff": {"rate_limit_ms": 100, "overloaded_ms": 200, "transient_ms": 50, "cap_ms": 1000},
            "canary_interval_ms": canary_interval_ms
        }
    });
    client.initialize(capabilities, init).await;
    client.open(URI, DOC).await;
    Setup {
        client,
        primary,
        secondary,
    }
}

fn editor_capabilities() -> Value {
    json!({"window": {"workDoneProgress": true, "showDocument": {"support": true}}, "workspace": {"applyEdit": true}})
}

async fn explain(client: &mut LspClient) -> Value {
    command(client, "switchyard.explain", json!([URI, whole_function()])).await
}

#[tokio::test]
async fn silent_degradation_costs_one_request_and_the_next_ones_go_to_the_secondary() {
    let Setup {
        mut client,
        primary,
        secondary,
    } = setup(editor_capabilities(), true).await;
    // Status 200, but the first token comes after the task's ceiling.
    primary.set_default(Behaviour::SlowFirstToken {
        delay: Duration::from_secs(2),
        text: "late".into(),
    });

    for _ in 0..4 {
        let response = explain(&mut client).await;
        assert_eq!(response["result"]["provider"], "secondary", "{response}");
    }
    assert_eq!(
        primary.user_request_count(),
        1,
        "only the first request tried the slow primary; the rest skipped it"
    );
    assert_eq!(secondary.user_request_count(), 4);

    let status = client
        .notification("switchyard/status", |p| {
            p["provider"] == "secondary"
                && p["health"].as_array().is_some_and(|h| {
                    h.iter()
                        .any(|e| e["provider"] == "primary" && e["state"] == "unhealthy")
                })
        })
        .await;
    let reason = status["params"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("slow"),
        "the status says why traffic moved: {status}"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn a_tier_with_nothing_healthy_downshifts_and_the_editor_is_told_why() {
    let Setup {
        mut client,
        primary,
        secondary,
    } = setup(editor_capabilities(), true).await;
    primary.set_default(Behaviour::Overloaded);
    secondary.set_default(Behaviour::ok("```rust\nfn count(words: &[&str]) -> HashMap<String, usize> {\n    words.iter().fold(HashMap::new(), |mut m, w| { *m.entry(w.to_string()).or_insert(0) += 1; m })\n}\n```"));

    let response = command(
        &mut client,
        "switchyard.refactor",
        json!([URI, whole_function(), "Simplify this code."]),
    )
    .await;

    let result = &response["result"];
    assert_eq!(
        (result["provider"].as_str(), result["tier"].as_str()),
        (Some("secondary"), Some("medium")),
        "{response}"
    );
    assert_eq!(result["applied"], true);
    let edit = client
        .seen
        .iter()
        .find(|m| m["method"] == "workspace/applyEdit")
        .expect("the refactor was applied");
    let edits = &edit["params"]["edit"]["documentChanges"][0]["edits"];
    assert!(
        edits
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["range"]["start"]["line"].as_u64().unwrap() >= 3),
        "only changed lines are edited: {edits}"
    );
    let status = client
        .notification("switchyard/status", |p| p["downshiftedFrom"] == "large")
        .await;
    assert!(
        status["params"]["reason"].as_str().unwrap().contains("529"),
        "{status}"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn a_downshift_indicator_clears_once_the_tier_it_left_recovers() {
    let Setup {
        mut client,
        primary,
        secondary,
    } = setup_with(editor_capabilities(), true, 200).await;
    primary.set_default(Behaviour::Overloaded);
    secondary.set_default(Behaviour::ok("```rust\nfn count() {}\n```"));
    let response = command(
        &mut client,
        "switchyard.refactor",
        json!([URI, whole_function(), "Simplify this code."]),
    )
    .await;
    assert_eq!(response["result"]["tier"], "medium", "{response}");
    client
        .notification("switchyard/status", |p| p["downshiftedFrom"] == "large")
        .await;

    // No further task runs: the canaries find the primary healthy again, and
    // the status alone takes the indicator away.
    primary.set_default(Behaviour::ok("fine"));
    let recovered = client
        .notification("switchyard/status", |p| {
            p["downshiftedFrom"].is_null() && p["tier"] == "large"
        })
        .await;
    assert_eq!(recovered["params"]["provider"], "primary", "{recovered}");
    let refactor = recovered["params"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "refactor")
        .cloned()
        .unwrap_or_default();
    assert!(refactor["downshiftedFrom"].is_null(), "{recovered}");
    client.shutdown().await;
}

#[tokio::test]
async fn clients_without_status_notifications_hear_of_a_change_once() {
    let Setup {
        mut client,
        primary,
        secondary: _secondary,
    } = setup(json!({}), false).await;
    primary.set_default(Behaviour::Unavailable);
    for _ in 0..3 {
        explain(&mut client).await;
    }
    client.call("shutdown", Value::Null).await;
    let moved: Vec<&Value> = client
        .seen
        .iter()
        .filter(|m| {
            m["method"] == "window/showMessage"
                && m["params"]["message"]
                    .as_str()
                    .is_some_and(|t| t.contains("explain now served by secondary"))
        })
        .collect();
    assert_eq!(
        moved.len(),
        1,
        "told once, not per request: {:?}\n{}",
        client.seen,
        client.log()
    );
    assert!(
        client
            .seen
            .iter()
            .all(|m| m["method"] != "switchyard/status")
    );
}

#[tokio::test]
async fn local_only_is_one_command_away_and_persists() {
    let Setup {
        mut client,
        primary,
        secondary,
    } = setup(editor_capabilities(), true).await;
    // No arguments at all, as Helix's `:lsp-workspace-command` sends it.
    let toggled = client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.toggleLocalOnly"}),
        )
        .await;
    assert_eq!(toggled["result"]["localOnly"], true, "{toggled}");
    client
        .notification("switchyard/status", |p| p["localOnly"] == true)
        .await;

    let refused = command(
        &mut client,
        "switchyard.refactor",
        json!([URI, whole_function(), "Simplify."]),
    )
    .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("local-only mode"),
        "{refused}"
    );
    assert_eq!(
        primary.request_count() + secondary.request_count(),
        0,
        "no remote call in local-only mode"
    );
    let config = std::fs::read_to_string(client.config_file()).unwrap();
    assert!(config.contains("local_only = true"), "{config}");

    let back = command(&mut client, "switchyard.setLocalOnly", json!([false])).await;
    assert_eq!(back["result"]["localOnly"], false);
    client.shutdown().await;
}

#[tokio::test]
async fn every_answer_is_complete_or_a_clear_error() {
    let Setup {
        mut client,
        primary,
        secondary,
    } = setup(editor_capabilities(), true).await;
    primary.set_default(Behaviour::CutAfter {
        text: "The function counts".into(),
        after_chunks: 2,
    });
    secondary.set_default(Behaviour::CutAfter {
        text: "The function counts words".into(),
        after_chunks: 1,
    });

    let response = explain(&mut client).await;

    let message = response["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("a cut answer is no success: {response}"));
    assert!(
        message.contains("primary/mid-model") && message.contains("secondary/gpt-test"),
        "{message}"
    );
    assert!(!message.contains(PRIMARY_KEY) && !message.contains(SECONDARY_KEY));
    client.shutdown().await;
}

#[tokio::test]
async fn explain_opens_a_markdown_document_naming_the_provider() {
    let Setup {
        mut client,
        primary: _primary,
        secondary: _secondary,
    } = setup(editor_capabilities(), true).await;
    let response = explain(&mut client).await;
    assert_eq!(
        response["result"]["provider"],
        "primary",
        "{}",
        client.log()
    );
    let shown = client
        .seen
        .iter()
        .find(|m| m["method"] == "window/showDocument")
        .expect("explanation shown");
    let uri = shown["params"]["uri"].as_str().unwrap();
    assert!(uri.ends_with(".md"), "{uri}");
    let path = response["result"]["path"].as_str().unwrap();
    let markdown = std::fs::read_to_string(path).unwrap();
    assert!(
        markdown.contains("Hello from the fake") && markdown.contains("primary/mid-model"),
        "{markdown}"
    );
    assert!(client.seen.iter().any(|m| {
        m["method"] == "$/progress"
            && m["params"]["value"]["message"]
                .as_str()
                .is_some_and(|t| t.contains("primary/mid-model"))
    }));
    client.shutdown().await;
}

#[tokio::test]
async fn code_actions_offer_explain_refactor_presets_and_fixes() {
    let Setup {
        mut client,
        primary: _primary,
        secondary: _secondary,
    } = setup(editor_capabilities(), true).await;
    let diagnostic = json!({"range": {"start": {"line": 5, "character": 8}, "end": {"line": 5, "character": 12}}, "message": "unused variable", "severity": 2});
    let actions = client
        .call("textDocument/codeAction", json!({"textDocument": {"uri": URI}, "range": whole_function(), "context": {"diagnostics": [diagnostic]}}))
        .await;
    let titles: Vec<&str> = actions
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap())
        .collect();
    for expected in [
        "switchyard: Explain",
        "switchyard: Simplify",
        "switchyard: Add error handling",
        "switchyard: Add docs",
        "switchyard: Fix diagnostics",
    ] {
        assert!(titles.contains(&expected), "{titles:?}");
    }
    let status = command(&mut client, "switchyard.status", json!([])).await;
    assert_eq!(status["result"]["localOnly"], false);
    assert!(
        status["result"]["health"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["provider"] == "secondary")
    );
    client.shutdown().await;
}
