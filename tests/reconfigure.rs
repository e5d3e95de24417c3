//! A changed configuration reaches everything that reads it, through the
//! one owner (the core): the language server's next remote completion uses
//! a changed `autocomplete.chain` and `autocomplete.budget_ms`, and the
//! gateway's next request is routed by a config file edited while it runs.

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
