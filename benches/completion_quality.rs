//! Completion quality on HumanEval-Infilling, through the language server the
//! way an editor drives it (see `tests/support/infilling.rs`): exact match,
//! pass@1 by running each task's tests, empty answers with their reasons, and
//! latency, for each budget and each way the cursor arrives, in one run.
//!
//! Run: `cargo bench --bench completion_quality` (fetch the model first with
//! `models/fetch-test-model.sh`). Settings (environment):
//! - `QUALITY_SET=single|multi` (default single-line), `QUALITY_TASKS` (default
//!   100; `all` for every task), `QUALITY_SEED` (default 0): a seeded sample.
//! - `QUALITY_BUDGETS_MS=1000,10000`: the autocomplete budgets to run.
//! - `QUALITY_ARRIVALS=revealed,silent`: whether the editor reveals the cursor
//!   (a code-action request at it) before the idle time, or says nothing.
//! - `QUALITY_IDLE_MS=2000`: idle time between arriving and asking.
//! - `QUALITY_INPUT_TOKENS`: `autocomplete.input_tokens` (the largest window;
//!   the engine's speed-following budget is at most this).
//! - `QUALITY_SUFFIX_TOKENS`: `autocomplete.suffix_tokens` (the longest suffix;
//!   the budget's share at the measured speed may cut it, down to the floor).
//! - `QUALITY_THREADS`: `local.threads` (default 0: the engine measures).
//! - `QUALITY_HOG=1`: busy loops on every core while measuring (a build
//!   running beside the editor); `after`: one spinning core, started once
//!   the model is ready (a build started while editing).
//! - `QUALITY_OUT`: a directory for each attempt (JSON lines) and each
//!   server's log.
//! - `QUALITY_DATA`: the directory of the `.jsonl.gz` files (default
//!   `../shared/bench/humaneval-infilling` beside the repository).
//! - `QUALITY_CEILING=1`: no model; pass every task's canonical answer through
//!   the post-processing rules, as if the model had written it, and count the
//!   answers the rules keep whole: the most the rules let pass.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::cpu_hog::CpuHog;
use support::env_or;
use support::infilling::{self, Arrival, Attempt};

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

async fn run(
    tasks: &[infilling::Task],
    budget_ms: u64,
    arrival: Arrival,
    idle: Duration,
) -> Vec<Attempt> {
    let mut autocomplete = json!({"budget_ms": budget_ms});
    if let Ok(tokens) = std::env::var("QUALITY_INPUT_TOKENS") {
        autocomplete["input_tokens"] = tokens.parse::<u64>().expect("QUALITY_INPUT_TOKENS").into();
    }
    if let Ok(tokens) = std::env::var("QUALITY_SUFFIX_TOKENS") {
        autocomplete["suffix_tokens"] =
            tokens.parse::<u64>().expect("QUALITY_SUFFIX_TOKENS").into();
    }
    let mut local = json!({});
    if let Ok(threads) = std::env::var("QUALITY_THREADS") {
        local["threads"] = threads.parse::<u64>().expect("QUALITY_THREADS").into();
    }
    let mut client = infilling::server_with(autocomplete, local).await;
    let _build = (env_or("QUALITY_HOG", "0") == "after").then(|| CpuHog::on_cores(1));
    let mut attempts = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        attempts.push(infilling::attempt(&mut client, task, i, arrival, idle).await);
    }
    println!(
        "{budget_ms} ms, {arrival:?}: {}",
        acceptance(&support::completion_stats(&client.state_dir()))
    );
    if let Ok(dir) = std::env::var("QUALITY_OUT") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("QUALITY_OUT can be created");
        let path = dir.join(format!("server-{budget_ms}-{arrival:?}.log"));
        std::fs::write(path, client.log()).expect("QUALITY_OUT is writable");
    }
    client.shutdown().await;
    attempts
}

/// What `switchyard stats` says of the run's suggestions, summed over its
/// groups: the benchmark takes an exact answer with Tab and otherwise types
/// the canonical one (see `infilling::attempt`).
fn acceptance(stats: &serde_json::Value) -> String {
    let sum = |key| support::stats_sum(stats, key, |_| true);
    let (shown, accepted, partial) = (sum("shown"), sum("accepted"), sum("partial"));
    format!(
        "stats: {} requests, {shown} shown, {accepted} accepted, {partial} partly, {} ignored \
         ({:.1} % of shown accepted whole or in part), {} characters accepted, {} empty ({} late)",
        sum("requests"),
        sum("ignored"),
        (accepted + partial) as f64 * 100.0 / shown.max(1) as f64,
        sum("accepted_chars"),
        sum("empty"),
        sum("late"),
    )
}

/// How many canonical answers survive the rules whole, with a few that do not.
fn ceiling(set: &str, tasks: &[infilling::Task]) {
    let cut: Vec<(&infilling::Task, Option<String>)> = tasks
        .iter()
        .filter_map(|task| {
            let shown = task.rules_keep(&task.canonical_solution);
            (!shown.as_deref().is_some_and(|s| task.exact(s))).then_some((task, shown))
        })
        .collect();
    let kept = tasks.len() - cut.len();
    println!(
        "{set}-line: the rules keep {kept} of {} canonical answers whole ({:.1} %)",
        tasks.len(),
        kept as f64 * 100.0 / tasks.len().max(1) as f64
    );
    for (task, shown) in cut.iter().take(5) {
        println!(
            "- {}: canonical {:?}\n  shown     {:?}",
            task.task_id, task.canonical_solution, shown
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let set = env_or("QUALITY_SET", "single");
    let file = match set.as_str() {
        "multi" => "HumanEval-MultiLineInfilling.jsonl.gz",
        _ => "HumanEval-SingleLineInfilling.jsonl.gz",
    };
    let data = std::env::var_os("QUALITY_DATA").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/bench/humaneval-infilling"),
        PathBuf::from,
    );
    let all = infilling::load(&data.join(file));
    if env_or("QUALITY_CEILING", "0") == "1" {
        return ceiling(&set, &all);
    }
    let count = match env_or("QUALITY_TASKS", "100").as_str() {
        "all" => all.len(),
        n => n.parse().expect("QUALITY_TASKS is a number or `all`"),
    };
    let seed: u64 = env_or("QUALITY_SEED", "0").parse().expect("QUALITY_SEED");
    let tasks = infilling::sample(all, count, seed);
    let budgets: Vec<u64> = env_or("QUALITY_BUDGETS_MS", "1000,10000")
        .split(',')
        .map(|b| b.trim().parse().expect("QUALITY_BUDGETS_MS"))
        .collect();
    let arrivals: Vec<Arrival> = env_or("QUALITY_ARRIVALS", "revealed,silent")
        .split(',')
        .map(|a| match a.trim() {
            "silent" => Arrival::Silent,
            _ => Arrival::Revealed,
        })
        .collect();
    let idle = Duration::from_millis(env_or("QUALITY_IDLE_MS", "2000").parse().expect("idle"));
    let _hog = (env_or("QUALITY_HOG", "0") == "1").then(CpuHog::start);
    println!(
        "completion quality: {set}-line, {} tasks (seed {seed}), idle {} ms before each request{}",
        tasks.len(),
        idle.as_millis(),
        match env_or("QUALITY_HOG", "0").as_str() {
            "1" => ", CPU hog on every core",
            "after" => ", one core spinning from the model being ready",
            _ => "",
        }
    );
    println!(
        "| budget ms | cursor | tasks | exact % | pass@1 % | empty % | p50 / p95 ms | decoded at request p50 / p95 | generated per shown char | empty reasons |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &budget in &budgets {
        for &arrival in &arrivals {
            let attempts = run(&tasks, budget, arrival, idle).await;
            let score = infilling::score(&attempts);
            let reasons: Vec<String> = score
                .empty_reasons
                .iter()
                .map(|(r, n)| format!("{n}× {r}"))
                .collect();
            println!(
                "| {budget} | {arrival:?} | {} | {:.1} | {:.1} | {:.1} | {} / {} | {} / {} | {:.2} | {} |",
                score.tasks,
                score.exact * 100.0,
                score.pass_at_1 * 100.0,
                score.empty * 100.0,
                ms(score.p50),
                ms(score.p95),
                score.to_decode.0,
                score.to_decode.1,
                score.tokens_per_char,
                reasons.join("; ")
            );
            if let Ok(dir) = std::env::var("QUALITY_OUT") {
                let path = PathBuf::from(dir).join(format!("{set}-{budget}-{arrival:?}.jsonl"));
                let lines: Vec<String> = attempts
                    .iter()
                    .map(|a| {
                        json!({"task_id": a.task_id, "completion": a.completion, "latency_ms": ms(a.latency), "empty_reason": a.empty_reason, "exact": a.exact, "passed": a.passed, "to_decode": a.work.to_decode, "generated": a.work.generated, "chars": a.work.chars}).to_string()
                    })
                    .collect();
                std::fs::write(&path, lines.join("\n")).expect("QUALITY_OUT is writable");
            }
        }
    }
}
