//! Drivers for fault scenarios: one routed request through each front end (the
//! gateway over HTTP, with and without streaming, and the language server's
//! `switchyard.explain`) against fake providers on loopback, with the same
//! configuration, so a scenario states its faults and assertions once and runs
//! them through every front.
//!
//! Timings come from a [`Profile`]: the fast one (default) scales ceilings,
//! backoff and the faults' own waits down together; `FAULTS_FULL=1` uses the
//! real-length defaults of the explain task and faults as the issue states them.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

pub use super::actions::{DOC, URI};
use super::fake_provider::{Behaviour, FakeProvider, Manner};
use super::gateway::GatewayProcess;
use super::lsp_client::{LspClient, ServerOptions};

pub const KEY: &str = "sk-test-faults-0123456789abcdef";
/// The chain entries every scenario uses: `medium` is primary then secondary.
pub const PRIMARY: &str = "primary/mid";
pub const SECONDARY: &str = "secondary/backup";

/// Ceilings, waits and fault lengths of one run.
#[derive(Clone, Debug)]
pub struct Profile {
    pub full: bool,
    /// `tasks.explain.first_token_ms`: also when the hedge starts.
    pub first_token: Duration,
    pub total: Duration,
    /// `tasks.explain.idle_ms`: a quieter stream has stalled.
    pub idle: Duration,
    /// `tasks.explain.wait_ms`: what a request may spend waiting to retry.
    pub wait: Duration,
    /// `resilience.backoff`: rate-limit, overloaded and transient bases, cap.
    pub rate_limit_base: Duration,
    pub overloaded_base: Duration,
    pub transient_base: Duration,
    pub backoff_cap: Duration,
    /// `resilience.breaker` for the outage scenario.
    pub cooldown: Duration,
    /// `resilience.canary_interval_ms`: how often entries out of user traffic
    /// are tested.
    pub canary: Duration,
    /// Fault lengths: a provider that never answers holds the request this long.
    pub silence: Duration,
    /// The first token of a slow answer comes this late.
    pub slow_first_token: Duration,
    /// A stalled stream is silent this long.
    pub stall: Duration,
    /// How long the primary is down in the outage scenario.
    pub outage: Duration,
    /// Headroom on the test client's own timeout beyond the longest wait a
    /// scenario can cause (a loaded 2-core CI box).
    pub slack: Duration,
}

impl Profile {
    /// `FAULTS_FULL=1` (or `true`) picks the full-length profile.
    pub fn current() -> Profile {
        match std::env::var("FAULTS_FULL").as_deref() {
            Ok("1" | "true" | "yes") => Profile::full(),
            _ => Profile::fast(),
        }
    }

    /// Real lengths: the explain task's default ceilings and the default
    /// backoff; the faults as the issue states them (first token after 20 s,
    /// a 60 s outage, a stall of twice the 30 s idle ceiling). The breaker
    /// keeps its default 5 min cooldown: canaries every 10 s, not the
    /// cooldown, bring a recovered primary back.
    pub fn full() -> Profile {
        Profile {
            full: true,
            first_token: Duration::from_secs(10),
            total: Duration::from_secs(60),
            idle: Duration::from_secs(30),
            wait: Duration::from_secs(30),
            rate_limit_base: Duration::from_secs(2),
            overloaded_base: Duration::from_secs(10),
            transient_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(120),
            cooldown: Duration::from_secs(300),
            canary: Duration::from_secs(10),
            silence: Duration::from_secs(120),
            slow_first_token: Duration::from_secs(20),
            stall: Duration::from_secs(60),
            outage: Duration::from_secs(60),
            slack: Duration::from_secs(10),
        }
    }

    /// Everything scaled down together so the suite stays quick: ceilings
    /// 3 s / 15 s / idle 1 s, wait budget 4 s, backoff bases 0.1–0.2 s with a
    /// 3 s cap (a `retry-after: 2` is still honoured in full), cooldown 0.5 s, a 3 s outage, faults just past their ceilings.
    pub fn fast() -> Profile {
        Profile {
            full: false,
            first_token: Duration::from_secs(3),
            total: Duration::from_secs(15),
            idle: Duration::from_secs(1),
            wait: Duration::from_secs(4),
            rate_limit_base: Duration::from_millis(200),
            overloaded_base: Duration::from_millis(200),
            transient_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(3),
            cooldown: Duration::from_millis(500),
            canary: Duration::from_millis(300),
            silence: Duration::from_secs(60),
            slow_first_token: Duration::from_secs(10),
            stall: Duration::from_secs(20),
            outage: Duration::from_secs(3),
            slack: Duration::from_secs(3),
        }
    }

    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    /// The configuration both front ends get (initializationOptions / TOML).
    fn config(&self, setup: &Setup, primary: &dyn Upstream, secondary: &dyn Upstream) -> Value {
        let url = |wire: Wire, fake: &dyn Upstream| match wire {
            Wire::Anthropic => fake.anthropic_url(),
            Wire::OpenAi => fake.openai_url(),
        };
        let mut config = json!({
            "local": {"auto_pull": false},
            "providers": {
                "primary": {"kind": setup.primary.kind(), "base_url": url(setup.primary, primary), "api_key_env": "SY_FAULTS_KEY"},
                "secondary": {"kind": setup.secondary.kind(), "base_url": url(setup.secondary, secondary), "api_key_env": "SY_FAULTS_KEY"}
            },
            "tiers": {"large": ["primary/big"], "medium": [PRIMARY, SECONDARY], "small": []},
            "tasks": {"explain": {
                "first_token_ms": Self::ms(self.first_token),
                "total_ms": Self::ms(self.total),
                "idle_ms": Self::ms(self.idle),
                "wait_ms": Self::ms(self.wait),
                "hedge": true
            }},
            "resilience": {
                "backoff": {
                    "rate_limit_ms": Self::ms(self.rate_limit_base),
                    "overloaded_ms": Self::ms(self.overloaded_base),
                    "transient_ms": Self::ms(self.transient_base),
                    "cap_ms": Self::ms(self.backoff_cap)
                },
                "canary_interval_ms": Self::ms(self.canary)
            }
        });
        merge(&mut config, setup.extra.clone());
        config
    }
}

/// Something a configured provider can point at.
pub trait Upstream {
    fn anthropic_url(&self) -> String;
    fn openai_url(&self) -> String;
}

impl Upstream for FakeProvider {
    fn anthropic_url(&self) -> String {
        FakeProvider::anthropic_url(self)
    }
    fn openai_url(&self) -> String {
        FakeProvider::openai_url(self)
    }
}

/// A provider that answers every request with one canned HTTP error (for
/// errors the fake provider has no behaviour for, such as Azure OpenAI's 400
/// `content_filter`), recording when each request arrived.
pub struct CannedError {
    addr: std::net::SocketAddr,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    server: tokio::task::JoinHandle<()>,
}

impl CannedError {
    pub async fn start(status: u16, reason: &'static str, body: Value) -> CannedError {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let body = body.to_string();
        let response = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let seen = arrivals.clone();
        let server = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (seen, response) = (seen.clone(), response.clone());
                tokio::spawn(async move {
                    if read_request(&mut socket).await {
                        seen.lock().unwrap().push(Instant::now());
                        let _ = socket.write_all(response.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    }
                });
            }
        });
        CannedError {
            addr,
            arrivals,
            server,
        }
    }

    pub fn request_count(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }
}

impl Upstream for CannedError {
    fn anthropic_url(&self) -> String {
        format!("http://{}", self.addr)
    }
    fn openai_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for CannedError {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Reads one request's head and body; `false` if the client went away first.
async fn read_request(socket: &mut tokio::net::TcpStream) -> bool {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + 4 + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

/// Which wire format a fake speaks for a configured provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Accepts an assistant prefill: continues a cut answer.
    Anthropic,
    /// Does not: a cut answer restarts there.
    OpenAi,
}

impl Wire {
    fn kind(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic",
            Wire::OpenAi => "openai",
        }
    }

    /// The other wire format.
    pub fn other(self) -> Wire {
        match self {
            Wire::Anthropic => Wire::OpenAi,
            Wire::OpenAi => Wire::Anthropic,
        }
    }
}

/// The entry that takes over a cut answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Anthropic kind: takes the partial answer as a prefill.
    Prefill,
    /// OpenAI kind: no prefill; the partial as its turn, then the instruction.
    NoPrefill,
    /// Anthropic kind, but the model answers a prefill with a 400.
    RejectsPrefill,
}

impl Fallback {
    pub const ALL: [Fallback; 3] = [
        Fallback::Prefill,
        Fallback::NoPrefill,
        Fallback::RejectsPrefill,
    ];

    pub fn wire(self) -> Wire {
        match self {
            Fallback::Prefill | Fallback::RejectsPrefill => Wire::Anthropic,
            Fallback::NoPrefill => Wire::OpenAi,
        }
    }

    /// A model of this kind whose whole answer is `full`, continuing in `manner`.
    pub fn behaviour(self, full: &str, manner: Manner) -> Behaviour {
        match self {
            Fallback::RejectsPrefill => Behaviour::rejecting_prefill(full, manner),
            _ => Behaviour::continuing(full, manner),
        }
    }
}

/// What a scenario changes from the common setup.
#[derive(Clone, Debug)]
pub struct Setup {
    pub primary: Wire,
    pub secondary: Wire,
    /// Merged into the configuration (same shape as the TOML file).
    pub extra: Value,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            primary: Wire::Anthropic,
            secondary: Wire::OpenAi,
            extra: json!({}),
        }
    }
}

impl Setup {
    /// Refactors served by the medium tier (the fakes' two entries) with the
    /// explain task's ceilings, no hedge, and no waiting to retry.
    pub fn refactor_on_medium(self, profile: &Profile) -> Setup {
        let mut extra = json!({"tasks": {"refactor": {
            "tier": "medium",
            "first_token_ms": Profile::ms(profile.first_token),
            "total_ms": Profile::ms(profile.total),
            "idle_ms": Profile::ms(profile.idle),
            "wait_ms": 0,
            "hedge": false
        }}});
        merge(&mut extra, self.extra);
        Setup { extra, ..self }
    }
}

pub fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(base.entry(k).or_insert(Value::Null), v);
            }
        }
        (base, extra) => *base = extra,
    }
}

/// The ways in: the gateway answering whole, the gateway streaming, the
/// language server's explain command, and its refactor command (not in
/// [`Front::ALL`]: its answer must be code, and it runs on the medium tier
/// only where a scenario says so, see [`Setup::refactor_on_medium`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    Gateway,
    GatewayStream,
    Lsp,
    LspRefactor,
}

impl Front {
    pub const ALL: [Front; 3] = [Front::Gateway, Front::GatewayStream, Front::Lsp];
}

/// Runs `scenario` once per front, concurrently, each with its own fakes and process.
pub async fn each_front<F, Fut>(scenario: F)
where
    F: Fn(Front, Profile) -> Fut,
    Fut: Future<Output = ()>,
{
    let profile = Profile::current();
    futures::future::join_all(Front::ALL.map(|front| scenario(front, profile.clone()))).await;
}

/// A served answer.
#[derive(Clone, Debug)]
pub struct Served {
    /// `provider/model` that answered.
    pub model: String,
    pub text: String,
    /// The gateway's `usage` (None from the language server, which reports none).
    pub usage: Option<Value>,
    /// Streaming: the `model` of every chunk, in order.
    pub chunk_models: Vec<String>,
}

/// A request that ended without an answer.
#[derive(Clone, Debug)]
pub struct Failed {
    pub message: String,
    /// The gateway's `error.code`.
    pub code: Option<String>,
    /// The HTTP status (200 for an in-band error in a stream).
    pub status: Option<u16>,
    /// Streaming: text the caller received before the error.
    pub streamed: String,
}

#[derive(Debug)]
pub struct Reply {
    pub front: Front,
    pub sent: Instant,
    pub elapsed: Duration,
    pub result: Result<Served, Failed>,
}

impl Reply {
    pub fn served(&self) -> &Served {
        match &self.result {
            Ok(served) => served,
            Err(failed) => panic!("{:?}: expected an answer, got {failed:?}", self.front),
        }
    }

    pub fn failed(&self) -> &Failed {
        match &self.result {
            Err(failed) => failed,
            Ok(served) => panic!("{:?}: expected a failure, got {served:?}", self.front),
        }
    }
}

/// One front end (a fresh process) configured against two fakes.
pub struct Rig {
    pub front: Front,
    driver: Driver,
}

enum Driver {
    Gateway(Box<Gateway>),
    Lsp(Box<LspClient>),
}

/// A gateway process and an HTTP client for it.
pub struct Gateway {
    pub process: GatewayProcess,
    http: reqwest::Client,
}

impl Rig {
    pub async fn start(
        front: Front,
        profile: &Profile,
        setup: Setup,
        primary: &dyn Upstream,
        secondary: &dyn Upstream,
    ) -> Rig {
        let config = profile.config(&setup, primary, secondary);
        let driver = match front {
            Front::Gateway | Front::GatewayStream => {
                Driver::Gateway(Box::new(start_gateway(&config, profile).await))
            }
            Front::Lsp | Front::LspRefactor => Driver::Lsp(Box::new(start_lsp(config).await)),
        };
        Rig { front, driver }
    }

    /// One routed request; the caller's view of how it ended.
    pub async fn ask(&mut self) -> Reply {
        let sent = Instant::now();
        let result = match (&mut self.driver, self.front) {
            (Driver::Gateway(gateway), Front::GatewayStream) => gateway.ask(true).await,
            (Driver::Gateway(gateway), _) => gateway.ask(false).await,
            (Driver::Lsp(client), Front::LspRefactor) => lsp_refactor(client).await,
            (Driver::Lsp(client), _) => lsp_explain(client).await,
        };
        let reply = Reply {
            front: self.front,
            sent,
            elapsed: sent.elapsed(),
            result,
        };
        // Shown with a failing test's output.
        eprintln!(
            "{:?} after {:?}: {:?}",
            reply.front, reply.elapsed, reply.result
        );
        reply
    }

    /// The language server, for a scenario that talks to it while a
    /// request is under way.
    pub fn lsp(&mut self) -> &mut LspClient {
        match &mut self.driver {
            Driver::Lsp(client) => client,
            Driver::Gateway(_) => panic!("{:?} is not the language server", self.front),
        }
    }

    /// The gateway, for a scenario that changes it while a request is under way.
    pub fn gateway(&self) -> &Gateway {
        match &self.driver {
            Driver::Gateway(gateway) => gateway,
            Driver::Lsp(_) => panic!("{:?} is not the gateway", self.front),
        }
    }

    /// `n` requests sent at once (the language server gets them pipelined).
    pub async fn ask_concurrently(&mut self, n: usize) -> Vec<Reply> {
        let sent = Instant::now();
        let front = self.front;
        let results: Vec<Result<Served, Failed>> = match &mut self.driver {
            Driver::Gateway(gateway) => {
                let stream = front == Front::GatewayStream;
                let gateway = &*gateway;
                futures::future::join_all((0..n).map(|_| gateway.ask(stream))).await
            }
            Driver::Lsp(client) => {
                let mut ids = Vec::new();
                for _ in 0..n {
                    ids.push(
                        client
                            .send_request("workspace/executeCommand", explain_params())
                            .await,
                    );
                }
                let mut results = Vec::new();
                for id in ids {
                    results.push(explain_result(client.response(id).await));
                }
                results
            }
        };
        results
            .into_iter()
            .map(|result| Reply {
                front,
                sent,
                elapsed: sent.elapsed(),
                result,
            })
            .collect()
    }

    /// Whether the process still serves: the gateway's `/health`, or an LSP round trip.
    pub async fn healthy(&mut self) -> bool {
        match &mut self.driver {
            Driver::Gateway(gateway) => {
                let response = gateway
                    .http
                    .get(format!("{}/health", gateway.process.url))
                    .send()
                    .await;
                match response {
                    Ok(response) => response
                        .json::<Value>()
                        .await
                        .is_ok_and(|body| body["status"] == "ok"),
                    Err(_) => false,
                }
            }
            Driver::Lsp(client) => {
                let response = client
                    .request(
                        "workspace/executeCommand",
                        json!({"command": "switchyard.status", "arguments": []}),
                    )
                    .await;
                response.get("result").is_some()
            }
        }
    }

    /// The process's log, for failure messages.
    pub fn log(&self) -> String {
        match &self.driver {
            Driver::Gateway(gateway) => gateway.process.log(),
            Driver::Lsp(client) => client.log(),
        }
    }
}

async fn start_gateway(config: &Value, profile: &Profile) -> Gateway {
    let timeout = profile.total + profile.wait + profile.silence + profile.slack;
    Gateway::start(config, &[("SY_FAULTS_KEY", KEY)], timeout).await
}

impl Gateway {
    /// Starts a gateway with `config` (the TOML file's shape as JSON); every
    /// request it is sent gives up after `timeout`.
    pub async fn start(config: &Value, env: &[(&str, &str)], timeout: Duration) -> Gateway {
        let toml = toml::to_string(config).expect("the configuration as TOML");
        let process = GatewayProcess::start(&toml, env).await;
        let http = reqwest::Client::builder().timeout(timeout).build().unwrap();
        Gateway { process, http }
    }

    /// `/status`: the same fields as the editor's `switchyard/status`.
    pub async fn status(&self) -> Value {
        let response = self
            .http
            .get(format!("{}/status", self.process.url))
            .send()
            .await
            .expect("the gateway answers /status");
        response.json().await.expect("/status is JSON")
    }

    /// One explain-style chat completion on the medium tier.
    pub async fn ask(&self, stream: bool) -> Result<Served, Failed> {
        let body = json!({"model": "switchyard/medium", "stream": stream, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What does HashMap::entry do?"}
        ]});
        let response = self
            .http
            .post(format!("{}/v1/chat/completions", self.process.url))
            .json(&body)
            .send()
            .await
            .expect("the gateway answers HTTP");
        let status = response.status().as_u16();
        if status != 200 {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            return Err(Failed {
                message: body["error"]["message"].as_str().unwrap_or_default().into(),
                code: body["error"]["code"].as_str().map(Into::into),
                status: Some(status),
                streamed: String::new(),
            });
        }
        if !stream {
            let body: Value = response.json().await.expect("a JSON completion");
            return Ok(Served {
                model: body["model"].as_str().unwrap_or_default().into(),
                text: body["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
                usage: Some(body["usage"].clone()),
                chunk_models: Vec::new(),
            });
        }
        let text = response.text().await.unwrap_or_default();
        sse_outcome(&text)
    }
}

/// How a streamed completion ended: `[DONE]` after the usage chunk, or an
/// in-band error (and then never `[DONE]`).
pub fn sse_outcome(body: &str) -> Result<Served, Failed> {
    let events: Vec<&str> = body
        .split("\n\n")
        .filter_map(|e| e.trim_start().strip_prefix("data: "))
        .collect();
    let parsed: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str(e).ok())
        .collect();
    let content: String = parsed
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    let done = events.iter().filter(|e| **e == "[DONE]").count();
    let error = parsed.iter().find(|e| e.get("error").is_some());
    match (done, error) {
        (0, Some(error)) => Err(Failed {
            message: error["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .into(),
            code: error["error"]["code"].as_str().map(Into::into),
            status: Some(200),
            streamed: content,
        }),
        (1, None) if events.last() == Some(&"[DONE]") => {
            let usage = parsed
                .iter()
                .rev()
                .find(|e| e.get("usage").is_some_and(|u| !u.is_null()))
                .cloned()
                .unwrap_or(Value::Null);
            Ok(Served {
                model: usage["model"].as_str().unwrap_or_default().into(),
                text: content,
                usage: Some(usage["usage"].clone()),
                chunk_models: parsed
                    .iter()
                    .filter_map(|e| e["model"].as_str().map(Into::into))
                    .collect(),
            })
        }
        _ => panic!(
            "a stream must end with exactly one [DONE] or with an error, not both or neither:\n{body}"
        ),
    }
}

async fn start_lsp(config: Value) -> LspClient {
    let options = ServerOptions {
        model_dir: tempfile::tempdir().unwrap().keep(),
        env: vec![("SY_FAULTS_KEY".into(), KEY.into())],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    client.initialize(json!({}), config).await;
    client.open(URI, DOC).await;
    client
}

pub fn explain_params() -> Value {
    let range = json!({"start": {"line": 2, "character": 0}, "end": {"line": 9, "character": 0}});
    json!({"command": "switchyard.explain", "arguments": [URI, range]})
}

pub fn explain_result(response: Value) -> Result<Served, Failed> {
    let result = &response["result"];
    match result["provider"].as_str() {
        Some(provider) => Ok(Served {
            model: format!(
                "{provider}/{}",
                result["model"].as_str().unwrap_or_default()
            ),
            text: result["text"].as_str().unwrap_or_default().into(),
            usage: None,
            chunk_models: Vec::new(),
        }),
        None => Err(Failed {
            message: response["error"]["message"]
                .as_str()
                .unwrap_or_else(|| panic!("neither an answer nor an error: {response}"))
                .into(),
            code: None,
            status: None,
            streamed: String::new(),
        }),
    }
}

/// A refactor of the whole function; the text served is the document as the
/// applied edit left it.
async fn lsp_refactor(client: &mut LspClient) -> Result<Served, Failed> {
    let arguments = json!([URI, super::actions::whole_function(), "Simplify this code."]);
    let response = client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.refactor", "arguments": arguments}),
        )
        .await;
    let result = &response["result"];
    let Some(provider) = result["provider"].as_str() else {
        return Err(Failed {
            message: response["error"]["message"]
                .as_str()
                .unwrap_or_else(|| panic!("neither a refactor nor an error: {response}"))
                .into(),
            code: None,
            status: None,
            streamed: String::new(),
        });
    };
    let edit = client
        .seen
        .iter()
        .rev()
        .find(|m| m["method"] == "workspace/applyEdit")
        .unwrap_or_else(|| panic!("a refactor that was not applied: {response}"));
    let edits = &edit["params"]["edit"]["documentChanges"][0]["edits"];
    Ok(Served {
        model: format!(
            "{provider}/{}",
            result["model"].as_str().unwrap_or_default()
        ),
        text: apply_edits(DOC, edits.as_array().expect("text edits")),
        usage: None,
        chunk_models: Vec::new(),
    })
}

/// `doc` after LSP text edits (ranges in lines and characters, ASCII text).
pub fn apply_edits(doc: &str, edits: &[Value]) -> String {
    let offset = |position: &Value| {
        let line = position["line"].as_u64().unwrap() as usize;
        let character = position["character"].as_u64().unwrap() as usize;
        let start: usize = doc.split_inclusive('\n').take(line).map(str::len).sum();
        start + character
    };
    let mut spans: Vec<(usize, usize, &str)> = edits
        .iter()
        .map(|e| {
            (
                offset(&e["range"]["start"]),
                offset(&e["range"]["end"]),
                e["newText"].as_str().unwrap(),
            )
        })
        .collect();
    spans.sort_by_key(|(start, ..)| std::cmp::Reverse(*start));
    let mut text = doc.to_owned();
    for (start, end, new) in spans {
        text.replace_range(start..end, new);
    }
    text
}

async fn lsp_explain(client: &mut LspClient) -> Result<Served, Failed> {
    let response = client
        .request("workspace/executeCommand", explain_params())
        .await;
    explain_result(response)
}

/// The assistant prefill a request carried, if its last message is one.
pub fn prefill(body: &Value) -> Option<String> {
    let last = body["messages"].as_array()?.last()?;
    (last["role"] == "assistant").then(|| last["content"].as_str().unwrap_or_default().to_owned())
}

/// `n` whitespace-separated tokens `t01 t02 …`: cuts land on token boundaries
/// when `n` is a multiple of the fake's four chunks.
pub fn tokens(n: usize) -> String {
    (1..=n)
        .map(|i| format!("t{i:02}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The words of `text`, so answers compare across re-chunking and prefill seams.
pub fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}
