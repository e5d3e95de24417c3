//! `switchyard doctor` through the binary: ready on a machine with the test
//! model, a valid configuration and a writable state directory (exit 0);
//! exit 1 naming the fix for each thing that keeps it from serving (no
//! model, a bad config key, a state directory it cannot write).

mod support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `switchyard doctor --json` with `config` (TOML) as the config file
/// and the given model and state directories.
fn doctor(home: &Path, config: &str, model_dir: &Path, state_dir: &Path) -> (Output, Value) {
    let file = home.join("config.toml");
    std::fs::write(&file, config).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["--log-file", home.join("log").to_str().unwrap()])
        .args(["--config", file.to_str().unwrap(), "doctor", "--json"])
        .env("SWITCHYARD_MODEL_DIR", model_dir)
        .env("SWITCHYARD_STATE_DIR", state_dir)
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&output.stderr)));
    (output, report)
}

/// The checks named `name`, as (level, detail, fix).
fn checks<'a>(report: &'a Value, name: &str) -> Vec<(&'a str, &'a str, &'a str)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == name)
        .map(|c| {
            let text = |key: &str| c[key].as_str().unwrap_or_default();
            (text("level"), text("detail"), text("fix"))
        })
        .collect()
}

/// The one error the report has, as (name, detail, fix).
fn the_error(output: &Output, report: &Value) -> (String, String, String) {
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert_eq!(report["ready"], false, "{report}");
    let errors: Vec<&Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["level"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{report}");
    let text = |key: &str| errors[0][key].as_str().unwrap_or_default().to_owned();
    (text("name"), text("detail"), text("fix"))
}

#[test]
fn a_ready_machine_passes_and_says_what_it_runs_on() {
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join("state");
    let config = "[tiers]\nlarge = [\"anthropic/claude\"]\nmedium = []\nsmall = []\n";
    let (output, report) = doctor(home.path(), config, &support::model_dir(), &state);
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert_eq!(report["ready"], true, "{report}");
    assert_eq!(report["version"], env!("CARGO_PKG_VERSION"));
    let model = checks(&report, "model");
    assert_eq!(model[0].0, "ok", "{report}");
    assert!(model[0].1.contains("SHA-256 checked"), "{report}");
    let engine = checks(&report, "engine");
    assert_eq!(engine[0].0, "ok", "{report}");
    assert!(engine[0].1.contains("thread(s)"), "{report}");
    assert!(
        checks(&report, "state")[0].1.contains("is writable"),
        "{report}"
    );
    // A missing key is worth knowing, not a reason to refuse: the local model serves.
    let keys = checks(&report, "providers");
    assert_eq!(
        keys,
        [(
            "warn",
            "anthropic: no key in $ANTHROPIC_API_KEY; its entries are skipped",
            "export ANTHROPIC_API_KEY=... where switchyard starts"
        )]
    );
}

#[test]
fn no_model_is_an_error_naming_the_pull() {
    let home = tempfile::tempdir().unwrap();
    let empty = home.path().join("models");
    let (output, report) = doctor(home.path(), "", &empty, &home.path().join("state"));
    let (name, detail, fix) = the_error(&output, &report);
    assert_eq!(name, "model");
    assert!(detail.contains("not downloaded"), "{detail}");
    assert_eq!(fix, "switchyard models pull qwen2.5-coder-0.5b-instruct");
    assert!(
        checks(&report, "engine").is_empty(),
        "no engine without a model"
    );
}

#[test]
fn a_bad_config_key_is_an_error_naming_the_file_and_the_key() {
    let home = tempfile::tempdir().unwrap();
    let misspelt = "[autocomplete]\nbudget_msec = 800\n";
    let state = home.path().join("state");
    let (output, report) = doctor(home.path(), misspelt, &support::model_dir(), &state);
    let (name, detail, fix) = the_error(&output, &report);
    assert_eq!(name, "config");
    assert!(detail.contains("config.toml"), "{detail}");
    assert!(detail.contains("budget_msec"), "{detail}");
    assert!(fix.contains("write `autocomplete.budget_ms`"), "{fix}");
}

#[test]
fn a_state_directory_it_cannot_write_is_an_error_naming_the_fix() {
    let home = tempfile::tempdir().unwrap();
    // Below a plain file: no user, root included, can make it a folder.
    let file = home.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let state = file.join("state");
    let (output, report) = doctor(home.path(), "", &support::model_dir(), &state);
    let (name, detail, fix) = the_error(&output, &report);
    assert_eq!(name, "state");
    assert!(detail.contains("cannot write"), "{detail}");
    assert!(fix.contains("SWITCHYARD_STATE_DIR"), "{fix}");
}
