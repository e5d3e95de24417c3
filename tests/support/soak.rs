//! The soak across real processes (issue 52): four language servers driven
//! as editor windows on one machine (one state directory), a gateway with a
//! client that does not retry by itself, one `redis-server` behind a proxy
//! that can slow or cut its connections, and two fake providers speaking
//! the real wire formats. A seeded schedule puts one fault in force per
//! phase, calm phases between; every fault comes once before any comes
//! twice. `benches/soak.rs` runs it for as long as asked, `tests/soak.rs`
//! for three minutes.
//!
//! The windows ask Explain; two also refactor (and park when no provider
//! can serve), one turns local-only on and off, each edits a scratch file.
//! What is counted, per phase and in all, is what a user would call broken:
//! garbled answers, lost requests, parked refactors never resumed, bytes
//! sent while local-only was on, requests that reached a provider before its
//! `retry-after` ended, 429s from a quota the governor keeps, more than one
//! probe in a half-open window, requests past their ceiling, exits nobody
//! asked for; and, after each phase, memory and open files.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::actions::{REWRITE, rewritten, whole_function};
use super::fake_provider::{Behaviour, FakeProvider, RecordedRequest};
use super::gateway::GatewayProcess;
use super::lsp_client::{LspClient, ServerOptions};
use super::redis_server::RedisServer;
use super::scenario::{DOC, apply_edits, explain_result};
use super::tcp_proxy::TcpProxy;

const ANSWER: &str = "HashMap::entry looks the key up once and hands back an Entry: Occupied when the key is present, Vacant when it is not.";
const KEY: &str = "sk-test-soak-0123456789abcdef";
/// The refactor's instruction; the fakes answer a prompt carrying it with
/// the rewrite, any other with the explanation.
const REFACTOR_INSTRUCTION: &str = "Comment the lookup (soak).";
/// Every task's whole ceiling, and what a reply may take beyond it before
/// the request counts as lost.
const CEILING: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(15);
/// A request already on its way when a `retry-after` went out may arrive
/// after it: the reply must reach its client, which writes the pause to
/// Redis, which the others read at most 50 ms later, and a request admitted
/// just before still has to connect and send. Only those later than this
/// count as sent too early (the faults say three seconds).
const RETRY_AFTER_GRACE: Duration = Duration::from_secs(1);
/// The `retry-after` of the 429 and 529 storms.
const RETRY_AFTER_S: u64 = 3;
/// The primary's requests-per-minute quota, which the fake enforces and the
/// configuration declares: the governor keeps every process under it.
const PRIMARY_RPM: u64 = 300;
/// How long an open breaker stays off user traffic: short, so that a
/// phase sees many half-open windows.
const COOLDOWN: Duration = Duration::from_millis(1500);
const WINDOWS: usize = 4;
/// The windows that refactor.
const REFACTORING: [usize; 2] = [0, 1];
/// The window that turns local-only on and off.
const PRIVATE: usize = 3;
/// The window with the local model: inline completions in a 10 MB
/// document, some cancelled mid-decode, and bursts of 1 000 changes a second.
const COMPLETING: usize = 2;
/// Lines of the large document (about 10 MB).
const LARGE_LINES: usize = 200_000;

/// How long and with what seed.
pub struct Settings {
    pub phases: usize,
    pub phase: Duration,
    pub seed: u64,
}

impl Settings {
    /// `SOAK_MINUTES`, `SOAK_PHASE_S` and `SOAK_SEED`, or these defaults.
    pub fn from_env(minutes: u64, phase_s: u64, seed: u64) -> Settings {
        let read = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let (minutes, phase_s) = (read("SOAK_MINUTES", minutes), read("SOAK_PHASE_S", phase_s));
        Settings {
            phases: ((minutes * 60) / phase_s.max(1)).max(2) as usize,
            phase: Duration::from_secs(phase_s),
            seed: read("SOAK_SEED", seed),
        }
    }
}

/// One fault in force for a phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    Calm,
    Overloaded529,
    RateLimitedRetryAfter,
    RateLimited,
    SpendLimit,
    CutStreams,
    StalledStreams,
    DrippingStreams,
    Unavailable503,
    /// Both providers down: refactors park.
    AllDown,
    /// The primary down with slow replies; the window holding its probe
    /// lease is killed while it probes.
    ProbeHolderKilled,
    RedisPaused,
    RedisRestarted,
    RedisSlow,
    RedisResets,
    WindowKilled,
}

const FAULTS: [Fault; 15] = [
    Fault::Overloaded529,
    Fault::RateLimitedRetryAfter,
    Fault::RateLimited,
    Fault::SpendLimit,
    Fault::CutStreams,
    Fault::StalledStreams,
    Fault::DrippingStreams,
    Fault::Unavailable503,
    Fault::AllDown,
    Fault::ProbeHolderKilled,
    Fault::RedisPaused,
    Fault::RedisRestarted,
    Fault::RedisSlow,
    Fault::RedisResets,
    Fault::WindowKilled,
];

/// `make` of the rewrite for a refactor's prompt, of the explanation for any other.
fn per_task(make: impl Fn(&str) -> Behaviour) -> Behaviour {
    Behaviour::ByPrompt {
        marker: REFACTOR_INSTRUCTION.into(),
        matched: Box::new(make(REWRITE)),
        otherwise: Box::new(make(ANSWER)),
    }
}

impl Fault {
    /// What the primary does while the fault is in force.
    fn primary(self, rng: &mut fastrand::Rng) -> Behaviour {
        let cut_after = rng.usize(1..4);
        match self {
            Fault::Overloaded529 => Behaviour::OverloadedFor {
                retry_after: RETRY_AFTER_S,
            },
            Fault::RateLimitedRetryAfter => Behaviour::RateLimited {
                retry_after: Some(RETRY_AFTER_S),
            },
            Fault::RateLimited => Behaviour::RateLimited { retry_after: None },
            Fault::SpendLimit => Behaviour::QuotaExhausted,
            Fault::CutStreams => per_task(|text| Behaviour::CutAfter {
                text: text.into(),
                after_chunks: cut_after,
            }),
            Fault::StalledStreams => per_task(|text| Behaviour::StallMidStream {
                text: text.into(),
                after_chunks: 1,
                stall: Duration::from_secs(30),
            }),
            Fault::DrippingStreams => per_task(|text| Behaviour::Ok {
                text: text.into(),
                chunks: 12,
                delay: Duration::from_millis(300),
            }),
            Fault::Unavailable503 | Fault::AllDown => Behaviour::Unavailable,
            // Slow enough to catch its prober at it, quick enough to trip
            // the breaker and probe within a short phase.
            Fault::ProbeHolderKilled => {
                Behaviour::Unavailable.after_latency(Duration::from_millis(1500))
            }
            _ => healthy(),
        }
    }

    fn secondary(self) -> Behaviour {
        match self {
            Fault::AllDown => Behaviour::Unavailable,
            _ => per_task(Behaviour::continues),
        }
    }
}

fn healthy() -> Behaviour {
    per_task(Behaviour::ok)
}

/// The schedule: calm first (the baseline) and between faults; each round
/// of faults in a seeded order.
pub fn schedule(settings: &Settings) -> Vec<Fault> {
    let mut rng = fastrand::Rng::with_seed(settings.seed);
    let mut round = Vec::new();
    (0..settings.phases)
        .map(|i| {
            if i % 2 == 0 {
                return Fault::Calm;
            }
            if round.is_empty() {
                round = FAULTS.to_vec();
                rng.shuffle(&mut round);
            }
            round.pop().expect("a round of faults")
        })
        .collect()
}

/// What happened in one phase.
#[derive(Default)]
struct Counts {
    sent: AtomicUsize,
    answered: AtomicUsize,
    errors: AtomicUsize,
    garbled: AtomicUsize,
    lost: AtomicUsize,
    exited: AtomicUsize,
    parked: AtomicUsize,
    /// Requests that took longer than their ceiling and margin allow.
    past_ceiling: AtomicUsize,
    longest_ms: AtomicU64,
}

impl Counts {
    fn add(&self, counter: impl Fn(&Counts) -> &AtomicUsize) {
        counter(self).fetch_add(1, Ordering::Relaxed);
    }

    fn took(&self, started: Instant) {
        let ms = started.elapsed().as_millis() as u64;
        self.longest_ms.fetch_max(ms, Ordering::Relaxed);
        if started.elapsed() > CEILING + Duration::from_secs(2) {
            self.add(|c| &c.past_ceiling);
        }
    }
}

/// Each phase's outcome, as the report prints it.
#[derive(Clone, Debug, Default)]
pub struct PhaseReport {
    pub fault: String,
    pub sent: usize,
    pub answered: usize,
    pub errors: usize,
    pub garbled: usize,
    pub lost: usize,
    pub exited: usize,
    pub parked: usize,
    pub past_ceiling: usize,
    pub longest_ms: u64,
    /// Requests that reached a provider while a `retry-after` it sent ran.
    pub early: usize,
    /// Requests the primary's quota turned away.
    pub quota_429s: usize,
    /// Requests of the local-only window that reached a provider while the mode was on.
    pub leaked: usize,
    /// The most user requests the primary got in one half-open window.
    pub probes_per_window: usize,
    pub rss_mb: u64,
    pub fds: usize,
    /// The most live tasks any window had over its own first count, as the
    /// phase ended.
    pub task_growth: usize,
}

impl PhaseReport {
    pub const HEADER: &'static str = "phase fault                  sent answered errors garbled lost exited parked past_ceiling longest_ms early 429s leaked probes/window rss_MB fds";

    pub fn line(&self, phase: usize) -> String {
        format!(
            "{phase:>5} {:<22} {:>4} {:>8} {:>6} {:>7} {:>4} {:>6} {:>6} {:>12} {:>10} {:>5} {:>4} {:>6} {:>13} {:>6} {:>3}",
            self.fault,
            self.sent,
            self.answered,
            self.errors,
            self.garbled,
            self.lost,
            self.exited,
            self.parked,
            self.past_ceiling,
            self.longest_ms,
            self.early,
            self.quota_429s,
            self.leaked,
            self.probes_per_window,
            self.rss_mb,
            self.fds
        )
    }
}

/// The whole run.
pub struct Report {
    pub schedule: Vec<Fault>,
    pub phases: Vec<PhaseReport>,
    /// Parked refactors, each by how many times it was resumed and finished.
    pub parked: Vec<(String, usize)>,
    /// Parked refactors whose resume failed for good (said to the user).
    pub resumes_failed: usize,
    /// Driver tasks that stopped (a panic in the harness is a failure too).
    pub drivers_stopped: usize,
    /// Requests of the local-only window the fakes got (with the mode off).
    pub private_seen: usize,
}

impl Report {
    /// What broke a promise, one line each; empty when none did.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for (i, p) in self.phases.iter().enumerate() {
            let mut check = |what: &str, n: usize, most: usize| {
                if n > most {
                    failures.push(format!("phase {i} ({}): {n} {what}", p.fault));
                }
            };
            check("garbled", p.garbled, 0);
            check("lost", p.lost, 0);
            check("unexpected exits", p.exited, 0);
            check("past their ceiling", p.past_ceiling, 0);
            check("sent before retry-after ended", p.early, 0);
            check("429s from the governed quota", p.quota_429s, 0);
            check("sent while local-only was on", p.leaked, 0);
            check("probes in one half-open window", p.probes_per_window, 1);
            check("tasks over a window's first count", p.task_growth, 2);
        }
        let not_once: Vec<&(String, usize)> = self.parked.iter().filter(|(_, n)| *n != 1).collect();
        if !not_once.is_empty() {
            failures.push(format!(
                "{} of {} parked refactors were not resumed and finished exactly once: {:?}",
                not_once.len(),
                self.parked.len(),
                &not_once[..not_once.len().min(5)]
            ));
        }
        if self.private_seen == 0 {
            failures.push("no request of the local-only window reached a provider: the leak count saw nothing".into());
        }
        if self.drivers_stopped > 0 {
            failures.push(format!("{} drivers stopped", self.drivers_stopped));
        }
        failures
    }

    pub fn total(&self, field: impl Fn(&PhaseReport) -> usize) -> usize {
        self.phases.iter().map(field).sum()
    }
}

/// The settings every process reads (the gateway as its config file).
fn config(redis: &str, primary: &FakeProvider, secondary: &FakeProvider) -> Value {
    let task = json!({"tier": "medium", "first_token_ms": 3000, "total_ms": CEILING.as_millis() as u64, "idle_ms": 2000, "wait_ms": 2000});
    json!({
        "local": {"auto_pull": false},
        "providers": {
            "primary": {"kind": "anthropic", "base_url": primary.anthropic_url(), "api_key_env": "SY_SOAK_KEY",
                        "quota": {"requests_per_minute": PRIMARY_RPM}},
            "secondary": {"kind": "openai", "base_url": secondary.openai_url(), "api_key_env": "SY_SOAK_KEY"}
        },
        "tiers": {"large": [], "medium": ["primary/mid", "secondary/backup"], "small": []},
        "tasks": {"explain": task, "refactor": task},
        "resilience": {
            "state": redis,
            "canary_interval_ms": 2000,
            "resume_interval_ms": 2000,
            "breaker": {"failures": 3, "cooldown_ms": COOLDOWN.as_millis() as u64}
        }
    })
}

/// The document window `index` works on: its name is in every prompt, so
/// the fakes can tell whose request they got.
fn document(index: usize) -> String {
    format!("file:///work/{}", file_name(index))
}

/// The name the prompt carries.
fn file_name(index: usize) -> String {
    format!("window{index}.rs")
}

fn scratch(index: usize) -> String {
    format!("file:///work/scratch{index}.rs")
}

/// Everything the drivers and the phase loop share.
struct Soak {
    config: Value,
    /// One state directory for every window, as on one machine.
    state_dir: std::path::PathBuf,
    counts: Vec<Counts>,
    phases: watch::Receiver<(usize, Fault)>,
    /// The windows' process ids, by index (to kill a probe lease's holder).
    pids: Mutex<HashMap<usize, u32>>,
    /// Windows the phase loop killed, waiting for their driver to restart them.
    killed: Mutex<Vec<usize>>,
    /// When the private window had local-only on: (from its reply, to the
    /// request turning it off).
    private_spans: Mutex<Vec<(Instant, Instant)>>,
    /// Every refactor that parked, by id (from its reply, or its checkpoint
    /// seen in the state directory when the reply died with its window).
    parked: Mutex<std::collections::HashSet<String>>,
    /// How many times each parked refactor was resumed and finished.
    finished: Mutex<HashMap<String, usize>>,
    resumes_failed: AtomicUsize,
    /// Each window's live tasks as it saw a phase end: (phase, pid, tasks).
    tasks: Mutex<Vec<(usize, u32, usize)>>,
}

impl Soak {
    fn phase(&self) -> (usize, Fault) {
        *self.phases.borrow()
    }

    async fn window(&self, index: usize) -> LspClient {
        let model_dir = match index {
            COMPLETING => super::model_dir(),
            _ => self.state_dir.join("no-models"),
        };
        let options = ServerOptions {
            model_dir,
            env: vec![
                ("SY_SOAK_KEY".into(), KEY.into()),
                (
                    "SWITCHYARD_STATE_DIR".into(),
                    self.state_dir.display().to_string(),
                ),
            ],
            ..Default::default()
        };
        let mut client = LspClient::spawn(options).await;
        let capabilities = json!({"window": {"workDoneProgress": true}});
        client.initialize(capabilities, self.config.clone()).await;
        client.open(&document(index), DOC).await;
        client.open(&scratch(index), "fn scratch() {}\n").await;
        if index == COMPLETING {
            client.open(&large_document(), &large_text()).await;
        }
        if let Some(pid) = client.pid() {
            self.pids.lock().unwrap().insert(index, pid);
        }
        client
    }

    /// Takes a window down by the phase loop's order, if it gave one.
    fn was_killed(&self, index: usize) -> bool {
        let mut killed = self.killed.lock().unwrap();
        let at = killed.iter().position(|k| *k == index);
        at.map(|i| killed.remove(i)).is_some()
    }
}

/// One editor window: explain, refactor, edits and local-only toggles, one
/// at a time, as a user works.
async fn drive_window(index: usize, soak: Arc<Soak>) {
    let mut client = soak.window(index).await;
    let mut rng = fastrand::Rng::with_seed(index as u64);
    let mut edits = 0u64;
    let mut killed_in = None;
    let mut seen_phase = 0;
    loop {
        let (phase, fault) = soak.phase();
        let counts = &soak.counts[phase];
        if phase != seen_phase {
            count_tasks(&mut client, seen_phase, &soak).await;
            seen_phase = phase;
        }
        if fault == Fault::WindowKilled && index == 2 + phase % 2 && killed_in != Some(phase) {
            killed_in = Some(phase);
            // Killed with a request under way, then started again.
            client
                .send_request("workspace/executeCommand", explain(index))
                .await;
            counts.add(|c| &c.sent);
            client.kill().await;
            client = soak.window(index).await;
            continue;
        }
        let roll = rng.usize(..100);
        if index == COMPLETING && roll < 35 {
            complete(&mut client, &mut rng, &mut edits, counts).await;
        } else if index == PRIVATE && roll < 15 {
            private_requests(&mut client, index, &soak).await;
        } else if REFACTORING.contains(&index) && roll < 30 {
            refactor(&mut client, index, &soak, counts).await;
        } else if roll < 40 {
            edits += 1;
            let text = format!("fn scratch() {{ let edits = {edits}; }}\n");
            client
                .notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": scratch(index), "version": edits + 1},
                           "contentChanges": [{"text": text}]}),
                )
                .await;
        } else {
            ask_explain(&mut client, index, counts).await;
        }
        resumes_in(&mut client, &soak);
        if !client.pid().is_some_and(alive) {
            if !soak.was_killed(index) {
                soak.counts[soak.phase().0].add(|c| &c.exited);
            }
            client = soak.window(index).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(300..700))).await;
    }
}

/// Notes the window's live tasks at the end of `phase` (by its status):
/// the fewest of three looks 100 ms apart, so work under way for a moment
/// (a resume, a canary round) does not count, and a leak still does.
async fn count_tasks(client: &mut LspClient, phase: usize, soak: &Soak) {
    let Some(pid) = client.pid() else { return };
    let mut fewest: Option<u64> = None;
    for _ in 0..3 {
        let status = json!({"command": "switchyard.status"});
        let id = client
            .send_request("workspace/executeCommand", status)
            .await;
        let reply = client.response_within(id, CEILING).await;
        if let Some(tasks) = reply.and_then(|r| r["result"]["runtimeTasks"].as_u64()) {
            fewest = Some(fewest.map_or(tasks, |f| f.min(tasks)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(tasks) = fewest {
        soak.tasks
            .lock()
            .unwrap()
            .push((phase, pid, tasks as usize));
    }
}

fn large_document() -> String {
    "file:///work/large.rs".into()
}

/// About 10 MB of Rust.
fn large_text() -> String {
    (0..LARGE_LINES)
        .map(|i| format!("fn item_{i}(x: u64) -> u64 {{ x.wrapping_mul({i}) + 7 }} // {i:>8}\n"))
        .collect()
}

/// An inline completion in the large document: now and then after a burst
/// of 1 000 edits in about a second, some cancelled as soon as they are
/// sent. Every one ends in items, an empty answer or the cancellation.
async fn complete(
    client: &mut LspClient,
    rng: &mut fastrand::Rng,
    edits: &mut u64,
    counts: &Counts,
) {
    let line = rng.u32(1000..LARGE_LINES as u32 - 1000);
    if rng.usize(..4) == 0 {
        burst_of_changes(client, line, edits).await;
    }
    let position = json!({"line": line, "character": 0});
    let params = json!({"textDocument": {"uri": large_document()}, "position": position,
                        "context": {"triggerKind": 2}});
    let id = client
        .send_request("textDocument/inlineCompletion", params)
        .await;
    counts.add(|c| &c.sent);
    if rng.bool() {
        client.notify("$/cancelRequest", json!({"id": id})).await;
    }
    let started = Instant::now();
    let response = client.response_within(id, CEILING + MARGIN).await;
    counts.took(started);
    let Some(response) = response else {
        return unanswered(client, counts);
    };
    let result = &response["result"];
    if response.get("error").is_some() {
        counts.add(|c| &c.errors)
    } else if result.is_null() || result["items"].is_array() || result.is_array() {
        counts.add(|c| &c.answered)
    } else {
        counts.add(|c| &c.garbled)
    }
}

/// 1 000 edits at `line` of the large document, a character typed and taken
/// back, sent a millisecond apart.
async fn burst_of_changes(client: &mut LspClient, line: u32, edits: &mut u64) {
    for n in 0..1000u32 {
        *edits += 1;
        let (range, text) = match n % 2 {
            0 => (
                json!({"start": {"line": line, "character": 0}, "end": {"line": line, "character": 0}}),
                "x",
            ),
            _ => (
                json!({"start": {"line": line, "character": 0}, "end": {"line": line, "character": 1}}),
                "",
            ),
        };
        client
            .notify(
                "textDocument/didChange",
                json!({"textDocument": {"uri": large_document(), "version": *edits + 1},
                       "contentChanges": [{"range": range, "text": text}]}),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn explain(index: usize) -> Value {
    let range = whole_function();
    json!({"command": "switchyard.explain", "arguments": [document(index), range]})
}

/// Sends one command and waits for its reply within the ceiling and margin.
async fn command(client: &mut LspClient, params: Value, counts: &Counts) -> Option<Value> {
    let id = client
        .send_request("workspace/executeCommand", params)
        .await;
    counts.add(|c| &c.sent);
    let started = Instant::now();
    let response = client.response_within(id, CEILING + MARGIN).await;
    counts.took(started);
    if response.is_none() {
        unanswered(client, counts);
    }
    response
}

/// A request with no reply: lost, unless its window died (killed by the
/// soak, or an exit counted on its own).
fn unanswered(client: &LspClient, counts: &Counts) {
    if client.pid().is_some_and(alive) {
        counts.add(|c| &c.lost);
    }
}

async fn ask_explain(client: &mut LspClient, index: usize, counts: &Counts) {
    let Some(response) = command(client, explain(index), counts).await else {
        return;
    };
    match response.get("result").is_some() || response.get("error").is_some() {
        false => counts.add(|c| &c.garbled),
        true => match explain_result(response) {
            Ok(served) if served.text == ANSWER => counts.add(|c| &c.answered),
            Ok(_) => counts.add(|c| &c.garbled),
            Err(_) => counts.add(|c| &c.errors),
        },
    }
}

async fn refactor(client: &mut LspClient, index: usize, soak: &Soak, counts: &Counts) {
    let params = json!({"command": "switchyard.refactor",
        "arguments": [document(index), whole_function(), REFACTOR_INSTRUCTION]});
    let before = client.seen.len();
    let Some(response) = command(client, params, counts).await else {
        return;
    };
    let result = &response["result"];
    if let Some(id) = result["parked"].as_str() {
        counts.add(|c| &c.parked);
        soak.parked.lock().unwrap().insert(id.to_owned());
        return;
    }
    if response.get("error").is_some() {
        counts.add(|c| &c.errors);
        return;
    }
    let applied = client.seen[before..]
        .iter()
        .rev()
        .find(|m| m["method"] == "workspace/applyEdit")
        .and_then(|edit| {
            edit["params"]["edit"]["documentChanges"][0]["edits"]
                .as_array()
                .cloned()
        });
    match applied {
        Some(edits)
            if result["provider"].is_string() && apply_edits(DOC, &edits) == rewritten() =>
        {
            counts.add(|c| &c.answered)
        }
        _ => counts.add(|c| &c.garbled),
    }
}

/// Local-only on, a few explains (which must not leave the machine), off.
async fn private_requests(client: &mut LspClient, index: usize, soak: &Soak) {
    let set = |on: bool| json!({"command": "switchyard.setLocalOnly", "arguments": [on]});
    let counts = &soak.counts[soak.phase().0];
    if command(client, set(true), counts).await.is_none() {
        return;
    }
    let on_since = Instant::now();
    for _ in 0..3 {
        let counts = &soak.counts[soak.phase().0];
        let Some(response) = command(client, explain(index), counts).await else {
            break;
        };
        match response.get("error").is_some() {
            // No local model here: a clean error is the answer.
            true => counts.add(|c| &c.errors),
            false => counts.add(|c| &c.answered),
        }
    }
    soak.private_spans
        .lock()
        .unwrap()
        .push((on_since, Instant::now()));
    command(client, set(false), counts).await;
}

/// Notes the parked refactors this window resumed and finished (their
/// `$/progress` ends so) and those whose resume failed for good since it
/// last looked, then forgets what it has read.
fn resumes_in(client: &mut LspClient, soak: &Soak) {
    for message in &client.seen {
        let params = &message["params"];
        match message["method"].as_str() {
            Some("$/progress") if params["value"]["kind"] == "end" => {
                let token = params["token"].as_str().unwrap_or_default();
                let finished = params["value"]["message"] == "resumed and finished";
                if let (Some(id), true) = (token.strip_prefix("switchyard/resume/"), finished) {
                    *soak
                        .finished
                        .lock()
                        .unwrap()
                        .entry(id.to_owned())
                        .or_default() += 1;
                }
            }
            Some("window/showMessage")
                if params["message"]
                    .as_str()
                    .is_some_and(|t| t.contains("parked refactor failed")) =>
            {
                println!("      {}", params["message"]);
                soak.resumes_failed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
    client.seen.clear();
    client.drop_backlog();
}

/// Parked refactors whose checkpoint is in the state directory now.
fn note_checkpoints(soak: &Soak) {
    let Ok(entries) = std::fs::read_dir(soak.state_dir.join("parked")) else {
        return;
    };
    let ids = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()));
    soak.parked.lock().unwrap().extend(ids);
}

/// A gateway client that does not retry by itself.
async fn drive_gateway(gateway: Arc<GatewayProcess>, soak: Arc<Soak>) {
    loop {
        let counts = &soak.counts[soak.phase().0];
        counts.add(|c| &c.sent);
        let started = Instant::now();
        let ended =
            tokio::time::timeout(CEILING + MARGIN, gateway.chat("What does entry do?")).await;
        counts.took(started);
        match ended {
            Err(_) => counts.add(|c| &c.lost),
            Ok((200, body)) if body["choices"][0]["message"]["content"] == ANSWER => {
                counts.add(|c| &c.answered)
            }
            Ok((200, _)) => counts.add(|c| &c.garbled),
            Ok(_) => counts.add(|c| &c.errors),
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

/// The breaker records in the shared state, polled: when each of the
/// primary's half-open windows began and how long it was seen lasting.
struct BreakerWatch {
    /// (open until, on the backend's clock) → (half-open from, last seen open), here.
    windows: Mutex<HashMap<u64, (Instant, Instant)>>,
}

async fn watch_breaker(state: Arc<dyn switchyard_state::SharedState>, watch: Arc<BreakerWatch>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (Ok(records), Ok(now)) = (state.scan("breaker/").await, state.now_ms().await) else {
            continue;
        };
        let seen = Instant::now();
        for (key, record) in records {
            if !key.contains("/primary/") || record["open"] != true {
                continue;
            }
            let until = record["open_until"].as_u64().unwrap_or_default();
            let from = seen + Duration::from_millis(until.saturating_sub(now));
            let mut windows = watch.windows.lock().unwrap();
            let entry = windows.entry(until).or_insert((from, seen));
            entry.1 = seen;
        }
    }
}

impl BreakerWatch {
    /// The most user requests the primary got within one half-open window
    /// (from its start to the last poll that saw it still open, so a
    /// request after the verdict is never counted in it).
    fn most_per_window(&self, requests: &[RecordedRequest], from: Instant, to: Instant) -> usize {
        let windows = self.windows.lock().unwrap();
        windows
            .values()
            .filter(|(start, _)| *start >= from && *start < to)
            .map(|(start, last_open)| {
                requests
                    .iter()
                    .filter(|r| !r.is_canary() && r.at >= *start && r.at <= *last_open)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}

/// Who sent a request the fakes got: a window (its document is in the
/// prompt), the gateway's client, or a canary.
fn sender(request: &RecordedRequest) -> String {
    let body = request.body.to_string();
    if request.is_canary() {
        return "a canary".into();
    }
    (0..WINDOWS)
        .find(|i| body.contains(&file_name(*i)))
        .map_or("the gateway".into(), |i| format!("window {i}"))
}

/// Resident memory (kB) and open files of the switchyard processes this
/// process started.
fn footprint() -> (u64, usize) {
    let me = std::process::id().to_string();
    let mut rss = 0;
    let mut fds = 0;
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let path = entry.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // The parent's pid is the second field after the command's closing parenthesis.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if comm.trim() != "switchyard" || parent != Some(me.as_str()) {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        rss += status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        fds += std::fs::read_dir(path.join("fd"))
            .map(|d| d.count())
            .unwrap_or(0);
    }
    (rss, fds)
}

/// Whether process `pid` runs (it is there and not a zombie).
fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    state.is_some_and(|s| s != "Z")
}

fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

/// Kills the window that holds the primary's probe lease while it probes
/// (the probe takes 1.5 s), once in the phase; the lease's holder names its
/// process.
async fn kill_probe_holder(state: &dyn switchyard_state::SharedState, soak: &Soak, until: Instant) {
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Ok(leases) = state.scan("lease/").await else {
            continue;
        };
        let holder = leases
            .iter()
            .filter(|(key, _)| key.contains("/primary/"))
            .find_map(|(_, holder)| holder.as_str()?.split('-').next()?.parse::<u32>().ok());
        let Some(pid) = holder else { continue };
        let window = soak
            .pids
            .lock()
            .unwrap()
            .iter()
            .find(|(_, p)| **p == pid)
            .map(|(index, _)| *index);
        if let Some(index) = window {
            soak.killed.lock().unwrap().push(index);
            signal(pid, "-KILL");
            println!("      killed window {index} (pid {pid}) holding the primary's probe lease");
            return;
        }
    }
}

/// Runs the soak, printing a line per phase as it ends.
pub async fn run(settings: Settings) -> Report {
    let schedule = schedule(&settings);
    println!(
        "soak: seed {}, {} phases of {} s: {schedule:?}",
        settings.seed,
        settings.phases,
        settings.phase.as_secs()
    );
    let mut rng = fastrand::Rng::with_seed(settings.seed);
    let mut redis = RedisServer::start();
    let proxy = TcpProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let shared = switchyard_state::open(&redis.url()).expect("the harness reads Redis");
    let primary = FakeProvider::with_default(healthy()).await;
    primary.set_quota(PRIMARY_RPM);
    let secondary = FakeProvider::with_default(Fault::Calm.secondary()).await;
    let config = config(&proxy.url(), &primary, &secondary);
    let state_dir = tempfile::tempdir().unwrap().keep();
    let (phase_tx, phases) = watch::channel((0, schedule[0]));
    let soak = Arc::new(Soak {
        config: config.clone(),
        state_dir,
        counts: (0..settings.phases).map(|_| Counts::default()).collect(),
        phases,
        pids: Mutex::default(),
        killed: Mutex::default(),
        private_spans: Mutex::default(),
        parked: Mutex::default(),
        finished: Mutex::default(),
        resumes_failed: AtomicUsize::new(0),
        tasks: Mutex::default(),
    });
    let toml = toml::to_string(&config).expect("the settings are TOML");
    let gateway = Arc::new(GatewayProcess::start(&toml, &[("SY_SOAK_KEY", KEY)]).await);
    let breaker = Arc::new(BreakerWatch {
        windows: Mutex::default(),
    });
    let mut drivers: Vec<tokio::task::JoinHandle<()>> = (0..WINDOWS)
        .map(|index| tokio::spawn(drive_window(index, soak.clone())))
        .collect();
    drivers.push(tokio::spawn(drive_gateway(gateway.clone(), soak.clone())));
    let watcher = tokio::spawn(watch_breaker(shared.clone(), breaker.clone()));
    let checkpoints = tokio::spawn({
        let soak = soak.clone();
        async move {
            loop {
                note_checkpoints(&soak);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });

    println!("{}", PhaseReport::HEADER);
    let mut reports = Vec::new();
    for (phase, fault) in schedule.iter().copied().enumerate() {
        let began = Instant::now();
        let (quota_before, requests_before) = (primary.quota_rejections(), primary.request_count());
        phase_tx.send_replace((phase, fault));
        primary.set_default(fault.primary(&mut rng));
        secondary.set_default(fault.secondary());
        let ends = began + settings.phase;
        match fault {
            Fault::RedisPaused => {
                let pid = redis.pid();
                signal(pid, "-STOP");
                tokio::time::sleep(settings.phase.min(Duration::from_secs(30))).await;
                signal(pid, "-CONT");
            }
            Fault::RedisRestarted => {
                let port = redis.port;
                drop(redis);
                redis = RedisServer::start_on(port);
            }
            Fault::RedisSlow => proxy.set_latency(Duration::from_millis(100)),
            Fault::RedisResets => {
                while Instant::now() + Duration::from_secs(2) < ends {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    proxy.reset_all();
                }
            }
            Fault::ProbeHolderKilled => kill_probe_holder(shared.as_ref(), &soak, ends).await,
            _ => {}
        }
        tokio::time::sleep_until(ends).await;
        proxy.set_latency(Duration::ZERO);
        primary.set_default(healthy());
        secondary.set_default(Fault::Calm.secondary());
        let (rss, fds) = footprint();
        let requests = [primary.requests(), secondary.requests()];
        let in_phase = |r: &&RecordedRequest| r.at >= began;
        let leaked = {
            let spans = soak.private_spans.lock().unwrap();
            let marker = file_name(PRIVATE);
            requests
                .iter()
                .flatten()
                .filter(in_phase)
                .filter(|r| r.body.to_string().contains(&marker))
                .filter(|r| spans.iter().any(|(from, to)| r.at >= *from && r.at <= *to))
                .count()
        };
        let early: Vec<(RecordedRequest, Duration)> = [&primary, &secondary]
            .iter()
            .flat_map(|fake| fake.requests_before_retry_after(RETRY_AFTER_GRACE))
            .filter(|(r, _)| r.at >= began)
            .collect();
        for (request, after) in &early {
            println!(
                "      early: {} ms after a retry-after, from {}",
                after.as_millis(),
                sender(request)
            );
        }
        let counts = &soak.counts[phase];
        let n = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        let report = PhaseReport {
            fault: format!("{fault:?}"),
            sent: n(&counts.sent),
            answered: n(&counts.answered),
            errors: n(&counts.errors),
            garbled: n(&counts.garbled),
            lost: n(&counts.lost),
            exited: n(&counts.exited),
            parked: n(&counts.parked),
            past_ceiling: n(&counts.past_ceiling),
            longest_ms: counts.longest_ms.load(Ordering::Relaxed),
            early: early.len(),
            quota_429s: primary.quota_rejections() - quota_before,
            leaked,
            probes_per_window: breaker.most_per_window(
                &primary.requests()[requests_before..],
                began,
                Instant::now(),
            ),
            rss_mb: rss / 1024,
            fds,
            task_growth: 0,
        };
        println!("{}", report.line(phase));
        reports.push(report);
    }
    // Requests still under way end in their phase; parked work resumes.
    tokio::time::sleep(CEILING + MARGIN).await;
    watcher.abort();
    checkpoints.abort();
    let drivers_stopped = drivers.iter().filter(|d| d.is_finished()).count();
    for driver in &drivers {
        driver.abort();
    }
    // What ended after its phase was printed is in the report all the same.
    let n = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    for (report, counts) in reports.iter_mut().zip(&soak.counts) {
        report.sent = n(&counts.sent);
        report.answered = n(&counts.answered);
        report.errors = n(&counts.errors);
        report.garbled = n(&counts.garbled);
        report.lost = n(&counts.lost);
        report.exited = n(&counts.exited);
        report.parked = n(&counts.parked);
        report.past_ceiling = n(&counts.past_ceiling);
        report.longest_ms = counts.longest_ms.load(Ordering::Relaxed);
    }
    let tasks = soak.tasks.lock().unwrap().clone();
    let mut first: HashMap<u32, usize> = HashMap::new();
    for (phase, pid, count) in tasks {
        let baseline = *first.entry(pid).or_insert(count);
        let growth = &mut reports[phase].task_growth;
        *growth = (*growth).max(count.saturating_sub(baseline));
    }
    println!(
        "tasks over each window's first count, by phase: {:?}",
        reports.iter().map(|p| p.task_growth).collect::<Vec<_>>()
    );
    note_checkpoints(&soak);
    let finished = soak.finished.lock().unwrap().clone();
    let parked = soak
        .parked
        .lock()
        .unwrap()
        .iter()
        .map(|id| (id.clone(), finished.get(id).copied().unwrap_or(0)))
        .collect();
    let report = Report {
        schedule,
        parked,
        phases: reports,
        resumes_failed: soak.resumes_failed.load(Ordering::Relaxed),
        drivers_stopped,
        private_seen: [primary.requests(), secondary.requests()]
            .iter()
            .flatten()
            .filter(|r| sender(r) == format!("window {PRIVATE}"))
            .count(),
    };
    println!(
        "total: sent {} answered {} errors {} garbled {} lost {} exited {} parked {} resumed once {} (failed {}) early {} quota 429s {} leaked {} past ceiling {}",
        report.total(|p| p.sent),
        report.total(|p| p.answered),
        report.total(|p| p.errors),
        report.total(|p| p.garbled),
        report.total(|p| p.lost),
        report.total(|p| p.exited),
        report.parked.len(),
        report.parked.iter().filter(|(_, n)| *n == 1).count(),
        report.resumes_failed,
        report.total(|p| p.early),
        report.total(|p| p.quota_429s),
        report.total(|p| p.leaked),
        report.total(|p| p.past_ceiling),
    );
    drop(gateway);
    report
}
