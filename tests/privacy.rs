//! What leaves the machine, counted at the fake provider: documents matched
//! by a path rule never reach it (explain, refactor, remote autocomplete);
//! thirty real-format fake secrets in a selection reach it only as
//! placeholders, and a refactor's applied edit has them back; the gateway
//! redacts its callers' messages unless told not to; the outbound audit
//! records every remote request without its text. Also a property test of
//! the redaction rules and their false positives on ordinary code.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use proptest::prelude::*;
use serde_json::{Value, json};
use support::actions::command;
use support::fake_provider::{Behaviour, FakeProvider};
use support::gateway::GatewayProcess;
use support::lsp_client::{LspClient, ServerOptions};
use support::scenario::merge;
use support::secrets::{FAKE_SECRETS, document, tell_tales};
use switchyard_privacy::redact;

const KEY: &str = "sk-test-privacy-0123456789abcdef";

/// A server with the fake as every remote tier and the first autocomplete
/// entry, no local model, and `root` as its workspace.
async fn server(fake: &FakeProvider, root: &Path) -> LspClient {
    server_with(fake, root, json!({})).await
}

/// [`server`] with `settings` laid over its own.
async fn server_with(fake: &FakeProvider, root: &Path, settings: Value) -> LspClient {
    let options = ServerOptions {
        model_dir: root.join("no-models"),
        env: vec![("SY_FAKE_KEY".into(), KEY.into())],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    let mut init = json!({
        "local": {"auto_pull": false},
        "providers": {"fake": {"kind": "anthropic", "base_url": fake.anthropic_url(), "api_key_env": "SY_FAKE_KEY"}},
        "tiers": {"large": ["fake/big"], "medium": ["fake/mid"], "small": ["local"]},
        "autocomplete": {"chain": ["fake/fim", "local"]},
        "statusNotifications": true,
    });
    merge(&mut init, settings);
    let root_uri = format!("file://{}", root.display());
    client
        .call(
            "initialize",
            json!({"processId": null, "rootUri": root_uri, "capabilities": {
                "window": {"workDoneProgress": true, "showDocument": {"support": true}},
                "workspace": {"applyEdit": true, "didChangeWatchedFiles": {"dynamicRegistration": true}}
            }, "initializationOptions": init}),
        )
        .await;
    client.notify("initialized", json!({})).await;
    client
}

fn uri(root: &Path, path: &str) -> String {
    format!("file://{}", root.join(path).display())
}

fn everything(text: &str) -> Value {
    let lines = text.lines().count() as u32;
    json!({"start": {"line": 0, "character": 0}, "end": {"line": lines, "character": 0}})
}

/// What the fake was sent, canaries left out.
fn sent(fake: &FakeProvider) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| !r.is_canary())
        .map(|r| r.body.to_string())
        .collect()
}

#[tokio::test]
async fn documents_a_path_rule_names_never_leave_the_machine() {
    let fake = FakeProvider::with_default(Behaviour::ok("An answer.")).await;
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join(".switchyardignore"), "internal/\n").unwrap();
    let mut client = server(&fake, root.path()).await;
    let env = uri(root.path(), ".env");
    let billing = uri(root.path(), "internal/billing.rs");
    client.open(&env, &document()).await;
    client
        .open(&billing, "fn rate() -> u32 {\n    7\n}\n")
        .await;

    for (doc, rule) in [(&env, "`.env` (default rules)"), (&billing, "`internal/`")] {
        let text = if doc == &env {
            document()
        } else {
            "fn rate() -> u32 {\n    7\n}\n".into()
        };
        let explained = command(
            &mut client,
            "switchyard.explain",
            json!([doc, everything(&text)]),
        )
        .await;
        let refactored = command(
            &mut client,
            "switchyard.refactor",
            json!([doc, everything(&text), "Sort the lines."]),
        )
        .await;
        for response in [explained, refactored] {
            let message = response["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(rule) && message.contains("nothing was sent"),
                "{response}"
            );
        }
        // Typing in it asks the local model only (none here), never the remote entry.
        let completion = client
            .request(
                "textDocument/completion",
                json!({"textDocument": {"uri": doc}, "position": {"line": 1, "character": 2}}),
            )
            .await;
        assert!(completion.get("error").is_none(), "{completion}");
    }
    assert_eq!(sent(&fake), Vec::<String>::new());
    client.shutdown().await;
}

#[tokio::test]
async fn a_refactor_parked_before_its_file_became_local_only_is_not_sent_when_it_resumes() {
    let fake = FakeProvider::with_default(Behaviour::Unavailable).await;
    let root = tempfile::tempdir().unwrap();
    let quick_parking = json!({
        "tasks": {"refactor": {"first_token_ms": 3000, "total_ms": 10000, "wait_ms": 300}},
        "resilience": {
            "backoff": {"rate_limit_ms": 50, "overloaded_ms": 50, "transient_ms": 50, "cap_ms": 200},
            "breaker": {"failures": 3, "cooldown_ms": 500},
            "resume_interval_ms": 200
        }
    });
    let mut client = server_with(&fake, root.path(), quick_parking).await;
    let billing = uri(root.path(), "billing.rs");
    let text = "fn rate() -> u32 {\n    7\n}\n";
    client.open(&billing, text).await;
    let response = command(
        &mut client,
        "switchyard.refactor",
        json!([billing, everything(text), "Inline the constant."]),
    )
    .await;
    assert!(response["result"]["parked"].is_string(), "{response}");

    // The user marks the file local-only (a request after it is answered
    // once the change is in force), then the provider recovers.
    client
        .notify(
            "workspace/didChangeConfiguration",
            json!({"settings": {"switchyard": {"privacy": {"local_only_paths": ["billing.rs"]}}}}),
        )
        .await;
    command(&mut client, "switchyard.status", json!([])).await;
    let sent_before = sent(&fake).len();
    fake.set_default(Behaviour::ok("```rust\nfn rate() -> u32 { 7 }\n```"));
    let resumed = client
        .notification("$/progress", |p| {
            let resume = p["token"]
                .as_str()
                .unwrap_or_default()
                .starts_with("switchyard/resume/");
            let message = p["value"]["message"].as_str().unwrap_or_default();
            resume && p["value"]["kind"] == "end" && !message.starts_with("still parked")
        })
        .await;
    let outcome = resumed["params"]["value"]["message"].as_str().unwrap();
    assert!(
        outcome.contains("local-only path rule `billing.rs`")
            && outcome.contains("nothing was sent"),
        "{outcome}"
    );
    assert_eq!(
        sent(&fake).len(),
        sent_before,
        "the resumed refactor reached the provider"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn a_switchyardignore_written_while_the_editor_runs_applies_to_the_next_request() {
    let fake = FakeProvider::with_default(Behaviour::ok("An answer.")).await;
    let root = tempfile::tempdir().unwrap();
    let mut client = server(&fake, root.path()).await;
    let registration = client.server_request("client/registerCapability").await;
    let watcher = &registration["params"]["registrations"][0]["registerOptions"]["watchers"][0];
    assert_eq!(
        watcher["globPattern"], "**/.switchyardignore",
        "{registration}"
    );
    let notes = uri(root.path(), "notes.rs");
    let text = "fn total() -> u32 {\n    7\n}\n";
    client.open(&notes, text).await;
    let explain = json!([notes, everything(text)]);
    let served = command(&mut client, "switchyard.explain", explain.clone()).await;
    assert!(served["result"]["provider"].is_string(), "{served}");
    let sent_before = sent(&fake).len();

    std::fs::write(root.path().join(".switchyardignore"), "notes.rs\n").unwrap();
    let ignore_file = uri(root.path(), ".switchyardignore");
    client
        .notify(
            "workspace/didChangeWatchedFiles",
            json!({"changes": [{"uri": ignore_file, "type": 1}]}),
        )
        .await;
    let refused = command(&mut client, "switchyard.explain", explain).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`notes.rs`") && message.contains("nothing was sent"),
        "{refused}"
    );
    assert_eq!(sent(&fake).len(), sent_before);
    client.shutdown().await;
}

#[tokio::test]
async fn a_local_only_workspace_keeps_its_documents_and_the_status_says_why() {
    let fake = FakeProvider::with_default(Behaviour::ok("An answer.")).await;
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let privacy = json!({"privacy": {"local_only_workspaces": [root.path()]}});
    let mut client = server_with(&fake, root.path(), privacy).await;
    let status = client
        .notification("switchyard/status", |p| !p["localOnlyRule"].is_null())
        .await;
    let rule = status["params"]["localOnlyRule"].as_str().unwrap();
    assert!(rule.contains("privacy.local_only_workspaces"), "{rule}");
    assert_eq!(
        status["params"]["localOnly"], false,
        "the global mode stays off"
    );

    let text = "fn rate() -> u32 {\n    7\n}\n";
    let inside = uri(root.path(), "src/rate.rs");
    let outside = uri(elsewhere.path(), "rate.rs");
    client.open(&inside, text).await;
    client.open(&outside, text).await;
    let refused = command(
        &mut client,
        "switchyard.explain",
        json!([inside, everything(text)]),
    )
    .await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is local-only") && message.contains("nothing was sent"),
        "{refused}"
    );
    assert!(sent(&fake).is_empty());
    let served = command(
        &mut client,
        "switchyard.explain",
        json!([outside, everything(text)]),
    )
    .await;
    assert_eq!(served["result"]["provider"], "fake", "{served}");
    assert_eq!(sent(&fake).len(), 1);
    client.shutdown().await;
}

#[tokio::test]
async fn secrets_leave_only_as_placeholders_and_a_refactor_puts_them_back() {
    let fake = FakeProvider::with_default(Behaviour::ok("It configures the services.")).await;
    let root = tempfile::tempdir().unwrap();
    let mut client = server(&fake, root.path()).await;
    let doc = uri(root.path(), "deploy/settings.conf");
    let text = document();
    client.open(&doc, &text).await;

    let explained = command(
        &mut client,
        "switchyard.explain",
        json!([doc, everything(&text)]),
    )
    .await;
    assert!(explained.get("error").is_none(), "{explained}");
    let bodies = sent(&fake);
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    for secret in tell_tales() {
        let escaped = serde_json::to_string(secret).unwrap();
        let escaped = escaped.trim_matches('"');
        assert!(!bodies[0].contains(escaped), "{secret} was sent");
    }
    // One placeholder per secret, in the document's order.
    let placeholders: Vec<String> = regex::Regex::new(r"REDACTED_[A-Z_]+_[0-9a-f]{8}")
        .unwrap()
        .find_iter(&bodies[0])
        .map(|m| m.as_str().to_owned())
        .collect();
    assert_eq!(placeholders.len(), FAKE_SECRETS.len(), "{}", bodies[0]);

    // The model rewrites every line and keeps the placeholders; the edit
    // applied to the file has the secrets back.
    let rewrite: Vec<String> = FAKE_SECRETS
        .iter()
        .zip(&placeholders)
        .map(|((line, _), placeholder)| format!("# {}", line.replace("{}", placeholder)))
        .collect();
    fake.set_default(Behaviour::ok(&format!("```\n{}\n```", rewrite.join("\n"))));
    let refactored = command(
        &mut client,
        "switchyard.refactor",
        json!([doc, everything(&text), "Comment every line out."]),
    )
    .await;
    assert_eq!(refactored["result"]["applied"], true, "{refactored}");
    let edit = client
        .seen
        .iter()
        .find(|m| m["method"] == "workspace/applyEdit")
        .expect("the refactor was applied")
        .clone();
    let applied: String = edit["params"]["edit"]["documentChanges"][0]["edits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["newText"].as_str().unwrap())
        .collect();
    // Only changed lines are edited: the private key's body lines stay as they are.
    let expected: String = FAKE_SECRETS
        .iter()
        .map(|(line, secret)| {
            let restored = format!("# {}", line.replace("{}", secret));
            format!("{}\n", restored.lines().next().unwrap())
        })
        .collect();
    assert_eq!(applied, expected);
    assert!(!applied.contains("REDACTED_"));

    // The audit names both requests, their size and redactions, never the text.
    let log = client.state_dir().join("outbound.jsonl");
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let audit = std::fs::read_to_string(&log).unwrap();
    let records: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tasks: Vec<&str> = records
        .iter()
        .map(|r| r["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["explain", "refactor"], "{audit}");
    for record in &records {
        assert_eq!(record["front_end"], "lsp");
        assert_eq!(record["provider"], "fake");
        assert_eq!(record["subject"], doc.as_str());
        assert_eq!(record["redactions"], FAKE_SECRETS.len());
        assert!(
            record["bytes"].as_u64() > Some(text.len() as u64 / 2),
            "{record}"
        );
    }
    for secret in tell_tales() {
        assert!(!audit.contains(secret), "{secret} is in the audit");
    }
    assert!(!audit.contains("EndpointSuffix"), "the audit holds no text");

    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["audit", "--since", "1h"])
        .env("SWITCHYARD_STATE_DIR", client.state_dir())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.starts_with("2 remote requests in the last 1h"),
        "{shown}"
    );
    assert!(shown.contains("60 secrets redacted"), "{shown}");
    client.shutdown().await;
}

#[tokio::test]
async fn a_remote_completion_that_copies_a_placeholder_shows_the_users_secret() {
    const TOKEN: &str = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
    let fake = FakeProvider::with_default(Behaviour::ok("It sets two tokens.")).await;
    let root = tempfile::tempdir().unwrap();
    let mut client = server(&fake, root.path()).await;
    let doc = uri(root.path(), "deploy.py");
    let text = format!("GITHUB_TOKEN = \"{TOKEN}\"\nBACKUP_TOKEN = \n");
    client.open(&doc, &text).await;
    // The placeholder the provider sees for the token (the explain tells it).
    command(
        &mut client,
        "switchyard.explain",
        json!([doc, everything(&text)]),
    )
    .await;
    let placeholder = regex::Regex::new(r"REDACTED_GITHUB_TOKEN_[0-9a-f]{8}")
        .unwrap()
        .find(&sent(&fake)[0])
        .expect("the token went out as a placeholder")
        .as_str()
        .to_owned();

    fake.set_default(Behaviour::ok(&format!("\"{placeholder}\"")));
    let completion = client
        .request(
            "textDocument/completion",
            json!({"textDocument": {"uri": doc}, "position": {"line": 1, "character": 15}}),
        )
        .await;
    let fim = sent(&fake).pop().unwrap();
    assert!(fim.contains(&placeholder) && !fim.contains(TOKEN), "{fim}");
    let item = &completion["result"]["items"][0];
    let inserted = item["textEdit"]["newText"]
        .as_str()
        .or(item["insertText"].as_str())
        .unwrap_or_else(|| panic!("{completion}"));
    assert!(
        inserted.contains(TOKEN) && !inserted.contains("REDACTED_"),
        "{inserted}"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn the_gateway_redacts_its_callers_messages_unless_told_not_to() {
    for redact in [true, false] {
        let fake = FakeProvider::with_default(Behaviour::ok("Fine.")).await;
        let config = format!(
            "[local]\nauto_pull = false\n\n[providers.fake]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"SY_FAKE_KEY\"\n\n[tiers]\nlarge = [\"fake/big\"]\nmedium = [\"fake/mid\"]\nsmall = []\n\n[privacy]\nredact_gateway = {redact}\n",
            fake.openai_url()
        );
        let gateway = GatewayProcess::start(&config, &[("SY_FAKE_KEY", KEY)]).await;
        let body = json!({"model": "switchyard", "messages": [
            {"role": "user", "content": format!("Why does this fail?\n{}", document())}
        ]});
        let response = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", gateway.url))
            .header("x-switchyard-task", "explain")
            .header("user-agent", "privacy-test")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        let bodies = sent(&fake);
        let leaked = tell_tales()
            .iter()
            .filter(|secret| {
                let escaped = serde_json::to_string(secret).unwrap();
                bodies.iter().any(|b| b.contains(escaped.trim_matches('"')))
            })
            .count();
        if redact {
            assert_eq!(leaked, 0, "{bodies:?}");
            let audit =
                std::fs::read_to_string(gateway.home.path().join("state/outbound.jsonl")).unwrap();
            assert!(audit.contains("\"front_end\":\"gateway\""), "{audit}");
            assert!(audit.contains("\"subject\":\"privacy-test\""), "{audit}");
            let status: Value = reqwest::get(format!("{}/status", gateway.url))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(status["outbound"][0]["provider"], "fake", "{status}");
            assert_eq!(status["outbound"][0]["requests"], 1, "{status}");
        } else {
            assert_eq!(leaked, FAKE_SECRETS.len());
        }
    }
}

/// Lines of ordinary code: this project's own sources, without the file
/// that holds fake secrets on purpose.
static ORDINARY_CODE: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(read_sources);

fn read_sources() -> Vec<String> {
    code_lines(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// Every line of the Rust, Python, JavaScript and TypeScript files under
/// `root`, but the redaction rules' own.
fn code_lines(root: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path
                .extension()
                .is_some_and(|e| ["rs", "py", "js", "ts"].iter().any(|x| e == *x))
                && !path.ends_with("privacy/redact.rs")
            {
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue; // not UTF-8
                };
                lines.extend(text.lines().map(str::to_owned));
            }
        }
    }
    lines
}

/// The lines the rules redact something in.
fn flagged_lines(lines: &[String]) -> Vec<&String> {
    lines
        .iter()
        .filter(|line| redact::redact(line).count > 0)
        .collect()
}

#[test]
fn ordinary_code_is_left_alone() {
    let lines = &*ORDINARY_CODE;
    let flagged = flagged_lines(lines);
    println!(
        "false positives: {} of {} lines of switchyard's own sources",
        flagged.len(),
        lines.len()
    );
    assert!(flagged.is_empty(), "{flagged:#?}");
    // REDACTION_CORPUS=dir:dir… measures other sources too (BENCHMARKS.md).
    for dir in std::env::var("REDACTION_CORPUS")
        .unwrap_or_default()
        .split(':')
    {
        if dir.is_empty() {
            continue;
        }
        let lines = code_lines(Path::new(dir));
        let flagged = flagged_lines(&lines);
        println!(
            "false positives: {} of {} lines of {dir}",
            flagged.len(),
            lines.len()
        );
        for line in flagged {
            println!("  {}", line.trim());
        }
    }
}

fn secret() -> impl Strategy<Value = String> {
    prop_oneof![
        "AKIA[A-Z2-7]{16}",
        "ghp_[A-Za-z0-9]{36}",
        "sk-proj-[A-Za-z0-9_-]{40,60}",
        "sk-ant-api03-[A-Za-z0-9_-]{60,90}",
        "xoxb-[0-9]{11}-[0-9]{12}-[A-Za-z0-9]{24}",
        "glpat-[A-Za-z0-9_-]{20}",
        "AIza[0-9A-Za-z_-]{35}",
        "eyJ[A-Za-z0-9_-]{12,40}\\.eyJ[A-Za-z0-9_-]{12,40}\\.[A-Za-z0-9_-]{20,43}",
    ]
}

/// A secret as it sits in code: bare, in an assignment, in a URL.
fn planted() -> impl Strategy<Value = (String, String)> {
    let known = (
        secret(),
        prop_oneof![
            Just("let key = \"{}\";"),
            Just("TOKEN={}"),
            Just("headers = {{\"Authorization\": \"Bearer {}\"}}"),
            Just("    client = Client(api_key=\"{}\")"),
        ],
    )
        .prop_map(|(s, line)| (line.replace("{}", &s), s));
    let password = "[A-Za-z0-9]{6,10}[0-9][A-Z]".prop_flat_map(|s| {
        prop_oneof![
            Just((format!("DB_PASSWORD=\"{s}\""), s.clone())),
            Just((format!("postgres://app:{s}@db:5432/x"), s.clone())),
            Just((format!("\"client_secret\": \"{s}\","), s.clone())),
        ]
    });
    prop_oneof![known, password]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn secrets_planted_in_ordinary_code_are_redacted_and_put_back(
        picks in proptest::collection::vec((any::<prop::sample::Index>(), planted()), 1..6)
    ) {
        let mut lines: Vec<String> = ORDINARY_CODE.iter().take(40).cloned().collect();
        let mut secrets = Vec::new();
        for (at, (line, secret)) in picks {
            lines.insert(at.index(lines.len() + 1), line);
            secrets.push(secret);
        }
        let text = lines.join("\n");
        let redacted = redact::redact(&text);
        for secret in &secrets {
            prop_assert!(!redacted.text.contains(secret.as_str()), "{secret} kept in {}", redacted.text);
        }
        prop_assert_eq!(redact::restore(&redacted.text, &[&text]), text);
    }
}
