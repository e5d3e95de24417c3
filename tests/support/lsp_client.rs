//! A minimal LSP client over the real binary's stdio. It checks that every byte
//! on stdout is a well-framed JSON-RPC message (invariant 1), answers the
//! server's requests (configuration, progress tokens), and records notifications.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// Generous: these waits catch hangs; they do not measure speed.
pub const WAIT: Duration = Duration::from_secs(90);

pub struct ServerOptions {
    pub model_dir: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Answer to `workspace/configuration` (section "switchyard").
    pub workspace_configuration: Value,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            model_dir: super::model_dir(),
            args: Vec::new(),
            env: Vec::new(),
            workspace_configuration: Value::Null,
        }
    }
}

pub struct LspClient {
    child: Child,
    stdin: ChildStdin,
    incoming: mpsc::UnboundedReceiver<Value>,
    next_id: i64,
    /// Messages received while waiting for something else.
    backlog: VecDeque<Value>,
    /// Every notification and server request seen, in order.
    pub seen: Vec<Value>,
    workspace_configuration: Value,
    pub log_file: PathBuf,
    _home: tempfile::TempDir,
}

/// The server under test: this build's, or the one `SWITCHYARD_BIN` names
/// (a benchmark runs an older build with the same harness, in one sitting).
pub fn server_binary() -> std::ffi::OsString {
    std::env::var_os("SWITCHYARD_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_switchyard").into())
}

impl LspClient {
    pub async fn spawn(options: ServerOptions) -> LspClient {
        let home = tempfile::tempdir().unwrap();
        let log_file = home.path().join("switchyard.log");
        let mut command = Command::new(server_binary());
        command
            .args(["--log-file", log_file.to_str().unwrap()])
            .args(&options.args)
            .env("SWITCHYARD_MODEL_DIR", &options.model_dir)
            .env("SWITCHYARD_CONFIG", home.path().join("config.toml"))
            .env("SWITCHYARD_STATE_DIR", home.path().join("state"))
            .env("SWITCHYARD_LOG", "debug")
            .envs(options.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawning switchyard");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, incoming) = mpsc::unbounded_channel();
        tokio::spawn(read_frames(BufReader::new(stdout), tx));
        LspClient {
            child,
            stdin,
            incoming,
            next_id: 1,
            backlog: VecDeque::new(),
            seen: Vec::new(),
            workspace_configuration: options.workspace_configuration,
            log_file,
            _home: home,
        }
    }

    /// `SWITCHYARD_STATE_DIR` of this server (parked tasks, the outbound audit).
    pub fn state_dir(&self) -> PathBuf {
        self._home.path().join("state")
    }

    pub fn config_file(&self) -> PathBuf {
        self._home.path().join("config.toml")
    }

    /// Writes to the server's stdin. A server that is gone (killed, or
    /// exited) cannot be written to; the wait for its reply says so, and a
    /// driver that kills servers on purpose goes on (found by the soak,
    /// whose window driver died on the broken pipe).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        if self.stdin.write_all(bytes).await.is_ok() {
            let _ = self.stdin.flush().await;
        }
    }

    pub async fn send(&mut self, message: Value) {
        let body = serde_json::to_vec(&message).unwrap();
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend(body);
        self.send_raw(&frame).await;
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Sends a request without waiting; returns its id.
    pub async fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Sends a request and returns its whole response message.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.response(id).await
    }

    /// The `result` of a request that must succeed.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params).await;
        assert!(
            response.get("error").is_none(),
            "{method} failed: {response}"
        );
        response["result"].clone()
    }

    /// Waits for the response to request `id`.
    pub async fn response(&mut self, id: i64) -> Value {
        self.next_matching(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none())
            .await
    }

    /// The response to request `id`, or `None` when `wait` passes first or
    /// the server is gone (a driver that must go on when an editor dies).
    pub async fn response_within(&mut self, id: i64, wait: Duration) -> Option<Value> {
        let is_it = |m: &Value| m.get("id") == Some(&json!(id)) && m.get("method").is_none();
        if let Some(i) = self.backlog.iter().position(is_it) {
            return self.backlog.remove(i);
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let message = tokio::time::timeout_at(deadline, self.incoming.recv())
                .await
                .ok()??;
            self.take_in(&message).await;
            if is_it(&message) {
                return Some(message);
            }
            self.backlog.push_back(message);
        }
    }

    /// Whether the server has closed its stdout (it exited, or was killed):
    /// nothing more will come from it.
    pub fn gone(&self) -> bool {
        self.incoming.is_closed() && self.incoming.is_empty()
    }

    /// Reads the messages that have arrived, without waiting for more
    /// (answering the server's requests among them), into `seen` and the backlog.
    pub async fn read_arrived(&mut self) {
        while let Ok(message) = self.incoming.try_recv() {
            self.take_in(&message).await;
            self.backlog.push_back(message);
        }
    }

    /// Forgets the messages read while waiting for others (a long-running
    /// driver that looks only at `seen`).
    pub fn drop_backlog(&mut self) {
        self.backlog.clear();
    }

    /// Whether the response to request `id` has come already (read while
    /// waiting for another message, and kept).
    pub fn answered(&self, id: i64) -> bool {
        self.backlog
            .iter()
            .any(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none())
    }

    /// Waits for a notification with this method satisfying `filter`.
    pub async fn notification(&mut self, method: &str, filter: impl Fn(&Value) -> bool) -> Value {
        self.next_matching(|m| {
            m["method"] == method && m.get("id").is_none() && filter(&m["params"])
        })
        .await
    }

    /// Waits for a request from the server (already answered, as every server
    /// request is) with this method.
    pub async fn server_request(&mut self, method: &str) -> Value {
        self.next_matching(|m| m["method"] == method && m.get("id").is_some())
            .await
    }

    /// Waits for a `window/showMessage` whose text contains `needle`.
    pub async fn show_message_containing(&mut self, needle: &str) -> Value {
        self.notification("window/showMessage", |p| {
            p["message"].as_str().is_some_and(|m| m.contains(needle))
        })
        .await
    }

    /// Like [`Self::notification`], but `None` if none arrives within `wait`.
    pub async fn maybe_notification(
        &mut self,
        method: &str,
        wait: Duration,
        filter: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        tokio::time::timeout(wait, self.notification(method, filter))
            .await
            .ok()
    }

    async fn next_matching(&mut self, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&matches) {
            return self.backlog.remove(i).unwrap();
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let message = tokio::time::timeout_at(deadline, self.incoming.recv())
                .await
                .expect("timed out waiting for the server")
                .expect("server closed stdout");
            self.take_in(&message).await;
            if matches(&message) {
                return message;
            }
            self.backlog.push_back(message);
        }
    }

    /// Notes a message from the server and answers it if it is a request.
    async fn take_in(&mut self, message: &Value) {
        if message.get("method").is_some() {
            self.seen.push(message.clone());
            if message.get("id").is_some() {
                self.answer_server_request(message).await;
            }
        }
    }

    async fn answer_server_request(&mut self, request: &Value) {
        let result = match request["method"].as_str().unwrap() {
            "workspace/configuration" => {
                let n = request["params"]["items"].as_array().map_or(1, Vec::len);
                Value::Array(vec![self.workspace_configuration.clone(); n])
            }
            "workspace/applyEdit" => json!({"applied": true}),
            "window/showDocument" => json!({"success": true}),
            _ => Value::Null,
        };
        self.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
            .await;
    }

    /// `initialize` + `initialized`; returns the initialize result.
    pub async fn initialize(&mut self, capabilities: Value, options: Value) -> Value {
        let result = self
            .call("initialize", json!({"processId": null, "rootUri": null, "capabilities": capabilities, "initializationOptions": options}))
            .await;
        self.notify("initialized", json!({})).await;
        result
    }

    pub async fn open(&mut self, uri: &str, text: &str) {
        let doc = json!({"uri": uri, "languageId": "rust", "version": 1, "text": text});
        self.notify("textDocument/didOpen", json!({"textDocument": doc}))
            .await;
    }

    /// Shows the server where the cursor is, as VS Code does whenever it moves:
    /// a code-action request for the cursor's empty range.
    pub async fn reveal_cursor(&mut self, uri: &str, line: u32, character: u32) {
        let at = json!({"line": line, "character": character});
        let params = json!({
            "textDocument": {"uri": uri},
            "range": {"start": at, "end": at},
            "context": {"diagnostics": [], "triggerKind": 2}
        });
        self.request("textDocument/codeAction", params).await;
    }

    /// Waits until the server's log contains `needle`, answering what the server
    /// asks meanwhile (progress tokens, configuration) as an editor does.
    pub async fn wait_for_log(&mut self, needle: &str) {
        let deadline = super::timing::Deadline::after(WAIT);
        while !self.log().contains(needle) {
            deadline.assert_not_passed(format_args!(
                "the log never said {needle:?}:\n{}",
                self.log()
            ));
            let next = tokio::time::timeout(Duration::from_millis(100), self.incoming.recv());
            if let Ok(Some(message)) = next.await {
                self.take_in(&message).await;
                self.backlog.push_back(message);
            }
        }
    }

    /// Waits until the local model is loaded (the loader logs it; with progress
    /// capability the end of the load progress also says it).
    pub async fn wait_for_model(&mut self) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while tokio::time::Instant::now() < deadline {
            let log = std::fs::read_to_string(&self.log_file).unwrap_or_default();
            if log.contains("local model ready") {
                return;
            }
            assert!(
                !log.contains("local model unavailable"),
                "model failed to load:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("model did not load");
    }

    /// Sends an inline completion request without waiting; returns its id.
    pub async fn send_inline_completion(&mut self, uri: &str, line: u32, character: u32) -> i64 {
        let params = json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character}, "context": {"triggerKind": 2}});
        self.send_request("textDocument/inlineCompletion", params)
            .await
    }

    pub async fn inline_completion(&mut self, uri: &str, line: u32, character: u32) -> Value {
        let id = self.send_inline_completion(uri, line, character).await;
        self.response(id).await
    }

    /// Asks for inline completions until one has an item (the first requests on a
    /// cold cache are answered empty on time while the cache fills).
    pub async fn inline_completion_eventually(
        &mut self,
        uri: &str,
        line: u32,
        character: u32,
    ) -> Value {
        for _ in 0..60 {
            let response = self.inline_completion(uri, line, character).await;
            assert!(response.get("error").is_none(), "{response}");
            if response["result"]["items"]
                .as_array()
                .is_some_and(|items| !items.is_empty())
            {
                return response["result"]["items"][0].clone();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let log = self.log();
        let why: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("no completion") || l.contains("prompt synced"))
            .collect();
        let tail = why[why.len().saturating_sub(12)..].join("\n");
        panic!("no inline completion after 60 tries; the server said:\n{tail}");
    }

    pub async fn shutdown(mut self) -> std::process::ExitStatus {
        self.call("shutdown", Value::Null).await;
        self.notify("exit", Value::Null).await;
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("server did not exit")
            .unwrap()
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the server with SIGKILL, as a crash ends it: no shutdown, no cleanup.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("killing the server");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_file).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_file
    }
}

/// Parses `Content-Length` frames; anything else on stdout fails the test.
async fn read_frames(
    mut stdout: BufReader<tokio::process::ChildStdout>,
    tx: mpsc::UnboundedSender<Value>,
) {
    loop {
        let mut length = None;
        loop {
            let mut header = String::new();
            if stdout.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            let (name, value) = header
                .trim_end()
                .split_once(": ")
                .unwrap_or_else(|| panic!("non-protocol output on stdout: {header:?}"));
            if name.eq_ignore_ascii_case("Content-Length") {
                length = Some(value.parse::<usize>().expect("Content-Length value"));
            }
        }
        let mut body = vec![0; length.expect("frame without Content-Length")];
        // A server killed mid-frame ends the stream (the soak kills them).
        if stdout.read_exact(&mut body).await.is_err() {
            return;
        }
        let message: Value = serde_json::from_slice(&body).expect("frame body is JSON");
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC 2.0: {message}");
        if tx.send(message).is_err() {
            return;
        }
    }
}

impl LspClient {
    /// Waits for an error response with a null id (a message the server could not parse).
    pub async fn next_error(&mut self) -> Value {
        self.next_matching(|m| m.get("error").is_some() && m["id"].is_null())
            .await
    }
}
