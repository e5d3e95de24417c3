//! The gateway's dashboard in a real browser: a `switchyard gateway` in front of
//! fake providers with a scripted fault, its `/dashboard` loaded in headless
//! Chromium driven through chromedriver's W3C WebDriver API. The page must
//! render, chart real data, and show the breaker trip through its live polling.
//! A screenshot is left at `target/dashboard-screenshot.png`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`scripts/test-setup` installs them).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::browser::{Browser, require_chromium, target_dir};
use support::fake_provider::{Behaviour, FakeProvider, FakeRateLimits};
use support::gateway::GatewayProcess as Gateway;
use switchyard_router::canary::TOKEN;

const KEY: &str = "sk-test-dashboard-0123456789abcdef";

/// Waits until the page's state (`PAGE_STATE`) satisfies `done`.
async fn wait_for(browser: &Browser, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let failed = target_dir().join("dashboard-screenshot-failed.png");
    browser.wait_until(what, PAGE_STATE, &failed, done).await
}

// ---- The gateway under test.

/// Refactors start on `secondary/big` (large) and downshift to `primary/mid`
/// (medium); explains go to `primary/mid`. Canaries every 200 ms, so the
/// history fills in seconds; two failures open a breaker for a minute.
async fn gateway(primary: &FakeProvider, secondary: &FakeProvider, extra: &str) -> Gateway {
    let config = format!(
        r#"
[local]
auto_pull = false

[providers.primary]
kind = "openai"
base_url = "{}"
api_key_env = "SY_KEY"

[providers.secondary]
kind = "anthropic"
base_url = "{}"
api_key_env = "SY_KEY"

[tiers]
large = ["secondary/big"]
medium = ["primary/mid"]
small = []

[tasks.explain]
wait_ms = 0

[tasks.refactor]
wait_ms = 0

[resilience]
canary_interval_ms = 200
primary_canary_ms = 1000

[resilience.breaker]
failures = 2
cooldown_ms = 60000
{extra}
"#,
        primary.openai_url(),
        secondary.anthropic_url(),
    );
    let env = [
        ("SY_KEY", KEY),
        ("SY_GATEWAY_TOKEN", "dashboard-test-token"),
    ];
    Gateway::start(&config, &env).await
}

/// The status and body of one chat completion.
async fn ask(gateway: &Gateway, model: &str, task: &str) -> (u16, String) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "What does Vec::drain do?"}]});
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .header("x-switchyard-task", task)
        .header("authorization", "Bearer dashboard-test-token")
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// What the page shows, read from its data attributes.
const PAGE_STATE: &str = r##"
const q = (s) => document.querySelector(s);
const entries = {};
for (const e of document.querySelectorAll("[data-entry]")) {
  const points = (metric) => {
    const chart = e.querySelector(`svg[data-metric="${metric}"]`);
    return chart ? Number(chart.dataset.points) : null;
  };
  const band = e.querySelector("[data-band]");
  entries[e.dataset.entry] = {
    state: e.dataset.state,
    phase: e.querySelector("[data-breaker-phase]")?.dataset.breakerPhase ?? null,
    trips: Number(e.querySelector("[data-trips]")?.dataset.trips ?? -1),
    ttft: points("ttft"),
    total: points("total"),
    errors: points("errors"),
    band: band ? band.dataset.phases : null,
    linePaths: e.querySelectorAll('svg[data-metric="ttft"] path').length,
  };
}
return {
  heading: q("h1")?.textContent ?? null,
  updates: Number(document.body.dataset.updates),
  verdict: q("#verdict")?.dataset.verdict ?? null,
  headline: q("#verdict .headline")?.textContent ?? null,
  entries,
  canaries: document.querySelectorAll("[data-canary]").length,
  downshifts: document.querySelectorAll("[data-downshift]").length,
  quota: document.querySelectorAll("[data-quota]").length,
  outbound: [...document.querySelectorAll("[data-outbound]")].map((r) => r.dataset.outbound),
  origin: location.origin,
  resources: performance.getEntriesByType("resource").map((r) => r.name),
};
"##;

fn entry<'a>(state: &'a Value, id: &str) -> &'a Value {
    &state["entries"][id]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_charts_live_health_and_shows_a_breaker_trip() {
    require_chromium();
    // Answers carry the canary's token, so the primaries' canaries pass.
    let answer = Behaviour::Ok {
        text: format!("It removes a range. {TOKEN}"),
        chunks: 4,
        delay: Duration::from_millis(20),
    };
    // Rate-limit headers give the governor learned meters to show as headroom.
    let limits = FakeRateLimits {
        requests_limit: 600,
        requests_remaining: 540,
        requests_reset: Duration::from_secs(6),
        tokens_limit: 200_000,
        tokens_remaining: 150_000,
        tokens_reset: Duration::from_secs(15),
    };
    let answer = answer
        .after_latency(Duration::from_millis(40))
        .with_rate_limits(limits);
    let primary = FakeProvider::with_default(answer).await;
    let secondary = FakeProvider::with_default(Behaviour::ok(&format!("Done. {TOKEN}"))).await;
    let gateway = gateway(&primary, &secondary, "").await;
    for (model, task) in [("switchyard/medium", "explain"), ("switchyard", "refactor")] {
        for _ in 0..4 {
            let (status, body) = ask(&gateway, model, task).await;
            assert_eq!(status, 200, "{body}");
        }
    }
    let browser = Browser::start().await;
    browser.goto(&format!("{}/dashboard", gateway.url)).await;
    let healthy = wait_for(&browser, "charts with data for primary/mid", |s| {
        entry(s, "primary/mid")["ttft"].as_u64() > Some(0)
            && entry(s, "primary/mid")["total"].as_u64() > Some(0)
    })
    .await;
    assert_eq!(healthy["heading"], "switchyard gateway", "{healthy:#}");
    assert_eq!(entry(&healthy, "primary/mid")["state"], "healthy");
    assert_eq!(entry(&healthy, "primary/mid")["phase"], "closed");
    assert!(entry(&healthy, "primary/mid")["linePaths"].as_u64() > Some(0));
    assert_eq!(entry(&healthy, "secondary/big")["phase"], "closed");
    let before = healthy["updates"].as_u64().unwrap();

    // The scripted fault: the large tier's only entry starts answering 503
    // (its canaries fail too), and refactors downshift to medium.
    secondary.set_default(Behaviour::Unavailable);
    let served = secondary.request_count();
    for _ in 0..3 {
        ask(&gateway, "switchyard", "refactor").await;
    }
    assert!(
        secondary.request_count() >= served + 2,
        "the fault was exercised"
    );

    // The page was loaded before the trip: only its polling can show it.
    let tripped = wait_for(&browser, "the breaker trip on secondary/big", |s| {
        entry(s, "secondary/big")["phase"] == "open"
            && entry(s, "secondary/big")["band"]
                .as_str()
                .is_some_and(|b| b.contains("open"))
            && s["canaries"].as_u64() > Some(0)
    })
    .await;
    assert!(tripped["updates"].as_u64().unwrap() > before, "{tripped:#}");
    assert_eq!(tripped["verdict"], "down", "{tripped:#}");
    assert!(
        tripped["headline"]
            .as_str()
            .unwrap()
            .contains("secondary/big"),
        "{tripped:#}"
    );
    assert_eq!(entry(&tripped, "secondary/big")["state"], "down");
    assert!(entry(&tripped, "secondary/big")["trips"].as_u64() >= Some(1));
    assert!(tripped["downshifts"].as_u64() > Some(0), "{tripped:#}");
    assert!(tripped["quota"].as_u64() > Some(0), "{tripped:#}");
    // What the gateway sent, per provider, from the outbound audit.
    assert_eq!(
        tripped["outbound"],
        json!(["primary", "secondary"]),
        "{tripped:#}"
    );
    // Nothing was fetched from anywhere but the gateway.
    let origin = tripped["origin"].as_str().unwrap();
    for resource in tripped["resources"].as_array().unwrap() {
        let resource = resource.as_str().unwrap();
        assert!(resource.starts_with(origin), "external request: {resource}");
    }

    browser
        .screenshot(&target_dir().join("dashboard-screenshot.png"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_bearer_token_the_page_reads_it_from_the_fragment() {
    require_chromium();
    let primary = FakeProvider::with_default(Behaviour::ok("Yes.")).await;
    let secondary = FakeProvider::with_default(Behaviour::ok("Yes.")).await;
    let gateway = gateway(
        &primary,
        &secondary,
        "[gateway]\ntoken_env = \"SY_GATEWAY_TOKEN\"\n",
    )
    .await;
    let status = reqwest::get(format!("{}/status", gateway.url))
        .await
        .unwrap();
    assert_eq!(status.status(), 401, "the token is enforced");

    let browser = Browser::start().await;
    browser.goto(&format!("{}/dashboard", gateway.url)).await;
    wait_for(&browser, "the page to ask for a token", |s| {
        s["verdict"] == "unauthorised"
    })
    .await;
    browser
        .goto(&format!(
            "{}/dashboard#token=dashboard-test-token",
            gateway.url
        ))
        .await;
    // A fragment change does not reload the page; the next poll uses the token.
    let state = wait_for(&browser, "data with the token", |s| {
        s["updates"].as_u64() > Some(0) && s["entries"]["primary/mid"].is_object()
    })
    .await;
    assert_ne!(state["verdict"], "unauthorised", "{state:#}");
}

/// The page is one self-contained document: nothing to load from elsewhere.
#[tokio::test]
async fn the_page_is_self_contained() {
    let primary = FakeProvider::start().await;
    let secondary = FakeProvider::start().await;
    let gateway = gateway(&primary, &secondary, "").await;
    let response = reqwest::get(format!("{}/dashboard", gateway.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(
        policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"),
        "{policy}"
    );
    let page = response.text().await.unwrap();
    // The SVG namespace is a name, not a request.
    let urls = page
        .replace("http://www.w3.org/2000/svg", "")
        .matches("http")
        .count();
    assert_eq!(urls, 0, "the page names no other origin");
    for external in [" src=", "@import", "url(", "<link rel=\"stylesheet\""] {
        assert!(!page.contains(external), "the page loads {external}");
    }
}
