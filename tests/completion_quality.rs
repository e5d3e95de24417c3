//! Smoke tests of the completion-quality harnesses (`cargo bench --bench
//! completion_quality` and `--bench completion_crossfile`), so they cannot rot:
//! three HumanEval-Infilling tasks (MIT, OpenAI;
//! `tests/data/humaneval-infilling-LICENSE`) and a cross-file task from a pinned
//! crate end to end through the language server and the real test model, and
//! the scoring checked against the tasks' own solutions. Quality itself is a
//! benchmark figure (BENCHMARKS.md), not asserted here.

mod support;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::crossfile;
use support::infilling::{self, Arrival, Attempt};
use support::lsp_client::LspClient;

/// Every empty answer has its reason from the log, and exact match is scored
/// as the task scores the answer.
fn assert_scored(client: &LspClient, attempt: &Attempt, exact: bool) {
    eprintln!("{attempt:?}");
    if attempt.completion.is_empty() {
        let reason = attempt.empty_reason.as_deref().unwrap_or_default();
        assert_ne!(reason, "no reason logged", "{}", client.log());
    }
    assert_eq!(attempt.exact, exact);
}

fn tasks() -> Vec<infilling::Task> {
    infilling::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/humaneval-infilling-smoke.jsonl"),
    )
}

#[tokio::test]
async fn the_scoring_accepts_each_canonical_solution_and_rejects_a_wrong_one() {
    for task in tasks() {
        let canonical = task.canonical_solution.trim_end_matches('\n');
        assert!(task.exact(canonical), "{}", task.task_id);
        assert!(
            infilling::passes(&task, canonical).await,
            "{}: the canonical solution fails its tests:\n{}",
            task.task_id,
            task.program(canonical)
        );
        let indent: String = canonical
            .chars()
            .take_while(|c| c.is_whitespace())
            .collect();
        let wrong = format!("{indent}raise ValueError('wrong')");
        assert!(!task.exact(&wrong), "{}", task.task_id);
        assert!(!infilling::passes(&task, &wrong).await, "{}", task.task_id);
    }
}

#[test]
fn similarity_ranks_a_nearly_right_line_between_the_line_and_a_wrong_one_and_reads_as_many_lines() {
    let line = "        let total = items.iter().sum();";
    assert_eq!(infilling::similarity(line.trim(), line), 1.0);
    assert_eq!(infilling::similarity("", line), 0.0);
    let nearly = infilling::similarity("let total = items.iter().count();", line);
    let wrong = infilling::similarity("return None", line);
    assert!(0.7 < nearly && nearly < 1.0, "{nearly}");
    assert!(wrong < 0.3, "{wrong}");
    let going_on = format!("{}\n        total / 2", line.trim());
    assert_eq!(infilling::similarity(&going_on, line), 1.0);
}

/// The harnesses' server with the same prompts on every machine (the
/// smallest input budget the engine sizes to, one inference thread) and the
/// longest budget there is: the smoke tests check that the harnesses run and
/// score, whatever the machine's speed.
async fn pinned_server() -> LspClient {
    infilling::server_with(
        json!({"budget_ms": 10_000, "input_tokens": 256}),
        json!({"threads": 1}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_end_to_end_through_the_server_with_every_empty_answer_explained() {
    let tasks = tasks();
    let mut client = pinned_server().await;
    let mut attempts = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        let attempt = infilling::attempt(
            &mut client,
            task,
            i,
            Arrival::Revealed,
            Duration::from_millis(500),
        )
        .await;
        assert_scored(&client, &attempt, task.exact(&attempt.completion));
        attempts.push(attempt);
    }
    let score = infilling::score(&attempts);
    assert_eq!(score.tasks, tasks.len());
    assert!(
        attempts.iter().any(|a| !a.completion.is_empty()),
        "with a long budget the model answers at least one task: {attempts:?}"
    );
    client.shutdown().await;
}

fn ropey_tasks() -> Vec<crossfile::Task> {
    let ropey = &crossfile::CRATES[2];
    assert_eq!(ropey.name, "ropey");
    let work = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-crates");
    crossfile::tasks(ropey.name, &ropey.sources(&work), 4, 0)
}

#[test]
fn cross_file_tasks_mask_a_line_whose_name_only_the_other_file_defines() {
    let tasks = ropey_tasks();
    assert_eq!(tasks.len(), 4);
    for task in &tasks {
        assert_ne!(task.path, task.definition_path, "{}", task.id);
        let masked_line = task.document.lines().nth(task.line as usize).unwrap();
        assert_eq!(masked_line.len(), task.indent as usize, "{}", task.id);
        let defined = task
            .definition_text
            .lines()
            .nth(task.definition_line as usize)
            .unwrap();
        let words = |text: &str| -> HashSet<String> {
            text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map(str::to_owned)
                .collect()
        };
        let (in_line, in_document) = (words(&task.expected), words(&task.document));
        let name = words(defined)
            .into_iter()
            .find(|w| w.len() >= 5 && in_line.contains(w) && !in_document.contains(w));
        assert!(
            name.is_some(),
            "{}: {defined:?} / {:?}",
            task.id,
            task.expected
        );
        assert!(task.exact(&format!("{}\n", task.expected)));
        assert!(!task.exact("let x = 1;"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_file_task_runs_end_to_end_with_repository_context() {
    let task = ropey_tasks().remove(0);
    let mut client = pinned_server().await;
    let attempt = crossfile::attempt(
        &mut client,
        &task,
        "ropey",
        Duration::from_millis(1_500),
        Duration::from_millis(500),
    )
    .await;
    assert_scored(&client, &attempt, task.exact(&attempt.completion));
    client.shutdown().await;
}
