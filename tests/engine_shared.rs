//! Editor windows share the machine (ARCHITECTURE.md invariant 24): engines
//! started with the same options and state directory are one engine. The
//! first hosts it; the second loads nothing and sends its jobs over the
//! socket, where its stop rule, its cancel flag and a chat's streamed pieces
//! work as they do in-process; when the host shuts down, the other takes
//! over and answers the same prompt the same. The windows here are two
//! handles in one process: the lock is per open file, as between processes
//! (`lsp_shared_engine.rs` kills real ones).

mod support;

use std::time::{Duration, Instant};

use support::engine_options as options;
use switchyard_base::cancel::CancelFlag;
use switchyard_engine::*;

fn sample() -> FimText {
    let marker = "let total = ";
    let at = support::SAMPLE_RUST.find(marker).unwrap() + marker.len();
    FimText {
        prefix: support::SAMPLE_RUST[at - 500..at].to_owned(),
        suffix: support::SAMPLE_RUST[at..].to_owned(),
        ..FimText::default()
    }
}

fn job(stop: StopRule, cancel: CancelFlag) -> CompletionJob {
    CompletionJob {
        text: sample(),
        span: None,
        max_tokens: 48,
        stop,
        deadline: Instant::now() + Duration::from_secs(120),
        cancel,
    }
}

fn at_newline() -> StopRule {
    Box::new(|text: &str| text.contains('\n'))
}

async fn ready(engine: &LocalEngine) -> ModelInfo {
    engine.wait_ready().await.expect("the engine is ready")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_share_one_engine_and_take_over_when_its_host_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let host = LocalEngine::shared(options(), dir.path());
    let hosted = ready(&host).await;
    let client = LocalEngine::shared(options(), dir.path());
    let seen_by_client = ready(&client).await;
    assert_eq!(
        seen_by_client.load_ms, hosted.load_ms,
        "the second window sees the host's engine, not one it loaded"
    );

    let at_host = host
        .complete(job(at_newline(), CancelFlag::default()))
        .await
        .unwrap();
    let at_client = client
        .complete(job(at_newline(), CancelFlag::default()))
        .await
        .unwrap();
    assert_eq!(at_client.prompt_digest, at_host.prompt_digest);
    assert_eq!(
        at_client.text, at_host.text,
        "one prompt, one answer, from either window"
    );

    // The client's stop rule is asked at the client: it stops after the first token.
    let first_only = client
        .complete(job(
            Box::new(|text: &str| !text.is_empty()),
            CancelFlag::default(),
        ))
        .await
        .unwrap();
    assert_eq!(
        (first_only.stop, first_only.tokens_generated),
        (StopReason::Rule, 1)
    );

    // A cancel set at the client stops the job at the host.
    let cancel = CancelFlag::default();
    cancel.cancel();
    let cancelled = client
        .complete(job(Box::new(|_: &str| false), cancel))
        .await
        .unwrap();
    assert_eq!(cancelled.stop, StopReason::Cancelled);

    // A chat streams its pieces to the client, in order, and they make its answer.
    let (pieces, mut streamed) = tokio::sync::mpsc::unbounded_channel();
    let chat = client
        .chat(ChatJob {
            messages: vec![("user".into(), "Name three prime numbers.".into())],
            max_tokens: 24,
            deadline: Instant::now() + Duration::from_secs(120),
            first_token_by: None,
            cancel: CancelFlag::default(),
            pieces: Some(pieces),
        })
        .await
        .unwrap();
    let mut text = String::new();
    while let Ok(piece) = streamed.try_recv() {
        text.push_str(&piece);
    }
    assert!(!chat.text.is_empty());
    assert_eq!(text, chat.text);

    // The host's window closes: the other loads the model and answers alike.
    // Until then its jobs answer "loading" or "stopped", as the editor's
    // next keystroke would find them.
    tokio::task::spawn_blocking(move || host.shutdown())
        .await
        .unwrap();
    let after = loop {
        match client
            .complete(job(at_newline(), CancelFlag::default()))
            .await
        {
            Ok(answer) => break answer,
            Err(EngineError::Loading | EngineError::Stopped) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("the take-over failed: {e}"),
        }
    };
    assert_eq!(after.text, at_host.text);

    // A third window now finds the new host.
    let third = LocalEngine::shared(options(), dir.path());
    assert_eq!(ready(&third).await.load_ms, ready(&client).await.load_ms);
    tokio::task::spawn_blocking(move || {
        third.shutdown();
        client.shutdown();
    })
    .await
    .unwrap();
}

/// Engines of other options do not meet: each window gets the engine it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_of_other_options_are_not_shared() {
    let dir = tempfile::tempdir().unwrap();
    let one = LocalEngine::shared(options(), dir.path());
    let other_options = EngineOptions {
        max_output_tokens: 100,
        ..options()
    };
    let other = LocalEngine::shared(other_options, dir.path());
    let (one_info, other_info) = (ready(&one).await, ready(&other).await);
    assert_ne!(one_info.load_ms, other_info.load_ms);
    let sockets = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
        .count();
    assert_eq!(sockets, 2, "one meeting place each");
    tokio::task::spawn_blocking(move || {
        one.shutdown();
        other.shutdown();
    })
    .await
    .unwrap();
}
