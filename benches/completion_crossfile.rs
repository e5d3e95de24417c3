//! Cross-file completion: does repository context make the model know what
//! another file of the crate defines? Tasks from pinned crates.io crates (see
//! `tests/support/crossfile.rs`), through the language server the way an
//! editor drives it, with repository context on and off in the same run:
//! exact match of the masked line, how often the answer names the identifier
//! only the other file defines, empty answers with their reasons, latency.
//!
//! Run: `cargo bench --bench completion_crossfile` (fetch the model first with
//! `models/fetch-test-model.sh`). Settings (environment):
//! - `CROSSFILE_TASKS` (default 8): tasks per crate; `CROSSFILE_SEED` (default 0).
//! - `CROSSFILE_BUDGETS_MS=1000,10000`: the autocomplete budgets to run.
//! - `CROSSFILE_REPOSITORY=1024,0`: `autocomplete.repository_tokens` values
//!   (0 turns repository context off).
//! - `CROSSFILE_READING_MS=15000`: time spent reading the definition before
//!   moving (the repository context changes only after a pause as long as its
//!   refill takes: several seconds on a slow machine).
//! - `CROSSFILE_IDLE_MS=2000`: idle time between the cursor landing and the request.
//! - `CROSSFILE_OUT`: a directory for each attempt (JSON lines) and server logs.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::crossfile::{self, CRATES};
use support::env_or;
use support::infilling::{self, Attempt};

fn list(name: &str, default: &str) -> Vec<u64> {
    env_or(name, default)
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: numbers"))
        })
        .collect()
}

async fn run(
    tasks: &[(&'static str, crossfile::Task)],
    budget_ms: u64,
    repository_tokens: u64,
    reading: Duration,
    idle: Duration,
) -> Vec<Attempt> {
    let autocomplete = json!({"budget_ms": budget_ms, "repository_tokens": repository_tokens});
    let mut client = infilling::server(autocomplete).await;
    let mut attempts = Vec::new();
    for (name, task) in tasks {
        attempts.push(crossfile::attempt(&mut client, task, name, reading, idle).await);
    }
    if let Ok(dir) = std::env::var("CROSSFILE_OUT") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("CROSSFILE_OUT can be created");
        let log = dir.join(format!("server-{budget_ms}-{repository_tokens}.log"));
        std::fs::write(log, client.log()).expect("CROSSFILE_OUT is writable");
        let lines: Vec<String> = attempts
            .iter()
            .map(|a| json!({"task_id": a.task_id, "completion": a.completion, "latency_ms": a.latency.as_millis(), "empty_reason": a.empty_reason, "exact": a.exact}).to_string())
            .collect();
        let path = dir.join(format!("crossfile-{budget_ms}-{repository_tokens}.jsonl"));
        std::fs::write(path, lines.join("\n")).expect("CROSSFILE_OUT is writable");
    }
    client.shutdown().await;
    attempts
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let per_crate: usize = env_or("CROSSFILE_TASKS", "8")
        .parse()
        .expect("CROSSFILE_TASKS");
    let seed: u64 = env_or("CROSSFILE_SEED", "0")
        .parse()
        .expect("CROSSFILE_SEED");
    let work = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-crates");
    let mut tasks = Vec::new();
    for krate in &CRATES {
        let root = krate.sources(&work);
        for task in crossfile::tasks(krate.name, &root, per_crate, seed) {
            tasks.push((krate.name, task));
        }
    }
    if let Ok(dir) = std::env::var("CROSSFILE_OUT") {
        std::fs::create_dir_all(&dir).expect("CROSSFILE_OUT can be created");
        let lines: Vec<String> = tasks
            .iter()
            .map(|(_, t)| json!({"task_id": t.id, "defined_in": t.definition_path, "identifier": t.identifier, "expected": t.expected}).to_string())
            .collect();
        std::fs::write(PathBuf::from(dir).join("tasks.jsonl"), lines.join("\n"))
            .expect("CROSSFILE_OUT is writable");
    }
    let reading = Duration::from_millis(list("CROSSFILE_READING_MS", "15000")[0]);
    let idle = Duration::from_millis(list("CROSSFILE_IDLE_MS", "2000")[0]);
    let crates: Vec<String> = CRATES
        .iter()
        .map(|c| format!("{} {}", c.name, c.version))
        .collect();
    println!(
        "cross-file completion: {} tasks ({per_crate} per crate, seed {seed}) from {}; {} ms reading the definition, {} ms idle before each request",
        tasks.len(),
        crates.join(", "),
        reading.as_millis(),
        idle.as_millis()
    );
    println!(
        "| budget ms | repository tokens | tasks | exact % | names it % | empty % | p50 / p95 ms | empty reasons |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for budget in list("CROSSFILE_BUDGETS_MS", "1000,10000") {
        for repository in list("CROSSFILE_REPOSITORY", "1024,0") {
            let attempts = run(&tasks, budget, repository, reading, idle).await;
            let score = infilling::score(&attempts);
            let named = tasks
                .iter()
                .zip(&attempts)
                .filter(|((_, task), attempt)| task.names_identifier(&attempt.completion))
                .count();
            let reasons: Vec<String> = score
                .empty_reasons
                .iter()
                .map(|(r, n)| format!("{n}× {r}"))
                .collect();
            println!(
                "| {budget} | {repository} | {} | {:.1} | {:.1} | {:.1} | {} / {} | {} |",
                score.tasks,
                score.exact * 100.0,
                named as f64 * 100.0 / score.tasks.max(1) as f64,
                score.empty * 100.0,
                score.p50.as_millis(),
                score.p95.as_millis(),
                reasons.join("; ")
            );
        }
    }
}
