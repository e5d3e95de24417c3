//! Smoke test of the completion-quality harness (`cargo bench --bench
//! completion_quality`), so it cannot rot: three HumanEval-Infilling tasks
//! (MIT, OpenAI; `tests/data/humaneval-infilling-LICENSE`) end to end through
//! the language server and the real test model, and the scoring checked
//! against the tasks' own solutions. Quality itself is a benchmark figure
//! (BENCHMARKS.md), not asserted here.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::infilling::{self, Arrival};
use support::lsp_client::{LspClient, ServerOptions};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_end_to_end_through_the_server_with_every_empty_answer_explained() {
    let tasks = tasks();
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    client
        .initialize(
            json!({"textDocument": {"inlineCompletion": {}}}),
            json!({"local": {"auto_pull": false}, "autocomplete": {"budget_ms": 10_000}}),
        )
        .await;
    client.wait_for_model().await;
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
        eprintln!("{attempt:?}");
        if attempt.completion.is_empty() {
            let reason = attempt.empty_reason.as_deref().unwrap_or_default();
            assert_ne!(reason, "no reason logged", "{}", client.log());
        }
        assert_eq!(attempt.exact, task.exact(&attempt.completion));
        attempts.push(attempt);
    }
    let score = infilling::score(&attempts);
    assert_eq!(score.tasks, tasks.len());
    assert!(
        attempts.iter().any(|a| !a.completion.is_empty()),
        "with a 10 s budget the model answers at least one task: {attempts:?}"
    );
    client.shutdown().await;
}
