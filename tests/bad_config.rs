//! A bad configuration never sends more. A config file keeps the user's
//! privacy settings (local-only, a path rule, a provider behind its own
//! base URL) next to one key an earlier release removed
//! (`resilience.breaker.max_cooldown_ms`): every front end (the language
//! server at start and on `didChangeConfiguration`, the gateway, `switchyard
//! status`) names the key and applies the rest, so local-only stays on, the
//! path rule stays and requests reach only the configured base URL. Where a
//! setting that decides what leaves the machine, or the whole file, cannot
//! be read, only the local model serves and the status says why.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use support::actions::{DOC, URI, command, whole_function};
use support::fake_provider::FakeProvider;
use support::gateway::GatewayProcess;
use support::lsp_client::{LspClient, ServerOptions};

const KEY: &str = "sk-ant-test-bad-config-0123456789";
const STALE_KEY: &str = "resilience.breaker.max_cooldown_ms";
const STALE: &str = "\n[resilience.breaker]\nmax_cooldown_ms = 600000\nfailures = 4\n";
const BILLING: &str = "file:///work/billing.rs";
const QUESTION: &str = "What does HashMap::entry do?";

/// The user's settings: local-only as given, a path rule, the Anthropic
/// provider behind `fake`, plus `extra`.
fn config_text(fake: &FakeProvider, local_only: bool, extra: &str) -> String {
    format!(
        "local_only = {local_only}\n\n[local]\nauto_pull = false\n\n[privacy]\nlocal_only_paths = [\"billing.rs\"]\n\n\
         [providers.anthropic]\nkind = \"anthropic\"\nbase_url = \"{}\"\n\n\
         [tiers]\nlarge = []\nmedium = [\"anthropic/claude-haiku-4-5\"]\nsmall = []\n{extra}",
        fake.anthropic_url()
    )
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A fake provider and a config file (in a directory kept as long as the
/// result) written by `text` for it.
async fn with_file(
    text: impl FnOnce(&FakeProvider) -> String,
) -> (FakeProvider, tempfile::TempDir, PathBuf) {
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &text(&fake));
    (fake, dir, path)
}

async fn server(config: &Path) -> LspClient {
    let options = ServerOptions {
        model_dir: tempfile::tempdir().unwrap().keep(),
        args: vec!["--config".into(), config.to_str().unwrap().into()],
        env: vec![("ANTHROPIC_API_KEY".into(), KEY.into())],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    client.initialize(json!({}), json!({})).await;
    client.open(URI, DOC).await;
    client.open(BILLING, DOC).await;
    client
}

async fn status(client: &mut LspClient) -> Value {
    command(client, "switchyard.status", json!([])).await["result"].clone()
}

/// The status once `done` holds for it (a pushed change is applied while
/// other requests are served), or the last one after 20 s.
async fn status_once(client: &mut LspClient, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let report = status(client).await;
        if done(&report) || tokio::time::Instant::now() > deadline {
            return report;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn explain(client: &mut LspClient, uri: &str) -> Value {
    command(client, "switchyard.explain", json!([uri, whole_function()])).await
}

async fn set_local_only(client: &mut LspClient, on: bool) -> Value {
    command(client, "switchyard.setLocalOnly", json!([on])).await
}

/// The messages the editor was shown.
fn shown(client: &LspClient) -> Vec<String> {
    client
        .seen
        .iter()
        .filter(|m| m["method"] == "window/showMessage")
        .filter_map(|m| m["params"]["message"].as_str().map(str::to_owned))
        .collect()
}

/// Only the local model serves, and the status (`/status`, `switchyard
/// status --json`) says the config file is why.
fn kept_local_for_the_file(report: &Value) {
    assert_eq!(report["localOnly"], true, "{report}");
    assert!(
        report["localOnlyReason"]
            .as_str()
            .is_some_and(|r| r.contains("config.toml")),
        "{report}"
    );
}

/// The privacy settings hold: local-only is on and nothing is sent; off, an
/// explain goes to the configured base URL and the path rule keeps its
/// document home.
async fn privacy_settings_hold(client: &mut LspClient, fake: &FakeProvider) {
    let report = status_once(client, |r| r["localOnly"] == true).await;
    assert_eq!(report["localOnly"], true, "{report}");
    assert!(explain(client, URI).await.get("error").is_some());
    assert_eq!(fake.request_count(), 0, "local-only: nothing sent");

    assert_eq!(
        set_local_only(client, false).await["result"]["localOnly"],
        false
    );
    let served = explain(client, URI).await;
    assert_eq!(served["result"]["provider"], "anthropic", "{served}");
    assert_eq!(
        fake.user_request_count(),
        1,
        "served at the configured base_url"
    );

    let refused = explain(client, BILLING).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("billing.rs"),
        "the path rule holds: {refused}"
    );
    assert_eq!(
        fake.user_request_count(),
        1,
        "nothing of billing.rs was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_at_start_is_named_and_the_privacy_settings_hold() {
    let (fake, _dir, path) = with_file(|f| config_text(f, true, STALE)).await;
    let mut client = server(&path).await;
    privacy_settings_hold(&mut client, &fake).await;
    let messages = shown(&client);
    let named = messages.iter().find(|m| m.contains(STALE_KEY));
    let named = named.unwrap_or_else(|| panic!("no message names the key: {messages:?}"));
    assert!(
        named.contains("removed") && named.contains("config.toml"),
        "{named}"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_pushed_by_the_editor_is_named_and_the_privacy_settings_hold() {
    let (fake, _dir, path) = with_file(|f| config_text(f, false, "")).await;
    let mut client = server(&path).await;
    // The editor turns local-only on, next to a key an older release had.
    let settings = json!({"switchyard": {
        "localOnly": true,
        "resilience": {"breaker": {"max_cooldown_ms": 600000}},
        "autocomplete": {"budget_ms": 900}
    }});
    client
        .notify(
            "workspace/didChangeConfiguration",
            json!({"settings": settings}),
        )
        .await;
    privacy_settings_hold(&mut client, &fake).await;
    assert!(
        shown(&client).iter().any(|m| m.contains(STALE_KEY)),
        "{:?}",
        shown(&client)
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_privacy_setting_that_cannot_be_read_keeps_everything_local_until_it_can() {
    let (fake, _dir, path) = with_file(|f| config_text(f, false, "")).await;
    let mut client = server(&path).await;
    // A slip in a privacy key, pushed by the editor.
    let settings = json!({"switchyard": {"privacy": {"local_only_path": ["src/**"]}}});
    client
        .notify(
            "workspace/didChangeConfiguration",
            json!({"settings": settings}),
        )
        .await;
    let report = status_once(&mut client, |r| r["localOnlyReason"].is_string()).await;
    assert_eq!(report["localOnly"], true, "{report}");
    let reason = report["localOnlyReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("privacy.local_only_path")
            && reason.contains("did you mean `local_only_paths`"),
        "{report}"
    );
    let refused = set_local_only(&mut client, false).await;
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(explain(&mut client, URI).await.get("error").is_some());
    assert_eq!(
        fake.request_count(),
        0,
        "nothing leaves while it cannot be read"
    );

    // Mended: the user's own settings apply again.
    client
        .notify(
            "workspace/didChangeConfiguration",
            json!({"settings": {"switchyard": {}}}),
        )
        .await;
    let report = status(&mut client).await;
    assert_eq!(
        (
            report["localOnly"].clone(),
            report["localOnlyReason"].clone()
        ),
        (json!(false), Value::Null)
    );
    assert_eq!(
        explain(&mut client, URI).await["result"]["provider"],
        "anthropic"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_cannot_be_read_keeps_everything_local_and_says_why() {
    let broken = |f: &FakeProvider| config_text(f, false, "").replace("[privacy]", "[privacy");
    let (fake, _dir, path) = with_file(broken).await;
    let mut client = server(&path).await;
    let report = status(&mut client).await;
    assert_eq!(report["localOnly"], true, "{report}");
    let reason = report["localOnlyReason"].as_str().unwrap_or_default();
    assert!(reason.contains(path.to_str().unwrap()), "{report}");
    assert!(
        set_local_only(&mut client, false)
            .await
            .get("error")
            .is_some()
    );
    assert!(explain(&mut client, URI).await.get("error").is_some());
    assert_eq!(fake.request_count(), 0);
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_with_a_removed_key_names_it_and_applies_the_rest() {
    let fake = FakeProvider::start().await;
    let env = [("ANTHROPIC_API_KEY", KEY)];
    // Local-only as the file says: nothing sent.
    let local = GatewayProcess::start(&config_text(&fake, true, STALE), &env).await;
    assert_eq!(local.status().await["localOnly"], true);
    let (status, _) = local.chat(QUESTION).await;
    assert_ne!(status, 200);
    assert_eq!(fake.request_count(), 0);
    assert!(local.log().contains(STALE_KEY), "the log names the key");
    // Remote allowed: served at the configured base URL.
    let open = GatewayProcess::start(&config_text(&fake, false, STALE), &env).await;
    let (status, body) = open.chat(QUESTION).await;
    assert_eq!(
        (status, body["model"].as_str()),
        (200, Some("anthropic/claude-haiku-4-5")),
        "{body}"
    );
    assert_eq!(fake.user_request_count(), 1);
    // A file that cannot be read: everything local, and the status says why.
    let broken = config_text(&fake, false, "").replace("[privacy]", "[privacy");
    let closed = GatewayProcess::start(&broken, &env).await;
    kept_local_for_the_file(&closed.status().await);
    assert_ne!(closed.chat(QUESTION).await.0, 200);
    assert_eq!(fake.user_request_count(), 1);
}

fn switchyard_status(config: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["--config", config.to_str().unwrap(), "status", "--json"])
        .env("SWITCHYARD_STATE_DIR", config.with_file_name("state"))
        .env("ANTHROPIC_API_KEY", KEY)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchyard_status_reads_the_file_as_the_server_does() {
    let (_fake, _dir, path) = with_file(|f| config_text(f, true, STALE)).await;
    let output = switchyard_status(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(STALE_KEY), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["localOnly"], true, "{report}");

    std::fs::write(&path, "local_only = false\n[privacy\n").unwrap();
    let output = switchyard_status(&path);
    assert!(output.status.success());
    kept_local_for_the_file(&serde_json::from_slice(&output.stdout).unwrap());
}
