//! The everyday controls around the suggestion, through the binary: a
//! snooze from the editor's command (kept across a restart), a language
//! turned off, and the completion state in `switchyard/status`.

mod support;

use std::path::PathBuf;

use serde_json::{Value, json};
use support::lsp_client::{LspClient, ServerOptions};

const MARKDOWN: &str = "file:///work/notes.md";

/// A server without a model, telling its status: the controls need none.
async fn server(state_dir: Option<PathBuf>, options: Value) -> LspClient {
    let env = state_dir
        .map(|dir| vec![("SWITCHYARD_STATE_DIR".to_owned(), dir.display().to_string())])
        .unwrap_or_default();
    let mut client = LspClient::spawn(ServerOptions {
        model_dir: tempfile::tempdir().unwrap().keep(),
        env,
        ..Default::default()
    })
    .await;
    let mut init = json!({"local": {"auto_pull": false}, "status_notifications": true});
    init.as_object_mut()
        .unwrap()
        .extend(options.as_object().unwrap().clone());
    client
        .initialize(json!({"window": {"workDoneProgress": true}}), init)
        .await;
    client
}

async fn completion_state(client: &mut LspClient, state: &str) -> Value {
    let status = client
        .notification("switchyard/status", |p| p["completion"]["state"] == state)
        .await;
    status["params"]["completion"].clone()
}

async fn snooze(client: &mut LspClient, minutes: Value) -> Value {
    let response = client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.snooze", "arguments": [minutes]}),
        )
        .await;
    response["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snooze_shows_in_the_status_survives_a_restart_and_ends_on_resume() {
    let state = tempfile::tempdir().unwrap();
    let mut client = server(Some(state.path().to_owned()), json!({})).await;
    let failed = completion_state(&mut client, "failed").await;
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .contains("switchyard models pull"),
        "no model: the state says what fixes it: {failed}"
    );

    let result = snooze(&mut client, json!(30)).await;
    let until = result["snoozedUntil"].as_u64().expect("a snooze end");
    let snoozed = completion_state(&mut client, "snoozed").await;
    assert_eq!(snoozed["untilMs"], until);
    client.shutdown().await;

    // Another editor session of the same user: still snoozed.
    let mut restarted = server(Some(state.path().to_owned()), json!({})).await;
    let snoozed = completion_state(&mut restarted, "snoozed").await;
    assert_eq!(snoozed["untilMs"], until, "the restart keeps the snooze");
    assert_eq!(
        snooze(&mut restarted, json!(0)).await["snoozedUntil"],
        Value::Null
    );
    completion_state(&mut restarted, "failed").await;
    // Helix's workspace commands take no arguments: a snooze of 30 minutes, and a resume.
    let helix = |command: &str| json!({"command": command});
    let snoozed = restarted
        .request("workspace/executeCommand", helix("switchyard.snooze"))
        .await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let minutes = (snoozed["result"]["snoozedUntil"].as_u64().unwrap() - now_ms) as f64 / 60_000.0;
    assert!((29.0..=30.0).contains(&minutes), "{snoozed}");
    completion_state(&mut restarted, "snoozed").await;
    let resume = helix("switchyard.resumeCompletions");
    restarted.request("workspace/executeCommand", resume).await;
    completion_state(&mut restarted, "failed").await;
    let bad = restarted
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.snooze", "arguments": ["soon"]}),
        )
        .await;
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("minutes"),
        "{bad}"
    );
    restarted.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_language_turned_off_answers_empty_and_says_so_in_the_status() {
    let options = json!({"autocomplete": {"languages": {"markdown": false}}});
    let mut client = server(None, options).await;
    let doc = json!({"uri": MARKDOWN, "languageId": "markdown", "version": 1, "text": "# Notes\n"});
    client
        .notify("textDocument/didOpen", json!({"textDocument": doc}))
        .await;
    let response = client
        .request(
            "textDocument/inlineCompletion",
            json!({
                "textDocument": {"uri": MARKDOWN},
                "position": {"line": 1, "character": 0},
                "context": {"triggerKind": 2}
            }),
        )
        .await;
    assert_eq!(response["result"]["items"], json!([]), "{response}");
    let off = completion_state(&mut client, "off").await;
    assert!(
        off["reason"].as_str().unwrap().contains("markdown"),
        "{off}"
    );
    client.shutdown().await;
}

/// The real model, a budget too short for any prompt (the least there is:
/// under the margin the engine stops before the deadline, so the automatic
/// request is empty on any machine), a long one for a request the user asks
/// for. The budgets' timing is checked on a paused clock
/// (`crates/completion/src/tests.rs`); here, the order of the answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invoked_request_after_an_empty_automatic_one_gets_a_suggestion() {
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    let options = json!({
        "local": {"auto_pull": false, "threads": 1},
        "autocomplete": {"input_tokens": 256, "budget_ms": 50, "invoked_budget_ms": 30000, "precompute_next": false},
        "status_notifications": true
    });
    let capabilities = json!({"window": {"workDoneProgress": true}});
    client.initialize(capabilities, options).await;
    client.wait_for_model().await;
    completion_state(&mut client, "ready").await;
    let (text, line) = support::sample_with_hole();
    let (line, character) = (line as u32 - 1, 8);
    const URI: &str = "file:///work/store.rs";
    // Opened without a cursor to prewarm at: the cache holds nothing of the window.
    client.open(URI, &text).await;
    let ask = |kind: u32| {
        json!({
            "textDocument": {"uri": URI},
            "position": {"line": line, "character": character},
            "context": {"triggerKind": kind}
        })
    };
    let automatic = client
        .request("textDocument/inlineCompletion", ask(2))
        .await;
    assert_eq!(
        automatic["result"]["items"],
        json!([]),
        "{automatic} {}",
        client
            .log()
            .lines()
            .filter(|l| l.contains("completion") || l.contains("prewarm"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let invoked = client
        .request("textDocument/inlineCompletion", ask(1))
        .await;
    let items = invoked["result"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{invoked}");
    assert!(!items[0]["insertText"].as_str().unwrap().trim().is_empty());
    // The user waited: the editor showed it was working.
    let progress = client
        .notification("$/progress", |p| {
            p["token"]
                .as_str()
                .is_some_and(|t| t.starts_with("switchyard/complete"))
                && p["value"]["kind"] == "end"
        })
        .await;
    assert_eq!(progress["params"]["value"]["message"], "done");
    client.shutdown().await;
}

/// The real model: a suggestion accepted (the client's accept command, then
/// its edit), one accepted by its first word and then left, one ignored by
/// typing something else; the stats count each once and hold no text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_partly_accepted_and_ignored_suggestions_are_counted_without_their_text() {
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    // The same prompts on every machine (the smallest input budget the engine
    // sizes to, one inference thread) and the longest budget there is: whole
    // greedy answers, several words long.
    let options = json!({"local": {"auto_pull": false, "threads": 1}, "autocomplete": {"input_tokens": 256, "budget_ms": 10000}});
    let init = json!({
        "processId": null, "rootUri": null, "capabilities": {},
        "clientInfo": {"name": "protocol-test"}, "initializationOptions": options
    });
    client.call("initialize", init).await;
    client.notify("initialized", json!({})).await;
    client.wait_for_model().await;
    let (text, line) = support::sample_with_hole();
    let (line, character) = (line as u32 - 1, 8);
    let mut shown = Vec::new();
    for doc in ["a", "b", "c"] {
        let uri = format!("file:///work/{doc}.rs");
        client.open(&uri, &text).await;
        let item = client
            .inline_completion_eventually(&uri, line, character)
            .await;
        let id = item["command"]["arguments"][0]
            .as_u64()
            .expect("the accept command's id");
        assert_eq!(item["command"]["command"], "switchyard.accepted");
        shown.push((uri, item["insertText"].as_str().unwrap().to_owned(), id));
    }
    let type_in = |uri: &str, version: i32, text: &str, after: u32| {
        let at = json!({"line": line, "character": character + after});
        json!({
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": at, "end": at}, "text": text}]
        })
    };
    // a: the client says it was accepted, and its edit follows.
    let (a, suggestion, id) = &shown[0];
    client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.accepted", "arguments": [id]}),
        )
        .await;
    let edit = type_in(a, 2, suggestion, 0);
    client.notify("textDocument/didChange", edit).await;
    // b: its first word, then something else.
    let (b, suggestion, _) = &shown[1];
    let word: String = suggestion
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    assert!(
        !word.is_empty() && word.len() < suggestion.len(),
        "{suggestion:?}"
    );
    client
        .notify("textDocument/didChange", type_in(b, 2, &word, 0))
        .await;
    let after = word.chars().count() as u32;
    client
        .notify("textDocument/didChange", type_in(b, 3, "#", after))
        .await;
    // c: something else at once.
    let (c, _, _) = &shown[2];
    client
        .notify("textDocument/didChange", type_in(c, 2, "#", 0))
        .await;
    // Every edit is in once the server answers a later request.
    client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.status"}),
        )
        .await;

    let groups = support::completion_stats(&client.state_dir())["groups"].clone();
    let ours: Vec<&Value> = groups
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["editor"] == "protocol-test")
        .collect();
    assert_eq!(ours.len(), 1, "{groups}");
    let g = ours[0];
    assert_eq!(
        (&g["shown"], &g["accepted"], &g["partial"], &g["ignored"]),
        (&json!(3), &json!(1), &json!(1), &json!(1)),
        "{g}"
    );
    assert_eq!(g["language"], "rust");
    let kept = std::fs::read_to_string(client.state_dir().join("completions.jsonl")).unwrap();
    for (_, suggestion, _) in &shown {
        assert!(
            !kept.contains(suggestion.as_str()),
            "the stats hold no text: {kept}"
        );
    }
    client.shutdown().await;
}
