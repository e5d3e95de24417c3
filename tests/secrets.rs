//! No API key leaks (invariant 9), and state files are private. A realistic
//! session through the real binary, with distinctive keys in the environment:
//! the language server (explain and refactor, failures of every kind, a parked
//! refactor), `switchyard status --json` and the gateway; then every byte the
//! processes produced is searched for the keys: log files, every LSP message,
//! status JSON, gateway bodies, and every file under the state directory.
//!
//! The fakes are worse than real providers on purpose: the OpenAI fake quotes
//! the bearer key back in its 401 body, and an "echo" provider (a proxy that
//! dumps the request headers into a plain-text error) puts the key where error
//! quoting cuts the body short.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::actions::{DOC, URI, command, whole_function};
use support::fake_provider::{Behaviour, FakeProvider};
use support::lsp_client::{LspClient, ServerOptions};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::Command;

const ANTHROPIC_KEY: &str = "sk-ant-SECRET-a1b2c3d4e5f6a7b8c9d0";
const OPENAI_KEY: &str = "sk-proj-SECRET-0f1e2d3c4b5a69788796";
const ECHO_KEY: &str = "sk-echo-SECRET-5a5b5c5d5e5f60616263";
const GATEWAY_TOKEN: &str = "sy-gw-SECRET-token-77665544332211";

/// Any 10 consecutive characters of a key would say too much.
fn leaks(haystack: &str) -> Vec<String> {
    let mut found = Vec::new();
    for key in [ANTHROPIC_KEY, OPENAI_KEY, ECHO_KEY, GATEWAY_TOKEN] {
        for piece in key.as_bytes().windows(10) {
            let piece = std::str::from_utf8(piece).unwrap();
            // The shared `-SECRET-` infix is not itself secret.
            if piece.contains("SECRET") || piece.starts_with("sk-") || piece.starts_with("sy-gw") {
                continue;
            }
            if let Some(at) = haystack.find(piece) {
                let context =
                    &haystack.as_bytes()[at.saturating_sub(80)..(at + 80).min(haystack.len())];
                found.push(format!(
                    "{piece:?} in …{}…",
                    String::from_utf8_lossy(context)
                ));
                break;
            }
        }
        if haystack.contains(key) {
            found.push(format!("the whole key {key}"));
        }
    }
    found
}

/// A provider behind a proxy that answers every request with 401 and a
/// plain-text dump of the request headers, the key among them, starting just
/// before the point where error quoting cuts a body.
struct EchoProvider {
    url: String,
}

impl EchoProvider {
    async fn start() -> EchoProvider {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head);
                    let secret_lines: String = head
                        .lines()
                        .filter(|l| {
                            let l = l.to_ascii_lowercase();
                            l.starts_with("authorization") || l.starts_with("x-api-key")
                        })
                        .map(|l| l.split_once(':').map_or(l, |(_, v)| v.trim()))
                        .collect::<Vec<_>>()
                        .join(" ");
                    let body = format!(
                        "{}{secret_lines} <- not accepted here. Request was:\n{head}",
                        "-".repeat(290)
                    );
                    let response = format!(
                        "HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        EchoProvider { url }
    }
}

struct Fakes {
    primary: FakeProvider,
    secondary: FakeProvider,
    echo: EchoProvider,
}

impl Fakes {
    async fn start() -> Fakes {
        Fakes {
            primary: FakeProvider::start().await,
            secondary: FakeProvider::start().await,
            echo: EchoProvider::start().await,
        }
    }

    fn providers(&self) -> Value {
        json!({
            "echo": {"kind": "openai", "base_url": format!("{}/v1", self.echo.url), "api_key_env": "SY_ECHO_KEY"},
            "primary": {"kind": "anthropic", "base_url": self.primary.anthropic_url(), "api_key_env": "SY_ANTHROPIC_KEY"},
            "secondary": {"kind": "openai", "base_url": self.secondary.openai_url(), "api_key_env": "SY_OPENAI_KEY"}
        })
    }

    fn settings(&self) -> Value {
        json!({
            "local": {"auto_pull": false},
            "statusNotifications": true,
            "providers": self.providers(),
            "tiers": {
                "large": ["echo/big", "primary/big", "secondary/gpt-big"],
                "medium": ["echo/mid", "primary/mid", "secondary/gpt-mid"],
                "small": []
            },
            "tasks": {
                "explain": {"first_token_ms": 2000, "total_ms": 10000, "wait_ms": 0},
                "refactor": {"first_token_ms": 2000, "total_ms": 10000, "wait_ms": 0}
            },
            "resilience": {
                "backoff": {"rate_limit_ms": 20, "overloaded_ms": 20, "transient_ms": 20, "cap_ms": 100},
                // Keep every provider in play: the point is the error text, not the breaker.
                "breaker": {"failures": 1000, "cooldown_ms": 200},
                "resume_interval_ms": 200
            }
        })
    }
}

fn key_env() -> Vec<(String, String)> {
    vec![
        ("SY_ANTHROPIC_KEY".into(), ANTHROPIC_KEY.into()),
        ("SY_OPENAI_KEY".into(), OPENAI_KEY.into()),
        ("SY_ECHO_KEY".into(), ECHO_KEY.into()),
        ("SY_GATEWAY_TOKEN".into(), GATEWAY_TOKEN.into()),
    ]
}

/// Everything a session produced that a user or a log collector could see.
#[derive(Default)]
struct Transcript {
    parts: Vec<(String, String)>,
}

impl Transcript {
    fn add(&mut self, what: impl Into<String>, text: impl Into<String>) {
        self.parts.push((what.into(), text.into()));
    }

    fn add_files_under(&mut self, dir: &Path) {
        for path in files_under(dir) {
            let bytes = std::fs::read(&path).unwrap_or_default();
            self.add(path.display().to_string(), String::from_utf8_lossy(&bytes));
        }
    }

    fn assert_clean(&self) {
        let mut found = Vec::new();
        for (what, text) in &self.parts {
            for leak in leaks(text) {
                found.push(format!("{what}: {leak}"));
            }
        }
        assert!(found.is_empty(), "keys leaked:\n{}", found.join("\n"));
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn no_key_leaks_anywhere_and_state_files_are_private() {
    let fakes = Fakes::start().await;
    let state = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut transcript = Transcript::default();
    // Sanity: the search itself finds a key where there is one.
    assert!(!leaks(&format!("x {}y", &OPENAI_KEY[..20])).is_empty());

    // 1. The language server: every failure kind on the providers behind the echo.
    let mut env = key_env();
    env.push((
        "SWITCHYARD_STATE_DIR".into(),
        state.path().to_str().unwrap().into(),
    ));
    let mut client = LspClient::spawn(ServerOptions {
        model_dir: home.path().join("models"),
        env: env.clone(),
        ..Default::default()
    })
    .await;
    let capabilities = json!({"window": {"workDoneProgress": true, "showDocument": {"support": true}}, "workspace": {"applyEdit": true}});
    let init = client
        .initialize(capabilities.clone(), fakes.settings())
        .await;
    transcript.add("initialize result", init.to_string());
    client.open(URI, DOC).await;
    let failures = [
        (Behaviour::Unauthorized, Behaviour::Unauthorized),
        (
            Behaviour::RateLimited { retry_after: None },
            Behaviour::Unauthorized,
        ),
        (Behaviour::Unavailable, Behaviour::ServerError),
        (
            Behaviour::MalformedChunk {
                text: "half an answer".into(),
                after_chunks: 1,
            },
            Behaviour::Unauthorized,
        ),
        (
            Behaviour::CutAfter {
                text: "cut short answer".into(),
                after_chunks: 2,
            },
            Behaviour::QuotaExhausted,
        ),
        (Behaviour::ContextLength, Behaviour::Unauthorized),
        (Behaviour::Unauthorized, Behaviour::ok("finally an answer")),
    ];
    for (i, (primary, secondary)) in failures.into_iter().enumerate() {
        fakes.primary.push(primary.clone());
        fakes.secondary.push(secondary.clone());
        let name = if i % 2 == 0 {
            "switchyard.explain"
        } else {
            "switchyard.refactor"
        };
        let mut arguments = json!([URI, whole_function()]);
        if name == "switchyard.refactor" {
            arguments.as_array_mut().unwrap().push("Simplify.".into());
        }
        let response = command(&mut client, name, arguments).await;
        transcript.add(format!("{name} response {i}"), response.to_string());
    }
    // The OpenAI fake quoted the key back at least once: the test saw hostile text.
    assert!(
        fakes
            .secondary
            .requests()
            .iter()
            .any(|r| r.header("authorization") == Some(&format!("Bearer {OPENAI_KEY}"))),
        "the secondary was never asked"
    );

    // Pump what is still queued (status notifications, messages) into `seen`.
    client
        .maybe_notification("$/never", Duration::from_secs(2), |_| false)
        .await;
    for message in &client.seen {
        transcript.add("LSP message", message.to_string());
    }
    let lsp_log = client.log_path().to_owned();
    transcript.add("LSP log", client.log());
    assert!(
        client
            .seen
            .iter()
            .any(|m| m["method"] == "switchyard/status"),
        "no status notification seen"
    );
    assert!(!client.log().is_empty(), "{}", lsp_log.display());

    client.shutdown().await;

    // A refactor with nowhere to go but a provider that answers 503 parks: its
    // checkpoint (with the failure's text) stays after a kill -9. (Failures the
    // router routed around, judged entries skipped, left some script unused.)
    fakes.primary.clear_queue();
    fakes.secondary.clear_queue();
    fakes.primary.set_default(Behaviour::Unavailable);
    let mut parker = LspClient::spawn(ServerOptions {
        model_dir: home.path().join("models"),
        env: env.clone(),
        ..Default::default()
    })
    .await;
    let mut only_primary = fakes.settings();
    only_primary["tiers"] = json!({"large": ["primary/big"], "medium": [], "small": []});
    only_primary["tasks"]["refactor"]["wait_ms"] = json!(300);
    parker.initialize(capabilities, only_primary).await;
    parker.open(URI, DOC).await;
    let parked = command(
        &mut parker,
        "switchyard.refactor",
        json!([URI, whole_function(), "Rename everything."]),
    )
    .await;
    transcript.add("parked refactor response", parked.to_string());
    let parked_id = parked["result"]["parked"]
        .as_str()
        .unwrap_or_else(|| panic!("the refactor did not park: {parked}"))
        .to_owned();
    parker
        .notification("switchyard/status", |p| {
            p["parked"][0]["id"] == parked_id.as_str()
        })
        .await;
    for message in &parker.seen {
        transcript.add("LSP message (parker)", message.to_string());
    }
    transcript.add("LSP log (parker)", parker.log());
    drop(parker); // kill -9: the checkpoint stays

    // 2. `switchyard status --json`, reading the same state.
    let config = home.path().join("config.toml");
    let mut settings = fakes.settings();
    settings
        .as_object_mut()
        .unwrap()
        .remove("statusNotifications");
    settings["gateway"] = json!({"token_env": "SY_GATEWAY_TOKEN"});
    let toml_text = toml::to_string(&settings).unwrap();
    std::fs::write(&config, &toml_text).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "--log-file",
            home.path().join("status.log").to_str().unwrap(),
        ])
        .args(["status", "--json"])
        .env("SWITCHYARD_CONFIG", &config)
        .env("SWITCHYARD_STATE_DIR", state.path())
        .env("SWITCHYARD_MODEL_DIR", home.path().join("models"))
        .envs(key_env())
        .output()
        .await
        .unwrap();
    let status_json = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    serde_json::from_str::<Value>(&status_json).expect("status --json is JSON");
    transcript.add("status --json", status_json);
    transcript.add("status stderr", String::from_utf8_lossy(&status.stderr));

    // 3. The gateway, with the same failures behind it.
    let mut gateway = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "--log-file",
            home.path().join("gateway.log").to_str().unwrap(),
        ])
        .args(["gateway", "--listen", "127.0.0.1:0"])
        .env("SWITCHYARD_CONFIG", &config)
        .env("SWITCHYARD_STATE_DIR", state.path())
        .env("SWITCHYARD_MODEL_DIR", home.path().join("models"))
        .envs(key_env())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(gateway.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the gateway says where it listens")
        .unwrap()
        .unwrap();
    transcript.add("gateway stdout", first.clone());
    let url = first.rsplit(' ').next().unwrap().to_owned();
    let http = reqwest::Client::new();
    let ask = |model: &str, stream: bool| json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "What does entry do?"}]});
    fakes.primary.push(Behaviour::Unauthorized);
    fakes.secondary.push(Behaviour::Unauthorized);
    for (model, stream) in [
        ("switchyard/medium", false),
        ("switchyard/medium", true),
        ("secondary/gpt-mid", false),
        ("secondary/gpt-mid", true),
        ("echo/mid", false),
        ("primary/mid", true),
    ] {
        for token in [Some(GATEWAY_TOKEN), None, Some("wrong-token")] {
            let mut request = http
                .post(format!("{url}/v1/chat/completions"))
                .json(&ask(model, stream));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            let status = response.status();
            let headers = format!("{:?}", response.headers());
            let body = response.text().await.unwrap();
            transcript.add(
                format!("gateway {model} stream={stream} token={token:?} -> {status}"),
                format!("{headers}\n{body}"),
            );
        }
    }
    for path in ["/status", "/v1/models", "/health"] {
        for token in [Some(GATEWAY_TOKEN), None] {
            let mut request = http.get(format!("{url}{path}"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Ok(response) = request.send().await {
                let body = response.text().await.unwrap_or_default();
                transcript.add(format!("gateway GET {path}"), body);
            }
        }
    }
    gateway.start_kill().unwrap();
    let output = gateway.wait_with_output().await.unwrap();
    transcript.add("gateway stderr", String::from_utf8_lossy(&output.stderr));

    // 4. Every log and every state file.
    for log in ["status.log", "gateway.log"] {
        transcript.add(
            log,
            std::fs::read_to_string(home.path().join(log)).unwrap_or_default(),
        );
    }
    transcript.add(
        "LSP log after shutdown",
        std::fs::read_to_string(&lsp_log).unwrap_or_default(),
    );
    transcript.add_files_under(state.path());
    assert!(
        transcript
            .parts
            .iter()
            .any(|(_, t)| t.contains("[redacted]")),
        "no error text was scrubbed: the fakes' hostile text never came back, so this test proved nothing"
    );
    transcript.assert_clean();

    // 5. Private files: the shared state, the parked checkpoints, the probe history.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let shared = state.path().join("shared");
        let parked_dir = state.path().join("parked");
        assert!(shared.is_dir(), "no shared state was written");
        assert!(
            parked_dir.join(format!("{parked_id}.json")).is_file(),
            "no parked checkpoint was written"
        );
        let mut checked = 0;
        for dir in [&shared, &parked_dir] {
            assert_eq!(mode(dir), 0o700, "{}", dir.display());
            for file in files_under(dir) {
                assert_eq!(mode(&file), 0o600, "{}", file.display());
                checked += 1;
            }
        }
        let history = state.path().join("probes.jsonl");
        if history.exists() {
            assert_eq!(mode(&history), 0o600, "{}", history.display());
        }
        assert!(checked >= 2, "{checked} files checked");
    }
}
