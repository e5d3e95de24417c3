//! Unit tests of the quota governor on a paused clock.

use super::*;
use switchyard_state::memory::MemoryState;

const TPM: Quota = Quota {
    requests_per_minute: Some(60),
    tokens_per_minute: Some(60_000),
    input_tokens_per_minute: None,
    output_tokens_per_minute: None,
};

fn governor(state: &Arc<MemoryState>) -> Governor {
    Governor::new(
        state.clone(),
        GovernorConfig::default(),
        WhenUnavailable::Open,
    )
}

fn soon() -> Instant {
    Instant::now() + Duration::from_millis(1)
}

/// Fills the buckets of `k` to the quota. Governed buckets start empty
/// until headers are seen; these tests are about admission against a known
/// level, not about that cold start.
async fn full(state: &MemoryState, quota: Quota) {
    for meter in Meter::ALL {
        let Some(limit) = meter.limit(&quota) else {
            continue;
        };
        let spec = BucketSpec {
            capacity: limit as f64,
            refill_per_sec: 0.0,
        };
        state
            .bucket(&bucket_key("k", meter), spec, BucketOp::Peek)
            .await
            .unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn reserves_on_every_configured_meter_and_refuses_past_the_deadline() {
    let state = Arc::new(MemoryState::new());
    full(&state, TPM).await;
    let g = governor(&state);
    // Headroom: 60,000 x 10 % / 6 = 1,000 tokens; autocomplete keeps 1,000 back.
    let r = g
        .admit("k", TaskKind::Autocomplete, TPM, 40_000, 10_000, soon())
        .await
        .unwrap();
    assert_eq!(r.held.len(), 2);
    let refused = g
        .admit("k", TaskKind::Autocomplete, TPM, 8_000, 2_000, soon())
        .await
        .unwrap_err();
    assert!(refused.reason.contains("tokens"), "{}", refused.reason);
    // 10,000 short of 10,000 + 1,000 floor at 900 tokens/s (90 % of 60,000/min).
    assert!(refused.wait > Duration::from_secs(1), "{:?}", refused.wait);
}

#[tokio::test(start_paused = true)]
async fn waits_for_the_refill_within_the_deadline() {
    let state = Arc::new(MemoryState::new());
    full(&state, TPM).await;
    let g = governor(&state);
    g.admit("k", TaskKind::Explain, TPM, 50_000, 8_000, soon())
        .await
        .unwrap();
    let waited = wait_for_admission(&g, TaskKind::Explain, 5_000, 1_000).await;
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn interactive_work_gets_through_where_a_refactor_waits() {
    let state = Arc::new(MemoryState::new());
    full(&state, TPM).await;
    let g = governor(&state);
    g.admit("k", TaskKind::Refactor, TPM, 55_000, 1_500, soon())
        .await
        .unwrap();
    // 3,500 left: a refactor stops 2,000 above, autocomplete 1,000 above.
    assert!(
        g.admit("k", TaskKind::Refactor, TPM, 1_000, 1_000, soon())
            .await
            .is_err()
    );
    assert!(
        g.admit("k", TaskKind::Autocomplete, TPM, 1_000, 1_000, soon())
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_reservation_gives_back_its_output_share_at_once() {
    let state = Arc::new(MemoryState::new());
    full(&state, TPM).await;
    let g = governor(&state);
    let r = g
        .admit("k", TaskKind::Explain, TPM, 20_000, 38_000, soon())
        .await
        .unwrap();
    assert!(
        g.admit("k", TaskKind::Explain, TPM, 20_000, 0, soon())
            .await
            .is_err()
    );
    drop(r); // the request's future was dropped mid-stream
    tokio::task::yield_now().await;
    assert!(
        g.admit("k", TaskKind::Explain, TPM, 20_000, 0, soon())
            .await
            .is_ok(),
        "refunded without waiting for the refill"
    );
}

#[tokio::test(start_paused = true)]
async fn settling_gives_back_what_was_not_used() {
    let state = Arc::new(MemoryState::new());
    full(&state, TPM).await;
    let g = governor(&state);
    let r = g
        .admit("k", TaskKind::Explain, TPM, 20_000, 38_000, soon())
        .await
        .unwrap();
    assert!(
        g.admit("k", TaskKind::Explain, TPM, 20_000, 0, soon())
            .await
            .is_err()
    );
    g.settle(
        r,
        Some(Usage {
            input_tokens: 20_000,
            output_tokens: 500,
        }),
    )
    .await;
    assert!(
        g.admit("k", TaskKind::Explain, TPM, 20_000, 0, soon())
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn headers_teach_the_limits_and_the_spare_capacity() {
    let state = Arc::new(MemoryState::new());
    let g = governor(&state);
    let none = Quota::default();
    let first = g
        .admit("k", TaskKind::Explain, none, 1_000, 1_000, soon())
        .await
        .unwrap();
    assert!(
        first.held.is_empty(),
        "nothing to govern before the limits are known"
    );
    let limits = RateLimits {
        tokens_limit: Some(100_000),
        tokens_remaining: Some(10_000),
        ..RateLimits::default()
    };
    g.observe(&first, &limits).await;
    // Someone else on the account used most of it: 10,000 left.
    assert!(
        g.admit("k", TaskKind::Explain, none, 9_000, 0, soon())
            .await
            .is_err()
    );
    assert!(
        g.admit("k", TaskKind::Explain, none, 6_000, 0, soon())
            .await
            .is_ok()
    );
    let views = g.views().await;
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].limit, 100_000);
}

#[tokio::test(start_paused = true)]
async fn before_any_header_a_configured_quota_starts_empty_and_earns_its_share() {
    let state = Arc::new(MemoryState::new());
    let g = governor(&state);
    // Nothing says the account has anything left this minute.
    assert!(
        g.admit("k", TaskKind::Refactor, TPM, 5_000, 4_000, soon())
            .await
            .is_err()
    );
    let waited = wait_for_admission(&g, TaskKind::Refactor, 5_000, 4_000).await;
    // 9,000 plus the refactor's 2,000 above the headroom, at 900 tokens/s.
    assert!(
        waited >= Duration::from_millis(12_200) && waited < Duration::from_secs(13),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn headers_count_the_refill_since_the_provider_counted_the_request() {
    let state = Arc::new(MemoryState::new());
    let g = governor(&state);
    let sent = g
        .admit(
            "k",
            TaskKind::Explain,
            Quota::default(),
            1_000,
            1_000,
            soon(),
        )
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(3)).await;
    // 10,000 left when it was counted, at most 3 s ago, refilling 1,000/s.
    let limits = RateLimits {
        tokens_limit: Some(60_000),
        tokens_remaining: Some(10_000),
        ..RateLimits::default()
    };
    g.observe(&sent, &limits).await;
    assert_eq!(g.views().await[0].available, 13_000.0);
    // "Full again in 49 s" pins it at 11,000: it was counted 1 s after we sent it.
    let limits = RateLimits {
        tokens_reset: Some(Duration::from_secs(49)),
        ..limits
    };
    g.observe(&sent, &limits).await;
    assert_eq!(g.views().await[0].available, 11_000.0);
}

#[tokio::test(start_paused = true)]
async fn a_shared_pause_holds_every_process() {
    let state = Arc::new(MemoryState::new());
    full(&state, TPM).await;
    let (a, b) = (governor(&state), governor(&state));
    a.pause("k", Duration::from_secs(2)).await;
    let refused = b
        .admit("k", TaskKind::Autocomplete, TPM, 10, 10, soon())
        .await
        .unwrap_err();
    assert!(refused.reason.contains("paused"));
    let started = Instant::now();
    b.admit(
        "k",
        TaskKind::Explain,
        TPM,
        10,
        10,
        started + Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(started.elapsed() >= Duration::from_secs(2));
}

/// How long `admit` waited on key "k" for `input` and `output` tokens (its
/// deadline, 30 s away, never cuts the wait in these tests).
async fn wait_for_admission(g: &Governor, kind: TaskKind, input: u64, output: u64) -> Duration {
    let started = Instant::now();
    g.admit(
        "k",
        kind,
        TPM,
        input,
        output,
        started + Duration::from_secs(30),
    )
    .await
    .unwrap();
    started.elapsed()
}

type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A team's shared state that can go away (a Redis stopped or cut off),
/// and whose clock takes `clock_takes` to answer (a busy Redis).
struct Reachable {
    inner: MemoryState,
    away: std::sync::atomic::AtomicBool,
    clock_takes: Duration,
}

impl Reachable {
    fn check(&self) -> Result<(), StateError> {
        match self.away.load(std::sync::atomic::Ordering::Relaxed) {
            true => Err(StateError {
                backend: "redis://team".into(),
                reason: "no answer within 1s".into(),
            }),
            false => Ok(()),
        }
    }
}

impl SharedState for Reachable {
    fn describe(&self) -> String {
        "redis://team".into()
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        ttl: Option<Duration>,
        update: switchyard_state::Update<'a>,
    ) -> Boxed<'a, Result<Option<switchyard_state::Json>, StateError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.update(key, ttl, update).await
        })
    }

    fn get<'a>(
        &'a self,
        key: &'a str,
    ) -> Boxed<'a, Result<Option<switchyard_state::Json>, StateError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.get(key).await
        })
    }

    fn now_ms(&self) -> Boxed<'_, Result<u64, StateError>> {
        Box::pin(async move {
            self.check()?;
            // The clock is read half-way: the question's way there, the
            // answer's way back.
            tokio::time::sleep(self.clock_takes / 2).await;
            let now = self.inner.now_ms().await;
            tokio::time::sleep(self.clock_takes / 2).await;
            now
        })
    }

    fn scan<'a>(
        &'a self,
        prefix: &'a str,
    ) -> Boxed<'a, Result<Vec<(String, switchyard_state::Json)>, StateError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.scan(prefix).await
        })
    }

    fn try_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> Boxed<'a, Result<bool, StateError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.try_lease(key, holder, ttl).await
        })
    }

    fn release_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> Boxed<'a, Result<(), StateError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.release_lease(key, holder).await
        })
    }
}

/// Requests one process gets admitted over `span` on key "k", each settled
/// as soon as it is granted.
async fn admitted_over(g: &Governor, quota: Quota, span: Duration) -> usize {
    let ends = Instant::now() + span;
    let mut granted = 0;
    while Instant::now() < ends {
        let deadline = Instant::now() + Duration::from_millis(100);
        match g
            .admit("k", TaskKind::Explain, quota, 10, 10, deadline)
            .await
        {
            Ok(reservation) => {
                granted += 1;
                g.settle(reservation, None).await;
                // A busy process: ten requests a second at most.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(starved) => tokio::time::sleep(starved.wait.min(Duration::from_secs(1))).await,
        }
    }
    granted
}

/// Found by the soak: while Redis was stopped, every process sent
/// ungoverned, each taking the whole quota. Now the processes that answered
/// the last roll call split the quota they knew, and together stay under it.
#[tokio::test(start_paused = true)]
async fn while_the_state_is_away_each_process_governs_its_part_of_the_quota() {
    let state = Arc::new(Reachable {
        inner: MemoryState::new(),
        away: Default::default(),
        clock_takes: Duration::ZERO,
    });
    let processes: Vec<Governor> = (0..3)
        .map(|_| {
            Governor::new(
                state.clone(),
                GovernorConfig::default(),
                WhenUnavailable::Open,
            )
        })
        .collect();
    for _ in 0..2 {
        for process in &processes {
            process.fleet.roll_call(state.as_ref()).await;
        }
    }
    assert!(processes.iter().all(|p| p.fleet.members() == 3));
    state.away.store(true, std::sync::atomic::Ordering::Relaxed);
    let quota = Quota {
        requests_per_minute: Some(60),
        ..Quota::default()
    };
    let minute = Duration::from_secs(60);
    let (a, b, c) = tokio::join!(
        admitted_over(&processes[0], quota, minute),
        admitted_over(&processes[1], quota, minute),
        admitted_over(&processes[2], quota, minute),
    );
    let each = [a, b, c];
    let total: usize = each.iter().sum();
    assert!(
        total <= 60,
        "together they took {total} of a quota of 60 a minute: {each:?}"
    );
    assert!(
        each.iter().all(|n| *n >= 10),
        "each gets its part: {each:?}"
    );
}

/// With no quota configured, the own share governs by the limits learned
/// from headers; a pause makes the process read the entry again, and must
/// not make it forget them, or the state going away right after a 429
/// would leave the process sending ungoverned.
#[tokio::test(start_paused = true)]
async fn a_pause_keeps_the_learned_limits_for_when_the_state_goes_away() {
    let state = Arc::new(Reachable {
        inner: MemoryState::new(),
        away: Default::default(),
        clock_takes: Duration::ZERO,
    });
    let g = Governor::new(
        state.clone(),
        GovernorConfig::default(),
        WhenUnavailable::Open,
    );
    g.fleet.roll_call(state.as_ref()).await;
    let none = Quota::default();
    let sent = g
        .admit("k", TaskKind::Explain, none, 10, 10, soon())
        .await
        .unwrap();
    let limits = RateLimits {
        requests_limit: Some(60),
        requests_remaining: Some(60),
        ..RateLimits::default()
    };
    g.observe(&sent, &limits).await;
    g.settle(sent, None).await;
    g.pause("k", Duration::from_secs(1)).await;
    tokio::time::advance(Duration::from_secs(2)).await;
    state.away.store(true, std::sync::atomic::Ordering::Relaxed);
    let granted = admitted_over(&g, none, Duration::from_secs(60)).await;
    assert!(
        granted <= 61,
        "{granted} admitted in a minute against a learned limit of 60"
    );
}

/// Found by the soak: a request reached a provider 21 ms before the
/// `retry-after` it had sent ran out. A process read the pause's end
/// against the backend's clock, which is read half-way through its round
/// trip, and counted the rest from before the trip: the pause ended early
/// here by half a round trip, and a request that found that view fresh went.
#[tokio::test(start_paused = true)]
async fn a_shared_pause_never_ends_early_however_long_the_clock_takes() {
    let state = Arc::new(Reachable {
        inner: MemoryState::new(),
        away: Default::default(),
        clock_takes: Duration::from_millis(30),
    });
    let (a, b) = (
        Governor::new(
            state.clone(),
            GovernorConfig::default(),
            WhenUnavailable::Open,
        ),
        Governor::new(
            state.clone(),
            GovernorConfig::default(),
            WhenUnavailable::Open,
        ),
    );
    let paused_at = Instant::now();
    a.pause("k", Duration::from_secs(2)).await;
    let ends = b.view("k").await.unwrap().pause_ends.expect("paused");
    assert!(
        ends >= paused_at + Duration::from_secs(2),
        "the pause ends {:?} early here",
        (paused_at + Duration::from_secs(2)) - ends
    );
}
