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
//! probe in a half-open window, exits nobody asked for; and, after each
//! phase, the longest request, memory and open files (printed, not
//! asserted: deadlines are checked on the paused clock).

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

mod drivers;
mod outside;
mod report;

use drivers::*;
use outside::*;
use report::Counts;
pub use report::{PhaseReport, Report};

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
    /// 502s: the primary's from a proxy in front of it (an HTML page), the
    /// router-style secondary's in OpenRouter's JSON for explains (its
    /// upstream for them down) while it still serves refactors: explains end
    /// in typed errors, and refactors park once both breakers open.
    BadGateway502,
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

const FAULTS: [Fault; 16] = [
    Fault::Overloaded529,
    Fault::RateLimitedRetryAfter,
    Fault::RateLimited,
    Fault::SpendLimit,
    Fault::CutStreams,
    Fault::StalledStreams,
    Fault::DrippingStreams,
    Fault::Unavailable503,
    Fault::BadGateway502,
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
        // Anywhere in a body of about a kilobyte, or past its end (whole).
        let cut_at = rng.usize(1..1200);
        match self {
            Fault::Overloaded529 => Behaviour::OverloadedFor {
                retry_after: RETRY_AFTER_S,
            },
            Fault::RateLimitedRetryAfter => Behaviour::RateLimited {
                retry_after: Some(RETRY_AFTER_S),
            },
            Fault::RateLimited => Behaviour::RateLimited { retry_after: None },
            Fault::SpendLimit => Behaviour::QuotaExhausted,
            Fault::CutStreams => per_task(|text| Behaviour::cut_at_byte(text, cut_at)),
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
            Fault::BadGateway502 => Behaviour::BadGateway,
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
            Fault::BadGateway502 => Behaviour::ByPrompt {
                marker: REFACTOR_INSTRUCTION.into(),
                matched: Box::new(Behaviour::continues(REWRITE)),
                otherwise: Box::new(Behaviour::BadGateway),
            },
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
    // `SOAK_ONLY=RedisPaused,AllDown` narrows the faults (to chase one).
    let only = std::env::var("SOAK_ONLY").unwrap_or_default();
    let faults: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| only.is_empty() || only.split(',').any(|o| o == format!("{f:?}")))
        .collect();
    let mut round = Vec::new();
    (0..settings.phases)
        .map(|i| {
            if i % 2 == 0 {
                return Fault::Calm;
            }
            if round.is_empty() {
                round = faults.clone();
                rng.shuffle(&mut round);
            }
            round.pop().expect("a round of faults")
        })
        .collect()
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
    /// Probe holders the soak killed: which window, and when.
    killed_probers: Mutex<Vec<(usize, Instant)>>,
    /// When the private window had local-only on: (from its reply, to the
    /// request turning it off).
    private_spans: Mutex<Vec<(Instant, Instant)>>,
    /// Every refactor that parked, by id (from its reply, or its checkpoint
    /// seen in the state directory when the reply died with its window).
    parked: Mutex<std::collections::HashSet<String>>,
    /// How many times each parked refactor was resumed and finished.
    finished: Mutex<HashMap<String, usize>>,
    resumes_failed: AtomicUsize,
    /// Each process's footprint as it settled after each phase.
    settled: Mutex<Vec<Settled>>,
}

/// One process's live tasks (a window's; the gateway does not say) and
/// open files between its requests after a phase, each the fewest it
/// showed in a few looks, and how far each is over the process's first.
struct Settled {
    phase: usize,
    pid: u32,
    tasks: Option<usize>,
    fds: Option<usize>,
    tasks_over: usize,
    fds_over: usize,
}

impl Soak {
    fn phase(&self) -> (usize, Fault) {
        *self.phases.borrow()
    }

    /// Notes process `pid` after `phase` from its looks; prints them when
    /// the fewest is more than 2 over its first.
    fn note_settled(&self, phase: usize, pid: u32, tasks: &[u64], fds: &[usize]) {
        let (tasks_now, fds_now) = (
            tasks.iter().min().map(|n| *n as usize),
            fds.iter().min().copied(),
        );
        let mut settled = self.settled.lock().unwrap();
        let earlier = settled.iter().filter(|s| s.pid == pid);
        let first_tasks = earlier.clone().find_map(|s| s.tasks).or(tasks_now);
        let first_fds = earlier.clone().find_map(|s| s.fds).or(fds_now);
        let over = |now: Option<usize>, first: Option<usize>| {
            now.zip(first)
                .map_or(0, |(now, first)| now.saturating_sub(first))
        };
        let (tasks_over, fds_over) = (over(tasks_now, first_tasks), over(fds_now, first_fds));
        if tasks_over > 2 || fds_over > 2 {
            println!(
                "      pid {pid} after phase {phase}: tasks {tasks:?} (first {first_tasks:?}), open files {fds:?} (first {first_fds:?})"
            );
        }
        settled.push(Settled {
            phase,
            pid,
            tasks: tasks_now,
            fds: fds_now,
            tasks_over,
            fds_over,
        });
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
        // The window shows a status bar, whose truth is checked.
        let mut options = self.config.clone();
        options["statusNotifications"] = json!(true);
        client.initialize(capabilities, options).await;
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
        killed_probers: Mutex::default(),
        private_spans: Mutex::default(),
        parked: Mutex::default(),
        finished: Mutex::default(),
        resumes_failed: AtomicUsize::new(0),
        settled: Mutex::default(),
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
            untrue_status: n(&counts.untrue_status),
            longest_ms: counts.longest_ms.load(Ordering::Relaxed),
            early: early.len(),
            quota_429s: primary.quota_rejections() - quota_before,
            leaked,
            probes_per_window: breaker.most_per_window(
                &primary.requests()[requests_before..],
                &soak.killed_probers.lock().unwrap(),
                (began, Instant::now()),
            ),
            rss_mb: rss / 1024,
            fds,
            task_growth: 0,
            fd_growth: 0,
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
        report.untrue_status = n(&counts.untrue_status);
        report.longest_ms = counts.longest_ms.load(Ordering::Relaxed);
    }
    for settled in soak.settled.lock().unwrap().iter() {
        let report = &mut reports[settled.phase];
        report.task_growth = report.task_growth.max(settled.tasks_over);
        report.fd_growth = report.fd_growth.max(settled.fds_over);
    }
    println!(
        "tasks over each window's first count, by phase: {:?}",
        reports.iter().map(|p| p.task_growth).collect::<Vec<_>>()
    );
    println!(
        "open files over each process's first count, by phase: {:?}",
        reports.iter().map(|p| p.fd_growth).collect::<Vec<_>>()
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
        "total: sent {} answered {} errors {} garbled {} lost {} exited {} parked {} resumed once {} (failed {}) early {} quota 429s {} leaked {} untrue status {}",
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
        report.total(|p| p.untrue_status),
    );
    drop(gateway);
    report
}
