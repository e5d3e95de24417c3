//! A changed configuration reaches everything that reads it, through the
//! one owner (the core): the language server's next remote completion uses
//! a changed `autocomplete.chain` and `autocomplete.budget_ms`, and the
//! gateway's next request is routed by a config file edited while it runs.
//! No setting is read once and kept: status notifications turned on, a
//! shorter resume interval, a new canary interval and a new local model all
//! apply without a restart, and what the router learned (a downshift, an
//! open breaker) survives a change that has nothing to do with it.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::fake_provider::{Behaviour, FakeProvider};
use support::gateway::GatewayProcess;
use support::lsp_client::{LspClient, ServerOptions};
use tokio::time::Instant;

const KEY: &str = "sk-test-reconfigure-0123456789abcdef";
const URI: &str = "file:///work/lib.rs";
const DOC: &str = "fn total(xs: &[u32]) -> u32 {\n    \n}\n";

/// The completion at the empty line inside `total`: its text, or `None`.
async fn complete(client: &mut LspClient) -> Option<String> {
    let response = client
        .request(
            "textDocument/completion",
            json!({"textDocument": {"uri": URI}, "position": {"line": 1, "character": 4}}),
        )
        .await;
    let item = &response["result"]["items"][0];
    item["textEdit"]["newText"]
        .as_str()
        .or(item["insertText"].as_str())
        .map(str::to_owned)
}

/// Pushes `autocomplete` settings as the editor does, and waits until the
/// server has them (a round trip after the notification).
async fn push(client: &mut LspClient, autocomplete: Value) {
    let settings = json!({"switchyard": {"autocomplete": autocomplete}});
    client
        .notify(
            "workspace/didChangeConfiguration",
            json!({"settings": settings}),
        )
        .await;
    client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.status", "arguments": []}),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_autocomplete_chain_and_budget_reach_the_next_remote_completion() {
    // A remote coder that answers 800 ms after it is asked.
    let fake = FakeProvider::with_default(
        Behaviour::ok("xs.iter().sum()").after_latency(Duration::from_millis(800)),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        model_dir: dir.path().join("no-models"),
        env: vec![("SY_FAKE_KEY".into(), KEY.into())],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    let init = json!({
        "local": {"auto_pull": false},
        "providers": {"coder": {"kind": "openai", "base_url": fake.openai_url(), "api_key_env": "SY_FAKE_KEY"}},
        "autocomplete": {"chain": ["local"], "budget_ms": 1000}
    });
    client.initialize(json!({}), init).await;
    client.open(URI, DOC).await;

    // Local only: the remote coder is not asked.
    assert_eq!(complete(&mut client).await, None);
    assert_eq!(fake.user_request_count(), 0);

    // The chain now puts the coder first: the next completion asks it, but
    // 60 % of a 1 s budget is over before its answer comes.
    push(
        &mut client,
        json!({"chain": ["coder/fim", "local"], "budget_ms": 1000}),
    )
    .await;
    assert_eq!(complete(&mut client).await, None);
    assert_eq!(fake.user_request_count(), 1, "the changed chain was used");

    // A 3 s budget leaves it 1.8 s: its answer is shown.
    push(
        &mut client,
        json!({"chain": ["coder/fim", "local"], "budget_ms": 3000}),
    )
    .await;
    let started = Instant::now();
    let shown = complete(&mut client).await;
    assert_eq!(
        shown.as_deref(),
        Some("xs.iter().sum()"),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(fake.user_request_count(), 2);
    client.shutdown().await;
}

fn gateway_config(provider: &str, fake: &FakeProvider) -> String {
    format!(
        "[local]\nauto_pull = false\n\n[providers.{provider}]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"SY_FAKE_KEY\"\n\n[tiers]\nlarge = []\nmedium = [\"{provider}/m\"]\nsmall = []\n",
        fake.openai_url()
    )
}

/// The model that answered one request, or the error.
async fn served_by(gateway: &GatewayProcess) -> String {
    let (_, body) = gateway.chat("Hi").await;
    body["model"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_routes_by_a_config_file_edited_while_it_runs() {
    let (first, second) = (FakeProvider::start().await, FakeProvider::start().await);
    let gateway =
        GatewayProcess::start(&gateway_config("first", &first), &[("SY_FAKE_KEY", KEY)]).await;
    assert_eq!(served_by(&gateway).await, "first/m");

    std::fs::write(
        gateway.home.path().join("config.toml"),
        gateway_config("second", &second),
    )
    .unwrap();
    // Applied within about a second; the editor-facing promise is "the next
    // request after it is read", so ask until then.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut served = served_by(&gateway).await;
    while served != "second/m" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        served = served_by(&gateway).await;
    }
    assert_eq!(served, "second/m", "{}", gateway.log());
    // And it stays there.
    assert_eq!(served_by(&gateway).await, "second/m");
    let status = gateway.status().await;
    assert!(status.to_string().contains("second"), "{status}");
}

/// A language server over the fake (anthropic format) with `settings` as its
/// initialization options, no local model, and `root` as its workspace.
async fn server(fake: &FakeProvider, root: &std::path::Path, settings: Value) -> LspClient {
    let options = ServerOptions {
        model_dir: root.join("no-models"),
        env: vec![("SY_FAKE_KEY".into(), KEY.into())],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    let mut init = json!({
        "local": {"auto_pull": false},
        "providers": {"fake": {"kind": "anthropic", "base_url": fake.anthropic_url(), "api_key_env": "SY_FAKE_KEY"}},
        "tiers": {"large": ["fake/big"], "medium": ["fake/mid"], "small": ["local"]},
    });
    support::scenario::merge(&mut init, settings);
    let root_uri = format!("file://{}", root.display());
    client
        .call(
            "initialize",
            json!({"processId": null, "rootUri": root_uri, "capabilities": {
                "window": {"workDoneProgress": true},
                "workspace": {"applyEdit": true}
            }, "initializationOptions": init}),
        )
        .await;
    client.notify("initialized", json!({})).await;
    client
}

/// Pushes `settings` as the editor does and waits until the server has them.
async fn push_settings(client: &mut LspClient, settings: Value) {
    client
        .notify(
            "workspace/didChangeConfiguration",
            json!({"settings": {"switchyard": settings}}),
        )
        .await;
    command(client, "switchyard.status", json!([])).await;
}

async fn command(client: &mut LspClient, name: &str, arguments: Value) -> Value {
    client
        .request(
            "workspace/executeCommand",
            json!({"command": name, "arguments": arguments}),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_notifications_turned_on_while_running_are_sent() {
    let fake = FakeProvider::with_default(Behaviour::ok("An answer.")).await;
    let root = tempfile::tempdir().unwrap();
    let mut client = server(&fake, root.path(), json!({})).await;
    push_settings(&mut client, json!({"statusNotifications": true})).await;
    // The change itself is told, and so is the next one.
    command(&mut client, "switchyard.setLocalOnly", json!([true])).await;
    let status = client
        .notification("switchyard/status", |p| p["localOnly"] == true)
        .await;
    assert_eq!(status["params"]["localOnly"], true, "{status}");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_interval_shortened_while_running_resumes_parked_work() {
    let fake = FakeProvider::with_default(Behaviour::Unavailable).await;
    let root = tempfile::tempdir().unwrap();
    let hour_long_resume = json!({
        "tasks": {"refactor": {"first_token_ms": 3000, "total_ms": 10000, "wait_ms": 300}},
        "resilience": {
            "backoff": {"rate_limit_ms": 50, "overloaded_ms": 50, "transient_ms": 50, "cap_ms": 200},
            "breaker": {"failures": 3, "cooldown_ms": 500},
            "resume_interval_ms": 3_600_000
        }
    });
    let mut client = server(&fake, root.path(), hour_long_resume).await;
    let doc = format!("file://{}", root.path().join("rate.rs").display());
    let text = "fn rate() -> u32 {\n    7\n}\n";
    client.open(&doc, text).await;
    let whole = json!({"start": {"line": 0, "character": 0}, "end": {"line": 3, "character": 0}});
    let response = command(
        &mut client,
        "switchyard.refactor",
        json!([doc, whole, "Inline the constant."]),
    )
    .await;
    assert!(response["result"]["parked"].is_string(), "{response}");
    fake.set_default(Behaviour::ok("```rust\nfn rate() -> u32 { 7 }\n```"));
    // An hour until the next try, unless the edit applies at once.
    push_settings(
        &mut client,
        json!({"resilience": {"resume_interval_ms": 200}}),
    )
    .await;
    let resumed = client
        .notification("$/progress", |p| {
            let resume = p["token"]
                .as_str()
                .unwrap_or_default()
                .starts_with("switchyard/resume/");
            let message = p["value"]["message"].as_str().unwrap_or_default();
            resume && p["value"]["kind"] == "end" && !message.starts_with("still parked")
        })
        .await;
    let outcome = resumed["params"]["value"]["message"].as_str().unwrap();
    assert!(outcome.contains("resumed"), "{outcome}");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_router_learned_survives_an_unrelated_change() {
    // The medium tier's entry (explain's own) is down: explain is served a
    // tier lower.
    let (down, up) = (
        FakeProvider::with_default(Behaviour::Unavailable).await,
        FakeProvider::with_default(Behaviour::ok("An answer.")).await,
    );
    let root = tempfile::tempdir().unwrap();
    let down_first = json!({
        "providers": {"down": {"kind": "anthropic", "base_url": down.anthropic_url(), "api_key_env": "SY_FAKE_KEY"}},
        "tiers": {"medium": ["down/mid"], "small": ["fake/small"]},
        "resilience": {
            "backoff": {"rate_limit_ms": 50, "overloaded_ms": 50, "transient_ms": 50, "cap_ms": 200}
        }
    });
    let mut client = server(&up, root.path(), down_first).await;
    let doc = format!("file://{}", root.path().join("lib.rs").display());
    client.open(&doc, DOC).await;
    let whole = json!({"start": {"line": 0, "character": 0}, "end": {"line": 3, "character": 0}});
    let explained = command(&mut client, "switchyard.explain", json!([doc, whole])).await;
    assert!(explained.get("error").is_none(), "{explained}");
    let learned = |status: &Value| {
        let route = &status["result"]["tasks"][0];
        let down = status["result"]["health"]
            .as_array()
            .and_then(|h| h.iter().find(|e| e["provider"] == "down"))
            .map(|e| e["state"].clone());
        (
            route["model"].clone(),
            route["downshiftedFrom"].clone(),
            down,
        )
    };
    let before = learned(&command(&mut client, "switchyard.status", json!([])).await);
    let expected = (json!("small"), json!("medium"), Some(json!("unhealthy")));
    assert_eq!(before, expected);

    push_settings(&mut client, json!({"autocomplete": {"budget_ms": 1500}})).await;
    let after = learned(&command(&mut client, "switchyard.status", json!([])).await);
    assert_eq!(
        after, before,
        "a budget edit forgot the downshift or the health"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_follows_an_edited_canary_interval_and_local_model() {
    let fake = FakeProvider::with_default(Behaviour::ok("An answer.")).await;
    let config = |interval_ms: u64, model: &str| {
        format!(
            "[local]\nauto_pull = false\nmodel = \"/nonexistent/{model}.gguf\"\n\n\
             [resilience]\ncanary_interval_ms = {interval_ms}\nprimary_canary_ms = 100\n\n{}",
            gateway_config("coder", &fake).split_once("\n\n").unwrap().1
        )
    };
    let gateway = GatewayProcess::start(&config(3_600_000, "first"), &[("SY_FAKE_KEY", KEY)]).await;
    let canaries = || fake.requests().iter().filter(|r| r.is_canary()).count();
    std::fs::write(
        gateway.home.path().join("config.toml"),
        config(200, "second"),
    )
    .unwrap();
    // Within an hour only if the edit applies at once: the primary watch
    // sends canaries, and the local model is loaded again from its new path.
    let deadline = Instant::now() + Duration::from_secs(30);
    while (canaries() == 0 || !gateway.log().contains("second.gguf")) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        canaries() > 0,
        "no canary after the edit: {}",
        gateway.log()
    );
    assert!(
        gateway.log().contains("second.gguf"),
        "the local model was not loaded again: {}",
        gateway.log()
    );
    let history: Value = reqwest::get(format!("{}/history", gateway.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // A point per canary interval, 200 ms now, and at most one per 10 s.
    assert_eq!(history["tickMs"], 10_000, "{history}");
}
