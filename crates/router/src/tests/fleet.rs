//! A fleet: several routers, each with its own resilience (breaker views,
//! probe leases, beacons) over one shared state, as processes share a state
//! directory or a Redis server. The promises about time that tests/load.rs,
//! tests/resilience.rs and tests/incident.rs check through the binary by
//! outcome and order are checked here, on the paused clock: one user probe
//! per cooldown during an outage, a trip reaching every process within the
//! breaker's view lifetime, and one paying request per silent slowdown with
//! a canary ending it.

use super::yielding::Yielding;
use super::*;
use switchyard_resilience::breaker::VIEW_TTL;
use switchyard_state::SharedState;
use switchyard_state::memory::MemoryState;

/// `processes` routers over one shared state, each with its own resilience.
fn fleet(processes: usize, config: &Config, providers: &[&Arc<Scripted>]) -> Vec<Arc<Router>> {
    let state: Arc<dyn SharedState> = Yielding::over(Arc::new(MemoryState::new()));
    (0..processes)
        .map(|_| {
            let resilience = Arc::new(Resilience::new(state.clone(), &config.resilience));
            Arc::new(sharing(config.clone(), providers, resilience))
        })
        .collect()
}

/// Each router's canary upkeep, as its process runs it; stopped on drop.
struct Upkeep(Vec<tokio::task::JoinHandle<()>>);

impl Upkeep {
    fn start(routers: &[Arc<Router>]) -> Upkeep {
        let tasks = routers
            .iter()
            .map(|router| {
                let router = router.clone();
                tokio::spawn(canary::upkeep(
                    move || router.clone(),
                    None::<tokio::sync::watch::Receiver<()>>,
                    |_| {},
                ))
            })
            .collect();
        Upkeep(tasks)
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// An answer with its first token at once: a request takes no paused time.
fn at_once() -> Behaviour {
    Behaviour::Answer {
        first_token: Duration::ZERO,
        reason: FinishReason::EndTurn,
    }
}

/// A 500: it counts toward the breaker but earns no health verdict, so only
/// the breaker keeps users off the entry.
fn server_error() -> Behaviour {
    fail_with(500, "api_error", None)
}

/// `each` explains from every router at once; who served each.
async fn every_router_asks(routers: &[Arc<Router>], each: usize) -> Vec<String> {
    let asks = routers
        .iter()
        .flat_map(|router| (0..each).map(move |_| run(router, explain())));
    futures::future::join_all(asks)
        .await
        .into_iter()
        .map(|answer| answer.expect("the secondary serves").route.provider)
        .collect()
}

// tests/load.rs through the binary: eight processes, a 3 s outage, a 500 ms
// cooldown, requests from every process many times per cooldown.
#[tokio::test(start_paused = true)]
async fn an_outage_lets_one_user_probe_through_per_cooldown_across_the_fleet() {
    const OUTAGE: Duration = Duration::from_secs(3);
    const WAVE: Duration = Duration::from_millis(100);
    let primary = Scripted::new("primary", vec![], at_once());
    let secondary = Scripted::new("secondary", vec![], at_once());
    let mut config = chains(&[], &["primary/m", "secondary/m"]);
    config.tasks.explain.wait_ms = 0;
    config.resilience.breaker.failures = 3;
    config.resilience.breaker.cooldown_ms = 500;
    config.resilience.canary_interval_ms = 200;
    let cooldown = Duration::from_millis(config.resilience.breaker.cooldown_ms);
    let routers = fleet(8, &config, &[&primary, &secondary]);
    let _upkeep = Upkeep::start(&routers);

    let healthy = every_router_asks(&routers, 3).await;
    assert!(healthy.iter().all(|p| p == "primary"), "{healthy:?}");
    primary.set_otherwise(server_error());
    let down = Instant::now();
    let before = primary.arrivals(false).len();
    // The first wave is in flight before any failure is known.
    every_router_asks(&routers, 2).await;
    let first_wave = primary.arrivals(false).len();
    while Instant::now() + WAVE < down + OUTAGE {
        tokio::time::sleep(WAVE).await;
        let served = every_router_asks(&routers, 2).await;
        assert!(served.iter().all(|p| p == "secondary"), "{served:?}");
    }
    primary.set_otherwise(at_once());
    let outage = down.elapsed();

    let arrivals = primary.arrivals(false);
    let probes = &arrivals[first_wave..];
    assert!(probes.len() >= 2, "the outage outlasts several cooldowns");
    assert!(
        probes.len() as u128 <= outage.as_millis() / cooldown.as_millis(),
        "{} user probes in a {outage:?} outage with a {cooldown:?} cooldown",
        probes.len()
    );
    // The breaker tripped at the failure that made `failures` in a row; each probe
    // comes a whole cooldown after it, or after the probe before.
    let failures = config.resilience.breaker.failures as usize;
    let tripped = arrivals[before + failures - 1];
    let spacing: Vec<Duration> = std::iter::once(&tripped)
        .chain(probes)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|pair| *pair[1] - *pair[0])
        .collect();
    assert!(
        spacing.iter().all(|gap| *gap >= cooldown),
        "user probes closer than the {cooldown:?} cooldown: {spacing:?}"
    );

    // A canary or the next probe closes it, and every process comes back.
    tokio::time::sleep(cooldown * 2).await;
    let after = every_router_asks(&routers, 2).await;
    assert!(after.iter().all(|p| p == "primary"), "{after:?}");
}

// tests/resilience.rs through the binary: three failures anywhere open the
// breaker everywhere. Here one failure trips it, and every other process has
// just read it closed: its view is as fresh as it can be.
#[tokio::test(start_paused = true)]
async fn a_trip_reaches_every_process_within_the_view_lifetime_and_not_a_request_later() {
    let primary = Scripted::new("primary", vec![], at_once());
    let secondary = Scripted::new("secondary", vec![], at_once());
    let mut config = chains(&[], &["primary/m", "secondary/m"]);
    config.resilience.breaker.failures = 1;
    let routers = fleet(4, &config, &[&primary, &secondary]);
    for router in &routers {
        let answer = run(router, explain()).await.unwrap();
        assert_eq!(answer.route.provider, "primary", "read closed");
    }
    let served = primary.arrivals(false).len();

    primary.set_otherwise(server_error());
    let tripped = run(&routers[0], explain()).await.unwrap();
    assert_eq!(tripped.route.provider, "secondary");
    assert_eq!(primary.arrivals(false).len(), served + 1, "the trip");
    // Within the view lifetime another process may still send one; at its
    // end none does.
    tokio::time::advance(VIEW_TTL).await;
    for (process, router) in routers.iter().enumerate() {
        let answer = run(router, explain()).await.unwrap();
        assert_eq!(answer.route.provider, "secondary", "process {process}");
    }
    assert_eq!(
        primary.arrivals(false).len(),
        served + 1,
        "no process sent the tripped entry a request once its view lapsed"
    );
}

/// `tasks.explain.first_token_ms` of the incident replays: the ceiling, and
/// when the hedge starts.
const CEILING: Duration = Duration::from_secs(1);

/// The explain task and resilience settings tests/incident.rs configures:
/// three entries, hedged at a 1 s ceiling, canaries every 2 s.
fn incident_config() -> Config {
    let mut config = chains(&[], &["primary/m", "second/m", "third/m"]);
    let explain = &mut config.tasks.explain;
    explain.first_token_ms = CEILING.as_millis() as u64;
    explain.total_ms = 8 * explain.first_token_ms;
    explain.idle_ms = explain.first_token_ms;
    explain.wait_ms = 2 * explain.first_token_ms;
    explain.hedge = true;
    config.resilience.canary_interval_ms = 2_000;
    config.resilience.breaker.cooldown_ms = 2_000;
    config
}

/// HTTP 200, but the first token comes at 2.5 times the ceiling.
fn slowdown() -> Behaviour {
    Behaviour::Answer {
        first_token: CEILING * 5 / 2,
        reason: FinishReason::EndTurn,
    }
}

/// One explain as its sender saw it.
struct Sent {
    /// When it was sent, from the replay's start.
    at: Duration,
    took: Duration,
    provider: String,
}

impl std::fmt::Debug for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (at, took) = (self.at.as_secs_f64(), self.took.as_secs_f64());
        write!(f, "sent at {at:.1} s, took {took:.1} s, {}", self.provider)
    }
}

/// Explains sent one pace apart, by each router in turn.
struct Paced<'a> {
    routers: &'a [Arc<Router>],
    pace: Duration,
    start: Instant,
    next: Instant,
    sent: usize,
}

impl Paced<'_> {
    async fn explain(&mut self) -> Sent {
        tokio::time::sleep_until(self.next).await;
        let at = Instant::now();
        self.next = at + self.pace;
        let router = &self.routers[self.sent % self.routers.len()];
        self.sent += 1;
        let answer = run(router, explain()).await.expect("two entries serve");
        Sent {
            at: at - self.start,
            took: at.elapsed(),
            provider: answer.route.provider,
        }
    }
}

/// A silent slowdown of the primary and its recovery, met by `processes`
/// routers taking turns at `pace`.
async fn slowdown_replay(processes: usize, pace: Duration) {
    let label = format!("{processes} process(es), one explain every {pace:?}");
    let primary = Scripted::new("primary", vec![], ok());
    let second = Scripted::new("second", vec![], ok());
    let third = Scripted::new("third", vec![], ok());
    let config = incident_config();
    let canary_every = Duration::from_millis(config.resilience.canary_interval_ms);
    let routers = fleet(processes, &config, &[&primary, &second, &third]);
    let _upkeep = Upkeep::start(&routers);
    let mut paced = Paced {
        routers: &routers,
        pace,
        start: Instant::now(),
        next: Instant::now(),
        sent: 0,
    };
    for _ in 0..2 {
        assert_eq!(paced.explain().await.provider, "primary", "{label}");
    }

    primary.set_otherwise(slowdown());
    let mut incident = Vec::new();
    for _ in 0..(2 * processes).max(6) {
        incident.push(paced.explain().await);
    }
    let paid: Vec<&Sent> = incident.iter().filter(|s| s.took >= CEILING).collect();
    assert_eq!(paid.len(), 1, "{label}: one request pays: {incident:#?}");
    // It paid the ceiling and the hedge's answer, no more.
    assert!(paid[0].took < CEILING * 2, "{label}: {incident:#?}");
    assert!(
        incident.iter().all(|s| s.provider != "primary"),
        "{label}: {incident:#?}"
    );

    primary.set_otherwise(ok());
    let recovered = Instant::now();
    let mut since = Vec::new();
    while since.iter().all(|s: &Sent| s.provider != "primary") {
        assert!(since.len() < 100, "{label}: never back: {since:#?}");
        since.push(paced.explain().await);
    }
    let back = paced.start + since.last().unwrap().at;
    let canaries = primary.arrivals(true);
    let canary = canaries.iter().find(|at| **at >= recovered);
    assert!(
        canary.is_some_and(|canary| *canary <= back),
        "{label}: a canary found it healthy before users went back: {since:#?}"
    );
    let users = primary.arrivals(false);
    assert_eq!(
        users.iter().filter(|at| **at >= recovered).count(),
        1,
        "{label}: no user request tried it before the canary's word"
    );
    // A canary in flight at the recovery still fails (by the ceiling at the
    // latest), the next comes a canary interval later, and the next request
    // after it is the primary's.
    let bound = canary_every + CEILING + pace;
    assert!(back - recovered <= bound, "{label}: {since:#?}");
    assert_eq!(paced.explain().await.provider, "primary", "{label}");
}

// tests/incident.rs through the binary: one process, and a team of five. The
// sparse pace lets each request find the one before's samples aged out; the
// busy one sends several per canary interval.
#[tokio::test(start_paused = true)]
async fn a_silent_slowdown_costs_one_request_at_any_pace_and_a_canary_ends_it() {
    let sparse = beacon::WINDOW + Duration::from_secs(5);
    let busy = Duration::from_millis(1_500);
    for processes in [1, 5] {
        for pace in [sparse, busy] {
            slowdown_replay(processes, pace).await;
        }
    }
}
