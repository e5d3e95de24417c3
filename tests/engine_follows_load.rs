//! The local engine on a machine whose load changes after it is ready: a
//! build started beside the editor takes a core, and the engine decodes
//! with fewer threads until the build stops. A binary of its own, so no
//! other test's engine is the load it sees.

mod support;

use std::time::Duration;

use support::cpu_hog::ProcessHog;
use support::engine_options as options;
use support::timing::Deadline;
use switchyard_engine::*;

/// Long enough for any machine to take a few load readings (two in a row
/// decide, half a second apart); only a broken engine waits this long.
const PATIENCE: Duration = Duration::from_secs(60);

/// The threads the engine reports, once `wanted` says yes or the patience
/// runs out; every count seen on the way, in order.
async fn threads_until(engine: &LocalEngine, wanted: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut status = engine.watch_status();
    let patience = Deadline::after(PATIENCE);
    let mut seen = Vec::new();
    loop {
        if let EngineStatus::Ready(info) = &*status.borrow_and_update()
            && seen.last() != Some(&info.threads)
        {
            seen.push(info.threads);
        }
        if seen.last().is_some_and(|&threads| wanted(threads)) || patience.passed() {
            return seen;
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), status.changed()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_started_after_the_model_is_ready_takes_threads_until_it_stops() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("one core: there is no thread count to follow the load with");
        return;
    }
    // Threads chosen by the engine (the shared options pin one).
    let engine = LocalEngine::spawn(EngineOptions {
        threads: 0,
        ..options()
    });
    engine.wait_ready().await.unwrap();
    let quiet = threads_until(&engine, |threads| threads == cores).await;
    assert_eq!(quiet.last(), Some(&cores), "the quiet machine: {quiet:?}");

    let build = ProcessHog::on_cores(1);
    let busy = threads_until(&engine, |threads| threads < cores).await;
    assert!(
        busy.last().is_some_and(|&threads| threads < cores),
        "a core taken: {busy:?}"
    );
    // The engine still answers, at its new count.
    let answer = engine
        .complete(CompletionJob {
            text: FimText {
                prefix: "fn add(a: u32, b: u32) -> u32 {\n    ".into(),
                suffix: "\n}\n".into(),
                ..FimText::default()
            },
            span: None,
            max_tokens: 8,
            stop: Box::new(|text: &str| text.contains('\n')),
            deadline: std::time::Instant::now() + Duration::from_secs(60),
            cancel: Default::default(),
        })
        .await
        .unwrap();
    assert!(answer.tokens_generated > 0, "{answer:?}");

    drop(build);
    let after = threads_until(&engine, |threads| threads == cores).await;
    assert_eq!(after.last(), Some(&cores), "the build stopped: {after:?}");
}
