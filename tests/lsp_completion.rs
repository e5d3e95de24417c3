//! Inline and classic completion through the real binary on the real test model.

mod support;

use serde_json::{Value, json};
use support::lsp_client::{LspClient, ServerOptions};

const URI: &str = "file:///work/store.rs";

fn vscode_like_capabilities() -> Value {
    json!({
        "general": {"positionEncodings": ["utf-16"]},
        "window": {"workDoneProgress": true},
        "textDocument": {"inlineCompletion": {"dynamicRegistration": false}}
    })
}

fn helix_like_capabilities() -> Value {
    json!({
        "general": {"positionEncodings": ["utf-8", "utf-32", "utf-16"]},
        "textDocument": {"completion": {"completionItem": {"snippetSupport": true}}}
    })
}

/// The sample with an empty line opened inside `purge_expired`, ready for a body.
fn sample_with_gap() -> (String, u32, u32) {
    let text = support::SAMPLE_RUST.replace(
        "        let before = self.entries.len();\n",
        "        let before = self.entries.len();\n        \n",
    );
    let line = text.lines().position(|l| l == "        ").unwrap() as u32;
    (text, line, 8)
}

/// Settings under which the real model's prompts, and so its greedy answers,
/// are the same wherever the suite runs, however loaded the machine: the
/// smallest input budget the engine ever sizes to (it cannot follow the
/// measured speed) and one inference thread (not the count measured fastest
/// here). The budgets are the longest the configuration takes: these tests
/// are about what the local model answers and how the server delivers it;
/// what a budget promises is checked on a paused clock
/// (`crates/completion/src/tests.rs`).
fn pinned_settings() -> Value {
    json!({
        "local": {"auto_pull": false, "threads": 1},
        "autocomplete": {"input_tokens": 256, "budget_ms": 10_000, "invoked_budget_ms": 60_000}
    })
}

/// A value the configuration refuses (or a key it does not know) is left out,
/// and the server runs on its default, where the machine decides again.
#[test]
fn the_pinned_settings_are_taken_whole() {
    let layers = switchyard_config::ConfigLayers {
        initialization_options: Some(pinned_settings()),
        ..Default::default()
    };
    let (_, problems) = layers.resolve();
    assert_eq!(problems, []);
}

/// Asks for a suggestion as the user does with the editor's trigger key, so
/// it has the invoked budget: one request is answered in full on any machine.
async fn invoked_inline_completion(
    client: &mut LspClient,
    uri: &str,
    line: u32,
    character: u32,
) -> Value {
    let at = json!({"line": line, "character": character});
    let params =
        json!({"textDocument": {"uri": uri}, "position": at, "context": {"triggerKind": 1}});
    client
        .request("textDocument/inlineCompletion", params)
        .await
}

async fn started(capabilities: Value) -> LspClient {
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    client.initialize(capabilities, pinned_settings()).await;
    client.wait_for_model().await;
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_completion_on_the_real_model_returns_ghost_text_at_the_cursor() {
    let mut client = started(vscode_like_capabilities()).await;
    let (text, line, character) = sample_with_gap();
    client.open(URI, &text).await;

    let item = client
        .inline_completion_eventually(URI, line, character)
        .await;

    let insert = item["insertText"].as_str().unwrap();
    assert!(!insert.trim().is_empty());
    assert!(
        !insert.contains("<|"),
        "special tokens are stripped: {insert:?}"
    );
    let at = json!({"line": line, "character": character});
    assert_eq!(
        item["range"],
        json!({"start": at, "end": at}),
        "empty range at the cursor"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_shown_while_the_model_loads_is_warm_once_the_model_is_ready() {
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    // What is checked is that the first request finds its prompt already in
    // the cache, not that it fits in time.
    client
        .initialize(vscode_like_capabilities(), pinned_settings())
        .await;
    let (text, line, character) = sample_with_gap();
    client.open(URI, &text).await;
    // VS Code asks for the code actions at the cursor whenever it moves.
    let cursor = json!({"line": line, "character": character});
    client
        .call(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": URI}, "range": {"start": cursor, "end": cursor}, "context": {"diagnostics": []}}),
        )
        .await;
    client
        .wait_for_log("prewarm deferred until the model is ready")
        .await;
    client.wait_for_model().await;
    // The span there, then the spans around it, then back.
    client.wait_for_log("idle fill done").await;

    let response = client.inline_completion(URI, line, character).await;

    assert!(
        response["result"]["items"]
            .as_array()
            .is_some_and(|items| !items.is_empty()),
        "{response}"
    );
    let log = client.log();
    let decoded: usize = log
        .lines()
        .find(|l| l.contains("decoded=") && l.contains("generated="))
        .and_then(|l| l.split("decoded=").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no completion line in the log:\n{log}"));
    assert!(
        decoded <= 2,
        "the prompt should already be in the cache, but {decoded} tokens were decoded"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helix_style_completion_items_carry_the_text_edit() {
    let mut client = started(helix_like_capabilities()).await;
    let (text, line, character) = sample_with_gap();
    client.open(URI, &text).await;
    // Warm the cache the way typing would, then ask as Helix does.
    client
        .inline_completion_eventually(URI, line, character)
        .await;

    let result = client
        .call("textDocument/completion", json!({"textDocument": {"uri": URI}, "position": {"line": line, "character": character}}))
        .await;

    assert_eq!(result["isIncomplete"], true);
    let item = &result["items"][0];
    let edit = &item["textEdit"];
    assert!(!edit["newText"].as_str().unwrap().trim().is_empty());
    assert_eq!(
        edit["range"]["end"],
        json!({"line": line, "character": character})
    );
    assert!(!item["label"].as_str().unwrap().is_empty());
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utf8_is_negotiated_when_offered_and_utf16_otherwise() {
    let mut utf8 = LspClient::spawn(ServerOptions::default()).await;
    let result = utf8
        .initialize(
            helix_like_capabilities(),
            json!({"local": {"auto_pull": false}}),
        )
        .await;
    assert_eq!(result["capabilities"]["positionEncoding"], "utf-8");
    assert_eq!(result["capabilities"]["inlineCompletionProvider"], true);
    assert_eq!(
        result["capabilities"]["textDocumentSync"]["change"], 2,
        "incremental sync"
    );
    utf8.shutdown().await;

    let mut utf16 = LspClient::spawn(ServerOptions::default()).await;
    let result = utf16
        .initialize(json!({}), json!({"local": {"auto_pull": false}}))
        .await;
    assert_eq!(result["capabilities"]["positionEncoding"], "utf-16");
    utf16.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_request_is_still_answered_once() {
    let mut client = started(vscode_like_capabilities()).await;
    let (text, line, character) = sample_with_gap();
    client.open(URI, &text).await;

    // Cold cache: the first request is still filling when the second replaces it.
    let first = client.send_inline_completion(URI, line, character).await;
    let second = client.send_inline_completion(URI, line, character).await;

    let first = client.response(first).await;
    let second = client.response(second).await;
    assert_eq!(
        first["result"]["items"],
        json!([]),
        "superseded: answered empty"
    );
    assert!(second.get("result").is_some(), "{second}");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_is_answered_with_request_cancelled() {
    let mut client = started(vscode_like_capabilities()).await;
    let (text, line, character) = sample_with_gap();
    client.open(URI, &text).await;

    let id = client.send_inline_completion(URI, line, character).await;
    client.notify("$/cancelRequest", json!({"id": id})).await;

    let response = client.response(id).await;
    // Either the cancellation won (-32800) or the answer was already on its way.
    let cancelled = response["error"]["code"] == -32800;
    let answered = response["result"].is_object();
    assert!(cancelled || answered, "{response}");
    // The server is still serving.
    client.inline_completion(URI, line, character).await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_loading_is_shown_as_work_done_progress() {
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    client
        .initialize(
            vscode_like_capabilities(),
            json!({"local": {"auto_pull": false}}),
        )
        .await;
    let begin = client
        .notification("$/progress", |p| p["value"]["kind"] == "begin")
        .await;
    assert_eq!(begin["params"]["token"], "switchyard/model-load");
    assert!(
        begin["params"]["value"]["title"]
            .as_str()
            .unwrap()
            .contains("loading qwen2.5-coder-0.5b-instruct")
    );
    let end = client
        .notification("$/progress", |p| p["value"]["kind"] == "end")
        .await;
    assert!(
        end["params"]["value"]["message"]
            .as_str()
            .unwrap()
            .contains("ready in"),
        "{end}"
    );
    assert!(
        client
            .seen
            .iter()
            .any(|m| m["method"] == "window/workDoneProgress/create")
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_remotes_down_completions_and_local_only_explanations_come_from_the_local_model() {
    let down = support::fake_provider::FakeProvider::with_default(
        support::fake_provider::Behaviour::Unavailable,
    )
    .await;
    let mut client = LspClient::spawn(ServerOptions {
        env: vec![("SY_KEY".into(), "sk-test".into())],
        ..Default::default()
    })
    .await;
    let mut init = pinned_settings();
    init["providers"] = json!({"remote": {"kind": "openai", "base_url": down.openai_url(), "api_key_env": "SY_KEY"}});
    init["tiers"] = json!({"large": ["remote/big"], "medium": ["remote/mid"], "small": ["local"]});
    init["tasks"] = json!({"explain": {"first_token_ms": 60000, "total_ms": 120000, "output_tokens": 200, "wait_ms": 0}});
    client.initialize(vscode_like_capabilities(), init).await;
    client.wait_for_model().await;
    let (text, line, character) = sample_with_gap();
    client.open(URI, &text).await;

    client
        .inline_completion_eventually(URI, line, character)
        .await;

    let range =
        json!({"start": {"line": 97, "character": 0}, "end": {"line": 104, "character": 0}});
    let explained = client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.explain", "arguments": [URI, range]}),
        )
        .await;
    let result = &explained["result"];
    assert_eq!(result["provider"], "local", "{explained}");
    assert_eq!(result["tier"], "small");
    assert!(!result["text"].as_str().unwrap().trim().is_empty());
    assert_eq!(
        down.user_request_count(),
        1,
        "the medium tier was tried first"
    );

    client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.toggleLocalOnly"}),
        )
        .await;
    let before = down.request_count();
    // (Canaries too stay home in local-only mode: every request counts here.)
    let local_only = client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.explain", "arguments": [URI, range]}),
        )
        .await;
    assert_eq!(local_only["result"]["provider"], "local", "{local_only}");
    assert_eq!(down.request_count(), before, "local-only: no remote call");
    client.shutdown().await;
}

/// That the local engine answers within what the remote leaves of the budget
/// is checked on a paused clock (`crates/completion/src/tests.rs`); here, who answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_first_autocomplete_chain_falls_back_to_local_when_the_remote_is_slow() {
    use support::fake_provider::{Behaviour, FakeProvider};
    let remote = FakeProvider::with_default(Behaviour::ok("let now = Instant::now();")).await;
    let mut client = LspClient::spawn(ServerOptions {
        env: vec![("SY_KEY".into(), "sk-test".into())],
        ..Default::default()
    })
    .await;
    let mut init = pinned_settings();
    init["providers"] = json!({"remote": {"kind": "openai", "base_url": remote.openai_url(), "api_key_env": "SY_KEY"}});
    init["autocomplete"]["chain"] = json!(["remote/fim-model", "local"]);
    client.initialize(vscode_like_capabilities(), init).await;
    client.wait_for_model().await;
    let (text, line, character) = sample_with_gap();
    client.open(URI, &text).await;

    let response = client.inline_completion(URI, line, character).await;
    assert_eq!(
        response["result"]["items"][0]["insertText"], "let now = Instant::now();",
        "the remote answers first: {response}"
    );

    // The remote now misses its share of the budget (it answers long after the
    // whole budget): each request is still answered, by the local model, and
    // after the first miss the remote is judged slow and no longer asked
    // (until a canary finds it fast again).
    remote.set_default(Behaviour::SlowFirstToken {
        delay: std::time::Duration::from_secs(600),
        text: "late".into(),
    });
    // Typing what no suggestion predicted keeps every request off the type-through
    // cache; each is answered.
    for i in 0..4u32 {
        let at = json!({"line": line, "character": character + i});
        let change = json!({"textDocument": {"uri": URI, "version": 2 + i}, "contentChanges": [{"range": {"start": at, "end": at}, "text": "Z"}]});
        client.notify("textDocument/didChange", change).await;
        let response = client.inline_completion(URI, line, character + i + 1).await;
        assert!(
            response["result"]["items"].is_array(),
            "every request is answered: {response}"
        );
    }
    // One answer and one miss: the local model has the whole budget since.
    assert_eq!(remote.user_request_count(), 2);
    // Asked where the local model's answer is not in doubt: after the four Zs its
    // greedy first token is end-of-text on one CPU's arithmetic and not on
    // another's; a counter being bumped has one continuation everywhere.
    let bump = "self.hits +";
    let zs = json!({"start": {"line": line, "character": character}, "end": {"line": line, "character": character + 4}});
    let change = json!({"textDocument": {"uri": URI, "version": 6}, "contentChanges": [{"range": zs, "text": bump}]});
    client.notify("textDocument/didChange", change).await;
    let item = client
        .inline_completion_eventually(URI, line, character + bump.len() as u32)
        .await;
    assert_ne!(item["insertText"], "let now = Instant::now();");
    assert_eq!(
        remote.user_request_count(),
        2,
        "not asked while it is judged slow: {}",
        client
            .log()
            .lines()
            .filter(|l| l.contains("judged") || l.contains("autocomplete"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    client.shutdown().await;
}

/// A helper in another file, under a name the model cannot guess.
const GEOMETRY: &str = "def polygon_perimeter_from_vertices(vertices):\n    \"\"\"Length of the closed path through the vertices.\"\"\"\n    total = 0.0\n    for a, b in zip(vertices, vertices[1:] + vertices[:1]):\n        total += ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5\n    return total\n";
const SHAPES: &str = "from geometry import *\n\ntriangle = [(0, 0), (3, 0), (3, 4)]\n# the distance around the triangle\nperimeter = \n";

/// The user reads the helper in geometry.py, then moves to shapes.py and
/// types an assignment: the first suggestion there, with `repository_tokens`
/// as configured.
async fn suggestion_after_reading_another_file(repository_tokens: usize) -> String {
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    let mut options = pinned_settings();
    options["autocomplete"]["repository_tokens"] = json!(repository_tokens);
    client.initialize(vscode_like_capabilities(), options).await;
    client.wait_for_model().await;
    let (geometry, shapes) = ("file:///work/geometry.py", "file:///work/shapes.py");
    client.open(geometry, GEOMETRY).await;
    client.reveal_cursor(geometry, 0, 4).await;
    // Reading: a long enough pause refreshes the repository context.
    client.wait_for_log("repository context refresh").await;
    client.open(shapes, SHAPES).await;
    client.reveal_cursor(shapes, 4, 12).await;
    let response = invoked_inline_completion(&mut client, shapes, 4, 12).await;
    client.shutdown().await;
    response["result"]["items"][0]["insertText"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_read_in_another_file_is_known_where_the_user_types_next() {
    let with_context = suggestion_after_reading_another_file(1024).await;
    let without = suggestion_after_reading_another_file(0).await;
    assert!(
        with_context.contains("polygon_perimeter_from_vertices(triangle"),
        "with repository context: {with_context:?}"
    );
    assert!(
        !without.contains("polygon_perimeter_from_vertices"),
        "without it the model cannot know the name: {without:?}"
    );
}

/// Completion before chat, through the server: with no API keys an explain
/// runs on the local model, and a completion asked while it answers is
/// answered before the explain ends; the explain still ends with the local
/// model's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghost_text_is_answered_while_a_local_explain_runs() {
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    let mut init = pinned_settings();
    init["tasks"] = json!({"explain": {"first_token_ms": 60000, "total_ms": 600000, "output_tokens": 300, "wait_ms": 0}});
    client.initialize(vscode_like_capabilities(), init).await;
    client.wait_for_model().await;
    let (text, line, character) = sample_with_gap();
    client.open(URI, &text).await;
    let range =
        json!({"start": {"line": 97, "character": 0}, "end": {"line": 104, "character": 0}});
    let explain = client
        .send_request(
            "workspace/executeCommand",
            json!({"command": "switchyard.explain", "arguments": [URI, range]}),
        )
        .await;
    client.wait_for_log("local chat answering").await;
    let completion = client.inline_completion(URI, line, character).await;
    assert!(completion.get("error").is_none(), "{completion}");
    assert!(
        !client.answered(explain),
        "the completion waited for the explain to end"
    );
    // Waits as long as the explain's own ceiling (`total_ms`): a starved
    // machine decodes its 300 tokens slowly, and only the ceiling is a promise.
    let explained = client
        .response_within(explain, std::time::Duration::from_secs(600))
        .await
        .expect("the explain ends within its ceiling");
    let result = &explained["result"];
    assert_eq!(result["provider"], "local", "{explained}");
    assert!(!result["text"].as_str().unwrap().trim().is_empty());
    client.shutdown().await;
}
