//! Helix through the protocol it speaks: the client declares Helix's
//! capabilities (no inline completion, no custom notifications), sends the
//! `config` of editors/helix/languages.toml as initializationOptions and
//! answers `workspace/configuration` with null, as Helix does for a section
//! its config lacks. tests/editor_hx.rs drives the real `hx`.

mod support;

use serde_json::{Value, json};
use support::fake_provider::{Behaviour, FakeProvider};
use support::lsp_client::{LspClient, ServerOptions};
use support::poll;

const SNIPPET: &str = include_str!("../editors/helix/languages.toml");

/// What helix-lsp declares in `initialize` (the parts that matter to switchyard).
fn helix_capabilities() -> Value {
    json!({
        "general": {"positionEncodings": ["utf-8", "utf-32", "utf-16"]},
        "window": {"workDoneProgress": true, "showDocument": {"support": true}},
        "workspace": {
            "configuration": true,
            "applyEdit": true,
            "workspaceFolders": true,
            "didChangeConfiguration": {"dynamicRegistration": false},
            "executeCommand": {"dynamicRegistration": false},
            "workspaceEdit": {"documentChanges": true, "resourceOperations": ["create", "rename", "delete"], "failureHandling": "abort"}
        },
        "textDocument": {
            "completion": {
                "completionItem": {"snippetSupport": true, "insertReplaceSupport": true, "deprecatedSupport": true, "resolveSupport": {"properties": ["documentation", "detail", "additionalTextEdits"]}},
                "completionItemKind": {}
            },
            "codeAction": {
                "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["", "quickfix", "refactor", "refactor.extract", "refactor.inline", "refactor.rewrite", "source", "source.organizeImports"]}},
                "isPreferredSupport": true, "disabledSupport": true, "dataSupport": true
            },
            "publishDiagnostics": {"versionSupport": true}
        }
    })
}

fn snippet() -> Value {
    let parsed: toml::Value = toml::from_str(SNIPPET).expect("languages.toml parses as TOML");
    serde_json::to_value(parsed).unwrap()
}

/// The snippet's `config` with test-only additions merged over it (objects key by key).
fn initialization_options(extra: Value) -> Value {
    fn merge(base: &mut Value, overlay: Value) {
        match (base, overlay) {
            (Value::Object(base), Value::Object(overlay)) => {
                for (key, value) in overlay {
                    merge(base.entry(key).or_insert(Value::Null), value);
                }
            }
            (base, overlay) => *base = overlay,
        }
    }
    let mut options = snippet()["language-server"]["switchyard"]["config"].clone();
    merge(&mut options, extra);
    options
}

async fn helix(options: ServerOptions, extra: Value) -> LspClient {
    let mut client = LspClient::spawn(options).await;
    client
        .initialize(helix_capabilities(), initialization_options(extra))
        .await;
    client
}

/// A server with no model and no auto-pull: it reports the missing model,
/// which also tells that `initialized` has run and status changes are watched.
async fn helix_without_model(extra: Value) -> LspClient {
    let mut client = helix(no_models(), extra).await;
    client.show_message_containing("not downloaded").await;
    client
}

fn no_models() -> ServerOptions {
    ServerOptions {
        model_dir: tempfile::tempdir().unwrap().keep(),
        env: vec![("SY_FAKE_KEY".into(), "sk-test-helix-0123456789".into())],
        ..Default::default()
    }
}

#[test]
fn the_snippet_is_valid_helix_config_with_a_valid_server_config() {
    let snippet = snippet();
    let keys: Vec<&String> = snippet.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["language", "language-server"], "only Helix's tables");
    let server = &snippet["language-server"]["switchyard"];
    assert_eq!(server["command"], "switchyard");
    let languages = snippet["language"].as_array().unwrap();
    assert!(!languages.is_empty());
    for language in languages {
        let servers: Vec<&str> = language["language-servers"]
            .as_array()
            .unwrap_or_else(|| panic!("{language} lists language-servers"))
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert!(
            servers.len() >= 2 && servers.last() == Some(&"switchyard"),
            "{}: the language's own server, then switchyard: {servers:?}",
            language["name"]
        );
    }
    let layers = switchyard_config::ConfigLayers {
        initialization_options: Some(server["config"].clone()),
        ..Default::default()
    };
    let (_, errors) = layers.resolve();
    assert!(errors.is_empty(), "the config is valid: {errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_items_carry_the_suggestion_text() {
    // The smallest input budget the engine sizes to, so answers hold on a loaded machine.
    let extra = json!({"local": {"auto_pull": false}, "autocomplete": {"input_tokens": 256}});
    let mut client = helix(ServerOptions::default(), extra).await;
    // Helix shows the load as $/progress; waiting on it also answers the server's
    // workspace/configuration request, which `initialized` awaits before loading.
    client
        .notification("$/progress", |p| {
            p["value"]["kind"] == "end"
                && p["value"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("ready"))
        })
        .await;
    let text = support::SAMPLE_RUST.replace(
        "        let before = self.entries.len();\n",
        "        let before = self.entries.len();\n        \n",
    );
    let line = text.lines().position(|l| l == "        ").unwrap() as u32;
    let uri = "file:///work/store.rs";
    client.open(uri, &text).await;

    // Helix asks again as the user types; empty answers are on time while the cache is cold.
    let ask = async || {
        let result = client
            .call(
                "textDocument/completion",
                json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": 8}}),
            )
            .await;
        assert_eq!(result["isIncomplete"], true, "{result}");
        match result["items"].as_array().and_then(|items| items.first()) {
            Some(first) => Ok(first.clone()),
            None => Err(result),
        }
    };
    let item = poll::eventually(poll::PATIENCE, ask)
        .await
        .unwrap_or_else(|result| panic!("no completion item: {result}"));
    let new_text = item["textEdit"]["newText"]
        .as_str()
        .unwrap_or_else(|| panic!("a completion item with a text edit: {item}"));
    assert!(!new_text.trim().is_empty());
    assert_eq!(
        item["textEdit"]["range"]["end"],
        json!({"line": line, "character": 8})
    );
    // The label is the start of the first non-blank line (Helix shows it in the menu).
    let label = item["label"].as_str().unwrap();
    let first_line = new_text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap()
        .trim();
    assert!(
        !label.is_empty() && first_line.starts_with(label),
        "{label:?} starts {first_line:?}"
    );
    assert!(
        client
            .seen
            .iter()
            .all(|m| m["method"] != "switchyard/status"),
        "Helix did not opt in to custom notifications"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn status_changes_reach_show_message_and_actions_show_progress() {
    let primary = FakeProvider::with_default(Behaviour::Unavailable).await;
    let secondary = FakeProvider::with_default(Behaviour::ok("It counts words.")).await;
    let extra = json!({
        "local": {"auto_pull": false},
        "providers": {
            "primary": {"kind": "anthropic", "base_url": primary.anthropic_url(), "api_key_env": "SY_FAKE_KEY"},
            "secondary": {"kind": "openai", "base_url": secondary.openai_url(), "api_key_env": "SY_FAKE_KEY"}
        },
        "tiers": {"large": ["primary/big"], "medium": ["primary/mid", "secondary/gpt-test"], "small": ["local"]}
    });
    let mut client = helix_without_model(extra).await;
    let uri = "file:///work/count.rs";
    client
        .open(
            uri,
            "fn count(words: &[&str]) -> usize {\n    words.len()\n}\n",
        )
        .await;

    // Space-a in Helix lists the code actions; picking Explain runs its command.
    let actions = client
        .call("textDocument/codeAction", json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 4}}, "context": {"diagnostics": []}}))
        .await;
    let explain = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"] == "switchyard: Explain")
        .expect("an Explain action")["command"]
        .clone();
    let result = client.call("workspace/executeCommand", explain).await;
    assert_eq!(result["provider"], "secondary");

    let moved = client
        .show_message_containing("explain now served by secondary/gpt-test")
        .await;
    assert_eq!(moved["params"]["type"], 3, "info: {moved}");
    assert!(
        client.seen.iter().any(|m| {
            m["method"] == "$/progress"
                && m["params"]["value"]["kind"] == "begin"
                && m["params"]["value"]["title"]
                    .as_str()
                    .is_some_and(|t| t.contains("explain"))
        }),
        "progress for display-progress-messages: {:?}",
        client.seen
    );
    client.shutdown().await;
}

#[tokio::test]
async fn the_toggle_works_without_arguments() {
    let mut client = helix_without_model(json!({"local": {"auto_pull": false}})).await;
    // `:lsp-workspace-command switchyard.toggleLocalOnly` sends no arguments at all.
    let on = client
        .call(
            "workspace/executeCommand",
            json!({"command": "switchyard.toggleLocalOnly"}),
        )
        .await;
    assert_eq!(on, json!({"localOnly": true}));
    client.show_message_containing("local-only mode on").await;
    let config = std::fs::read_to_string(client.config_file()).unwrap();
    assert!(config.contains("local_only = true"), "{config}");

    let off = client
        .call(
            "workspace/executeCommand",
            json!({"command": "switchyard.toggleLocalOnly"}),
        )
        .await;
    assert_eq!(off, json!({"localOnly": false}));
    client.show_message_containing("local-only mode off").await;
    client.shutdown().await;
}
