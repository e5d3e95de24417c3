//! Editor windows share the machine (ARCHITECTURE.md invariant 24), and a
//! window that crashes takes no other window's completions down. Real
//! servers over stdio, one state directory: the first hosts the engine, the
//! others are its clients. A client killed (SIGKILL, as a crash) or stopped
//! (SIGSTOP) in the middle of a request leaves the host answering; the host
//! killed, a client takes over and its completions come back.

mod support;

use std::path::Path;

use serde_json::json;
use support::lsp_client::{LspClient, ServerOptions};

async fn window(state: &Path) -> LspClient {
    let state = (
        "SWITCHYARD_STATE_DIR".to_owned(),
        state.display().to_string(),
    );
    let mut client = LspClient::spawn(ServerOptions {
        env: vec![state],
        ..ServerOptions::default()
    })
    .await;
    client
        .initialize(
            json!({"textDocument": {"inlineCompletion": {}}}),
            json!({"local": {"auto_pull": false, "threads": 1}}),
        )
        .await;
    client.wait_for_model().await;
    client
}

/// Opens `uri` and asks for a completion at the place, without waiting.
async fn asks(window: &mut LspClient, uri: &str, (text, line, character): (&str, u32, u32)) {
    window.open(uri, text).await;
    window.send_inline_completion(uri, line, character).await;
}

/// Opens `uri` and asks at the place until a suggestion comes.
async fn completes(window: &mut LspClient, uri: &str, (text, line, character): (&str, u32, u32)) {
    window.open(uri, text).await;
    window
        .inline_completion_eventually(uri, line, character)
        .await;
}

fn signal(window: &LspClient, signal: &str) {
    let pid = window.pid().expect("the window runs").to_string();
    let sent = std::process::Command::new("kill")
        .args([signal, &pid])
        .status();
    assert!(sent.is_ok_and(|s| s.success()), "kill {signal} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_window_takes_no_other_windows_completions_down() {
    let state = tempfile::tempdir().unwrap();
    let (text, line) = support::sample_with_hole();
    let (line, character) = (line as u32 - 1, 8);

    let mut a = window(state.path()).await;
    let mut b = window(state.path()).await;
    assert!(a.log().contains("hosting the local engine"), "{}", a.log());
    assert!(b.log().contains("hosted by another window"), "{}", b.log());
    let place = (text.as_str(), line, character);
    completes(&mut b, "file:///work/b.rs", place).await;

    // A client killed while the host runs its request.
    let mut c = window(state.path()).await;
    asks(&mut c, "file:///work/c.rs", place).await;
    c.kill().await;
    completes(&mut a, "file:///work/a.rs", place).await;

    // A client stopped (SIGSTOP: suspended, swapped out) while the host runs
    // its request: its stop rule never answers, and the host answers the
    // others all the same.
    let mut d = window(state.path()).await;
    asks(&mut d, "file:///work/d.rs", place).await;
    signal(&d, "-STOP");
    completes(&mut a, "file:///work/a2.rs", place).await;
    signal(&d, "-CONT");
    d.kill().await;

    // The host killed: the remaining window hosts the engine and answers.
    a.kill().await;
    b.wait_for_log("choosing a new host").await;
    completes(&mut b, "file:///work/b2.rs", place).await;
    assert!(b.log().contains("hosting the local engine"), "{}", b.log());
    b.shutdown().await;
}
