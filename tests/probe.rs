//! `switchyard probe`: the real binary against fake providers on loopback, as
//! cron runs it; and `probe --local` against the real test model.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use support::fake_provider::{Behaviour, FakeProvider, two_providers_toml};
use tokio::process::Command;

const KEY: &str = "sk-test-probe-0123456789abcdef";
const TOKEN: &str = "SWITCHYARD-PROBE-7Q";

/// A config home and state directory for one test.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    /// Chains over `primary` and `secondary`; `extra` is TOML appended as it is.
    fn new(primary: &FakeProvider, secondary: &FakeProvider, extra: &str) -> Home {
        let tiers = r#"
[tiers]
large = ["primary/big"]
medium = ["primary/mid", "secondary/gpt-test", "primary/big"]
small = ["local"]
"#;
        Home::with_config(&format!(
            "{}{tiers}{extra}",
            two_providers_toml(primary, secondary, "SY_KEY")
        ))
    }

    fn with_config(config: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        Home { dir }
    }

    fn history(&self) -> PathBuf {
        self.dir.path().join("state/probes.jsonl")
    }

    fn history_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.history())
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    async fn probe(&self, args: &[&str]) -> Output {
        self.probe_with_models(args, &self.dir.path().join("models"))
            .await
    }

    async fn probe_with_models(&self, args: &[&str], model_dir: &Path) -> Output {
        let home = self.dir.path();
        let run = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .arg("probe")
            .args(args)
            .args(["--log-file", home.join("probe.log").to_str().unwrap()])
            .env("SWITCHYARD_CONFIG", home.join("config.toml"))
            .env("SWITCHYARD_STATE_DIR", home.join("state"))
            .env("SWITCHYARD_MODEL_DIR", model_dir)
            .env("SY_KEY", KEY)
            .env_remove("SY_MISSING_KEY")
            .kill_on_drop(true)
            .output();
        tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("the probe finishes")
            .unwrap()
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> Value {
    let text = stdout(output);
    assert_eq!(
        text.lines().count(),
        1,
        "one JSON line for cron logs: {text}"
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The table row of `entry`.
fn row<'a>(table: &'a str, entry: &str) -> &'a str {
    table
        .lines()
        .find(|line| line.starts_with(&format!("{entry} ")))
        .unwrap_or_else(|| panic!("no row for {entry} in:\n{table}"))
}

async fn healthy_pair() -> (FakeProvider, FakeProvider) {
    let answer = format!("Sure: {TOKEN}");
    (
        FakeProvider::with_default(Behaviour::ok(&answer)).await,
        FakeProvider::with_default(Behaviour::ok(&answer)).await,
    )
}

#[tokio::test]
async fn healthy_entries_exit_0_and_are_recorded_in_a_private_history() {
    let (primary, secondary) = healthy_pair().await;
    let home = Home::new(&primary, &secondary, "");

    let output = home.probe(&[]).await;
    let table = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{table}{}", stderr(&output));
    for entry in ["primary/big", "primary/mid", "secondary/gpt-test"] {
        assert!(row(&table, entry).contains(" ok "), "{table}");
    }
    assert!(
        table.lines().last().unwrap().starts_with("healthy"),
        "{table}"
    );
    // Distinct entries only: primary/big is in two chains.
    assert_eq!(primary.request_count(), 2);
    assert_eq!(secondary.request_count(), 1);
    let sent = &secondary.requests()[0].body;
    assert_eq!(sent["model"], "gpt-test", "{sent}");
    assert!(sent.to_string().contains(TOKEN), "{sent}");

    let lines = home.history_lines();
    assert_eq!(lines.len(), 3);
    let line = lines.iter().find(|l| l["model"] == "gpt-test").unwrap();
    assert_eq!(line["provider"], "secondary");
    assert_eq!(line["ok"], true);
    assert!(line["at"].as_u64().unwrap() > 1_600_000_000_000, "{line}");
    assert!(
        line["ttft_ms"].is_u64() && line["total_ms"].is_u64(),
        "{line}"
    );
    assert!(line["error"].is_null(), "{line}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.history())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    home.probe(&[]).await;
    assert_eq!(home.history_lines().len(), 6, "appended, not rewritten");
}

#[tokio::test]
async fn a_wrong_answer_exits_1() {
    let (primary, _) = healthy_pair().await;
    let secondary = FakeProvider::with_default(Behaviour::ok("I'd rather not.")).await;
    let home = Home::new(&primary, &secondary, "");

    let output = home.probe(&[]).await;
    let table = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{table}");
    assert!(
        row(&table, "secondary/gpt-test").contains("wrong answer"),
        "{table}"
    );
    assert!(row(&table, "primary/mid").contains(" ok "), "{table}");
    let last = table.lines().last().unwrap();
    assert!(
        last.starts_with("UNHEALTHY") && last.contains("secondary/gpt-test"),
        "{table}"
    );
}

#[tokio::test]
async fn a_provider_that_is_down_exits_1_with_its_error() {
    let primary = FakeProvider::with_default(Behaviour::Unavailable).await;
    let (_, secondary) = healthy_pair().await;
    let home = Home::new(&primary, &secondary, "");

    let output = home.probe(&[]).await;
    let table = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{table}");
    assert!(row(&table, "primary/mid").contains("HTTP 503"), "{table}");
    assert!(
        row(&table, "secondary/gpt-test").contains(" ok "),
        "{table}"
    );
    let failed = home
        .history_lines()
        .into_iter()
        .find(|l| l["model"] == "mid")
        .unwrap();
    assert_eq!(failed["ok"], false);
    assert!(
        failed["error"].as_str().unwrap().contains("503"),
        "{failed}"
    );
}

#[tokio::test]
async fn a_slow_entry_over_the_ceiling_exits_1_naming_its_p95() {
    let (primary, _) = healthy_pair().await;
    let secondary = FakeProvider::with_default(Behaviour::SlowFirstToken {
        delay: Duration::from_millis(700),
        text: TOKEN.into(),
    })
    .await;
    // The ceiling comes from the explain task's profile.
    let home = Home::new(
        &primary,
        &secondary,
        "[tasks.explain]\nfirst_token_ms = 300\ntotal_ms = 5000\n",
    );

    let output = home.probe(&[]).await;
    let table = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{table}");
    // The answer was right, just slow: measured, not cut off at the ceiling.
    assert!(
        row(&table, "secondary/gpt-test").contains(" ok "),
        "{table}"
    );
    let last = table.lines().last().unwrap();
    assert!(
        last.contains("secondary/gpt-test: p95 TTFT") && last.contains("300 ms ceiling"),
        "{table}"
    );
    assert!(!last.contains("primary/"), "{table}");

    // --ceiling-ms overrides the total ceiling.
    let output = home
        .probe(&["--json", "--ceiling-ms", "100", "--ttft-ceiling-ms", "5000"])
        .await;
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report = json(&output);
    assert_eq!(report["ceiling"]["total_ms"], 100, "{report}");
    let slow = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["entry"] == "secondary/gpt-test")
        .unwrap();
    assert!(slow["p95_total_ms"].as_u64().unwrap() >= 700, "{slow}");
    assert_eq!(slow["p95_samples"], 2, "this probe and the one before");
    assert!(
        slow["over_ceiling"][0]
            .as_str()
            .unwrap()
            .contains("p95 total"),
        "{slow}"
    );
}

#[tokio::test]
async fn a_config_error_exits_2() {
    let home = Home::with_config("[tiers]\nlarge = [\"nowhere/model\"]\n");
    let output = home.probe(&[]).await;
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("tiers.large"),
        "{}",
        stderr(&output)
    );

    let broken = Home::with_config("[tiers\n");
    let output = broken.probe(&["--json"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(json(&output)["ok"], false);
    assert!(
        !broken.history().exists(),
        "nothing probed, nothing recorded"
    );
}

#[tokio::test]
async fn provider_limits_the_probe_to_one_provider() {
    let (primary, secondary) = healthy_pair().await;
    let home = Home::new(&primary, &secondary, "");

    let output = home.probe(&["--provider", "secondary"]).await;
    let table = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{table}");
    assert_eq!(primary.request_count(), 0);
    assert_eq!(secondary.request_count(), 1);
    assert!(!table.contains("primary/"), "{table}");

    let unknown = home.probe(&["--provider", "nope"]).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("nope"), "{}", stderr(&unknown));
}

#[tokio::test]
async fn json_is_one_object_with_results_and_ok() {
    let primary = FakeProvider::with_default(Behaviour::ServerError).await;
    let (_, secondary) = healthy_pair().await;
    let home = Home::new(&primary, &secondary, "");

    let output = home.probe(&["--json"]).await;
    assert_eq!(output.status.code(), Some(1));
    let report = json(&output);
    assert_eq!(report["ok"], false, "{report}");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{report}");
    let healthy = results
        .iter()
        .find(|r| r["entry"] == "secondary/gpt-test")
        .unwrap();
    assert_eq!(healthy["status"], "ok", "{healthy}");
    assert_eq!(healthy["ok"], true);
    assert_eq!(healthy["provider"], "secondary");
    assert_eq!(healthy["model"], "gpt-test");
    for field in ["ttft_ms", "total_ms", "p95_ttft_ms", "p95_total_ms"] {
        assert!(healthy[field].is_u64(), "{field}: {healthy}");
    }
    let failed = results
        .iter()
        .find(|r| r["entry"] == "primary/mid")
        .unwrap();
    assert_eq!(failed["status"], "error", "{failed}");
    assert_eq!(failed["ok"], false);
    assert!(
        failed["error"].as_str().unwrap().contains("500"),
        "{failed}"
    );
}

#[tokio::test]
async fn an_entry_without_its_key_is_skipped_and_named() {
    let (primary, secondary) = healthy_pair().await;
    let extra = FakeProvider::start().await;
    let config = format!(
        r#"{}
[providers.unkeyed]
kind = "openai"
base_url = "{}"
api_key_env = "SY_MISSING_KEY"

[tiers]
large = ["primary/big"]
medium = ["secondary/gpt-test"]
small = ["unkeyed/tiny"]
"#,
        two_providers_toml(&primary, &secondary, "SY_KEY"),
        extra.openai_url()
    );
    let home = Home::with_config(&config);

    let output = home.probe(&[]).await;
    let table = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{table}{}", stderr(&output));
    assert!(
        table.contains("skipped: unkeyed/tiny: no API key in $SY_MISSING_KEY"),
        "{table}"
    );
    assert_eq!(extra.request_count(), 0);

    let report = json(&home.probe(&["--json"]).await);
    let skipped = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["entry"] == "unkeyed/tiny")
        .unwrap()
        .clone();
    assert_eq!(skipped["status"], "skipped", "{skipped}");
    assert_eq!(report["ok"], true);

    let only_unkeyed = home.probe(&["--provider", "unkeyed"]).await;
    assert_eq!(only_unkeyed.status.code(), Some(2), "nothing left to probe");
}

#[tokio::test]
async fn an_api_key_is_never_printed_or_recorded() {
    // The fake quotes the key back in its 401 body.
    let primary = FakeProvider::with_default(Behaviour::Unauthorized).await;
    let secondary = FakeProvider::with_default(Behaviour::Unauthorized).await;
    let home = Home::new(&primary, &secondary, "");

    for args in [&[][..], &["--json"][..]] {
        let output = home.probe(args).await;
        assert_eq!(output.status.code(), Some(1));
        assert!(!stdout(&output).contains(KEY), "{}", stdout(&output));
        assert!(!stderr(&output).contains(KEY), "{}", stderr(&output));
    }
    let history = std::fs::read_to_string(home.history()).unwrap();
    assert!(history.contains("401"), "{history}");
    assert!(!history.contains(KEY), "{history}");
}

#[tokio::test]
async fn local_completes_with_the_real_model_and_reports_its_latency() {
    // A roomy budget: the check is that the path works end to end; the 2-core
    // test machine runs other tests alongside.
    let home = Home::with_config("[autocomplete]\nbudget_ms = 5000\n");
    let output = home
        .probe_with_models(&["--local", "--json"], &support::model_dir())
        .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    let report = json(&output);
    assert_eq!(report["ok"], true, "{report}");
    let local = &report["results"][0];
    assert!(local["latency_ms"].as_u64().unwrap() <= 5000, "{local}");
    assert!(local["load_ms"].is_u64(), "{local}");
    assert!(
        !local["completion"].as_str().unwrap().trim().is_empty(),
        "{local}"
    );
    let recorded = home.history_lines();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["provider"], "local");
}

#[tokio::test]
async fn local_without_the_model_exits_2_naming_the_pull_command() {
    let home = Home::with_config("");
    let empty = tempfile::tempdir().unwrap();
    let output = home.probe_with_models(&["--local"], empty.path()).await;
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("switchyard models pull"),
        "{}",
        stderr(&output)
    );
    assert!(
        std::fs::read_dir(empty.path()).unwrap().next().is_none(),
        "a probe never downloads"
    );
}
