//! Drop safety: a request abandoned at any stage gives back what it holds at
//! once, through both front ends. The gateway's caller hangs up (whole and
//! streamed `/v1/chat/completions`); the language server's `switchyard.explain`
//! gets `$/cancelRequest` or the progress cancel button. The stages:
//!
//! - holding the half-open probe lease, waiting for a slow first token: the
//!   lease file leaves the shared state at once (far sooner than its TTL, the
//!   task's total ceiling + 5 s = 35 s here), and the next request, from
//!   another process too, gets the probe;
//! - mid-stream, holding a quota reservation: the output share comes back at
//!   once (far sooner than the bucket's refill would bring it), so a second
//!   request that fits only if it came back is served;
//! - waiting for quota on an empty bucket (while holding the probe): the lease
//!   goes at once and nothing is ever reserved for the abandoned request.
//!
//! Everything is observed from outside, in the file backend's records (see
//! crates/state/src/file.rs: one JSON file per key) and at the fake provider.

mod support;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use support::actions::{DOC, URI, whole_function};
use support::fake_provider::{Behaviour, FakeProvider};
use support::gateway::GatewayProcess;
use support::lsp_client::{LspClient, ServerOptions};
use support::timing;

const KEY: &str = "sk-test-drop-0123456789abcdef";
/// The one chain entry, as `account/provider/model` in the shared state.
const ENTRY: &str = "primary/primary/mid";
/// `tasks.explain.total_ms`: the probe lease's TTL is this plus 5 s.
const TOTAL_MS: u64 = 30_000;
const LEASE_TTL: Duration = Duration::from_millis(TOTAL_MS + 5_000);
/// What "at once" means: well above a loaded 2-core machine's scheduling
/// noise, far below the lease TTL and any refill the tests rely on.
const AT_ONCE: Duration = Duration::from_secs(2);
/// Generous: waits for positive conditions catch hangs, not speed.
const PATIENCE: Duration = Duration::from_secs(60);
/// `tasks.explain.output_tokens`: every attempt reserves this much output.
const OUTPUT: f64 = 900.0;
/// A first token or a stall that outlasts every test.
const FOREVER: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// The shared state directory, read as another process would.

struct SharedDir {
    dir: tempfile::TempDir,
}

/// A key's file name: the file backend's escaping (crates/state/src/file/disk.rs).
fn file_stem(key: &str) -> String {
    key.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

impl SharedDir {
    fn new() -> SharedDir {
        SharedDir {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn url(&self) -> String {
        format!("file://{}", self.dir.path().display())
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.path().join(format!("{}.json", file_stem(key)))
    }

    /// The live record at `key` (`{"key", "value", "expires"}`), if any.
    fn record(&self, key: &str) -> Option<Value> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        let record: Value = serde_json::from_slice(&bytes).ok()?;
        let live = record["expires"].as_u64().is_none_or(|at| at > now_ms());
        (record["key"] == key && live).then_some(record)
    }

    /// The half-open probe lease of the entry, while someone holds it.
    fn lease(&self) -> Option<Value> {
        self.record(&format!("lease/breaker/{ENTRY}"))
    }

    fn breaker(&self) -> Option<Value> {
        self.record(&format!("breaker/{ENTRY}"))
            .map(|r| r["value"].clone())
    }

    fn bucket_key() -> String {
        format!("quota/{ENTRY}/output_tokens")
    }

    /// The output-token bucket: `{level, at, reserved, last_take}`.
    fn bucket(&self) -> Value {
        self.record(&Self::bucket_key())
            .map(|r| r["value"].clone())
            .unwrap_or(Value::Null)
    }

    /// The bucket's level as of its last write (refill since is not counted).
    fn level(&self) -> f64 {
        self.bucket()["level"].as_f64().unwrap_or(f64::NAN)
    }

    /// Everything ever reserved in the bucket (a running total of grants).
    fn reserved(&self) -> f64 {
        self.bucket()["reserved"].as_f64().unwrap_or(f64::NAN)
    }

    /// Writes the bucket as it stands now at `level`, before any process
    /// touches it (the governor keeps an existing bucket instead of starting
    /// it empty). Atomic, as the backend writes: a temp file renamed over.
    fn seed_bucket(&self, level: f64) {
        let now = now_ms();
        let key = Self::bucket_key();
        let record = json!({
            "key": key,
            "value": {"level": level, "at": now, "reserved": 0.0, "last_take": now},
            "expires": now + 3_600_000,
        });
        let path = self.path(&key);
        let temp = path.with_extension("seed");
        std::fs::write(&temp, serde_json::to_vec(&record).unwrap()).unwrap();
        std::fs::rename(&temp, &path).unwrap();
    }
}

/// Polls `condition` until it holds; panics with `what` after `within`,
/// scaled to this machine.
async fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = timing::Deadline::after(within);
    while !condition() {
        deadline.assert_not_passed(format!("{what}: not within {within:?}"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the tripped breaker has cooled down: the next request probes.
async fn until_half_open(shared: &SharedDir) {
    let breaker = shared.breaker().expect("a breaker record");
    assert_eq!(breaker["open"], true, "the breaker is open: {breaker}");
    let until = breaker["open_until"].as_u64().unwrap();
    let left = until.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(left + 100)).await;
}

/// Checks the lease a request holds: present, ours to watch, and with a TTL
/// that is nowhere near the "at once" bound. Returns when it would lapse
/// (ms since the epoch): a probe by another process before then was not
/// waiting for it.
async fn lease_taken(shared: &SharedDir) -> u64 {
    eventually("the request holds the probe lease", PATIENCE, || {
        shared.lease().is_some()
    })
    .await;
    let lease = shared.lease().unwrap();
    let ttl_left = lease["expires"].as_u64().unwrap().saturating_sub(now_ms());
    assert!(
        ttl_left > (LEASE_TTL - Duration::from_secs(10)).as_millis() as u64,
        "the lease lives for the task's ceiling: {lease}"
    );
    lease["expires"].as_u64().unwrap()
}

// ---------------------------------------------------------------------------
// Configuration and processes.

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(base.entry(k).or_insert(Value::Null), v);
            }
        }
        (base, extra) => *base = extra,
    }
}

/// One remote entry (`primary/mid`, no hedge, nowhere to fail over), its
/// breaker tripping after two failures and cooling down in half a second,
/// canaries out of the way (they would take the probe themselves).
fn config(shared: &SharedDir, fake: &FakeProvider, extra: Value) -> Value {
    let mut config = json!({
        "local": {"auto_pull": false},
        "providers": {
            "primary": {"kind": "anthropic", "base_url": fake.anthropic_url(), "api_key_env": "SY_DROP_KEY"}
        },
        "tiers": {"large": [], "medium": ["primary/mid"], "small": []},
        "tasks": {"explain": {
            "first_token_ms": 20_000,
            "total_ms": TOTAL_MS,
            "idle_ms": 20_000,
            "wait_ms": 0,
            "hedge": false,
            "output_tokens": OUTPUT as u64
        }},
        "resilience": {
            "state": shared.url(),
            "breaker": {"failures": 2, "cooldown_ms": 500},
            "backoff": {"rate_limit_ms": 50, "overloaded_ms": 50, "transient_ms": 50, "cap_ms": 200},
            "canary_interval_ms": 3_600_000
        }
    });
    merge(&mut config, extra);
    config
}

/// A quota of `per_minute` output tokens on the entry's account.
fn output_quota(per_minute: u64) -> Value {
    json!({"providers": {"primary": {"quota": {"output_tokens_per_minute": per_minute}}}})
}

fn with(mut a: Value, b: Value) -> Value {
    merge(&mut a, b);
    a
}

async fn gateway(config: &Value) -> GatewayProcess {
    let toml = toml::to_string(config).expect("the configuration as TOML");
    GatewayProcess::start(&toml, &[("SY_DROP_KEY", KEY)]).await
}

fn completion_body(stream: bool) -> Value {
    json!({"model": "switchyard/medium", "stream": stream, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What does HashMap::entry do?"}
    ]})
}

/// One whole completion through reqwest: the status and the JSON body.
async fn complete(url: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .timeout(PATIENCE)
        .json(&completion_body(false))
        .send()
        .await
        .expect("the gateway answers HTTP");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A completion over a bare socket, so the test decides exactly when the
/// caller hangs up (dropping it closes the connection).
struct Caller {
    socket: TcpStream,
    received: Vec<u8>,
}

impl Caller {
    async fn send(url: &str, stream: bool) -> Caller {
        let addr = url.trim_start_matches("http://");
        let mut socket = TcpStream::connect(addr).await.unwrap();
        let body = completion_body(stream).to_string();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(body.as_bytes()).await.unwrap();
        Caller {
            socket,
            received: Vec::new(),
        }
    }

    /// Reads until the response so far contains `needle`.
    async fn read_until(&mut self, needle: &str) {
        let deadline = Instant::now() + PATIENCE;
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&self.received).contains(needle) {
            let read = tokio::time::timeout_at(deadline, self.socket.read(&mut chunk))
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no {needle:?} in the response: {}",
                        String::from_utf8_lossy(&self.received)
                    )
                })
                .unwrap();
            assert!(
                read > 0,
                "the gateway closed before {needle:?}: {}",
                String::from_utf8_lossy(&self.received)
            );
            self.received.extend_from_slice(&chunk[..read]);
        }
    }

    /// Nothing came back yet: the request is still in flight.
    fn assert_still_waiting(&mut self) {
        let mut chunk = [0u8; 4096];
        match self.socket.try_read(&mut chunk) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!(
                "the request should still be waiting, got {other:?}: {}",
                String::from_utf8_lossy(&chunk)
            ),
        }
    }

    /// Closes the connection; returns when it did.
    fn hang_up(self) {
        drop(self.socket);
    }
}

/// Sends whole completions until the breaker is open (two 500s in a row: a
/// transient error, which breaks the circuit without a health verdict).
async fn trip_via_gateway(shared: &SharedDir, fake: &FakeProvider, url: &str) {
    fake.set_default(Behaviour::ServerError);
    for _ in 0..6 {
        let (status, body) = complete(url).await;
        assert_eq!(status, 503, "{body}");
        if shared.breaker().is_some_and(|b| b["open"] == true) {
            return;
        }
    }
    panic!("the breaker did not open: {:?}", shared.breaker());
}

async fn lsp(config: Value, capabilities: Value) -> LspClient {
    let options = ServerOptions {
        model_dir: tempfile::tempdir().unwrap().keep(),
        env: vec![("SY_DROP_KEY".into(), KEY.into())],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    client.initialize(capabilities, config).await;
    client.open(URI, DOC).await;
    client
}

async fn send_explain(client: &mut LspClient) -> i64 {
    client
        .send_request(
            "workspace/executeCommand",
            json!({"command": "switchyard.explain", "arguments": [URI, whole_function()]}),
        )
        .await
}

async fn explain(client: &mut LspClient) -> Value {
    let id = send_explain(client).await;
    client.response(id).await
}

async fn trip_via_lsp(shared: &SharedDir, fake: &FakeProvider, client: &mut LspClient) {
    fake.set_default(Behaviour::ServerError);
    for _ in 0..6 {
        let response = explain(client).await;
        assert!(response.get("error").is_some(), "{response}");
        if shared.breaker().is_some_and(|b| b["open"] == true) {
            return;
        }
    }
    panic!("the breaker did not open: {:?}", shared.breaker());
}

/// The whole answer an explain served, or a panic with the response.
fn served_by(response: &Value) -> String {
    match response["result"]["provider"].as_str() {
        Some(provider) => format!(
            "{provider}/{}",
            response["result"]["model"].as_str().unwrap()
        ),
        None => panic!("explain failed: {response}"),
    }
}

// ---------------------------------------------------------------------------
// 1a. Gateway: the caller hangs up while its request holds the probe lease.

async fn gateway_hang_up_while_probing(stream: bool) {
    let shared = SharedDir::new();
    let fake = FakeProvider::start().await;
    let config = config(&shared, &fake, json!({}));
    let first = gateway(&config).await;
    // Another process on the machine, sharing the breaker.
    let second = gateway(&config).await;
    trip_via_gateway(&shared, &fake, &first.url).await;
    until_half_open(&shared).await;

    // The probe: the primary sends its headers, then nothing for minutes.
    fake.set_default(Behaviour::SlowFirstToken {
        delay: FOREVER,
        text: "late".into(),
    });
    let sent_before = fake.request_count();
    let mut caller = Caller::send(&first.url, stream).await;
    let lapses = lease_taken(&shared).await;
    eventually("the probe reached the provider", PATIENCE, || {
        fake.request_count() == sent_before + 1
    })
    .await;
    caller.assert_still_waiting();

    // While the probe runs, the other process routes around the entry.
    let (status, body) = complete(&second.url).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("another request is probing")),
        "{body}"
    );
    assert_eq!(fake.request_count(), sent_before + 1);

    caller.hang_up();
    eventually("the lease is given back at once", AT_ONCE, || {
        shared.lease().is_none()
    })
    .await;

    // The other process probes now, not after the TTL: its request reaches
    // the recovered primary, and its verdict closes the breaker.
    fake.set_default(Behaviour::ok("recovered"));
    let (status, body) = complete(&second.url).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "primary/mid", "{body}");
    assert_eq!(fake.request_count(), sent_before + 2);
    timing::assert_in_order(
        "served, then the hung-up probe's lease would have lapsed",
        now_ms(),
        lapses,
    );
    assert_eq!(shared.breaker().unwrap()["open"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_client_hanging_up_a_whole_completion_gives_the_probe_lease_back_at_once() {
    gateway_hang_up_while_probing(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_client_hanging_up_a_stream_before_its_first_token_gives_the_probe_lease_back_at_once()
 {
    gateway_hang_up_while_probing(true).await;
}

// ---------------------------------------------------------------------------
// 1b. Gateway: the caller hangs up while the provider's answer is mid-stream.

/// 1,000 output tokens a minute, refilling 15 a second; an attempt reserves
/// 900. Full, the bucket admits one; after it, 100 are left and the next one
/// fits only when the first's 900 are back: by refund, at once, or by refill,
/// after about 55 s.
const SMALL_OUTPUT_QUOTA: u64 = 1_000;

async fn gateway_hang_up_mid_stream(stream: bool) {
    let shared = SharedDir::new();
    let fake = FakeProvider::with_default(Behaviour::StallMidStream {
        text: "AAAA BBBB CCCC DDDD".into(),
        after_chunks: 2,
        stall: FOREVER,
    })
    .await;
    shared.seed_bucket(SMALL_OUTPUT_QUOTA as f64);
    let gateway = gateway(&config(&shared, &fake, output_quota(SMALL_OUTPUT_QUOTA))).await;

    let mut caller = Caller::send(&gateway.url, stream).await;
    eventually("the request reached the provider", PATIENCE, || {
        fake.request_count() == 1
    })
    .await;
    if stream {
        // The caller has part of the answer; the provider has gone quiet.
        caller.read_until("BBBB").await;
    } else {
        // A whole completion shows nothing until the end: give the two
        // deltas (sent at once) time to arrive at the gateway.
        tokio::time::sleep(Duration::from_millis(500)).await;
        caller.assert_still_waiting();
    }
    let held = shared.level();
    assert!(
        held < SMALL_OUTPUT_QUOTA as f64 - OUTPUT + 50.0,
        "the answer's output is reserved: {}",
        shared.bucket()
    );

    caller.hang_up();
    let refunded = (held + OUTPUT).min(SMALL_OUTPUT_QUOTA as f64) - 1.0;
    eventually("the output reservation comes back at once", AT_ONCE, || {
        shared.level() >= refunded
    })
    .await;

    // A second request fits only with the first's reservation back (the wait
    // budget is zero: it is refused at once otherwise).
    fake.set_default(Behaviour::ok("second"));
    let (status, body) = complete(&gateway.url).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "primary/mid", "{body}");
    assert_eq!(fake.request_count(), 2);
    assert_eq!(shared.reserved(), 2.0 * OUTPUT, "{}", shared.bucket());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_client_hanging_up_a_whole_completion_mid_answer_refunds_its_reservation_at_once()
{
    gateway_hang_up_mid_stream(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_client_hanging_up_mid_stream_refunds_its_reservation_at_once() {
    gateway_hang_up_mid_stream(true).await;
}

// ---------------------------------------------------------------------------
// 1c. Gateway: the caller hangs up while its request waits for quota.

/// 6,000 output tokens a minute, refilling 90 a second: from empty, an
/// attempt's 900 (above the 150 kept for others) fit after about 12 s.
const WAIT_QUOTA: u64 = 6_000;
const WAIT_FOR_REFILL: Duration = Duration::from_millis(11_700);

/// The probe lease is taken before the quota: a request that waits on an
/// empty bucket holds it while it waits.
fn waiting_config(shared: &SharedDir, fake: &FakeProvider) -> Value {
    config(
        shared,
        fake,
        with(
            output_quota(WAIT_QUOTA),
            json!({"tasks": {"explain": {"wait_ms": 30_000}}}),
        ),
    )
}

/// Waits until the bucket was written after `seeded_at`: a request asked it.
async fn bucket_asked(shared: &SharedDir, seeded_at: u64) {
    eventually("the request asked the empty bucket", PATIENCE, || {
        shared.bucket()["at"]
            .as_u64()
            .is_some_and(|at| at > seeded_at)
    })
    .await;
}

/// After the hang-up: the lease went at once; by the time the bucket could
/// have admitted the abandoned request, nothing was reserved and nothing sent.
async fn nothing_held_after(shared: &SharedDir, fake: &FakeProvider, seeded: Instant, sent: usize) {
    eventually("the lease is given back at once", AT_ONCE, || {
        shared.lease().is_none()
    })
    .await;
    tokio::time::sleep_until(seeded + WAIT_FOR_REFILL + Duration::from_secs(3)).await;
    assert_eq!(
        shared.reserved(),
        0.0,
        "the abandoned request reserved quota: {}",
        shared.bucket()
    );
    assert!(shared.lease().is_none(), "{:?}", shared.lease());
    assert_eq!(fake.request_count(), sent, "the abandoned request went out");
}

async fn gateway_hang_up_waiting_for_quota(stream: bool) {
    let shared = SharedDir::new();
    let fake = FakeProvider::start().await;
    let config = waiting_config(&shared, &fake);
    // Full while the breaker trips (the failed attempts' output comes back),
    // empty once it has.
    shared.seed_bucket(WAIT_QUOTA as f64);
    let gateway = gateway(&config).await;
    trip_via_gateway(&shared, &fake, &gateway.url).await;
    fake.set_default(Behaviour::ok("served"));
    until_half_open(&shared).await;
    let sent = fake.request_count();
    shared.seed_bucket(0.0);
    let (seeded, seeded_at) = (Instant::now(), now_ms());

    let mut caller = Caller::send(&gateway.url, stream).await;
    bucket_asked(&shared, seeded_at).await;
    lease_taken(&shared).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    caller.assert_still_waiting();
    caller.hang_up();
    nothing_held_after(&shared, &fake, seeded, sent).await;

    // The next request probes and is served; it alone reserved anything.
    let (status, body) = complete(&gateway.url).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(fake.request_count(), sent + 1);
    assert_eq!(shared.reserved(), OUTPUT, "{}", shared.bucket());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_client_hanging_up_a_whole_completion_waiting_for_quota_leaves_nothing_held() {
    gateway_hang_up_waiting_for_quota(false).await;
}

/// A streamed completion runs as a spawned task that the caller's hang-up
/// cancels through a token (src/gateway/mod.rs): every wait in it, the quota
/// wait included, must heed the token for this to hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_client_hanging_up_a_stream_waiting_for_quota_leaves_nothing_held() {
    gateway_hang_up_waiting_for_quota(true).await;
}

// ---------------------------------------------------------------------------
// 2. Language server: `$/cancelRequest` and the progress cancel button.

/// LSP's `RequestCancelled`.
const REQUEST_CANCELLED: i64 = -32800;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lsp_cancel_request_gives_the_probe_lease_back_at_once() {
    let shared = SharedDir::new();
    let fake = FakeProvider::start().await;
    let mut client = lsp(config(&shared, &fake, json!({})), json!({})).await;
    trip_via_lsp(&shared, &fake, &mut client).await;
    until_half_open(&shared).await;

    fake.set_default(Behaviour::SlowFirstToken {
        delay: FOREVER,
        text: "late".into(),
    });
    let sent = fake.request_count();
    let id = send_explain(&mut client).await;
    let lapses = lease_taken(&shared).await;
    eventually("the probe reached the provider", PATIENCE, || {
        fake.request_count() == sent + 1
    })
    .await;

    client.notify("$/cancelRequest", json!({"id": id})).await;
    eventually("the lease is given back at once", AT_ONCE, || {
        shared.lease().is_none()
    })
    .await;
    let response = client.response(id).await;
    assert_eq!(response["error"]["code"], REQUEST_CANCELLED, "{response}");

    // Another process probes at once: a gateway sharing the state.
    fake.set_default(Behaviour::ok("recovered"));
    let gateway = gateway(&config(&shared, &fake, json!({}))).await;
    let (status, body) = complete(&gateway.url).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(fake.request_count(), sent + 2);
    timing::assert_in_order(
        "served, then the cancelled probe's lease would have lapsed",
        now_ms(),
        lapses,
    );
    assert_eq!(shared.breaker().unwrap()["open"], false);
    // And this server sees the breaker closed.
    assert_eq!(served_by(&explain(&mut client).await), "primary/mid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lsp_progress_cancel_button_gives_the_probe_lease_back_at_once() {
    let shared = SharedDir::new();
    let fake = FakeProvider::start().await;
    let capabilities =
        json!({"window": {"workDoneProgress": true, "showDocument": {"support": true}}});
    let mut client = lsp(config(&shared, &fake, json!({})), capabilities).await;
    trip_via_lsp(&shared, &fake, &mut client).await;
    until_half_open(&shared).await;
    let token_of = |m: &Value| m["params"]["token"].clone();
    let old_tokens: HashSet<String> = client
        .seen
        .iter()
        .filter(|m| m["method"] == "window/workDoneProgress/create")
        .map(|m| token_of(m).to_string())
        .collect();

    fake.set_default(Behaviour::SlowFirstToken {
        delay: FOREVER,
        text: "late".into(),
    });
    let sent = fake.request_count();
    let id = send_explain(&mut client).await;
    let token = loop {
        let create = client
            .server_request("window/workDoneProgress/create")
            .await;
        let explain = token_of(&create)
            .as_str()
            .is_some_and(|t| t.starts_with("switchyard/explain/"));
        if explain && !old_tokens.contains(&token_of(&create).to_string()) {
            break token_of(&create);
        }
    };
    // The button exists once the progress has begun.
    let begin = client
        .notification("$/progress", |p| {
            p["token"] == token && p["value"]["kind"] == "begin"
        })
        .await;
    assert_eq!(begin["params"]["value"]["cancellable"], true, "{begin}");
    lease_taken(&shared).await;
    eventually("the probe reached the provider", PATIENCE, || {
        fake.request_count() == sent + 1
    })
    .await;

    client
        .notify("window/workDoneProgress/cancel", json!({"token": token}))
        .await;
    eventually("the lease is given back at once", AT_ONCE, || {
        shared.lease().is_none()
    })
    .await;
    let response = client.response(id).await;
    assert!(response.get("error").is_some(), "{response}");

    fake.set_default(Behaviour::ok("recovered"));
    assert_eq!(served_by(&explain(&mut client).await), "primary/mid");
    assert_eq!(fake.request_count(), sent + 2);
    assert_eq!(shared.breaker().unwrap()["open"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lsp_cancel_request_mid_stream_refunds_its_reservation_at_once() {
    let shared = SharedDir::new();
    let fake = FakeProvider::with_default(Behaviour::StallMidStream {
        text: "AAAA BBBB CCCC DDDD".into(),
        after_chunks: 2,
        stall: FOREVER,
    })
    .await;
    shared.seed_bucket(SMALL_OUTPUT_QUOTA as f64);
    let capabilities =
        json!({"window": {"workDoneProgress": true, "showDocument": {"support": true}}});
    let config = config(&shared, &fake, output_quota(SMALL_OUTPUT_QUOTA));
    let mut client = lsp(config, capabilities).await;

    let id = send_explain(&mut client).await;
    // Part of the answer arrived (the progress counts it); then silence.
    client
        .notification("$/progress", |p| {
            p["value"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("received"))
        })
        .await;
    let held = shared.level();
    assert!(
        held < SMALL_OUTPUT_QUOTA as f64 - OUTPUT + 50.0,
        "the answer's output is reserved: {}",
        shared.bucket()
    );

    client.notify("$/cancelRequest", json!({"id": id})).await;
    let refunded = (held + OUTPUT).min(SMALL_OUTPUT_QUOTA as f64) - 1.0;
    eventually("the output reservation comes back at once", AT_ONCE, || {
        shared.level() >= refunded
    })
    .await;
    let response = client.response(id).await;
    assert_eq!(response["error"]["code"], REQUEST_CANCELLED, "{response}");

    fake.set_default(Behaviour::ok("second"));
    assert_eq!(served_by(&explain(&mut client).await), "primary/mid");
    assert_eq!(fake.request_count(), 2);
    assert_eq!(shared.reserved(), 2.0 * OUTPUT, "{}", shared.bucket());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lsp_cancel_request_waiting_for_quota_leaves_nothing_held() {
    let shared = SharedDir::new();
    let fake = FakeProvider::start().await;
    // Full while the breaker trips (the failed attempts' output comes back).
    shared.seed_bucket(WAIT_QUOTA as f64);
    let mut client = lsp(waiting_config(&shared, &fake), json!({})).await;
    trip_via_lsp(&shared, &fake, &mut client).await;
    fake.set_default(Behaviour::ok("served"));
    until_half_open(&shared).await;
    let sent = fake.request_count();
    shared.seed_bucket(0.0);
    let (seeded, seeded_at) = (Instant::now(), now_ms());

    let id = send_explain(&mut client).await;
    bucket_asked(&shared, seeded_at).await;
    lease_taken(&shared).await;
    client.notify("$/cancelRequest", json!({"id": id})).await;
    nothing_held_after(&shared, &fake, seeded, sent).await;
    let response = client.response(id).await;
    assert_eq!(response["error"]["code"], REQUEST_CANCELLED, "{response}");

    assert_eq!(served_by(&explain(&mut client).await), "primary/mid");
    assert_eq!(fake.request_count(), sent + 1);
    assert_eq!(shared.reserved(), OUTPUT, "{}", shared.bucket());
}
