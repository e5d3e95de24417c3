//! How an entry out of user traffic comes back, and what keeps it out:
//! canaries and the half-open probe.

use super::*;

/// Found by the soak: canaries went to a provider whose `retry-after`
/// was still running (every process's pause held user traffic off it).
#[tokio::test(start_paused = true)]
async fn no_canary_goes_to_an_entry_paused_by_its_retry_after() {
    let primary = Scripted::new("primary", vec![], ok());
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "secondary/m"]),
        &[&primary, &secondary],
    );
    let key = router.key(&ModelRef::parse("primary/m").unwrap());
    let pause = Duration::from_secs(30);
    router
        .resilience()
        .governor
        .pause(&key.quota_key(), pause)
        .await;
    let calls = primary.calls();
    let canaries = router.canary_round(true).await;
    assert!(
        canaries.iter().all(|c| c.provider != "primary"),
        "{canaries:?}"
    );
    assert_eq!(primary.calls(), calls);
    tokio::time::advance(pause).await;
    let canaries = router.canary_round(true).await;
    assert!(
        canaries.iter().any(|c| c.provider == "primary"),
        "after the pause it is due again: {canaries:?}"
    );
}

/// Found by the soak: a canary met a 529 with `retry-after` and paused
/// nothing, so the next process's canary and a user request reached the
/// provider before the time it gave had run out.
#[tokio::test(start_paused = true)]
async fn a_retry_after_a_canary_hears_holds_every_process_off() {
    let primary = Scripted::new(
        "primary",
        vec![fail_with(529, "overloaded_error", Some(3))],
        ok(),
    );
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "secondary/m"]),
        &[&primary, &secondary],
    );
    let key = router.key(&ModelRef::parse("primary/m").unwrap());
    let canaries = router.canary_round(true).await;
    assert!(
        canaries.iter().any(|c| c.provider == "primary" && !c.ok),
        "{canaries:?}"
    );
    let paused = router.resilience().governor.paused_for(&key.quota_key());
    assert!(
        paused.is_some_and(|p| p > Duration::from_secs(2)),
        "the canary's retry-after pauses the entry: {paused:?}"
    );
    let calls = primary.calls();
    tokio::time::advance(Duration::from_secs(2)).await;
    router.canary_round(true).await;
    assert_eq!(primary.calls(), calls, "no canary inside the retry-after");
}

/// A recovery probe slower than its hedge is not left without a verdict
/// when the hedge answers first: the breaker opens again, and the next
/// request in the same half-open window does not probe a second time.
#[tokio::test(start_paused = true)]
async fn a_probe_that_loses_its_hedge_race_reopens_the_breaker() {
    let slow = Behaviour::Answer {
        first_token: Duration::from_secs(25),
        reason: FinishReason::EndTurn,
    };
    let primary = Scripted::new("primary", vec![fail_with(500, "api_error", None)], slow);
    let secondary = Scripted::new("secondary", vec![], ok());
    let mut config = chains(&[], &["primary/m", "secondary/m"]);
    config.resilience.breaker.failures = 1;
    config.resilience.breaker.cooldown_ms = 60_000;
    let router = router(config, &[&primary, &secondary]);
    let tripped = run(&router, explain()).await.unwrap();
    assert_eq!(tripped.route.provider, "secondary");
    tokio::time::advance(Duration::from_secs(60)).await;
    // Half-open: this request is the probe; its hedge answers first.
    let probed = run(&router, explain()).await.unwrap();
    assert_eq!(probed.route.provider, "secondary");
    assert_eq!(primary.calls(), 2, "the probe reached the primary");
    let next = run(&router, explain()).await.unwrap();
    assert_eq!(next.route.provider, "secondary");
    assert_eq!(
        primary.calls(),
        2,
        "a second probe in the same half-open window"
    );
}
