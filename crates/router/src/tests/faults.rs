//! The fault scenarios' promises about time (tests/faults.rs runs the same
//! faults through the binary and checks outcomes and order), on the paused
//! clock at their real lengths: backoff spacing and its budget, the idle
//! ceiling, moving on without a wait, canary spacing and recovery, and a
//! breaker trip waking the requests that wait on it. The retry-after wait,
//! the transient retry, the overloaded hand-over and the hedge at the
//! first-token ceiling are in routing.rs.

use super::*;

/// Jitter draws from the test thread's generator: seeded, a run is the same every time.
fn seeded() {
    fastrand::seed(32);
}

fn gaps(arrivals: &[Instant]) -> Vec<Duration> {
    arrivals.windows(2).map(|w| w[1] - w[0]).collect()
}

fn primary_then_secondary() -> Config {
    chains(&[], &["primary/m", "secondary/m"])
}

// s02: a 429 without retry-after, every time. An explain waits for one
// retry, then moves on; a refactor keeps backing off, exponentially.
#[tokio::test(start_paused = true)]
async fn a_persistent_rate_limit_retries_an_explain_once_then_fails_over() {
    seeded();
    let primary = Scripted::new("primary", vec![], fail_with(429, "rate_limit_error", None));
    let secondary = Scripted::new("secondary", vec![], ok());
    let mut config = primary_then_secondary();
    config.tasks.explain.hedge = false;
    let base = Duration::from_millis(config.resilience.backoff.rate_limit_ms);
    let router = configured(config, &[&primary, &secondary]);

    let answer = run(&router, explain()).await.unwrap();

    assert_eq!(answer.route.provider, "secondary");
    let tried = primary.arrivals(false);
    assert_eq!(tried.len(), 2, "one retry: {tried:?}");
    let wait = tried[1] - tried[0];
    assert!(wait >= base / 2 && wait <= base, "{wait:?}");
    assert!(secondary.arrivals(false)[0] >= tried[1]);
}

#[tokio::test(start_paused = true)]
async fn a_persistent_rate_limit_backs_a_refactor_off_exponentially_within_its_wait_budget() {
    seeded();
    let primary = Scripted::new("primary", vec![], fail_with(429, "rate_limit_error", None));
    let secondary = Scripted::new("secondary", vec![], ok());
    let mut config = chains(&["primary/m", "secondary/m"], &[]);
    config.tasks.refactor.wait_ms = 30_000;
    let backoff = config.resilience.backoff.clone();
    let router = configured(config, &[&primary, &secondary]);

    let answer = run(&router, request(TaskKind::Refactor)).await.unwrap();

    assert_eq!(answer.route.provider, "secondary");
    let tried = primary.arrivals(false);
    assert!(tried.len() >= 4, "several retries: {tried:?}");
    let waits = gaps(&tried);
    for (retry, wait) in waits.iter().enumerate() {
        let ceiling = (Duration::from_millis(backoff.rate_limit_ms) * (1 << retry))
            .min(Duration::from_millis(backoff.cap_ms));
        assert!(
            *wait >= ceiling / 2 && *wait <= ceiling,
            "wait {retry} was {wait:?}, outside [{:?}, {ceiling:?}]: {waits:?}",
            ceiling / 2
        );
    }
    assert!(
        waits.iter().sum::<Duration>() <= Duration::from_secs(30),
        "{waits:?}"
    );
    assert!(
        secondary.arrivals(false)[0] >= *tried.last().unwrap(),
        "failed over only after the primary gave up"
    );
}

// s09: two deltas, then silence with the connection open.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_is_abandoned_at_the_idle_ceiling_and_continued() {
    let primary = Scripted::new("primary", vec![], Behaviour::Stall("fn renamed("));
    let mut fallback = Scripted::new("fallback", vec![], ok());
    Arc::get_mut(&mut fallback).unwrap().prefill = true;
    let config = chains(&[], &["primary/m", "fallback/m"]);
    let idle = config.tasks.explain.idle_ceiling();
    let router = router(config, &[&primary, &fallback]);

    let answer = run(&router, explain()).await.unwrap();

    assert_eq!(answer.text, "fn renamed(answer from fallback");
    let detected = fallback.arrivals(false)[0] - primary.arrivals(false)[0];
    assert_eq!(detected, idle, "the stall is declared at the idle ceiling");
    assert_eq!(primary.calls(), 1, "no retry once text has flowed");
}

// s12: a 400 context length.
#[tokio::test(start_paused = true)]
async fn context_length_moves_to_the_next_entry_without_a_wait() {
    let primary = Scripted::new(
        "primary",
        vec![],
        fail_with(400, "context_length_exceeded", None),
    );
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(primary_then_secondary(), &[&primary, &secondary]);

    let answer = run(&router, explain()).await.unwrap();

    assert_eq!(answer.route.provider, "secondary");
    assert_eq!(primary.calls(), 1, "never retried");
    assert_eq!(secondary.arrivals(false)[0], primary.arrivals(false)[0]);
}

// s15: down for 60 s, a request every 4 s for 80 s, canaries every 10 s.
#[tokio::test(start_paused = true)]
async fn an_outage_keeps_users_off_the_primary_and_a_canary_brings_it_back() {
    let primary = Scripted::new("primary", vec![], Behaviour::Fail(503));
    let secondary = Scripted::new("secondary", vec![], ok());
    let mut config = primary_then_secondary();
    config.resilience.breaker.failures = 3;
    let canary_every = Duration::from_millis(config.resilience.canary_interval_ms);
    let router = Arc::new(configured(config, &[&primary, &secondary]));
    let upkept = router.clone();
    let upkeep = tokio::spawn(canary::upkeep(
        move || upkept.clone(),
        None::<tokio::sync::watch::Receiver<()>>,
        |_| {},
    ));
    let start = Instant::now();
    let every = Duration::from_secs(4);
    let recovered = start + every * 15;

    for request in 0..20u32 {
        tokio::time::sleep_until(start + every * request).await;
        if request == 15 {
            primary.set_otherwise(ok());
        }
        run(&router, explain()).await.unwrap();
    }
    upkeep.abort();

    let users = primary.arrivals(false);
    assert!(
        users
            .iter()
            .filter(|at| **at < recovered)
            .all(|at| *at == start),
        "only the first request met the outage: {:?}",
        users.iter().map(|at| *at - start).collect::<Vec<_>>()
    );
    let canaries: Vec<Instant> = primary
        .arrivals(true)
        .into_iter()
        .filter(|at| *at < recovered)
        .collect();
    assert!(canaries.len() >= 4, "{canaries:?}");
    assert!(
        gaps(&canaries).iter().all(|gap| *gap >= canary_every),
        "canaries closer than their interval: {:?}",
        gaps(&canaries)
    );
    let back = users
        .iter()
        .find(|at| **at >= recovered)
        .expect("the primary serves users again");
    assert!(
        *back - recovered <= canary_every + every,
        "back {:?} after recovering",
        *back - recovered
    );
}

// s17: two requests meet a 500 at once; the second's failure opens the breaker.
#[tokio::test(start_paused = true)]
async fn a_breaker_trip_wakes_the_requests_waiting_to_retry_that_entry() {
    let primary = Scripted::new("primary", vec![], Behaviour::Fail(500));
    let secondary = Scripted::new("secondary", vec![], ok());
    let mut config = primary_then_secondary();
    config.resilience.breaker.failures = 2;
    config.resilience.backoff.transient_ms = 8_000;
    config.resilience.backoff.cap_ms = 32_000;
    config.tasks.explain.wait_ms = 32_000;
    config.tasks.explain.first_token_ms = 60_000;
    let router = configured(config, &[&primary, &secondary]);
    let started = Instant::now();

    let (first, second) = tokio::join!(run(&router, explain()), run(&router, explain()));

    for answer in [first.unwrap(), second.unwrap()] {
        assert_eq!(answer.route.provider, "secondary");
    }
    assert_eq!(primary.calls(), 2, "no retry after the trip");
    // On the paused clock, exactly the secondary's own first token, not a
    // backoff of at least 4 s.
    assert_eq!(started.elapsed(), Duration::from_millis(200));
}
