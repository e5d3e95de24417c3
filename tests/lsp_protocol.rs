//! Protocol behaviour that needs no model: document sync, bad input, config errors.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::lsp_client::{LspClient, ServerOptions};

const URI: &str = "file:///work/a.rs";

/// A server without a model (empty model dir, no auto-pull): protocol only.
async fn modelless(options: Value) -> LspClient {
    let empty = tempfile::tempdir().unwrap().keep();
    let mut client = LspClient::spawn(ServerOptions {
        model_dir: empty,
        ..Default::default()
    })
    .await;
    let mut init = json!({"local": {"auto_pull": false}});
    merge(&mut init, &options);
    client
        .initialize(json!({"window": {"workDoneProgress": true}}), init)
        .await;
    client
}

fn merge(base: &mut Value, overlay: &Value) {
    if let (Value::Object(b), Value::Object(o)) = (base, overlay) {
        for (k, v) in o {
            match b.get_mut(k) {
                Some(existing) if existing.is_object() => merge(existing, v),
                _ => {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

fn change(version: i32, line: u32, character: u32, text: &str) -> Value {
    let at = json!({"line": line, "character": character});
    json!({"textDocument": {"uri": URI, "version": version}, "contentChanges": [{"range": {"start": at, "end": at}, "text": text}]})
}

/// The server answers a request after the bad input.
async fn assert_still_serving(client: &mut LspClient) {
    let response = completion_at(client, URI, 0, 0).await;
    assert!(response.get("result").is_some(), "{response}");
}

async fn completion_at(client: &mut LspClient, uri: &str, line: u32, character: u32) -> Value {
    client
        .request("textDocument/completion", json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}))
        .await
}

#[tokio::test]
async fn a_burst_of_incremental_changes_applies_in_order() {
    let mut client = modelless(json!({})).await;
    client.open(URI, "").await;
    // Each edit appends a line at a position that exists only if every earlier edit applied.
    for i in 0..200u32 {
        client
            .notify("textDocument/didChange", change(i as i32 + 2, i, 0, "x\n"))
            .await;
    }
    let response = completion_at(&mut client, URI, 200, 0).await;
    assert!(
        response.get("error").is_none(),
        "line 200 exists after 200 ordered edits: {response}"
    );
    let past = completion_at(&mut client, URI, 202, 0).await;
    assert_eq!(past["error"]["code"], -32602);
    client.shutdown().await;
}

#[tokio::test]
async fn unknown_document_and_position_past_the_end_are_clear_errors() {
    let mut client = modelless(json!({})).await;
    let unknown = completion_at(&mut client, "file:///never/opened.rs", 0, 0).await;
    assert_eq!(unknown["error"]["code"], -32602);
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("never opened"),
        "{unknown}"
    );

    client.open(URI, "fn main() {}\n").await;
    let past = completion_at(&mut client, URI, 10, 0).await;
    assert!(
        past["error"]["message"]
            .as_str()
            .unwrap()
            .contains("past the end"),
        "{past}"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn malformed_json_rpc_gets_an_error_and_the_server_keeps_serving() {
    let mut client = modelless(json!({})).await;
    client.send_raw(b"Content-Length: 9\r\n\r\n{garbage}").await;
    let parse_error = client.next_error().await;
    assert_eq!(parse_error["error"]["code"], -32700, "{parse_error}");

    client.send(json!({"jsonrpc": "2.0", "id": 99, "method": "textDocument/completion", "params": {"bogus": true}})).await;
    let invalid = client.response(99).await;
    assert_eq!(invalid["error"]["code"], -32602, "{invalid}");

    client.open(URI, "fn main() {}\n").await;
    let fine = completion_at(&mut client, URI, 0, 0).await;
    assert!(fine.get("result").is_some(), "{fine}");
    client.shutdown().await;
}

#[tokio::test]
async fn invalid_config_is_shown_with_origin_key_and_reason_and_the_server_runs_on() {
    let mut client = modelless(json!({"autocomplete": {"budget_ms": 1}})).await;
    let message = client.show_message_containing("budget_ms").await;
    let text = message["params"]["message"].as_str().unwrap();
    assert!(text.contains("initializationOptions"), "{text}");
    assert!(text.contains("between 50 and 10000"), "{text}");
    assert_eq!(message["params"]["type"], 1, "an error");

    client.open(URI, "fn main() {}\n").await;
    assert_still_serving(&mut client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn invalid_workspace_configuration_names_its_origin() {
    let empty = tempfile::tempdir().unwrap().keep();
    let options = ServerOptions {
        model_dir: empty,
        workspace_configuration: json!({"autocomplete": {"output_tokens": "lots"}}),
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    client
        .initialize(
            json!({"workspace": {"configuration": true}}),
            json!({"local": {"auto_pull": false}}),
        )
        .await;
    let message = client.show_message_containing("output_tokens").await;
    assert!(
        message["params"]["message"]
            .as_str()
            .unwrap()
            .contains("workspace/configuration"),
        "{message}"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn a_missing_model_says_which_command_fixes_it_and_completions_stay_empty() {
    let mut client = modelless(json!({})).await;
    let message = client
        .show_message_containing("switchyard models pull")
        .await;
    assert_eq!(message["params"]["type"], 1);
    client.open(URI, "fn main() {\n    \n}\n").await;
    let response = client.inline_completion(URI, 1, 4).await;
    assert_eq!(response["result"]["items"], json!([]));
    client.shutdown().await;
}

#[tokio::test]
async fn a_file_that_is_not_a_model_is_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("broken.gguf");
    std::fs::write(&bogus, b"this is not a model").unwrap();
    let mut client = modelless(json!({"local": {"model": bogus.to_str().unwrap()}})).await;
    let message = client.show_message_containing("not a GGUF").await;
    assert_eq!(message["params"]["type"], 1);
    client.open(URI, "fn main() {}\n").await;
    assert_still_serving(&mut client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn logs_go_to_the_log_file_and_stdout_carries_only_protocol() {
    // The client's frame reader fails the test on any non-protocol byte.
    let mut client = modelless(json!({})).await;
    client.open(URI, "fn main() {}\n").await;
    completion_at(&mut client, URI, 0, 0).await;
    let mut log = client.log();
    for _ in 0..50 {
        if log.contains("switchyard language server starting") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        log = client.log();
    }
    assert!(log.contains("switchyard language server starting"), "{log}");
    client.shutdown().await;
}

#[tokio::test]
async fn a_broken_config_file_is_shown_to_the_user_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    std::fs::write(&path, "[local\nmodel = ").unwrap();
    let mut client = LspClient::spawn(ServerOptions {
        model_dir: dir.path().join("models"),
        args: vec!["--config".into(), path.to_str().unwrap().into()],
        ..Default::default()
    })
    .await;
    client
        .initialize(json!({}), json!({"local": {"auto_pull": false}}))
        .await;
    let shown = client.show_message_containing("broken.toml").await;
    assert_eq!(shown["params"]["type"], 1, "an error: {shown}");
    let status = client
        .call(
            "workspace/executeCommand",
            json!({"command": "switchyard.status"}),
        )
        .await;
    assert!(status.get("localOnly").is_some(), "{status}");
    client.shutdown().await;
}
