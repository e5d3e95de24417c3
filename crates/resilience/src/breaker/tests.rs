//! Unit tests of the shared circuit breakers on a paused clock.

use super::*;
use switchyard_state::memory::MemoryState;

const TTL: Duration = Duration::from_secs(30);
/// A breaker key `views` lists.
const K: &str = "breaker/k";

fn breakers(state: &Arc<MemoryState>) -> Breakers {
    Breakers::new(
        state.clone(),
        BreakerConfig::default(),
        WhenUnavailable::Open,
    )
}

async fn fail(b: &Breakers, key: &str, n: usize) {
    for _ in 0..n {
        let admission = b.admit(key, TTL).await;
        b.record(key, admission, false, "HTTP 503").await;
    }
}

#[tokio::test(start_paused = true)]
async fn opens_after_consecutive_failures_and_says_why() {
    let state = Arc::new(MemoryState::new());
    let b = breakers(&state);
    fail(&b, "k", 5).await;
    assert_eq!(b.admit("k", TTL).await, Admission::Closed);
    fail(&b, "k", 1).await;
    let (reason, retry_in) = refusal(b.admit("k", TTL).await);
    assert!(reason.contains("6 failures in a row"), "{reason}");
    assert_eq!(retry_in, Duration::from_secs(300));
}

#[tokio::test(start_paused = true)]
async fn opens_on_the_error_rate_over_the_window() {
    let state = Arc::new(MemoryState::new());
    let b = breakers(&state);
    for i in 0..10 {
        let admission = b.admit("k", TTL).await;
        b.record("k", admission, i % 2 == 0, "HTTP 500").await;
    }
    assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn old_failures_leave_the_window() {
    let state = Arc::new(MemoryState::new());
    let b = breakers(&state);
    for _ in 0..9 {
        let admission = b.admit("k", TTL).await;
        b.record("k", admission, false, "x").await;
        b.record("k", Admission::Closed, true, "").await;
        tokio::time::advance(Duration::from_secs(20)).await;
    }
    assert_eq!(b.admit("k", TTL).await, Admission::Closed);
}

#[tokio::test(start_paused = true)]
async fn one_probe_among_many_processes_and_its_verdict_is_for_all() {
    let state = Arc::new(MemoryState::new());
    let k = "breaker/acct/p/m".to_owned();
    let processes: Vec<_> = (0..4).map(|_| breakers(&state)).collect();
    fail(&processes[0], &k, 6).await;
    tokio::time::advance(Duration::from_secs(301)).await;
    let mut admissions = Vec::new();
    for b in &processes {
        for _ in 0..3 {
            admissions.push(b.admit(&k, TTL).await);
        }
    }
    let probes = admissions.iter().filter(|a| a.is_probe()).count();
    assert_eq!(probes, 1, "{admissions:?}");
    let at = admissions.iter().position(Admission::is_probe).unwrap();
    let probe = admissions.swap_remove(at);
    processes[at / 3].record(&k, probe, true, "").await;
    for b in &processes {
        assert_eq!(b.admit(&k, TTL).await, Admission::Closed);
    }
    assert_eq!(processes[0].views().await[0].recoveries, 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_for_another_cooldown_not_a_doubled_one() {
    let state = Arc::new(MemoryState::new());
    let b = breakers(&state);
    fail(&b, "k", 6).await;
    tokio::time::advance(Duration::from_secs(300)).await;
    let probe = b.admit("k", TTL).await;
    assert!(probe.is_probe());
    b.record("k", probe, false, "HTTP 503").await;
    let (reason, retry_in) = refusal(b.admit("k", TTL).await);
    assert!(reason.starts_with("probe failed"), "{reason}");
    assert_eq!(retry_in, Duration::from_secs(300));
}

/// B read the breaker as half-open just before A's probe failed and freed
/// the lease: B takes the free lease but must not probe a re-opened breaker.
#[tokio::test(start_paused = true)]
async fn a_lease_taken_after_a_failed_probe_is_not_a_probe() {
    let state = Arc::new(MemoryState::new());
    let (a, b) = (breakers(&state), breakers(&state));
    fail(&a, "k", 6).await;
    tokio::time::advance(Duration::from_secs(300)).await;
    let probe = a.admit("k", TTL).await;
    assert!(probe.is_probe());
    a.record("k", probe, false, "HTTP 503").await;
    let lease = Lease::claim(state.clone(), lease_key("k"), &b.holder);
    assert!(
        state
            .try_lease(&lease.key, &lease.holder, TTL)
            .await
            .unwrap()
    );
    assert!(matches!(
        b.confirm_probe("k", lease).await,
        Admission::Open { .. }
    ));
    assert!(
        state
            .try_lease(&lease_key("k"), "someone", TTL)
            .await
            .unwrap(),
        "the unused lease was given back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_crashed_probers_lease_expires() {
    let state = Arc::new(MemoryState::new());
    let (a, b) = (breakers(&state), breakers(&state));
    fail(&a, "k", 6).await;
    tokio::time::advance(Duration::from_secs(300)).await;
    let probe = a.admit("k", TTL).await;
    assert!(probe.is_probe());
    // Crashed: no verdict, and no destructor runs either.
    std::mem::forget(probe);
    drop(a);
    assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    assert!(b.admit("k", TTL).await.is_probe());
}

/// A holder paused past its lease (SIGSTOP, a long stall) wakes after
/// another process probed and re-tripped the breaker: its success is stale.
#[tokio::test(start_paused = true)]
async fn a_stale_probers_verdict_is_refused() {
    let state = Arc::new(MemoryState::new());
    let (a, b) = (breakers(&state), breakers(&state));
    fail(&a, K, 6).await;
    tokio::time::advance(Duration::from_secs(300)).await;
    let stale = a.admit(K, TTL).await;
    assert!(stale.is_probe());
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    let probe = b.admit(K, TTL).await;
    assert!(probe.is_probe(), "the lapsed lease is taken over");
    b.record(K, probe, false, "HTTP 503").await;
    a.record(K, stale, true, "").await;
    let (reason, _) = refusal(b.admit(K, TTL).await);
    assert!(reason.starts_with("probe failed"), "{reason}");
    let views = b.views().await;
    assert_eq!((views[0].phase, views[0].recoveries), (Phase::Open, 0));
    assert_eq!(views[0].stale_verdicts, 1);
}

/// The holder of the latest probe still decides, as before the fencing.
#[tokio::test(start_paused = true)]
async fn the_current_probers_verdict_closes_it() {
    let state = Arc::new(MemoryState::new());
    let (a, b) = (breakers(&state), breakers(&state));
    fail(&a, K, 6).await;
    tokio::time::advance(Duration::from_secs(300)).await;
    let first = a.admit(K, TTL).await;
    a.record(K, first, false, "HTTP 503").await;
    tokio::time::advance(Duration::from_secs(300)).await;
    let probe = b.admit(K, TTL).await;
    assert!(probe.is_probe());
    b.record(K, probe, true, "").await;
    assert_eq!(a.admit(K, TTL).await, Admission::Closed);
    let views = a.views().await;
    assert_eq!((views[0].recoveries, views[0].stale_verdicts), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_probe_gives_its_lease_back_at_once() {
    let state = Arc::new(MemoryState::new());
    let (a, b) = (breakers(&state), breakers(&state));
    fail(&a, "k", 6).await;
    tokio::time::advance(Duration::from_secs(300)).await;
    let probe = a.admit("k", TTL).await;
    assert!(probe.is_probe());
    assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
    drop(probe); // the request was cancelled before its verdict
    tokio::task::yield_now().await;
    assert!(b.admit("k", TTL).await.is_probe(), "no wait for the TTL");
}

#[tokio::test(start_paused = true)]
async fn a_trip_in_another_process_takes_effect_within_the_view_ttl() {
    let state = Arc::new(MemoryState::new());
    let (a, b) = (breakers(&state), breakers(&state));
    assert_eq!(b.admit("k", TTL).await, Admission::Closed);
    fail(&a, "k", 6).await;
    tokio::time::advance(VIEW_TTL).await;
    assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn late_answers_do_not_move_an_open_breaker() {
    let state = Arc::new(MemoryState::new());
    let b = breakers(&state);
    fail(&b, "k", 6).await;
    b.record("k", Admission::Closed, true, "").await;
    assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn views_show_every_breaker() {
    let state = Arc::new(MemoryState::new());
    let b = breakers(&state);
    fail(&b, "breaker/acct/anthropic/m", 6).await;
    let views = b.views().await;
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].key, "acct/anthropic/m");
    assert_eq!(views[0].phase, Phase::Open);
    assert_eq!(views[0].open_for_ms, 300_000);
}

#[test]
fn a_record_written_before_the_fencing_token_still_decodes() {
    let old = serde_json::json!({
        "open": true, "consecutive": 6, "window": [], "open_until": 9,
        "trips": 1, "reason": "x", "total_trips": 1, "recoveries": 0,
    });
    let record = decode(Some(old));
    assert!(record.open);
    assert_eq!((record.probe_token, record.stale_verdicts), (0, 0));
}

/// The reason and the wait of an open breaker's refusal.
fn refusal(admission: Admission) -> (String, Duration) {
    match admission {
        Admission::Open { reason, retry_in } => (reason, retry_in),
        other => panic!("expected an open breaker, got {other:?}"),
    }
}
