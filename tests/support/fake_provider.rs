//! A fake model provider on 127.0.0.1 that speaks both remote wire formats:
//! Anthropic Messages (`POST …/v1/messages`) and OpenAI chat completions
//! (`POST …/chat/completions`), chosen by the request path. Each request takes
//! the next scripted [`Behaviour`] from a queue, or the default when the queue
//! is empty, and is recorded (time, path, headers, JSON body) so tests can
//! count attempts and measure their spacing.
//!
//! It is written on a raw `TcpListener` so faults land exactly where a test
//! puts them: before the headers, between two events, in the middle of the
//! chunked body. Responses are the real wire formats: SSE over chunked
//! transfer encoding, error bodies as each API sends them, rate-limit headers
//! in each API's names. Every response closes its connection, so a client
//! never reuses one and each attempt is one connection, unless
//! [`FakeProvider::keep_connections`] asks it to keep them open as the real APIs
//! do (benchmarks). Dropping the [`FakeProvider`] stops the server and every
//! connection it holds.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use reply::Wire;

mod anthropic;
mod continuing;
mod openai;
mod reply;

pub use continuing::Manner;
pub use switchyard_base::prompts::CONTINUE_INSTRUCTION;

/// The answer a continuing model gives this request, in four deltas.
fn continuation(full: &str, manner: &Manner, body: &Value) -> Behaviour {
    Behaviour::Ok {
        text: continuing::answer(full, manner, body),
        chunks: 4,
        delay: Duration::ZERO,
    }
}

/// A door a test opens once: replies held at it go on from then.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        let mut open = self.0.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }
}

/// Input tokens every fake answer reports.
pub const FAKE_INPUT_TOKENS: u64 = 12;

/// The deltas the fake streams `text` in when a behaviour sends it in `chunks`
/// (near-equal lengths by characters): where a cut after some of them lands.
pub fn deltas(text: &str, chunks: usize) -> Vec<String> {
    reply::split(text, chunks)
}

/// What the fake does with one request.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// A streamed answer: `text` in `chunks` deltas with `delay` between them,
    /// ending normally. Output tokens reported = number of deltas.
    Ok {
        text: String,
        chunks: usize,
        delay: Duration,
    },
    /// Waits `delay` before sending the response headers, then behaves as `then`.
    LatencyBeforeHeaders {
        delay: Duration,
        then: Box<Behaviour>,
    },
    /// Holds the response before its headers until `gate` opens (whatever
    /// the time: a test orders events this way, not by sleeping), then
    /// behaves as `then`.
    Gated { gate: Gate, then: Box<Behaviour> },
    /// Sends headers and the opening events at once, then waits `delay` before the first delta.
    SlowFirstToken { delay: Duration, text: String },
    /// Sends `after_chunks` deltas of `text`, goes silent for `stall`, then finishes normally.
    StallMidStream {
        text: String,
        after_chunks: usize,
        stall: Duration,
    },
    /// Sends `after_chunks` deltas of `text`, then closes the connection in the
    /// middle of the chunked body (no terminal event, no final chunk).
    CutAfter { text: String, after_chunks: usize },
    /// Sends `after_chunks` deltas, then an event whose data is cut-off JSON,
    /// then the rest of the answer as usual.
    MalformedChunk { text: String, after_chunks: usize },
    /// `text` in four deltas, the body cut after `at_byte` bytes of event text
    /// (every event counts, the opening ones too; not the chunk framing): the
    /// chunk that passes it announces its whole event but carries only the
    /// bytes before the cut (mid-line, mid-JSON, mid-character as may be),
    /// then the connection closes. At or past the body's length, it ends normally.
    CutAtByte { text: String, at_byte: usize },
    /// Sends every delta and the finish reason, then ends the body cleanly
    /// without the terminal event (`message_stop` / `data: [DONE]`).
    MissingTerminal { text: String },
    /// Sends `after_chunks` of four deltas of `text`, then ends the body
    /// cleanly: no finish reason, no terminal event (a proxy that gave up).
    EndsEarly { text: String, after_chunks: usize },
    /// 429: Anthropic `rate_limit_error`, OpenAI `rate_limit_exceeded`, with
    /// `retry-after: <seconds>` when set.
    RateLimited { retry_after: Option<u64> },
    /// Credit exhausted: OpenAI 429 `insufficient_quota`; Anthropic 400
    /// `invalid_request_error` "credit balance is too low".
    QuotaExhausted,
    /// 503 with a plain-text body, as a proxy in front of either API sends it.
    Unavailable,
    /// Anthropic 529 `overloaded_error`; OpenAI 503 "engine is currently overloaded".
    Overloaded,
    /// The same, saying when to try again (`retry-after`, seconds).
    OverloadedFor { retry_after: u64 },
    /// 502 as a router or proxy sends it: OpenAI wire, OpenRouter's JSON
    /// (`code` 502, "Your chosen model is down…"); Anthropic wire, the HTML
    /// page of a CDN in front of the API.
    BadGateway,
    /// 500: Anthropic `api_error`, OpenAI `server_error`.
    ServerError,
    /// Reads the request, then closes the connection without a response.
    ResetBeforeHeaders,
    /// 400: Anthropic "prompt is too long", OpenAI `context_length_exceeded`.
    ContextLength,
    /// 401: Anthropic `authentication_error`; OpenAI `invalid_api_key` with the
    /// key quoted back in full (worse than OpenAI, which masks it) so tests can
    /// check the client scrubs it.
    Unauthorized,
    /// A complete answer the provider refused: stop_reason `refusal` /
    /// finish_reason `content_filter`.
    Refusal { text: String },
    /// HTTP 200 and `after_chunks` deltas, then an in-band error: Anthropic
    /// `event: error` (`overloaded_error`); OpenAI `data: {"error":{…}}` (with no
    /// deltas before it) or OpenRouter's error chunk with finish_reason "error".
    InBandError { text: String, after_chunks: usize },
    /// A complete answer cut by the token limit: stop_reason `max_tokens` /
    /// finish_reason `length`.
    MaxTokens { text: String },
    /// `then`, with rate-limit headers in the format's names added to its response.
    WithRateLimits {
        limits: FakeRateLimits,
        then: Box<Behaviour>,
    },
    /// A model asked to go on with a cut answer, `full` being the whole of
    /// it, streamed in four deltas. A request that continues part of `full`
    /// (an assistant prefill that begins it, or [`CONTINUE_INSTRUCTION`]
    /// after an assistant turn that begins it) gets what `manner` says; any
    /// other request gets all of `full`.
    Continues { full: String, manner: Manner },
    /// Like [`Behaviour::Continues`], except that a request ending with an
    /// assistant message (a prefill) gets [`Behaviour::PrefillRejected`].
    RejectsPrefill { full: String, manner: Manner },
    /// 400 `invalid_request_error` "This model does not support assistant
    /// message prefill…" (Anthropic's error body; OpenAI's for that wire).
    PrefillRejected,
    /// Sends `after_chunks` deltas of `text`, then `count` events of cut-off
    /// JSON in a row, then the rest of the answer as usual.
    MalformedRun {
        text: String,
        after_chunks: usize,
        count: usize,
    },
    /// `matched` for a request whose body contains `marker`, `otherwise` for
    /// the rest: one provider serving two kinds of task (an explain and a
    /// refactor) each its own answer.
    ByPrompt {
        marker: String,
        matched: Box<Behaviour>,
        otherwise: Box<Behaviour>,
    },
}

impl Behaviour {
    /// A normal answer of `text` in three deltas, no delays.
    pub fn ok(text: &str) -> Self {
        Behaviour::Ok {
            text: text.to_owned(),
            chunks: 3,
            delay: Duration::ZERO,
        }
    }

    /// `text` in four deltas, cut after `at_byte` bytes (see [`Behaviour::CutAtByte`]).
    pub fn cut_at_byte(text: &str, at_byte: usize) -> Self {
        Behaviour::CutAtByte {
            text: text.to_owned(),
            at_byte,
        }
    }

    /// This behaviour after `delay` of silence before the headers.
    pub fn after_latency(self, delay: Duration) -> Self {
        Behaviour::LatencyBeforeHeaders {
            delay,
            then: Box::new(self),
        }
    }

    /// This behaviour once `gate` opens.
    pub fn after_gate(self, gate: &Gate) -> Self {
        Behaviour::Gated {
            gate: gate.clone(),
            then: Box::new(self),
        }
    }

    /// How this behaviour answers a canary: a model that answers at all
    /// follows the canary's instruction and repeats its token; faults stay faults.
    fn answering_canary(self) -> Self {
        const TOKEN: &str = "SWITCHYARD-CANARY-OK";
        match self {
            Behaviour::Ok { delay, .. } => Behaviour::Ok {
                text: TOKEN.into(),
                chunks: 1,
                delay,
            },
            Behaviour::SlowFirstToken { delay, .. } => Behaviour::SlowFirstToken {
                delay,
                text: TOKEN.into(),
            },
            Behaviour::LatencyBeforeHeaders { delay, then } => Behaviour::LatencyBeforeHeaders {
                delay,
                then: Box::new(then.answering_canary()),
            },
            Behaviour::WithRateLimits { limits, then } => Behaviour::WithRateLimits {
                limits,
                then: Box::new(then.answering_canary()),
            },
            Behaviour::Gated { gate, then } => Behaviour::Gated {
                gate,
                then: Box::new(then.answering_canary()),
            },
            Behaviour::ByPrompt { otherwise, .. } => otherwise.answering_canary(),
            // A canary carries no prefill: a continuing model just answers it.
            Behaviour::Continues { .. } | Behaviour::RejectsPrefill { .. } => Behaviour::Ok {
                text: TOKEN.into(),
                chunks: 1,
                delay: Duration::ZERO,
            },
            fault => fault,
        }
    }

    /// A continuing model that goes on as asked (see [`Behaviour::Continues`]).
    pub fn continues(full: &str) -> Self {
        Behaviour::continuing(full, Manner::GoesOn)
    }

    /// A model asked to continue that does so in `manner`.
    pub fn continuing(full: &str, manner: Manner) -> Self {
        Behaviour::Continues {
            full: full.to_owned(),
            manner,
        }
    }

    /// A continuing model that refuses prefills (see [`Behaviour::RejectsPrefill`]).
    pub fn rejects_prefill(full: &str) -> Self {
        Behaviour::rejecting_prefill(full, Manner::GoesOn)
    }

    /// A model that refuses prefills and continues in `manner`.
    pub fn rejecting_prefill(full: &str, manner: Manner) -> Self {
        Behaviour::RejectsPrefill {
            full: full.to_owned(),
            manner,
        }
    }

    /// What this behaviour does with this request body: the continuing models
    /// read the conversation; everything else does what it says.
    fn for_request(self, body: &Value) -> Self {
        match self {
            Behaviour::Continues { full, manner } => continuation(&full, &manner, body),
            Behaviour::RejectsPrefill { full, manner } => {
                match continuing::ends_with_assistant(body) {
                    true => Behaviour::PrefillRejected,
                    false => continuation(&full, &manner, body),
                }
            }
            Behaviour::LatencyBeforeHeaders { delay, then } => Behaviour::LatencyBeforeHeaders {
                delay,
                then: Box::new(then.for_request(body)),
            },
            Behaviour::Gated { gate, then } => Behaviour::Gated {
                gate,
                then: Box::new(then.for_request(body)),
            },
            Behaviour::WithRateLimits { limits, then } => Behaviour::WithRateLimits {
                limits,
                then: Box::new(then.for_request(body)),
            },
            Behaviour::ByPrompt {
                marker,
                matched,
                otherwise,
            } => match body.to_string().contains(&marker) {
                true => matched.for_request(body),
                false => otherwise.for_request(body),
            },
            other => other,
        }
    }

    /// The `retry-after` this behaviour's response carries, if any.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Behaviour::RateLimited {
                retry_after: Some(seconds),
            }
            | Behaviour::OverloadedFor {
                retry_after: seconds,
            } => Some(Duration::from_secs(*seconds)),
            Behaviour::WithRateLimits { then, .. } => then.retry_after(),
            _ => None,
        }
    }

    /// This behaviour with rate-limit headers on its response.
    pub fn with_rate_limits(self, limits: FakeRateLimits) -> Self {
        Behaviour::WithRateLimits {
            limits,
            then: Box::new(self),
        }
    }
}

/// Rate-limit state the fake reports. Anthropic gets `anthropic-ratelimit-*`
/// (the tokens numbers repeated for input and output tokens, resets as RFC 3339
/// instants, whole seconds); OpenAI gets `x-ratelimit-*` (resets as Go durations).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeRateLimits {
    pub requests_limit: u64,
    pub requests_remaining: u64,
    pub requests_reset: Duration,
    pub tokens_limit: u64,
    pub tokens_remaining: u64,
    pub tokens_reset: Duration,
}

/// One request as the fake received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// Names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body (`Null` when the body was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// A canary asks for its known token back.
    pub fn is_canary(&self) -> bool {
        self.body.to_string().contains("SWITCHYARD-CANARY-OK")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The running fake. Dropping it stops the server.
pub struct FakeProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Each reply that said when to come back: (when it was sent, until when).
    retry_afters: Mutex<Vec<(Instant, Instant)>>,
    quota: Mutex<Option<Quota>>,
    keep_connections: AtomicBool,
}

/// A requests-per-minute quota the fake enforces like a provider: a token
/// bucket that starts full and refills continuously; a request that finds it
/// empty gets a 429 with `retry-after`, and every response reports the
/// remaining capacity in its rate-limit headers.
struct Quota {
    per_minute: u64,
    level: f64,
    at: Instant,
    rejected: usize,
}

impl Quota {
    /// Charges one request; `Err(seconds until one fits)` when empty.
    fn charge(&mut self) -> Result<(), u64> {
        let now = Instant::now();
        let rate = self.per_minute as f64 / 60.0;
        self.level = (self.level + now.duration_since(self.at).as_secs_f64() * rate)
            .min(self.per_minute as f64);
        self.at = now;
        if self.level >= 1.0 {
            self.level -= 1.0;
            Ok(())
        } else {
            self.rejected += 1;
            Err(((1.0 - self.level) / rate).ceil() as u64)
        }
    }

    fn limits(&self) -> FakeRateLimits {
        let missing = self.per_minute as f64 - self.level;
        FakeRateLimits {
            requests_limit: self.per_minute,
            requests_remaining: self.level.floor() as u64,
            requests_reset: Duration::from_secs_f64(missing * 60.0 / self.per_minute as f64),
            tokens_limit: 10_000_000,
            tokens_remaining: 10_000_000,
            tokens_reset: Duration::ZERO,
        }
    }
}

struct Script {
    queue: VecDeque<Behaviour>,
    default: Behaviour,
}

/// A config file's start: no model download, `primary` speaking Anthropic and
/// `secondary` OpenAI, both keyed by the environment variable `key_env`.
pub fn two_providers_toml(
    primary: &FakeProvider,
    secondary: &FakeProvider,
    key_env: &str,
) -> String {
    format!(
        r#"
[local]
auto_pull = false

[providers.primary]
kind = "anthropic"
base_url = "{}"
api_key_env = "{key_env}"

[providers.secondary]
kind = "openai"
base_url = "{}"
api_key_env = "{key_env}"
"#,
        primary.anthropic_url(),
        secondary.openai_url(),
    )
}

impl FakeProvider {
    /// Starts a fake whose default is a normal answer, "Hello from the fake".
    pub async fn start() -> Self {
        Self::with_default(Behaviour::ok("Hello from the fake")).await
    }

    /// Starts a fake that answers every unscripted request with `default`.
    pub async fn with_default(default: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake provider on loopback");
        let addr = listener.local_addr().expect("fake provider address");
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                queue: VecDeque::new(),
                default,
            }),
            requests: Mutex::new(Vec::new()),
            retry_afters: Mutex::new(Vec::new()),
            quota: Mutex::new(None),
            keep_connections: AtomicBool::new(false),
        });
        let server = tokio::spawn(accept(listener, shared.clone()));
        FakeProvider {
            addr,
            shared,
            server,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL for an Anthropic provider (it appends `/v1/messages`).
    pub fn anthropic_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL for an OpenAI-compatible provider (it appends `/chat/completions`).
    pub fn openai_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// From now on a connection stays open after a reply whose body ended
    /// cleanly, for the client's next request, as the real APIs' servers do.
    pub fn keep_connections(&self) -> &Self {
        self.shared.keep_connections.store(true, Ordering::Relaxed);
        self
    }

    /// Queues `behaviour` for the next request not yet scripted.
    pub fn push(&self, behaviour: Behaviour) -> &Self {
        self.shared
            .script
            .lock()
            .unwrap()
            .queue
            .push_back(behaviour);
        self
    }

    /// Drops what is still queued (requests the router sent elsewhere left it).
    pub fn clear_queue(&self) {
        self.shared.script.lock().unwrap().queue.clear();
    }

    /// What requests get once the queue is empty.
    pub fn set_default(&self, behaviour: Behaviour) {
        self.shared.script.lock().unwrap().default = behaviour;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Enforces a requests-per-minute quota from now on (the bucket starts full).
    pub fn set_quota(&self, requests_per_minute: u64) {
        *self.shared.quota.lock().unwrap() = Some(Quota {
            per_minute: requests_per_minute,
            level: requests_per_minute as f64,
            at: Instant::now(),
            rejected: 0,
        });
    }

    /// How many requests the quota turned away with a 429.
    pub fn quota_rejections(&self) -> usize {
        self.shared
            .quota
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |q| q.rejected)
    }

    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// Requests from users: everything but switchyard's own canaries.
    pub fn user_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| !r.is_canary())
            .collect()
    }

    pub fn user_request_count(&self) -> usize {
        self.user_requests().len()
    }

    /// Requests that arrived while a `retry-after` this fake sent was still
    /// running, each with how long after that reply it came; only those
    /// `grace` or more after it count (the ones before were on their way).
    pub fn requests_before_retry_after(&self, grace: Duration) -> Vec<(RecordedRequest, Duration)> {
        let windows = self.shared.retry_afters.lock().unwrap().clone();
        self.requests()
            .into_iter()
            .filter_map(|r| {
                let (sent, _) = windows
                    .iter()
                    .find(|(sent, until)| *sent + grace <= r.at && r.at < *until)?;
                let after = r.at.duration_since(*sent);
                Some((r, after))
            })
            .collect()
    }

    /// The time between each user request and the one before it.
    pub fn gaps(&self) -> Vec<Duration> {
        let requests = self.user_requests();
        requests
            .windows(2)
            .map(|pair| pair[1].at.duration_since(pair[0].at))
            .collect()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        // The accept task owns the connection tasks; aborting it drops them all.
        self.server.abort();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((socket, _)) = accepted {
                    // Each event goes out as it is written, as servers that
                    // stream do (Nagle would hold it for the client's ACK).
                    let _ = socket.set_nodelay(true);
                    connections.spawn(serve(socket, shared.clone()));
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Answers the requests on one connection: one, or one after another while
/// connections are kept and each reply ends cleanly.
async fn serve(mut socket: TcpStream, shared: Arc<Shared>) {
    let mut unread = Vec::new();
    while let Some(request) = read_request(&mut socket, &mut unread).await {
        let keep_open = shared.keep_connections.load(Ordering::Relaxed);
        let answered = answer(&mut socket, &shared, request, keep_open).await;
        if !(keep_open && answered) {
            return;
        }
    }
}

/// Sends one request its reply; whether the connection can take another.
async fn answer(
    socket: &mut TcpStream,
    shared: &Shared,
    request: RecordedRequest,
    keep_open: bool,
) -> bool {
    // Canaries get the default behaviour and leave the script to the
    // requests it was written for.
    let mut behaviour = {
        let mut script = shared.script.lock().unwrap();
        match request.is_canary() {
            true => script.default.clone().answering_canary(),
            false => script
                .queue
                .pop_front()
                .unwrap_or_else(|| script.default.clone()),
        }
    }
    .for_request(&request.body);
    if let Some(quota) = shared.quota.lock().unwrap().as_mut() {
        behaviour = match quota.charge() {
            Ok(()) => behaviour,
            Err(wait) => Behaviour::RateLimited {
                retry_after: Some(wait),
            },
        }
        .with_rate_limits(quota.limits());
    }
    let wire = if request.path.ends_with("/v1/messages") {
        Some(Wire::Anthropic)
    } else if request.path.ends_with("/chat/completions") {
        Some(Wire::OpenAi)
    } else {
        None
    };
    let bearer = request
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_owned();
    if let Some(after) = behaviour.retry_after() {
        let now = Instant::now();
        shared.retry_afters.lock().unwrap().push((now, now + after));
    }
    shared.requests.lock().unwrap().push(request);
    // Write errors mean the client hung up (a timeout fired): nothing to do.
    match wire {
        Some(wire) => {
            let reply = reply::plan(behaviour);
            let keep_open = keep_open && reply.ends_cleanly();
            let sent = reply::respond(socket, wire, reply, &bearer, keep_open).await;
            keep_open && sent.is_ok()
        }
        None => reply::write_error(
            socket,
            404,
            "Not Found",
            &[],
            &json!({"error": {"message": "no such route"}}),
            keep_open,
        )
        .await
        .is_ok_and(|()| keep_open),
    }
}

/// Reads the next request; `buffer` holds what was read past it (the start of
/// the next request on a kept connection) and is carried to the next call.
async fn read_request(socket: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<RecordedRequest> {
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + 4 + length {
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let request: Vec<u8> = buffer.drain(..head_end + 4 + length).collect();
    let body = serde_json::from_slice(&request[head_end + 4..]).unwrap_or(Value::Null);
    Some(RecordedRequest {
        at,
        method,
        path,
        headers,
        body,
    })
}
