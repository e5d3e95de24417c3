//! Test support shared by the integration tests: an LSP client that drives the
//! real `switchyard` binary over stdio, and the test model's location.
#![allow(dead_code)]

pub mod actions;
pub mod browser;
pub mod cpu_hog;
pub mod crossfile;
pub mod fake_provider;
pub mod files;
pub mod gateway;
pub mod gguf_split;
pub mod infilling;
pub mod lsp_client;
pub mod poll;
pub mod redis_server;
pub mod scenario;
pub mod secrets;
pub mod soak;
pub mod spread;
pub mod tcp_proxy;
pub mod timing;

use std::path::{Path, PathBuf};

use switchyard_engine::{EngineOptions, PromptBudget};
use switchyard_models::{CPU_DEFAULT_MODEL, Manifest};

/// A port nothing listens on now, for servers that cannot pick one and say
/// which (chromedriver, code-server, redis-server).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The path a tool's install script prints last (`editors/helix/build.sh`,
/// `editors/vscode/code-server.sh`), once it has installed or built the tool;
/// `None` when the script exits 2: it has nothing to build from here.
pub fn installed_tool(script: &str) -> Option<PathBuf> {
    let output = std::process::Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{script}: {e}"));
    if output.status.code() == Some(2) {
        return None;
    }
    assert!(output.status.success(), "{script} failed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    Some(PathBuf::from(
        stdout.lines().last().expect("the tool's path").trim(),
    ))
}

/// Where the test model is cached (`models/fetch-test-model.sh` puts it there).
pub fn model_dir() -> PathBuf {
    switchyard_models::model_dir()
}

/// A benchmark's setting: the environment variable `name`, else `default`.
pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The local engine on the test model, as the engine tests run it.
pub fn engine_options() -> EngineOptions {
    let entry = Manifest::embedded().get(CPU_DEFAULT_MODEL).unwrap();
    EngineOptions {
        model_name: entry.name.clone(),
        model_path: entry.path_in(&model_dir()),
        // One thread, not the count the engine would measure fastest here:
        // the same kernels on every machine, and tests running side by side
        // each keep a core.
        threads: 1,
        // The smallest budget the engine ever sizes to (256 tokens): it cannot
        // follow the measured speed, so every run sees the same prompts
        // however loaded the machine.
        budget: PromptBudget {
            input: 256,
            suffix: 64,
            repository: 0,
        },
        max_output_tokens: 200,
        reuse_cache: true,
        draft_tokens: 8,
        recent_prompts: 4,
        // Measured at every start: each test's engine its own.
        thread_memo: None,
    }
}

/// A small Rust file of about 1,000 tokens, used by completion tests.
pub const SAMPLE_RUST: &str = include_str!("sample.rs");

/// [`SAMPLE_RUST`] with an empty indented line opened inside a function body,
/// where the editor tests ask for a completion, and that line's number
/// (1-based).
pub fn sample_with_hole() -> (String, usize) {
    let anchor = "        let before = self.entries.len();\n";
    let at = SAMPLE_RUST.find(anchor).expect("anchor line in sample.rs") + anchor.len();
    let text = format!("{}        \n{}", &SAMPLE_RUST[..at], &SAMPLE_RUST[at..]);
    (text, SAMPLE_RUST[..at].lines().count() + 1)
}

/// The first word of a suggestion (or its first run of punctuation), as an
/// editor's accept-word takes it.
pub fn first_word(text: &str) -> String {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let first = text.chars().next().expect("a suggestion");
    text.chars()
        .take_while(|&c| word(c) == word(first) && !c.is_whitespace())
        .collect()
}

/// A character that does not go on with `text` (typed to ignore a suggestion).
pub fn other_than(text: &str) -> &'static str {
    if text.starts_with('#') { "@" } else { "#" }
}

/// `key` (`accepted`, `shown`, ...) summed over the groups of a `switchyard
/// stats --json` report that `group` picks.
pub fn stats_sum(
    stats: &serde_json::Value,
    key: &str,
    group: impl Fn(&serde_json::Value) -> bool,
) -> u64 {
    let groups = stats["groups"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    groups
        .iter()
        .filter(|g| group(g))
        .map(|g| g[key].as_u64().unwrap_or(0))
        .sum()
}

/// Fails if the completion stats file in `state_dir` holds a line of any
/// suggestion in `shown` (long enough not to be JSON's own text; an editor's
/// `…` of a cut label left out).
pub fn assert_no_suggestion_text(state_dir: &Path, shown: &[String]) {
    let file = std::fs::read_to_string(state_dir.join("completions.jsonl"))
        .expect("the completion stats file");
    let lines: Vec<&str> = shown
        .iter()
        .flat_map(|text| text.lines())
        .map(|line| line.trim().trim_end_matches('…').trim())
        .filter(|line| line.len() >= 6)
        .collect();
    assert!(
        !lines.is_empty(),
        "no suggestion line to look for in {shown:?}"
    );
    for line in lines {
        assert!(
            !file.contains(line),
            "the stats file holds {line:?}:\n{file}"
        );
    }
}

/// What `switchyard stats --json` says of the completion stats in `state_dir`.
#[allow(dead_code)] // not every test binary reads them
pub fn completion_stats(state_dir: &Path) -> serde_json::Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["stats", "--json", "--since", "1h"])
        .env("SWITCHYARD_STATE_DIR", state_dir)
        .output()
        .expect("running switchyard stats");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("stats JSON")
}
