//! A soak across real processes (issue 52, a first cut): four language
//! servers driven as editors asking Explain, a gateway with clients that do
//! not retry by themselves, one `redis-server` holding every process's
//! breakers and quota, and two fake providers speaking the real wire formats.
//! A seeded schedule of phases puts one fault in force at a time: provider
//! storms on the primary (529 and 429 with retry-after, 429 without it,
//! streams cut or stalled, 503), Redis paused (SIGSTOP) or restarted, one
//! language server killed mid-task and started again.
//!
//! It counts, per phase and in all: requests, answers, typed errors,
//! garbled answers (an answer that is not the whole one), lost requests (no
//! answer and no error within the task's ceiling and a margin), editors that
//! exited unasked, the longest a request took, and the resident memory and
//! open files of the processes it started, at the end of the phase. It exits 1 when anything was garbled, lost or
//! exited unasked.
//!
//! Run: `cargo bench --bench soak` (`SOAK_MINUTES=3`, `SOAK_SEED=1`,
//! `SOAK_PHASE_S=20`). Needs `redis-server` (scripts/test-setup).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use support::fake_provider::{Behaviour, FakeProvider};
use support::gateway::GatewayProcess;
use support::lsp_client::{LspClient, ServerOptions};
use support::redis_server::RedisServer;
use support::scenario::{DOC, URI, explain_params, explain_result};
use tokio::sync::watch;

const ANSWER: &str = "HashMap::entry looks the key up once and hands back an Entry: Occupied when the key is present, Vacant when it is not.";
const KEY: &str = "sk-test-soak-0123456789abcdef";
/// The explain task's whole ceiling, and what a reply may take beyond it
/// before the request counts as lost.
const CEILING: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(15);
const EDITORS: usize = 4;

/// One fault in force for a phase.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Calm,
    Overloaded529,
    RateLimitedRetryAfter,
    RateLimited,
    CutStreams,
    StalledStreams,
    Unavailable503,
    RedisPaused,
    RedisRestarted,
    EditorKilled,
}

const FAULTS: [Fault; 9] = [
    Fault::Overloaded529,
    Fault::RateLimitedRetryAfter,
    Fault::RateLimited,
    Fault::CutStreams,
    Fault::StalledStreams,
    Fault::Unavailable503,
    Fault::RedisPaused,
    Fault::RedisRestarted,
    Fault::EditorKilled,
];

impl Fault {
    /// What the primary does while the fault is in force.
    fn primary(self) -> Behaviour {
        match self {
            Fault::Overloaded529 => Behaviour::OverloadedFor { retry_after: 1 },
            Fault::RateLimitedRetryAfter => Behaviour::RateLimited {
                retry_after: Some(1),
            },
            Fault::RateLimited => Behaviour::RateLimited { retry_after: None },
            Fault::CutStreams => Behaviour::CutAfter {
                text: ANSWER.into(),
                after_chunks: 2,
            },
            Fault::StalledStreams => Behaviour::StallMidStream {
                text: ANSWER.into(),
                after_chunks: 1,
                stall: Duration::from_secs(30),
            },
            Fault::Unavailable503 => Behaviour::Unavailable,
            _ => Behaviour::ok(ANSWER),
        }
    }
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
    /// The longest any request took to end, in milliseconds.
    longest_ms: AtomicU64,
}

impl Counts {
    fn line(&self) -> String {
        let n = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        format!(
            "{:>5} {:>8} {:>6} {:>7} {:>4} {:>6} {:>10}",
            n(&self.sent),
            n(&self.answered),
            n(&self.errors),
            n(&self.garbled),
            n(&self.lost),
            n(&self.exited),
            self.longest_ms.load(Ordering::Relaxed)
        )
    }

    fn took(&self, started: tokio::time::Instant) {
        let ms = started.elapsed().as_millis() as u64;
        self.longest_ms.fetch_max(ms, Ordering::Relaxed);
    }
}

/// The phase in force: its number and fault.
type Phase = (usize, Fault);

fn config(redis: &str, primary: &FakeProvider, secondary: &FakeProvider) -> Value {
    json!({
        "local": {"auto_pull": false},
        "providers": {
            "primary": {"kind": "anthropic", "base_url": primary.anthropic_url(), "api_key_env": "SY_SOAK_KEY"},
            "secondary": {"kind": "openai", "base_url": secondary.openai_url(), "api_key_env": "SY_SOAK_KEY"}
        },
        "tiers": {"large": [], "medium": ["primary/mid", "secondary/backup"], "small": []},
        "tasks": {"explain": {"tier": "medium", "first_token_ms": 3000, "total_ms": CEILING.as_millis() as u64, "idle_ms": 2000, "wait_ms": 2000}},
        "resilience": {"state": redis, "canary_interval_ms": 2000}
    })
}

async fn editor(config: &Value) -> LspClient {
    let home = tempfile::tempdir().unwrap().keep();
    let options = ServerOptions {
        model_dir: home.join("no-models"),
        env: vec![("SY_SOAK_KEY".into(), KEY.into())],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    client.initialize(json!({}), config.clone()).await;
    client.open(URI, DOC).await;
    client
}

/// One editor asking Explain again and again; when the phase kills it, it
/// is killed with a request under way and started again.
async fn drive_editor(
    index: usize,
    config: Value,
    phases: watch::Receiver<Phase>,
    counts: Arc<Vec<Counts>>,
) {
    let mut client = editor(&config).await;
    let mut killed_in = None;
    loop {
        let (phase, fault) = *phases.borrow();
        let counts = &counts[phase];
        let id = client
            .send_request("workspace/executeCommand", explain_params())
            .await;
        counts.sent.fetch_add(1, Ordering::Relaxed);
        if fault == Fault::EditorKilled && index == phase % EDITORS && killed_in != Some(phase) {
            killed_in = Some(phase);
            client.kill().await;
            client = editor(&config).await;
            continue;
        }
        let started = tokio::time::Instant::now();
        let ended = tokio::time::timeout(CEILING + MARGIN, client.response(id)).await;
        counts.took(started);
        match ended {
            Err(_) => counts.lost.fetch_add(1, Ordering::Relaxed),
            Ok(response) => match explain_result(response) {
                Ok(served) if served.text == ANSWER => {
                    counts.answered.fetch_add(1, Ordering::Relaxed)
                }
                Ok(_) => counts.garbled.fetch_add(1, Ordering::Relaxed),
                Err(_) => counts.errors.fetch_add(1, Ordering::Relaxed),
            },
        };
        if !client.pid().is_some_and(alive) {
            counts.exited.fetch_add(1, Ordering::Relaxed);
            client = editor(&config).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A gateway client that does not retry by itself.
async fn drive_gateway(
    gateway: Arc<GatewayProcess>,
    phases: watch::Receiver<Phase>,
    counts: Arc<Vec<Counts>>,
) {
    loop {
        let counts = &counts[phases.borrow().0];
        counts.sent.fetch_add(1, Ordering::Relaxed);
        let started = tokio::time::Instant::now();
        let ended =
            tokio::time::timeout(CEILING + MARGIN, gateway.chat("What does entry do?")).await;
        counts.took(started);
        match ended {
            Err(_) => counts.lost.fetch_add(1, Ordering::Relaxed),
            Ok((200, body)) if body["choices"][0]["message"]["content"] == ANSWER => {
                counts.answered.fetch_add(1, Ordering::Relaxed)
            }
            Ok((200, _)) => counts.garbled.fetch_add(1, Ordering::Relaxed),
            Ok(_) => counts.errors.fetch_add(1, Ordering::Relaxed),
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Resident memory (kB) and open files of the switchyard processes this
/// soak started (its children).
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let minutes: u64 = support::env_or("SOAK_MINUTES", "3").parse().unwrap();
    let seed: u64 = support::env_or("SOAK_SEED", "1").parse().unwrap();
    let phase_s: u64 = support::env_or("SOAK_PHASE_S", "20").parse().unwrap();
    let phases_n = (minutes * 60 / phase_s).max(2) as usize;
    let mut rng = fastrand::Rng::with_seed(seed);
    // Calm first (the baseline), then a seeded fault per phase, calm between.
    let schedule: Vec<Fault> = (0..phases_n)
        .map(|i| {
            if i % 2 == 0 {
                Fault::Calm
            } else {
                FAULTS[rng.usize(..FAULTS.len())]
            }
        })
        .collect();
    println!("soak: seed {seed}, {phases_n} phases of {phase_s} s: {schedule:?}");

    let mut redis = RedisServer::start();
    let port = redis.port;
    let primary = FakeProvider::with_default(Behaviour::ok(ANSWER)).await;
    let secondary = FakeProvider::with_default(Behaviour::continues(ANSWER)).await;
    let config = config(&redis.url(), &primary, &secondary);
    let counts: Arc<Vec<Counts>> = Arc::new((0..phases_n).map(|_| Counts::default()).collect());
    let (phase_tx, phases) = watch::channel((0, schedule[0]));
    // The gateway reads the editors' settings as its config file.
    let toml = toml::to_string(&config).expect("the settings are TOML");
    let gateway = Arc::new(GatewayProcess::start(&toml, &[("SY_SOAK_KEY", KEY)]).await);
    for index in 0..EDITORS {
        tokio::spawn(drive_editor(
            index,
            config.clone(),
            phases.clone(),
            counts.clone(),
        ));
    }
    tokio::spawn(drive_gateway(
        gateway.clone(),
        phases.clone(),
        counts.clone(),
    ));

    println!(
        "phase fault                   sent answered errors garbled lost exited longest_ms rss_MB  fds"
    );
    for (phase, fault) in schedule.iter().copied().enumerate() {
        phase_tx.send_replace((phase, fault));
        primary.set_default(fault.primary());
        match fault {
            Fault::RedisPaused => {
                let pid = redis.pid();
                signal(pid, "-STOP");
                tokio::time::sleep(Duration::from_secs(phase_s.min(10))).await;
                signal(pid, "-CONT");
                tokio::time::sleep(Duration::from_secs(phase_s.saturating_sub(10))).await;
            }
            Fault::RedisRestarted => {
                drop(redis);
                redis = RedisServer::start_on(port);
                tokio::time::sleep(Duration::from_secs(phase_s)).await;
            }
            _ => tokio::time::sleep(Duration::from_secs(phase_s)).await,
        }
        primary.set_default(Behaviour::ok(ANSWER));
        let (rss, fds) = footprint();
        println!(
            "{phase:>5} {:<22} {} {:>6} {fds:>4}",
            format!("{fault:?}"),
            counts[phase].line(),
            rss / 1024
        );
    }
    // Requests still under way are counted in their phase when they end.
    tokio::time::sleep(CEILING + MARGIN).await;
    let total = |f: fn(&Counts) -> &AtomicUsize| {
        counts
            .iter()
            .map(|c| f(c).load(Ordering::Relaxed))
            .sum::<usize>()
    };
    let (garbled, lost, exited) = (
        total(|c| &c.garbled),
        total(|c| &c.lost),
        total(|c| &c.exited),
    );
    println!(
        "total: sent {} answered {} errors {} garbled {garbled} lost {lost} exited {exited}",
        total(|c| &c.sent),
        total(|c| &c.answered),
        total(|c| &c.errors)
    );
    // Returning drops the runtime, its tasks and with them every process
    // this soak started (each is killed on drop).
    match garbled + lost + exited {
        0 => std::process::ExitCode::SUCCESS,
        _ => std::process::ExitCode::FAILURE,
    }
}
