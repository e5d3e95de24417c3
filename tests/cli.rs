//! The command line: `complete`, `config check`, `models`.

mod support;

use std::process::{Command, Output};

fn switchyard(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["--log-file", home.path().join("log").to_str().unwrap()])
        .args(args)
        .env("SWITCHYARD_MODEL_DIR", support::model_dir())
        .env("SWITCHYARD_CONFIG", home.path().join("config.toml"))
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn complete_prints_the_text_the_model_and_the_latency() {
    // The same prompt on every machine (the smallest input budget the engine
    // sizes to, one inference thread) and the longest budget there is: what
    // is checked is what is printed, not how fast.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[local]\nthreads = 1\n[autocomplete]\ninput_tokens = 256\nbudget_ms = 10000\n",
    )
    .unwrap();
    let pinned = [("SWITCHYARD_CONFIG", config.to_str().unwrap())];
    let output = switchyard(
        &["complete", "--json", "demo/complete-me.rs:10:41"],
        &pinned,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(report["model"], "qwen2.5-coder-0.5b-instruct");
    assert!(
        report["text"]
            .as_str()
            .is_some_and(|t| !t.trim().is_empty()),
        "{report}"
    );
    assert!(report["latency_ms"].as_f64().is_some());
    assert_eq!(report["budget_ms"], 10000, "the configured budget");

    let human = switchyard(&["complete", "demo/complete-me.rs:10:41"], &pinned);
    let text = stdout(&human);
    assert!(
        text.contains("--- model qwen2.5-coder-0.5b-instruct | latency"),
        "{text}"
    );
}

#[test]
fn complete_rejects_a_location_past_the_end() {
    let output = switchyard(&["complete", "demo/complete-me.rs:999:1"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("line 999 is past the end"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn config_check_names_the_file_the_key_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[autocomplete]\noutput_tokens = 0\n").unwrap();
    let output = switchyard(&["config", "check", path.to_str().unwrap()], &[]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains(path.to_str().unwrap())
            && err.contains("autocomplete.output_tokens")
            && err.contains("between 1 and 4096"),
        "{err}"
    );
}

#[test]
fn config_check_prints_the_effective_configuration_of_a_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good.toml");
    std::fs::write(&path, "[autocomplete]\nbudget_ms = 800\n").unwrap();
    let output = switchyard(&["config", "check", path.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let effective: toml::Value = toml::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        effective["autocomplete"]["budget_ms"].as_integer(),
        Some(800)
    );
    assert_eq!(
        effective["autocomplete"]["input_tokens"].as_integer(),
        Some(2000)
    );
}

#[test]
fn models_list_shows_the_default_and_whether_it_is_downloaded() {
    let output = switchyard(&["models", "list"], &[]);
    assert!(output.status.success());
    let text = stdout(&output);
    assert!(
        text.contains("qwen2.5-coder-0.5b-instruct (default here)"),
        "{text}"
    );
    assert!(text.contains("| downloaded"), "{text}");
}

#[test]
fn models_verify_reports_a_corrupt_file() {
    let dir = tempfile::tempdir().unwrap();
    // Under the file's former name: caches from before the rename are read.
    std::fs::write(
        dir.path().join("qwen2.5-coder-0.5b-instruct-q8_0.gguf"),
        b"GGUF truncated",
    )
    .unwrap();
    let output = switchyard(
        &["models", "verify"],
        &[("SWITCHYARD_MODEL_DIR", dir.path().to_str().unwrap())],
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("qwen2.5-coder-0.5b-instruct-q8_0.gguf"),
        "{}",
        stderr(&output)
    );
}

/// `models du` shows what each model takes, a download in progress
/// included; `models rm` frees it and leaves the others.
#[test]
fn models_du_and_rm_account_for_and_free_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let name = "qwen2.5-coder-1.5b-instruct";
    let file = dir
        .path()
        .join("qwen2.5-coder-1.5b-instruct-q8_0.gguf.partial");
    std::fs::write(&file, vec![0u8; 3_000_000]).unwrap();
    let kept = dir.path().join("notes.txt");
    std::fs::write(&kept, vec![0u8; 2_000_000]).unwrap();
    let models = [("SWITCHYARD_MODEL_DIR", dir.path().to_str().unwrap())];
    let du = switchyard(&["models", "du"], &models);
    assert!(du.status.success(), "{}", stderr(&du));
    let listed = stdout(&du);
    assert!(listed.contains(&format!("3 MB  {name}")), "{listed}");
    assert!(listed.contains("5 MB  total"), "{listed}");
    let rm = switchyard(&["models", "rm", name], &models);
    assert!(rm.status.success(), "{}", stderr(&rm));
    assert!(stdout(&rm).contains("3 MB freed"), "{}", stdout(&rm));
    assert!(!file.exists() && kept.exists());
    let again = stdout(&switchyard(&["models", "du"], &models));
    assert!(again.contains("2 MB  total"), "{again}");
}
