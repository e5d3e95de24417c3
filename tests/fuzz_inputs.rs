//! Hostile input, as property tests (proptest; cargo-fuzz needs a nightly
//! toolchain): JSON-RPC frames fed to the real binary, SSE streams of both wire
//! formats fed to the real providers over loopback HTTP, and configuration
//! layers fed to `ConfigLayers::resolve` and `read_file`. Inputs that once broke
//! something are kept below as plain `#[test]`s with the minimal input.
//!
//! Case counts are small for CI; `PROPTEST_CASES=N` raises them all (see
//! docs/HOSTILE.md for the long run).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::{Value, json};
use switchyard_config::{ConfigLayers, read_file};
use switchyard_providers::{
    AnthropicProvider, ChatMessage, ChatRequest, FailureKind, OpenAiProvider, Provider,
    ProviderError, Role, Secret, StreamEvent, Timeouts,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// Generous: these waits catch hangs and deaths, they do not measure speed.
const WAIT: Duration = Duration::from_secs(60);

/// `PROPTEST_CASES` when set, else `default` (kept small enough for CI).
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        // Minimal failing inputs are kept as explicit tests, not in files beside the source.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Fails the test with proptest's report (the minimal failing input).
fn check<T: std::fmt::Debug>(result: Result<(), proptest::test_runner::TestError<T>>) {
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------
// JSON-RPC framing, through the real binary's stdio.
// ---------------------------------------------------------------------------

/// A `switchyard` language server whose stdout is checked frame by frame.
struct Server {
    child: Child,
    stdin: ChildStdin,
    incoming: mpsc::UnboundedReceiver<Value>,
    /// Anything on stdout that is not a `Content-Length` frame of JSON-RPC 2.0.
    violations: Arc<Mutex<Vec<String>>>,
    home: tempfile::TempDir,
}

impl Server {
    async fn spawn() -> Server {
        let home = tempfile::tempdir().unwrap();
        // No model download, no real provider: hostile input must not reach the network.
        std::fs::write(
            home.path().join("config.toml"),
            "[local]\nauto_pull = false\n[tiers]\nlarge = []\nmedium = []\nsmall = []\n",
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["--log-file", home.path().join("log").to_str().unwrap()])
            .env("SWITCHYARD_CONFIG", home.path().join("config.toml"))
            .env("SWITCHYARD_STATE_DIR", home.path().join("state"))
            .env("SWITCHYARD_MODEL_DIR", home.path().join("models"))
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let violations = Arc::new(Mutex::new(Vec::new()));
        let (tx, incoming) = mpsc::unbounded_channel();
        tokio::spawn(read_frames(stdout, tx, violations.clone()));
        Server {
            child,
            stdin,
            incoming,
            violations,
            home,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("log")).unwrap_or_default()
    }

    fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    /// Writes `bytes`; false when the server no longer reads.
    async fn write(&mut self, bytes: &[u8]) -> bool {
        self.stdin.write_all(bytes).await.is_ok() && self.stdin.flush().await.is_ok()
    }

    /// Sends a request and waits for its answer, answering the server's own
    /// requests meanwhile (a handler waiting on one would hold a slot).
    async fn answer_to(&mut self, id: &str) -> Result<Value, String> {
        let probe = json!({"jsonrpc": "2.0", "id": id, "method": "switchyard/fuzzProbe"});
        if !self
            .write(&frame(&serde_json::to_vec(&probe).unwrap()))
            .await
        {
            return Err("stdin closed: the server is gone".into());
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let message = match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Err(_) => return Err(format!("no answer to {id} within {WAIT:?}")),
                Ok(None) => return Err("stdout closed: the server is gone".into()),
                Ok(Some(message)) => message,
            };
            if message.get("method").is_some() {
                if let Some(request_id) = message.get("id") {
                    let answer = json!({"jsonrpc": "2.0", "id": request_id, "result": null});
                    self.write(&frame(&serde_json::to_vec(&answer).unwrap()))
                        .await;
                }
                continue;
            }
            if message["id"] == id {
                return Ok(message);
            }
        }
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// Strict reader of the server's stdout: exactly `Content-Length: N` headers,
/// a blank line, and a JSON-RPC 2.0 body. Stops at the first violation.
async fn read_frames(
    mut stdout: BufReader<tokio::process::ChildStdout>,
    tx: mpsc::UnboundedSender<Value>,
    violations: Arc<Mutex<Vec<String>>>,
) {
    let violation = |what: String| violations.lock().unwrap().push(what);
    loop {
        let mut length = None;
        loop {
            let mut line = Vec::new();
            match stdout.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == b"\r\n" {
                break;
            }
            let text = String::from_utf8_lossy(&line);
            match text
                .strip_prefix("Content-Length: ")
                .and_then(|v| v.strip_suffix("\r\n"))
                .and_then(|v| v.parse::<usize>().ok())
            {
                Some(n) => length = Some(n),
                None => return violation(format!("not a frame header: {text:?}")),
            }
        }
        let Some(length) = length else {
            return violation("a frame without Content-Length".into());
        };
        let mut body = vec![0; length];
        if stdout.read_exact(&mut body).await.is_err() {
            return violation("stdout ended inside a frame".into());
        }
        match serde_json::from_slice::<Value>(&body) {
            Ok(message) if message["jsonrpc"] == "2.0" => {
                if tx.send(message).is_err() {
                    return;
                }
            }
            _ => {
                return violation(format!(
                    "a frame that is not JSON-RPC 2.0: {}",
                    String::from_utf8_lossy(&body)
                ));
            }
        }
    }
}

/// JSON of any shape, with LSP-ish keys so objects sometimes mean something.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("uri".to_owned()),
        Just("textDocument".to_owned()),
        Just("position".to_owned()),
        Just("line".to_owned()),
        Just("character".to_owned()),
        Just("text".to_owned()),
        Just("command".to_owned()),
        Just("arguments".to_owned()),
        Just("id".to_owned()),
        Just("capabilities".to_owned()),
        Just("initializationOptions".to_owned()),
        "[a-zA-Z_$/]{0,10}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        Just(json!("file:///fuzz.rs")),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// A method name: real ones (never `exit`, which ends the session by design) or noise.
fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("initialize".to_owned()),
        Just("initialized".to_owned()),
        Just("textDocument/didOpen".to_owned()),
        Just("textDocument/didChange".to_owned()),
        Just("textDocument/didClose".to_owned()),
        Just("textDocument/inlineCompletion".to_owned()),
        Just("textDocument/codeAction".to_owned()),
        Just("workspace/executeCommand".to_owned()),
        Just("workspace/didChangeConfiguration".to_owned()),
        Just("$/cancelRequest".to_owned()),
        "[a-zA-Z/$]{0,16}".prop_filter("not exit", |m| m != "exit" && m != "shutdown"),
    ]
}

/// A JSON-RPC-shaped message, then possibly damaged: wrong types, duplicated
/// keys, cut short, bytes flipped.
fn message_body() -> impl Strategy<Value = Vec<u8>> {
    let id = prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::from),
        Just(Value::Null),
        json_value(),
    ];
    let shaped = (
        prop::option::of(id),
        prop::option::of(method()),
        prop::option::of(json_value()),
        prop_oneof![Just(json!("2.0")), Just(json!("1.0")), json_value()],
        0..4u8,
    )
        .prop_map(|(id, method, params, version, extra)| {
            let mut m = serde_json::Map::new();
            m.insert("jsonrpc".into(), version);
            if let Some(id) = id {
                m.insert("id".into(), id);
            }
            if let Some(method) = method {
                m.insert("method".into(), method.into());
            }
            match extra {
                0 => {}
                1 => {
                    m.insert("result".into(), params.clone().unwrap_or(Value::Null));
                }
                2 => {
                    m.insert("error".into(), params.clone().unwrap_or(json!(5)));
                }
                _ => {}
            }
            if let Some(params) = params {
                m.insert("params".into(), params);
            }
            serde_json::to_vec(&Value::Object(m)).unwrap()
        });
    (shaped, 0..6u8, any::<prop::sample::Index>(), any::<u8>()).prop_map(
        |(mut body, damage, at, byte)| {
            let i = at.index(body.len().max(1));
            match damage {
                // Duplicate a key: `Value` keeps the last, derived structs refuse.
                0 if body.len() > 2 => {
                    body.splice(1..1, br#""id":7,"#.iter().copied());
                }
                1 => body.truncate(i),
                2 if !body.is_empty() => {
                    let last = body.len() - 1;
                    body[i.min(last)] = byte;
                }
                _ => {}
            }
            body
        },
    )
}

/// One self-delimiting frame: the length always matches the body, so the
/// server can stay in step whatever the headers and body hold.
fn hostile_frame() -> impl Strategy<Value = Vec<u8>> {
    let header = prop_oneof![
        Just(b"Content-Type: application/vscode-jsonrpc; charset=utf-8".to_vec()),
        Just(b"Content-Type: text/html; charset=latin1".to_vec()),
        Just(b"X-\xff\xfe: \x00\x01".to_vec()),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(|mut h| {
            // Header noise is one line that neither ends the block nor sets a length.
            h.retain(|b| *b != b'\n' && *b != b'\r');
            h.retain(|_| true);
            let text = String::from_utf8_lossy(&h).to_ascii_lowercase();
            if text.contains("content-length") || h.is_empty() {
                b"X-Noise: 1".to_vec()
            } else {
                h
            }
        }),
    ];
    let body = prop_oneof![
        4 => message_body(),
        1 => prop::collection::vec(any::<u8>(), 0..200),
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
    ];
    (
        prop::collection::vec(header, 0..3),
        body,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(headers, body, bare_newlines, blank_before)| {
            let eol: &[u8] = if bare_newlines { b"\n" } else { b"\r\n" };
            let mut out = Vec::new();
            if blank_before {
                out.extend_from_slice(eol);
            }
            for h in headers {
                out.extend_from_slice(&h);
                out.extend_from_slice(eol);
            }
            out.extend_from_slice(format!("Content-Length: {}", body.len()).as_bytes());
            out.extend_from_slice(eol);
            out.extend_from_slice(eol);
            out.extend_from_slice(&body);
            out
        })
}

#[test]
fn hostile_frames_never_end_the_session_or_pollute_stdout() {
    let rt = runtime();
    let server = Mutex::new(rt.block_on(Server::spawn()));
    let probes = Mutex::new(0u64);
    let mut runner = TestRunner::new(config(96));
    let result = runner.run(&prop::collection::vec(hostile_frame(), 1..6), |frames| {
        let mut server = server.lock().unwrap();
        let n = {
            let mut probes = probes.lock().unwrap();
            *probes += 1;
            *probes
        };
        let outcome = rt.block_on(async {
            for f in &frames {
                if !server.write(f).await {
                    return Err("stdin closed: the server is gone".to_owned());
                }
            }
            server.answer_to(&format!("probe-{n}")).await
        });
        let violations = server.violations();
        if outcome.is_err() || !violations.is_empty() {
            let log = server.log();
            eprintln!(
                "failing case: {:?}\n{outcome:?} {violations:?}",
                frames
                    .iter()
                    .map(|f| String::from_utf8_lossy(f))
                    .collect::<Vec<_>>()
            );
            // Shrinking goes on with a fresh server.
            *server = rt.block_on(Server::spawn());
            return Err(TestCaseError::fail(format!(
                "{outcome:?}; stdout: {violations:?}; log tail: {}",
                &log[log.len().saturating_sub(2000)..]
            )));
        }
        Ok(())
    });
    check(result);
    let mut server = server.into_inner().unwrap();
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
    rt.block_on(async {
        server
            .write(&frame(br#"{"jsonrpc":"2.0","method":"exit"}"#))
            .await;
        let status = tokio::time::timeout(WAIT, server.child.wait())
            .await
            .expect("the server exits on `exit`")
            .unwrap();
        assert!(status.code().is_some(), "killed by a signal: {status:?}");
    });
}

/// Bytes with no regard for framing at all (cut frames, lengths past the
/// end), then end of input: the server ends by itself, cleanly, with only
/// frames on stdout.
#[test]
fn arbitrary_bytes_then_eof_end_the_server_cleanly() {
    let rt = runtime();
    let soup = prop::collection::vec(
        prop_oneof![
            hostile_frame(),
            prop::collection::vec(any::<u8>(), 0..64),
            Just(b"Content-Length: 99999999999999999999\r\n\r\n".to_vec()),
            Just(b"Content-Length: 70000000\r\n\r\n{".to_vec()),
            Just(b"Content-Length: 5\r\n\r\n{}".to_vec()),
            Just(b"\r\n\r\n\n\n".to_vec()),
        ],
        0..6,
    )
    .prop_map(|parts| parts.concat());
    let mut runner = TestRunner::new(config(48));
    let result = runner.run(&soup, |bytes| {
        rt.block_on(async {
            let mut server = Server::spawn().await;
            server.write(&bytes).await;
            drop(server.stdin);
            let status = tokio::time::timeout(WAIT, server.child.wait())
                .await
                .map_err(|_| TestCaseError::fail("still running after end of input"))?
                .unwrap();
            let mut stderr = String::new();
            if let Some(mut err) = server.child.stderr.take() {
                let _ = err.read_to_string(&mut stderr).await;
            }
            // Let the reader see the last frames before reading its verdict.
            while server.incoming.recv().await.is_some() {}
            let violations = server.violations.lock().unwrap().clone();
            let log = std::fs::read_to_string(server.home.path().join("log")).unwrap_or_default();
            prop_assert!(status.code().is_some(), "killed by a signal: {status:?}");
            prop_assert!(violations.is_empty(), "{violations:?}");
            prop_assert!(
                !log.contains("panicked") && !stderr.contains("panicked"),
                "{stderr}{log}"
            );
            Ok(())
        })
    });
    check(result);
}

/// Regressions found by the properties above: each of these ended the session
/// (the server stopped reading and exited).
#[test]
fn frames_that_once_ended_the_session_are_answered_and_the_session_goes_on() {
    let rt = runtime();
    rt.block_on(async {
        let mut server = Server::spawn().await;
        let cases: [&[u8]; 6] = [
            &frame(br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#),
            &frame(br#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#),
            &frame(br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#),
            &frame(br#"{"jsonrpc":"2.0","method":"x","method":"y"}"#),
            // A length that cannot be read leaves the body's size unknown: only
            // a frame without a body can be followed by one the server reads.
            b"Content-Length: 2\xff\r\n\r\n",
            b"X-\xff: 1\r\nContent-Length: 2\r\n\r\n{}",
        ];
        for (i, bytes) in cases.iter().enumerate() {
            assert!(server.write(bytes).await);
            let answer = server.answer_to(&format!("after-{i}")).await;
            assert!(
                answer.is_ok(),
                "case {i} {:?}: {answer:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        assert!(server.violations().is_empty(), "{:?}", server.violations());
    });
}

// ---------------------------------------------------------------------------
// SSE streams of both wire formats, through the real providers over loopback.
// ---------------------------------------------------------------------------

/// Serves one scripted raw HTTP response per connection, written in the
/// given pieces (so events and characters split across reads).
struct RawServer {
    url: String,
    next: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl RawServer {
    async fn start() -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let next: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let script = next.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let pieces = std::mem::take(&mut *script.lock().unwrap());
                tokio::spawn(async move {
                    // Read the request head and body before answering.
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 8192];
                    loop {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                            let length = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            if seen.len() >= end + 4 + length {
                                break;
                            }
                        }
                    }
                    for piece in pieces {
                        if socket.write_all(&piece).await.is_err() {
                            return;
                        }
                        let _ = socket.flush().await;
                        tokio::task::yield_now().await;
                    }
                    let _ = socket.shutdown().await;
                });
            }
        });
        RawServer { url, next }
    }
}

#[derive(Clone, Copy, Debug)]
enum Wire {
    Anthropic,
    OpenAi,
}

/// One event of a stream and what it means to the expected outcome.
#[derive(Clone, Debug)]
enum Ev {
    Text(String),
    /// Bookkeeping the reader must skip (ping, start, usage, comments, unknown types).
    Skip(usize),
    /// The terminal event.
    End,
    /// An error event in a 200 stream.
    InBand,
    /// Data that is not the format (cut JSON, wrong shape).
    Malformed(usize),
}

fn event_strategy() -> impl Strategy<Value = Ev> {
    prop_oneof![
        6 => any::<String>().prop_map(Ev::Text),
        3 => (0..6usize).prop_map(Ev::Skip),
        1 => Just(Ev::End),
        1 => Just(Ev::InBand),
        1 => (0..4usize).prop_map(Ev::Malformed),
    ]
}

/// The SSE bytes of `ev` in `wire`'s format.
fn encode(wire: Wire, ev: &Ev, crlf: bool) -> Vec<u8> {
    let (name, data): (Option<&str>, String) = match (wire, ev) {
        (Wire::Anthropic, Ev::Text(t)) => (
            Some("content_block_delta"),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":t}})
                .to_string(),
        ),
        (Wire::OpenAi, Ev::Text(t)) => (
            None,
            json!({"id":"c","choices":[{"index":0,"delta":{"content":t},"finish_reason":null}]})
                .to_string(),
        ),
        (_, Ev::Skip(0)) => return if crlf { b": keep-alive\r\n\r\n".to_vec() } else { b": keep-alive\n\n".to_vec() },
        (Wire::Anthropic, Ev::Skip(k)) => match k {
            1 => (Some("ping"), r#"{"type":"ping"}"#.into()),
            2 => (
                Some("message_start"),
                r#"{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}"#.into(),
            ),
            3 => (
                Some("message_delta"),
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#.into(),
            ),
            4 => (Some("content_block_start"), r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.into()),
            _ => (Some("brand_new"), r#"{"type":"brand_new_event","x":[1,2]}"#.into()),
        },
        (Wire::OpenAi, Ev::Skip(k)) => match k {
            1 => (None, r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}]}"#.into()),
            2 => (None, r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}"#.into()),
            3 => (None, r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#.into()),
            4 => (Some("message"), r#"{"id":"c","choices":[]}"#.into()),
            _ => (None, r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":null}}]}"#.into()),
        },
        (Wire::Anthropic, Ev::End) => (Some("message_stop"), r#"{"type":"message_stop"}"#.into()),
        (Wire::OpenAi, Ev::End) => (None, "[DONE]".into()),
        (Wire::Anthropic, Ev::InBand) => (
            Some("error"),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
        ),
        (Wire::OpenAi, Ev::InBand) => (
            None,
            r#"{"error":{"message":"upstream failed","type":"server_error","code":502}}"#.into(),
        ),
        (Wire::Anthropic, Ev::Malformed(k)) => match k {
            0 => (Some("content_block_delta"), r#"{"type":"content_block_delta","delta":{"type":"text_de"#.into()),
            1 => (Some("content_block_delta"), r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":5}}"#.into()),
            2 => (Some("message_start"), "not json at all".into()),
            _ => (None, "[DONE]".into()),
        },
        (Wire::OpenAi, Ev::Malformed(k)) => match k {
            0 => (None, r#"{"id":"c","choices":[{"delta":{"content":"cut"#.into()),
            1 => (None, r#"{"choices":5}"#.into()),
            2 => (None, r#"{"choices":[{"delta":{"content":7}}]}"#.into()),
            _ => (None, "<html>bad gateway</html>".into()),
        },
    };
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = String::new();
    if let Some(name) = name {
        out.push_str(&format!("event: {name}{eol}"));
    }
    out.push_str(&format!("data: {data}{eol}{eol}"));
    out.into_bytes()
}

/// What the reader must make of `events`: the first decisive event wins. A
/// malformed event is skipped; three in a row end the stream as `Malformed`
/// (a keep-alive comment, `Skip(0)`, is no event and does not break the run).
/// A body that ends cleanly without the terminal event is complete when a
/// finish (stop) reason came (`Skip(3)` in both formats), else it is a cut.
fn expected(events: &[Ev]) -> Result<String, (FailureKind, String)> {
    let mut text = String::new();
    let mut finish_reported = false;
    let mut malformed_in_a_row = 0;
    for ev in events {
        if !matches!(ev, Ev::Malformed(_) | Ev::Skip(0)) {
            malformed_in_a_row = 0;
        }
        match ev {
            Ev::Text(t) => text.push_str(t),
            Ev::Skip(3) => finish_reported = true,
            Ev::Skip(_) => {}
            Ev::End => return Ok(text),
            Ev::InBand => return Err((FailureKind::InBand, text)),
            Ev::Malformed(_) => {
                malformed_in_a_row += 1;
                if malformed_in_a_row == 3 {
                    return Err((FailureKind::Malformed, text));
                }
            }
        }
    }
    if finish_reported {
        Ok(text)
    } else {
        Err((FailureKind::StreamCut, text))
    }
}

fn provider(wire: Wire, url: &str, key: &str) -> Arc<dyn Provider> {
    match wire {
        Wire::Anthropic => Arc::new(
            AnthropicProvider::new("fuzz", url, Some(Secret::new(key)), Vec::new()).unwrap(),
        ),
        Wire::OpenAi => Arc::new(
            OpenAiProvider::new(
                "fuzz",
                &format!("{url}/v1"),
                Some(Secret::new(key)),
                Vec::new(),
                false,
            )
            .unwrap(),
        ),
    }
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        system: None,
        messages: vec![ChatMessage {
            role: Role::User,
            content: "hi".into(),
        }],
        max_tokens: 16,
        temperature: None,
    }
}

const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(20),
    first_byte: Duration::from_secs(20),
    first_token: Duration::from_secs(20),
    idle: Duration::from_secs(20),
};

/// The text of a successful stream (checked to end with exactly one `End`), or its error.
async fn collect(provider: &dyn Provider) -> Result<String, ProviderError> {
    let mut stream = provider.stream(request(), TIMEOUTS).await?;
    let mut text = String::new();
    let mut ended = false;
    while let Some(event) = stream.events.next().await {
        assert!(!ended, "an event after End");
        match event? {
            StreamEvent::Delta(delta) => text.push_str(&delta),
            StreamEvent::Skipped(_) => {}
            StreamEvent::End(_) => ended = true,
        }
    }
    assert!(ended, "a stream that ended without End or an error");
    Ok(text)
}

/// Splits `bytes` at the given fractions (anywhere, mid-character included).
fn pieces(bytes: Vec<u8>, cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for cut in at {
        out.push(bytes[start..cut].to_vec());
        start = cut;
    }
    out.push(bytes[start..].to_vec());
    out
}

fn sse_head(chunked: bool) -> Vec<u8> {
    let mut head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n".to_vec();
    if chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

fn chunked(pieces: Vec<Vec<u8>>, finish: bool) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = pieces
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = format!("{:x}\r\n", p.len()).into_bytes();
            c.extend(p);
            c.extend_from_slice(b"\r\n");
            c
        })
        .collect();
    if finish {
        out.push(b"0\r\n\r\n".to_vec());
    }
    out
}

fn sse_property(wire: Wire) {
    let rt = runtime();
    let server = rt.block_on(RawServer::start());
    let key = "sk-fuzz-SECRET-0123456789";
    let provider = provider(wire, &server.url, key);
    let strategy = (
        prop::collection::vec(event_strategy(), 0..12),
        prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        any::<bool>(),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(config(128));
    let result = runner.run(&strategy, |(events, cuts, crlf, use_chunked)| {
        let body: Vec<u8> = events.iter().flat_map(|e| encode(wire, e, crlf)).collect();
        let mut script = vec![sse_head(use_chunked)];
        let split = pieces(body, &cuts);
        script.extend(if use_chunked {
            chunked(split, true)
        } else {
            split
        });
        *server.next.lock().unwrap() = script;
        let outcome = rt.block_on(async {
            tokio::time::timeout(WAIT, collect(provider.as_ref()))
                .await
                .expect("the stream neither ended nor failed")
        });
        match (expected(&events), outcome) {
            (Ok(want), Ok(got)) => prop_assert_eq!(want, got),
            (Err((kind, partial)), Err(error)) => {
                prop_assert_eq!(&error.kind, &kind, "{}", error);
                prop_assert_eq!(error.partial, partial);
                prop_assert!(!error.message.contains(key));
            }
            (want, got) => prop_assert!(false, "expected {want:?}, got {got:?}"),
        }
        Ok(())
    });
    check(result);
}

#[test]
fn anthropic_streams_end_in_their_answer_or_a_typed_error() {
    sse_property(Wire::Anthropic);
}

#[test]
fn openai_streams_end_in_their_answer_or_a_typed_error() {
    sse_property(Wire::OpenAi);
}

/// Any bytes at all after a 200 event-stream head, in any pieces: never a
/// panic, and a success only where the bytes hold the format's terminal event
/// or its finish reason.
#[test]
fn arbitrary_stream_bytes_never_pass_as_a_truncated_success() {
    let rt = runtime();
    let server = rt.block_on(RawServer::start());
    let providers = [
        (
            provider(Wire::Anthropic, &server.url, "k"),
            ["message_stop", "stop_reason"],
        ),
        (
            provider(Wire::OpenAi, &server.url, "k"),
            ["[DONE]", "finish_reason"],
        ),
    ];
    let fragment = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40),
        any::<String>().prop_map(String::into_bytes),
        Just(b"data: ".to_vec()),
        Just(b"event: message_stop\n".to_vec()),
        Just(b"data: {\"type\":\"message_stop\"}\n".to_vec()),
        Just(b"data: [DONE]".to_vec()),
        Just(br#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#.to_vec()),
        Just(br#"data: {"choices":[{"delta":{},"finish_reason":"stop"}]}"#.to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"retry: x\n".to_vec()),
        Just(b"id: \xff\n".to_vec()),
    ];
    let strategy = (
        0..2usize,
        prop::collection::vec(fragment, 0..10),
        prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        any::<bool>(),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(config(128));
    let result = runner.run(
        &strategy,
        |(which, fragments, cuts, use_chunked, finish)| {
            let body = fragments.concat();
            let (provider, terminal) = &providers[which];
            let mut script = vec![sse_head(use_chunked)];
            let split = pieces(body.clone(), &cuts);
            script.extend(if use_chunked {
                chunked(split, finish)
            } else {
                split
            });
            *server.next.lock().unwrap() = script;
            let outcome = rt.block_on(async {
                tokio::time::timeout(WAIT, collect(provider.as_ref()))
                    .await
                    .expect("the stream neither ended nor failed")
            });
            if outcome.is_ok() {
                let holds = terminal
                    .iter()
                    .any(|t| body.windows(t.len()).any(|w| w == t.as_bytes()));
                prop_assert!(
                    holds,
                    "a success without {terminal:?}: {:?}",
                    String::from_utf8_lossy(&body)
                );
            }
            Ok(())
        },
    );
    check(result);
}

/// Error statuses with arbitrary bodies and headers (retry-after, rate limits):
/// always a typed `Status` error carrying the status, never the key.
#[test]
fn error_responses_of_any_shape_are_typed_status_errors() {
    let rt = runtime();
    let server = rt.block_on(RawServer::start());
    let key = "sk-fuzz-SECRET-abcdef0123456789";
    let providers = [
        provider(Wire::Anthropic, &server.url, key),
        provider(Wire::OpenAi, &server.url, key),
    ];
    let header_value = prop_oneof![
        "[0-9]{0,25}",
        "-?[0-9]{0,4}\\.[0-9]{0,6}",
        Just("1e308".to_owned()),
        Just("NaN".to_owned()),
        Just("-1".to_owned()),
        Just("inf".to_owned()),
        Just("9999999999999999999999h".to_owned()),
        Just("1h2m3.5s".to_owned()),
        Just("2024-13-45T99:99:99Z".to_owned()),
        Just("Wed, 21 Oct 2015 07:28:00 GMT".to_owned()),
        "[ -~]{0,30}",
    ];
    let header_name = prop_oneof![
        Just("retry-after"),
        Just("retry-after-ms"),
        Just("anthropic-ratelimit-requests-reset"),
        Just("anthropic-ratelimit-tokens-remaining"),
        Just("anthropic-ratelimit-input-tokens-limit"),
        Just("x-ratelimit-reset-requests"),
        Just("x-ratelimit-reset-tokens"),
        Just("x-ratelimit-remaining-requests"),
    ];
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..400),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        json_value().prop_map(|v| serde_json::to_vec(&json!({"error": v})).unwrap()),
        json_value().prop_map(|v| serde_json::to_vec(
            &json!({"error": {"type": v, "message": key, "code": 5}})
        )
        .unwrap()),
        (any::<String>(), 0..400usize).prop_map(move |(s, n)| {
            // The key quoted at any offset, cut or not by the quoting.
            let mut text: String = "x".repeat(n);
            text.push_str(key);
            text.push_str(&s);
            text.into_bytes()
        }),
    ];
    let strategy = (
        0..2usize,
        400u16..600,
        prop::collection::vec((header_name, header_value), 0..5),
        body,
    );
    let mut runner = TestRunner::new(config(128));
    let result = runner.run(&strategy, |(which, status, headers, body)| {
        let mut head = format!(
            "HTTP/1.1 {status} Whatever\r\nconnection: close\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (name, value) in &headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut response = head.into_bytes();
        response.extend_from_slice(&body);
        *server.next.lock().unwrap() = vec![response];
        let outcome = rt.block_on(async {
            tokio::time::timeout(WAIT, collect(providers[which].as_ref()))
                .await
                .expect("the call neither ended nor failed")
        });
        let error = match outcome {
            Ok(text) => {
                return Err(TestCaseError::fail(format!(
                    "HTTP {status} was a success: {text:?}"
                )));
            }
            Err(error) => error,
        };
        prop_assert_eq!(&error.kind, &FailureKind::Status);
        prop_assert_eq!(error.status, Some(status));
        let printed = format!("{error} {error:?}");
        // Any 8 characters of the key would already say too much.
        for window in key.as_bytes().windows(12) {
            let piece = std::str::from_utf8(window).unwrap();
            prop_assert!(!printed.contains(piece), "{piece} in {printed}");
        }
        Ok(())
    });
    check(result);
}

/// Found by the property above: the key placed where quoting cuts an
/// unparseable body (300 characters) left its first characters in the message.
#[test]
fn a_key_cut_by_quoting_leaves_no_piece_behind() {
    let rt = runtime();
    rt.block_on(async {
        let server = RawServer::start().await;
        let key = "sk-fuzz-SECRET-abcdef0123456789";
        let body = format!("{}{key} rest", "x".repeat(285));
        *server.next.lock().unwrap() = vec![format!(
            "HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()];
        let error = collect(provider(Wire::OpenAi, &server.url, key).as_ref())
            .await
            .unwrap_err();
        assert!(!error.message.contains("sk-fuzz-SE"), "{}", error.message);
        assert!(error.message.contains("[redacted]"), "{}", error.message);

        // The same inside a 200 stream, where the last of three malformed events
        // in a row (which end it) is quoted (200 characters).
        let data = format!("{{{}{key}", "y".repeat(180));
        *server.next.lock().unwrap() = vec![
            sse_head(false),
            format!("data: {data}\n\n").repeat(3).into_bytes(),
        ];
        let error = collect(provider(Wire::OpenAi, &server.url, key).as_ref())
            .await
            .unwrap_err();
        assert_eq!(error.kind, FailureKind::Malformed);
        assert!(!error.message.contains("sk-fuzz-SE"), "{}", error.message);
    });
}

// ---------------------------------------------------------------------------
// Configuration layers.
// ---------------------------------------------------------------------------

/// A config-shaped value: the real keys at every level, values of any type.
fn config_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("local"),
        Just("autocomplete"),
        Just("providers"),
        Just("tiers"),
        Just("tasks"),
        Just("local_only"),
        Just("localOnly"),
        Just("status_notifications"),
        Just("statusNotifications"),
        Just("resilience"),
        Just("gateway"),
        Just("model"),
        Just("threads"),
        Just("auto_pull"),
        Just("enabled"),
        Just("budget_ms"),
        Just("input_tokens"),
        Just("output_tokens"),
        Just("suffix_tokens"),
        Just("chain"),
        Just("kind"),
        Just("base_url"),
        Just("api_key_env"),
        Just("headers"),
        Just("account"),
        Just("quota"),
        Just("large"),
        Just("medium"),
        Just("small"),
        Just("explain"),
        Just("refactor"),
        Just("first_token_ms"),
        Just("total_ms"),
        Just("wait_ms"),
        Just("state"),
        Just("when_unavailable"),
        Just("backoff"),
        Just("breaker"),
        Just("governor"),
        Just("share"),
        Just("error_rate"),
        Just("failures"),
        Just("cooldown_ms"),
        Just("window_ms"),
        Just("cap_ms"),
        Just("rate_limit_ms"),
        Just("resume_interval_ms"),
        Just("token_env"),
        Just("anthropic"),
        Just("openai"),
        Just("requests_per_minute"),
        Just("bogus"),
    ]
    .prop_map(str::to_owned);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..5000).prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![
            Just("local"),
            Just("anthropic/claude"),
            Just("nowhere/x"),
            Just("http://127.0.0.1:9"),
            Just("anthropic"),
            Just("openai"),
            Just("file"),
            Just("redis://x"),
            Just("memory"),
            Just("open"),
            Just("closed"),
            Just(""),
        ]
        .prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// How many values `value` holds, itself included.
fn values(value: &Value) -> usize {
    1 + match value {
        Value::Object(map) => map.values().map(values).sum(),
        Value::Array(items) => items.iter().map(values).sum(),
        _ => 0,
    }
}

/// The first segment of an error key (`tiers.large[0]` -> `tiers`).
fn top_key(key: &str) -> &str {
    key.split(['.', '[']).next().unwrap_or("")
}

#[test]
fn config_layers_of_any_shape_resolve_and_every_error_names_a_key_of_its_layer() {
    let mut runner = TestRunner::new(config(512));
    let strategy = (
        prop::option::of(config_value()),
        prop::option::of(config_value()),
        prop::option::of(config_value()),
    );
    let result = runner.run(&strategy, |(file, init, workspace)| {
        let layers = ConfigLayers {
            file: file
                .clone()
                .map(|v| (PathBuf::from("/fuzz/config.toml"), v)),
            file_error: None,
            initialization_options: init.clone(),
            workspace: workspace.clone(),
            local_only: None,
        };
        let (config, errors) = layers.resolve();
        // What resolves is always a configuration that itself resolves cleanly.
        let again = ConfigLayers {
            workspace: Some(serde_json::to_value(&config).unwrap()),
            ..Default::default()
        };
        prop_assert!(again.resolve().1.is_empty(), "{:?}", again.resolve().1);
        let layers: Vec<&Value> = [&file, &init, &workspace]
            .into_iter()
            .flatten()
            .filter(|v| !v.is_null())
            .collect();
        // Each problem takes at least one value out of its layer.
        let values: usize = layers.iter().map(|layer| values(layer)).sum();
        prop_assert!(errors.len() <= values, "{errors:?}");
        // Only the local model serves exactly when a setting that decides
        // what leaves the machine could not be applied.
        prop_assert_eq!(
            config.fail_closed.is_some(),
            errors.iter().any(|e| e.decides_what_leaves()),
            "{:?}",
            errors
        );
        for error in &errors {
            prop_assert!(
                !error.key.is_empty() && !error.reason.is_empty(),
                "{error:?}"
            );
            let message = error.to_string();
            prop_assert!(message.contains(&error.key), "{message}");
            // An object layer's error is about one of its own top-level keys
            // (camelCase spellings are read as snake_case); any other layer's
            // error is about the whole layer.
            let owned = layers.iter().any(|layer| match layer {
                Value::Object(map) => map.keys().any(|k| {
                    let k = match k.as_str() {
                        "statusNotifications" => "status_notifications",
                        "localOnly" => "local_only",
                        k => k,
                    };
                    k == top_key(&error.key)
                }),
                // Not an object: the whole layer is wrong, wherever serde stopped.
                _ => true,
            });
            prop_assert!(owned, "{error:?} names no key of its layer");
        }
        Ok(())
    });
    check(result);
}

/// TOML text of any shape: config-ish lines, mangled.
fn toml_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just("[local]".to_owned()),
        Just("[autocomplete]".to_owned()),
        Just("[providers.x]".to_owned()),
        Just("[[tiers]]".to_owned()),
        Just("[resilience.breaker]".to_owned()),
        Just("budget_ms = 800".to_owned()),
        Just("threads = -1".to_owned()),
        Just("share = nan".to_owned()),
        Just("share = inf".to_owned()),
        Just("when = 1979-05-27T07:32:00Z".to_owned()),
        Just("chain = [\"local\", 1, {a = 2}]".to_owned()),
        Just("x = \"\"\"".to_owned()),
        Just("é = 'ü".to_owned()),
        Just("a.b.c = 1".to_owned()),
        Just("= =".to_owned()),
        "[ -~]{0,30}",
        any::<String>(),
    ];
    prop::collection::vec(line, 0..12).prop_map(|lines| lines.join("\n"))
}

#[test]
fn config_files_of_any_text_are_read_or_refused_naming_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let mut runner = TestRunner::new(config(512));
    let result = runner.run(&toml_text(), |text| {
        std::fs::write(&path, &text).unwrap();
        match read_file(&path) {
            Ok(Some((_, layer))) => {
                let layers = ConfigLayers {
                    file: Some((path.clone(), layer)),
                    ..Default::default()
                };
                for error in layers.resolve().1 {
                    prop_assert!(!error.key.is_empty(), "{error:?}");
                }
            }
            Ok(None) => prop_assert!(false, "an existing file read as absent"),
            Err(error) => {
                let lines = text.matches('\n').count() + 1;
                let named = error
                    .key
                    .strip_prefix("line ")
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_some_and(|n| (1..=lines).contains(&n));
                prop_assert!(named || error.key == "(file)", "{error:?}");
            }
        }
        Ok(())
    });
    check(result);
}
