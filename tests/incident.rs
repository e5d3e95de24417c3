//! Incident replays through both front ends, the language server and the
//! gateway: "one paying request per incident". A primary provider goes bad in
//! one of five ways (a silent slowdown with HTTP 200, answers cut
//! mid-stream, answers stopped for length far below the limit asked, answers
//! that end without their terminal event, 529 overloaded) while an editor or
//! a gateway client asks for explanations at a sparse or a busy pace. The
//! promise:
//!
//! - from the onset, at most one user request pays for the fault: the
//!   primary has it and a backup answers for it too (hedged at the
//!   first-token ceiling, or failed over), as the fakes recorded it;
//! - the request after the one that met the fault does not try the primary;
//! - the status names the cause while traffic is elsewhere;
//! - once the primary recovers, a canary (never a user request) is the first
//!   to find it healthy, and user requests are served by it again after that;
//! - only user requests move the status's route, never a canary.
//!
//! These are outcomes and order; what they take in time (one request at the
//! ceiling, back within a canary interval and a request) is checked on the
//! paused clock in crates/router/src/tests/fleet.rs.
//!
//! Each incident runs both paces through both front ends at once, each with
//! its own process, fakes and shared-state directory (the gateway alternates
//! whole and streamed answers, so both of its paths meet the incident); every broken promise of a replay is reported
//! together with the replay's timeline and the server's routing log.
//!
//! The team replay runs the silent slowdown through four language servers and
//! a gateway sharing one real `redis-server`, taking turns at the pace: the
//! promise holds for the whole team (one paying request, and the next one,
//! from another process, goes elsewhere), and each process's status names the
//! cause after its own first request of the incident.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::actions::{DOC, URI, command, whole_function};
use support::fake_provider::{Behaviour, FakeProvider};
use support::lsp_client::{LspClient, ServerOptions};
use support::redis_server::RedisServer;
use support::scenario::Gateway;
use support::timing;
use tokio::time::Instant;

const KEY: &str = "sk-test-incident-0123456789abcdef";

/// `tasks.explain.first_token_ms`: the ceiling, and when the hedge starts.
const CEILING_MS: u64 = 1_000;
/// `resilience.canary_interval_ms`.
const CANARY_MS: u64 = 2_000;
/// `resilience.beacon_window_ms`: how far back the health beacons look.
const BEACON_WINDOW_MS: u64 = 4_000;
/// `resilience.beacon_min_samples`.
const BEACON_MIN_SAMPLES: usize = 3;
/// The sparse pace: one explain every 5 s. The real-world sparse pace is one
/// every 25 s against the default 60 s window's worth of samples; what matters
/// is that it is longer than the beacon window, so every request finds the
/// samples of the one before it aged out and only a sticky verdict can keep
/// users off a bad entry.
const SPARSE_MS: u64 = 5_000;
const _: () = assert!(SPARSE_MS > BEACON_WINDOW_MS);
/// The busy pace: one explain every 1.5 s, several per canary interval.
const BUSY_MS: u64 = 1_500;
/// How long a replay waits for traffic to return to the recovered primary
/// before it gives up (scaled to the machine): generous, since the wait ends
/// as soon as the primary serves again.
const RECOVERY_PATIENCE_MS: u64 = 30_000;

/// The primary's answer, which the backups continue where it was cut.
const ANSWER: &str = "The function counts how often each word occurs in the slice.";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What goes wrong with the primary.
#[derive(Clone, Copy, Debug)]
enum Incident {
    /// HTTP 200, but the first token comes at 2.5x the ceiling.
    SilentSlowdown,
    /// Every answer is cut mid-stream (the connection closes in the body).
    CutAnswers,
    /// Every answer says it stopped for length, a few tokens into the 800
    /// asked: the provider cuts answers short.
    TruncatedAnswers,
    /// Every answer ends half-way, cleanly but without its finish reason or
    /// terminal event.
    UnterminatedAnswers,
    /// Anthropic's 529 `overloaded_error`.
    Overloaded,
}

impl Incident {
    fn fault(self) -> Behaviour {
        match self {
            Incident::SilentSlowdown => Behaviour::SlowFirstToken {
                delay: ms(CEILING_MS * 5 / 2),
                text: "A late explanation of count.".into(),
            },
            Incident::CutAnswers => Behaviour::CutAfter {
                text: ANSWER.into(),
                after_chunks: 2,
            },
            Incident::TruncatedAnswers => Behaviour::MaxTokens {
                text: ANSWER.into(),
            },
            Incident::UnterminatedAnswers => Behaviour::EndsEarly {
                text: ANSWER.into(),
                after_chunks: 2,
            },
            Incident::Overloaded => Behaviour::Overloaded,
        }
    }

    /// A word the status's reason must contain while traffic is elsewhere.
    fn cause(self) -> &'static str {
        match self {
            Incident::SilentSlowdown => "slow",
            // "the stream was cut", "answer cut short", "degraded: an answer was cut".
            Incident::CutAnswers | Incident::TruncatedAnswers | Incident::UnterminatedAnswers => {
                "cut"
            }
            Incident::Overloaded => "overloaded",
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Pace {
    Sparse,
    Busy,
}

impl Pace {
    fn every(self) -> Duration {
        match self {
            Pace::Sparse => ms(SPARSE_MS),
            Pace::Busy => ms(BUSY_MS),
        }
    }

    /// Requests sent while the primary is bad: enough to span several canary
    /// rounds (a canary that wrongly cleared the verdict would let one
    /// through to the primary).
    fn during_incident(self) -> usize {
        match self {
            Pace::Sparse => 3,
            Pace::Busy => 5,
        }
    }
}

/// The front end a replay drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Front {
    Lsp,
    Gateway,
    /// Four language servers and a gateway on one `redis-server`, in turns.
    Team,
}

/// Language servers in the team replay (plus one gateway).
const TEAM_EDITORS: usize = 4;

/// A running front end.
enum Door {
    Lsp(LspClient),
    /// Alternates whole and streamed answers.
    Gateway {
        gateway: Gateway,
        stream: bool,
    },
}

impl Door {
    async fn lsp(config: &Value) -> Door {
        let options = ServerOptions {
            model_dir: tempfile::tempdir().unwrap().keep(),
            env: vec![("SY_INCIDENT_KEY".into(), KEY.into())],
            ..Default::default()
        };
        let mut client = LspClient::spawn(options).await;
        let mut init = config.clone();
        init["statusNotifications"] = json!(true);
        client.initialize(json!({}), init).await;
        client.open(URI, DOC).await;
        Door::Lsp(client)
    }

    async fn gateway(config: &Value) -> Door {
        let env = [("SY_INCIDENT_KEY", KEY)];
        let gateway = Gateway::start(config, &env, ms(30 * CEILING_MS)).await;
        Door::Gateway {
            gateway,
            stream: false,
        }
    }

    /// The provider that answered one explain, or the error.
    async fn explain(&mut self) -> Result<String, String> {
        match self {
            Door::Lsp(client) => {
                let response =
                    command(client, "switchyard.explain", json!([URI, whole_function()])).await;
                match response["result"]["provider"].as_str() {
                    Some(provider) => Ok(provider.to_owned()),
                    None => Err(response["error"]["message"]
                        .as_str()
                        .unwrap_or("neither an answer nor an error")
                        .to_owned()),
                }
            }
            Door::Gateway { gateway, stream } => {
                *stream = !*stream;
                match gateway.ask(*stream).await {
                    Ok(served) => Ok(served.model.split('/').next().unwrap_or_default().into()),
                    Err(failed) => Err(format!("{failed:?}")),
                }
            }
        }
    }

    /// The status as computed now (`switchyard.status` or `/status`).
    async fn status(&mut self) -> Value {
        match self {
            Door::Lsp(client) => {
                command(client, "switchyard.status", json!([])).await["result"].clone()
            }
            Door::Gateway { gateway, .. } => gateway.status().await,
        }
    }

    fn log(&self) -> String {
        match self {
            Door::Lsp(client) => client.log(),
            Door::Gateway { gateway, .. } => gateway.process.log(),
        }
    }

    async fn shutdown(self) {
        if let Door::Lsp(client) = self {
            client.shutdown().await;
        }
    }
}

/// One explain as the editor saw it.
struct Row {
    phase: &'static str,
    /// Which process served it (its index in the replay's doors).
    door: usize,
    /// When it was sent, from the replay's start.
    sent: Duration,
    /// Sent, from the moment the phase began (onset or recovery).
    since_phase: Duration,
    elapsed: Duration,
    /// The provider that answered, or the error.
    served: Result<String, String>,
    /// User requests the primary received while this one ran.
    primary_tries: usize,
    /// User requests the backups received while this one ran.
    backup_tries: usize,
}

impl Row {
    fn by_primary(&self) -> bool {
        self.served.as_deref() == Ok("primary")
    }

    /// Paid for the fault, as the fakes recorded it: the primary had the
    /// request and a backup had to answer for it too (the hedge fired at the
    /// ceiling, or it failed over). How long it took says nothing here: a
    /// healthy request slowed by a busy machine is not a payer.
    fn paid(&self) -> bool {
        self.primary_tries > 0 && self.backup_tries > 0
    }
}

struct Replay {
    label: String,
    incident: Incident,
    pace: Pace,
    /// The processes, taking turns; one except in the team replay.
    doors: Vec<Door>,
    primary: FakeProvider,
    backups: [FakeProvider; 2],
    _state: tempfile::TempDir,
    _redis: Option<RedisServer>,
    start: Instant,
    next_send: Instant,
    phase_start: Instant,
    rows: Vec<Row>,
    broken: Vec<String>,
}

impl Replay {
    /// A medium tier of three entries on three fakes: the primary (Anthropic
    /// wire), then two backups (OpenAI and Anthropic wires).
    async fn start(front: Front, incident: Incident, pace: Pace) -> Replay {
        let primary = FakeProvider::start().await;
        let backup = || FakeProvider::with_default(Behaviour::continues(ANSWER));
        let backups = [backup().await, backup().await];
        let state = tempfile::tempdir().unwrap();
        let redis = (front == Front::Team).then(RedisServer::start);
        let shared = match &redis {
            Some(redis) => redis.url(),
            None => format!("file://{}", state.path().display()),
        };
        let provider = |kind: &str, url: String| json!({"kind": kind, "base_url": url, "api_key_env": "SY_INCIDENT_KEY"});
        let config = json!({
            "local": {"auto_pull": false},
            "providers": {
                "primary": provider("anthropic", primary.anthropic_url()),
                "second": provider("openai", backups[0].openai_url()),
                "third": provider("anthropic", backups[1].anthropic_url())
            },
            "tiers": {"large": [], "medium": ["primary/mid", "second/mid", "third/mid"], "small": []},
            "tasks": {"explain": {
                "first_token_ms": CEILING_MS,
                "total_ms": 8 * CEILING_MS,
                "idle_ms": CEILING_MS,
                "wait_ms": 2 * CEILING_MS,
                "hedge": true
            }},
            "resilience": {
                "state": shared,
                "canary_interval_ms": CANARY_MS,
                "beacon_window_ms": BEACON_WINDOW_MS,
                "beacon_min_samples": BEACON_MIN_SAMPLES,
                "breaker": {"cooldown_ms": CANARY_MS},
                "backoff": {"rate_limit_ms": 100, "overloaded_ms": 200, "transient_ms": 50, "cap_ms": 1000}
            }
        });
        let doors = match front {
            Front::Lsp => vec![Door::lsp(&config).await],
            Front::Gateway => vec![Door::gateway(&config).await],
            Front::Team => {
                let mut doors = Vec::new();
                for _ in 0..TEAM_EDITORS {
                    doors.push(Door::lsp(&config).await);
                }
                doors.push(Door::gateway(&config).await);
                doors
            }
        };
        let now = Instant::now();
        Replay {
            label: format!("{incident:?} at a {pace:?} pace through the {front:?} front end"),
            incident,
            pace,
            doors,
            primary,
            backups,
            _state: state,
            _redis: redis,
            start: now,
            next_send: now,
            phase_start: now,
            rows: Vec::new(),
            broken: Vec::new(),
        }
    }

    fn broke(&mut self, promise: String) {
        self.broken.push(promise);
    }

    /// The next explain at the pace, from the next process in turn: sent
    /// one pace after the one before was sent.
    async fn explain(&mut self, phase: &'static str) -> usize {
        tokio::time::sleep_until(self.next_send).await;
        let door = self.rows.len() % self.doors.len();
        self.route_is_the_last_served(door).await;
        let sent = Instant::now();
        self.next_send = sent + self.pace.every();
        let tries_before = self.primary.user_request_count();
        let backup_tries_before = self.backup_user_requests();
        let served = self.doors[door].explain().await;
        let elapsed = sent.elapsed();
        self.rows.push(Row {
            phase,
            door,
            sent: sent - self.start,
            since_phase: sent.saturating_duration_since(self.phase_start),
            elapsed,
            served,
            primary_tries: self.primary.user_request_count() - tries_before,
            backup_tries: self.backup_user_requests() - backup_tries_before,
        });
        self.rows.len() - 1
    }

    fn backup_user_requests(&self) -> usize {
        self.backups
            .iter()
            .map(FakeProvider::user_request_count)
            .sum()
    }

    /// Only serving moves the route: whatever canaries found since the
    /// process's last request, its status still names the entry that served it.
    async fn route_is_the_last_served(&mut self, door: usize) {
        let last = self.rows.iter().rev().find(|r| r.door == door);
        let Some(Ok(last)) = last.map(|r| r.served.clone()) else {
            return;
        };
        let status = self.doors[door].status().await;
        let route = explain_route(&status)["provider"].clone();
        if route != last.as_str() {
            let why = format!(
                "the status's explain route moved to {route} between requests; the last request was served by {last}"
            );
            self.broke(why);
        }
    }

    /// The whole replay: warm-up, incident, recovery.
    async fn run(mut self) -> Replay {
        // Warm-up: the primary serves, alone (no hedge, no failover).
        for _ in 0..2 {
            let i = self.explain("healthy").await;
            let row = &self.rows[i];
            if !row.by_primary() || row.backup_tries > 0 {
                let why = format!(
                    "setup: a healthy primary should serve alone, got {:?} after {:?} with {} backup request(s)",
                    row.served, row.elapsed, row.backup_tries
                );
                self.broke(why);
            }
        }
        self.incident().await;
        self.recovery().await;
        self
    }

    async fn incident(&mut self) {
        self.primary.set_default(self.incident.fault());
        self.phase_start = Instant::now();
        let mut rows = Vec::new();
        // Every process meets the incident, twice in the team.
        let count = match self.doors.len() {
            1 => self.pace.during_incident(),
            n => 2 * n,
        };
        for _ in 0..count {
            let row = self.explain("incident").await;
            rows.push(row);
            if rows.len() <= self.doors.len() {
                // The process's first request of the incident.
                self.status_names_the_cause(self.rows[row].door).await;
            }
        }
        let paying: Vec<String> = rows
            .iter()
            .map(|&i| &self.rows[i])
            .filter(|r| r.paid())
            .map(|r| format!("sent at {:?} from process {}", r.since_phase, r.door))
            .collect();
        if paying.len() > 1 {
            let why = format!(
                "at most one request pays for the fault from the onset (the primary had it and a backup answered for it); {} did ({})",
                paying.len(),
                paying.join(", ")
            );
            self.broke(why);
        }
        let failed: Vec<String> = rows
            .iter()
            .filter_map(|&i| self.rows[i].served.clone().err())
            .collect();
        if !failed.is_empty() {
            self.broke(format!(
                "two healthy entries remain, yet {} request(s) got no answer: {failed:?}",
                failed.len()
            ));
        }
        let next = &self.rows[rows[1]];
        if next.primary_tries > 0 {
            let why = format!(
                "the request after the onset request goes elsewhere, but it tried the primary {} time(s) (served by {:?})",
                next.primary_tries, next.served
            );
            self.broke(why);
        }
        let later: usize = rows[2..].iter().map(|&i| self.rows[i].primary_tries).sum();
        if later > 0 {
            self.broke(format!(
                "the primary stays out of user traffic until a canary finds it healthy, \
                 but later incident requests tried it {later} time(s)"
            ));
        }
        for door in 0..self.doors.len() {
            self.editor_was_told_the_cause(door).await;
        }
    }

    /// The status of one process, computed now, names the cause while the
    /// explain task is served elsewhere.
    async fn status_names_the_cause(&mut self, door: usize) {
        let cause = self.incident.cause();
        let status = self.doors[door].status().await;
        let explain = explain_route(&status);
        let reasons = [status["reason"].as_str(), explain["reason"].as_str()];
        if explain["provider"] == "primary" || !reasons.iter().any(|r| names(r, cause)) {
            let why = format!(
                "while traffic is elsewhere the status's reason names the cause ({cause:?}); \
                 process {door}'s switchyard.status says explain is served by {} with reasons {reasons:?}",
                explain["provider"]
            );
            self.broke(why);
        }
    }

    /// An editor is also told by notification (the gateway has no channel to tell).
    async fn editor_was_told_the_cause(&mut self, door: usize) {
        let cause = self.incident.cause();
        let Door::Lsp(client) = &mut self.doors[door] else {
            return;
        };
        let patience = timing::scaled(Duration::from_secs(5));
        let notified = client
            .maybe_notification("switchyard/status", patience, |p| {
                let explain = explain_route(p);
                explain["provider"].as_str().is_some_and(|p| p != "primary")
                    && [p["reason"].as_str(), explain["reason"].as_str()]
                        .iter()
                        .any(|r| names(r, cause))
            })
            .await;
        if notified.is_none() {
            let why = format!(
                "no switchyard/status notification to process {door} named the cause ({cause:?}) while traffic was elsewhere"
            );
            self.broke(why);
        }
    }

    async fn recovery(&mut self) {
        self.primary
            .set_default(Behaviour::ok("Hello from the primary"));
        let recovered = Instant::now();
        self.phase_start = recovered;
        // Users stay off the primary until a canary finds it healthy; then
        // the next request is the primary's. How soon is the paused clock's
        // to check; here, that it happens and in that order.
        let deadline = recovered + timing::scaled(ms(RECOVERY_PATIENCE_MS));
        let back = loop {
            let i = self.explain("recovered").await;
            if self.rows[i].by_primary() {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
        };
        if !back {
            let why = format!(
                "traffic returns to the primary once it recovers; it had not after {:?}",
                recovered.elapsed()
            );
            return self.broke(why);
        }
        // Received (and so answered) after the recovery: a canary first.
        let first = self
            .primary
            .requests()
            .into_iter()
            .find(|request| request.at >= recovered);
        if !first.as_ref().is_some_and(|request| request.is_canary()) {
            self.broke(
                "a canary, never a user request, is the first to find the recovered primary healthy; \
                 the first request it received after recovering was a user's"
                    .into(),
            );
        }
        // And it stays there.
        let i = self.explain("recovered").await;
        if !self.rows[i].by_primary() {
            let why = format!(
                "once back on the primary, traffic stays there; the next request was served by {:?}",
                self.rows[i].served
            );
            self.broke(why);
        }
    }

    fn report(&self) -> String {
        let mut out = format!("== {} ==\nbroken promises:\n", self.label);
        for promise in &self.broken {
            out += &format!("  - {promise}\n");
        }
        out += "timeline (sent from start / from phase start, process, elapsed, served by, user requests the primary and the backups received):\n";
        for r in &self.rows {
            out += &format!(
                "  {:>9} {:>7.2} s / {:>6.2} s  #{}  {:>6} ms  {:?}  primary tries {}, backup tries {}\n",
                r.phase,
                r.sent.as_secs_f64(),
                r.since_phase.as_secs_f64(),
                r.door,
                r.elapsed.as_millis(),
                r.served,
                r.primary_tries,
                r.backup_tries
            );
        }
        let canaries = self.primary.request_count() - self.primary.user_request_count();
        out += &format!(
            "primary: {} user requests, {canaries} canaries; backups: {} and {} user requests\n",
            self.primary.user_request_count(),
            self.backups[0].user_request_count(),
            self.backups[1].user_request_count()
        );
        out += "server log (routing, the first process):\n";
        let log = self.doors[0].log();
        let wanted = [
            "judged",
            "canary to",
            "served by",
            "hedging",
            "failed",
            "retrying",
        ];
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| wanted.iter().any(|w| l.contains(w)))
            .collect();
        for line in &lines[lines.len().saturating_sub(60)..] {
            out += &format!("  {line}\n");
        }
        out
    }
}

/// The explain task's entry of a status's `tasks`.
fn explain_route(status: &Value) -> Value {
    status["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["kind"] == "explain"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Replays `incident` at both paces through `fronts` at once and fails
/// with every broken promise.
async fn replay_through(incident: Incident, fronts: &[Front]) {
    let replays =
        futures::future::join_all(
            fronts
                .iter()
                .flat_map(|&front| [(front, Pace::Sparse), (front, Pace::Busy)])
                .map(|(front, pace)| async move {
                    Replay::start(front, incident, pace).await.run().await
                }),
        )
        .await;
    let mut reports = Vec::new();
    for replay in &replays {
        match replay.broken.is_empty() {
            // Shown with --nocapture.
            true => eprintln!("{}", replay.report()),
            false => reports.push(replay.report()),
        }
    }
    assert!(reports.is_empty(), "\n{}", reports.join("\n"));
    for replay in replays {
        for door in replay.doors {
            door.shutdown().await;
        }
    }
}

/// A word of `reason` names `cause`.
fn names(reason: &Option<&str>, cause: &str) -> bool {
    reason.is_some_and(|r| r.to_lowercase().contains(cause))
}

/// Replays `incident` at both paces through both front ends.
async fn replay(incident: Incident) {
    replay_through(incident, &[Front::Lsp, Front::Gateway]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_slowdown_costs_the_whole_team_one_request_and_every_process_names_it() {
    replay_through(Incident::SilentSlowdown, &[Front::Team]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_slowdown_costs_one_request_and_traffic_returns_after_recovery() {
    replay(Incident::SilentSlowdown).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_answers_cost_one_request_and_traffic_returns_after_recovery() {
    replay(Incident::CutAnswers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_cut_short_for_length_cost_one_request_and_traffic_returns_after_recovery() {
    replay(Incident::TruncatedAnswers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_without_their_terminal_event_cost_one_request_and_traffic_returns_after_recovery()
{
    replay(Incident::UnterminatedAnswers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_primary_costs_one_request_and_traffic_returns_after_recovery() {
    replay(Incident::Overloaded).await;
}
