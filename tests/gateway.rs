//! The gateway over real HTTP: a `switchyard gateway` process in front of fake
//! providers on loopback, driven with an HTTP client as an agent would.

mod support;

use serde_json::{Value, json};
use support::fake_provider::{Behaviour, FakeProvider, two_providers_toml};
use support::gateway::GatewayProcess as Gateway;
use tokio::process::Command;

const KEY: &str = "sk-test-gateway-0123456789abcdef";

/// primary speaks Anthropic (continues a cut answer as a prefill), secondary
/// speaks OpenAI (cannot); `medium` is primary then secondary.
async fn gateway(primary: &FakeProvider, secondary: &FakeProvider, medium: &[&str]) -> Gateway {
    let medium: Vec<String> = medium.iter().map(|e| format!("\"{e}\"")).collect();
    let config = format!(
        r#"{}
[tiers]
large = ["primary/big"]
medium = [{}]
small = []

[tasks.explain]
first_token_ms = 2000
total_ms = 10000
wait_ms = 0
"#,
        two_providers_toml(primary, secondary, "SY_KEY"),
        medium.join(", ")
    );
    Gateway::start(&config, &[("SY_KEY", KEY)]).await
}

fn ask(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What does HashMap::entry do?"}
    ]})
}

async fn post(gateway: &Gateway, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of an SSE body, in order.
async fn events(response: reqwest::Response) -> Vec<String> {
    let text = response.text().await.unwrap();
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

fn content(events: &[String]) -> String {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn a_tier_request_reports_the_model_that_answered_and_only_its_usage() {
    let primary = FakeProvider::with_default(Behaviour::Unavailable).await;
    let secondary = FakeProvider::with_default(Behaviour::ok("It inserts or updates.")).await;
    let gateway = gateway(&primary, &secondary, &["primary/mid", "secondary/gpt-test"]).await;

    let response = post(&gateway, ask("switchyard/medium", false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["model"], "secondary/gpt-test", "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "It inserts or updates."
    );
    // The fake reports 3 output tokens (one per delta) for the answer it served.
    assert_eq!(body["usage"]["completion_tokens"], 3, "{body}");
    assert_eq!(primary.request_count(), 1, "one failed attempt, not billed");
    let sent = &secondary.requests()[0].body;
    assert_eq!(sent["messages"][0]["content"], "Be brief.", "{sent}");
}

#[tokio::test]
async fn a_stream_streams_and_ends_with_done() {
    let primary = FakeProvider::with_default(Behaviour::ok("Entry API: insert or update.")).await;
    let secondary = FakeProvider::start().await;
    let gateway = gateway(&primary, &secondary, &["primary/mid"]).await;
    let response = post(&gateway, ask("switchyard/medium", true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = events(response).await;
    assert_eq!(content(&events), "Entry API: insert or update.");
    assert_eq!(events.last().unwrap(), "[DONE]");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["model"], "primary/mid");
    assert!(
        usage["usage"]["completion_tokens"].as_u64().unwrap() > 0,
        "{usage}"
    );
}

#[tokio::test]
async fn a_stream_cut_after_its_first_bytes_is_continued_where_prefill_is_possible() {
    let text = "one two three four five six";
    // It restates the last words it was given ("four fi…") before going on.
    let primary = FakeProvider::with_default(Behaviour::ok(" four five six")).await;
    let secondary = FakeProvider::start().await;
    // The cut happens on the secondary; the primary (Anthropic) continues it.
    secondary.push(Behaviour::CutAfter {
        text: text.into(),
        after_chunks: 3,
    });
    let gateway = gateway(&primary, &secondary, &["secondary/gpt-test", "primary/mid"]).await;
    let events = events(post(&gateway, ask("switchyard/medium", true)).await).await;
    assert_eq!(events.last().unwrap(), "[DONE]", "{events:?}");
    let sent = &primary.requests()[0].body;
    let prefill = sent["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(prefill["role"], "assistant", "{sent}");
    // The caller sees the cut part once, then the continuation: no repeat, no gap.
    let before_cut: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|e| e["model"] == "secondary/gpt-test")
        .filter_map(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(
        !before_cut.is_empty() && text.starts_with(&before_cut),
        "{events:?}"
    );
    assert_eq!(prefill["content"], before_cut.trim_end());
    // The restated words are cut at the seam: the whole answer, once.
    assert_eq!(content(&events), text);
}

#[tokio::test]
async fn a_cut_stream_that_cannot_be_continued_ends_with_an_error_not_done() {
    let primary = FakeProvider::start().await;
    let secondary = FakeProvider::start().await;
    primary.push(Behaviour::CutAfter {
        text: "one two three four".into(),
        after_chunks: 2,
    });
    // The fallback would continue it, but it is down too.
    secondary.set_default(Behaviour::Unavailable);
    let gateway = gateway(&primary, &secondary, &["primary/mid", "secondary/gpt-test"]).await;
    let events = events(post(&gateway, ask("switchyard/medium", true)).await).await;
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "stream_failed", "{events:?}");
    let message = last["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cut") && message.contains("primary/mid") && message.contains("503"),
        "the error names what stopped each entry: {message}"
    );
    assert!(
        !events.iter().any(|e| e == "[DONE]"),
        "a truncated stream never looks finished"
    );
}

#[tokio::test]
async fn a_cut_stream_is_continued_by_a_fallback_without_prefill() {
    let primary = FakeProvider::start().await;
    let secondary = FakeProvider::start().await;
    // Four chunks of four characters: the cut lands after "t01 t02 ".
    primary.push(Behaviour::CutAfter {
        text: "t01 t02 t03 t04".into(),
        after_chunks: 2,
    });
    // The fallback speaks OpenAI: no prefill, a continuation request instead,
    // which it answers as asked, from the last words it was given.
    secondary.set_default(Behaviour::continues("t01 t02 t03 t04"));
    let gateway = gateway(&primary, &secondary, &["primary/mid", "secondary/gpt-test"]).await;
    let events = events(post(&gateway, ask("switchyard/medium", true)).await).await;
    assert!(events.iter().any(|e| e == "[DONE]"), "{events:?}");
    assert_eq!(content(&events), "t01 t02 t03 t04");
}

#[tokio::test]
async fn models_health_status_and_bad_requests() {
    let primary = FakeProvider::start().await;
    let secondary = FakeProvider::start().await;
    let gateway = gateway(&primary, &secondary, &["primary/mid"]).await;
    let client = reqwest::Client::new();
    let get = |path: &str| client.get(format!("{}{path}", gateway.url)).send();

    let health: Value = get("/health").await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "ok");
    let models: Value = get("/v1/models").await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"switchyard/large") && ids.contains(&"primary/mid"),
        "{ids:?}"
    );

    let response = post(&gateway, ask("primary/mid", false)).await;
    assert_eq!(response.status(), 200);
    let status: Value = get("/status").await.unwrap().json().await.unwrap();
    assert_eq!(status["routes"][0]["kind"], "explain", "{status}");
    assert_eq!(
        status["routes"][0]["now"], "primary/mid (medium)",
        "{status}"
    );
    assert!(
        status["sharedState"].as_str().unwrap().starts_with("file"),
        "{status}"
    );

    let unknown = post(&gateway, ask("nobody/model", false)).await;
    assert_eq!(unknown.status(), 404);
    let not_json = client
        .post(format!("{}/v1/chat/completions", gateway.url))
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), 400);
    let body: Value = not_json.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{body}"
    );
}

#[tokio::test]
async fn listening_beyond_loopback_needs_an_explicit_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["gateway", "--listen", "0.0.0.0:0"])
        .env("SWITCHYARD_CONFIG", "/nonexistent/config.toml")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--allow-remote"), "{stderr}");
}
