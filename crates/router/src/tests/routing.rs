//! Failover, downshift, hedging and retry: which entry serves, and when it is tried again.

use super::*;

#[tokio::test(start_paused = true)]
async fn silent_degradation_costs_one_request_and_the_next_ones_skip_the_primary() {
    let primary = Scripted::new("primary", vec![], silently_degraded());
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "secondary/m"]),
        &[&primary, &secondary],
    );
    // The first request pays the ceiling (hedged) and judges the primary slow.
    let first = run(&router, explain()).await.unwrap();
    assert_eq!(first.route.provider, "secondary");
    for _ in 0..3 {
        let answer = run(&router, explain()).await.unwrap();
        assert_eq!(answer.route.provider, "secondary");
        assert!(
            answer.attempts[0].outcome.contains("skipped: slow"),
            "{:?}",
            answer.attempts
        );
        // The route says why traffic left the primary, within the tier too.
        let reason = answer.route.reason.unwrap_or_default();
        assert!(reason.contains("primary/m: skipped: slow"), "{reason}");
    }
    assert_eq!(
        primary.calls(),
        1,
        "only the first request tried the primary"
    );
    let health = router.status().health;
    let primary_health = health.iter().find(|h| h.provider == "primary").unwrap();
    assert_eq!(primary_health.state, status::HealthState::Unhealthy);
}

#[tokio::test(start_paused = true)]
async fn a_tier_with_nothing_healthy_downshifts_and_says_why() {
    let big = Scripted::new("big", vec![], Behaviour::Fail(529));
    let mid = Scripted::new("mid", vec![], ok());
    let router = router(chains(&["big/l"], &["mid/m"]), &[&big, &mid]);
    let answer = run(&router, request(TaskKind::Refactor)).await.unwrap();
    assert_eq!(
        (answer.route.provider.as_str(), answer.route.tier),
        ("mid", Tier::Medium)
    );
    assert_eq!(answer.route.downshifted_from, Some(Tier::Large));
    assert!(
        answer.route.reason.as_deref().unwrap().contains("HTTP 529"),
        "{:?}",
        answer.route.reason
    );
    let status = router.status();
    assert_eq!(status.downshifted_from, Some(Tier::Large));
}

#[tokio::test(start_paused = true)]
async fn when_nothing_is_healthy_the_error_lists_what_was_tried() {
    let a = Scripted::new("a", vec![], Behaviour::Fail(503));
    let b = Scripted::new(
        "b",
        vec![],
        Behaviour::Answer {
            first_token: Duration::from_millis(10),
            reason: FinishReason::MaxTokens,
        },
    );
    let router = router(chains(&["a/x"], &["b/y"]), &[&a, &b]);
    let err = run(&router, request(TaskKind::Refactor))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("a/x (large): HTTP 503"), "{err}");
    assert!(err.contains("b/y (medium): answer cut short"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_verdict_outlives_its_samples_and_only_a_canary_ends_it() {
    let primary = Scripted::new("primary", vec![silently_degraded()], ok());
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "secondary/m"]),
        &[&primary, &secondary],
    );
    run(&router, explain()).await.unwrap();
    // Long after its samples left the window, the primary stays skipped.
    tokio::time::advance(beacon::WINDOW * 3).await;
    let answer = run(&router, explain()).await.unwrap();
    assert_eq!(answer.route.provider, "secondary");
    assert_eq!(primary.calls(), 1);
    // A canary finds it healthy: that alone neither routes nor tells anyone...
    let canaries = router.canary_round(false).await;
    assert!(
        canaries.iter().any(|c| c.provider == "primary" && c.ok),
        "{canaries:?}"
    );
    assert_eq!(router.status().provider.as_deref(), Some("secondary"));
    // ...but the next request is the primary's again.
    let answer = run(&router, explain()).await.unwrap();
    assert_eq!(answer.route.provider, "primary");
    assert_eq!(router.status().provider.as_deref(), Some("primary"));
}

#[tokio::test(start_paused = true)]
async fn local_only_refuses_refactors_with_a_clear_message() {
    let a = Scripted::new("a", vec![], ok());
    let config = Config {
        local_only: true,
        ..chains(&["a/x"], &[])
    };
    let router = router(config, &[&a]);
    let err = run(&router, request(TaskKind::Refactor)).await.unwrap_err();
    assert!(matches!(err, RouteError::LocalOnly(_)));
    assert!(err.to_string().contains("switchyard.toggleLocalOnly"));
    assert_eq!(a.calls(), 0);
    assert!(router.status().local_only);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_task_stops_without_trying_further_entries() {
    let slow = Scripted::new("slow", vec![], ok());
    let router = router(chains(&[], &["slow/m"]), &[&slow]);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let err = router.run(explain(), cancel, &|_| {}).await.unwrap_err();
    assert!(matches!(err, RouteError::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn a_transient_error_is_retried_once_on_the_same_entry() {
    let primary = Scripted::new("primary", vec![Behaviour::Fail(500)], ok());
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "secondary/m"]),
        &[&primary, &secondary],
    );
    let answer = run(&router, explain()).await.unwrap();
    assert_eq!(answer.route.provider, "primary");
    assert_eq!((primary.calls(), secondary.calls()), (2, 0));
    // Full jitter on a 1 s base: the retry came within a second.
    let seen = primary.seen.lock().unwrap();
    assert!(seen[1].0 - seen[0].0 <= Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_waited_out_before_the_one_retry() {
    let primary = Scripted::new(
        "primary",
        vec![fail_with(429, "rate_limit_error", Some(2))],
        ok(),
    );
    let router = router(chains(&[], &["primary/m"]), &[&primary]);
    run(&router, explain()).await.unwrap();
    let seen = primary.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].0 - seen[0].0;
    assert!(
        gap >= Duration::from_secs(2) && gap <= Duration::from_millis(2_300),
        "{gap:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_entry_hands_an_interactive_request_to_the_next_at_once() {
    let primary = Scripted::new("primary", vec![], Behaviour::Fail(529));
    let secondary = Scripted::new("secondary", vec![], ok());
    let mut config = chains(&[], &["primary/m", "secondary/m"]);
    config.tasks.explain.hedge = false;
    let router = router(config, &[&primary, &secondary]);
    let started = Instant::now();
    let answer = run(&router, explain()).await.unwrap();
    assert_eq!(answer.route.provider, "secondary");
    assert_eq!(
        primary.calls(),
        1,
        "no same-entry retry while another can serve"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // And the next request does not start on the overloaded entry.
    run(&router, explain()).await.unwrap();
    assert_eq!(primary.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn persistent_overload_fails_a_refactor_over_once_the_wait_budget_is_spent() {
    let primary = Scripted::new("primary", vec![], Behaviour::Fail(503));
    let secondary = Scripted::new("secondary", vec![], ok());
    let mut config = chains(&["primary/m", "secondary/m"], &[]);
    config.tasks.refactor.wait_ms = 30_000;
    let router = router(config, &[&primary, &secondary]);
    let started = Instant::now();
    let answer = run(&router, request(TaskKind::Refactor)).await.unwrap();
    assert_eq!(answer.route.provider, "secondary");
    assert!(
        primary.calls() >= 2,
        "batch work keeps retrying within its budget"
    );
    assert!(
        started.elapsed() <= Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(
        answer.attempts[0].outcome.contains("wait budget"),
        "{:?}",
        answer.attempts
    );
}

#[tokio::test(start_paused = true)]
async fn a_late_first_token_is_hedged_and_the_first_answer_wins() {
    let slow = Behaviour::Answer {
        first_token: Duration::from_secs(25),
        reason: FinishReason::EndTurn,
    };
    let primary = Scripted::new("primary", vec![], slow);
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "secondary/m"]),
        &[&primary, &secondary],
    );
    let started = Instant::now();
    let seen = Mutex::new(Vec::new());
    let answer = router
        .run(explain(), CancellationToken::new(), &|e| {
            seen.lock().unwrap().push(e)
        })
        .await
        .unwrap();
    assert_eq!(answer.route.provider, "secondary");
    assert_eq!(answer.text, "answer from secondary");
    // Hedged at the 10 s first-token ceiling; the hedge answered 200 ms later.
    assert_eq!(started.elapsed(), Duration::from_millis(10_200));
    assert_eq!(
        (primary.calls(), secondary.calls()),
        (1, 1),
        "one hedge, no more"
    );
    assert!(
        answer.attempts[0].outcome.contains("hedge"),
        "{:?}",
        answer.attempts
    );
    // Only the winner's text and name reached the front end.
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter()
            .all(|e| !matches!(e, Progress::Trying { entry, .. } if entry.provider == "primary"))
    );
    let text: String = seen
        .iter()
        .filter_map(|e| match e {
            Progress::Delta(d) => Some(d.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "answer from secondary");
    // The beacon counts the primary as slow, so the next request skips it.
    let summary = router.beacons().summary(&ModelRef::new("primary", "m"));
    assert_eq!(summary.samples, 1);
    assert!(summary.p95_first_token.unwrap() >= Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn refactors_are_not_hedged() {
    let slow = Behaviour::Answer {
        first_token: Duration::from_secs(15),
        reason: FinishReason::EndTurn,
    };
    let primary = Scripted::new("primary", vec![], slow);
    let secondary = Scripted::new("secondary", vec![], ok());
    let mut config = chains(&["primary/m", "secondary/m"], &[]);
    config.tasks.refactor.first_token_ms = 20_000;
    let router = router(config, &[&primary, &secondary]);
    let answer = run(&router, request(TaskKind::Refactor)).await.unwrap();
    assert_eq!(answer.route.provider, "primary");
    assert_eq!(secondary.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn fatal_errors_never_retry_and_say_what_to_fix() {
    let primary = Scripted::new(
        "primary",
        vec![],
        fail_with(401, "authentication_error", None),
    );
    let long = Scripted::new("long", vec![], ok());
    let first = router(chains(&[], &["primary/m", "long/m"]), &[&primary, &long]);
    let answer = run(&first, explain()).await.unwrap();
    assert_eq!(primary.calls(), 1);
    assert!(
        answer.attempts[0]
            .outcome
            .contains("check the API key for `primary`"),
        "{:?}",
        answer.attempts
    );

    let short = Scripted::new(
        "short",
        vec![],
        fail_with(400, "context_length_exceeded", None),
    );
    let second = router(chains(&[], &["short/m", "long/m"]), &[&short, &long]);
    assert_eq!(
        run(&second, explain()).await.unwrap().route.provider,
        "long"
    );
    assert_eq!(
        short.calls(),
        1,
        "context length goes to the next (larger-context) entry"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_propagates_its_reason_without_trying_elsewhere() {
    let primary = Scripted::new("primary", vec![], fail_with(400, "content_filter", None));
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "secondary/m"]),
        &[&primary, &secondary],
    );
    let err = run(&router, explain()).await.unwrap_err();
    assert!(matches!(err, RouteError::Refused { .. }), "{err}");
    assert!(err.to_string().contains("content_filter"), "{err}");
    assert_eq!((primary.calls(), secondary.calls()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_cut_answer_is_continued_by_a_prefill_provider() {
    let primary = Scripted::new("primary", vec![], Behaviour::Cut("fn renamed("));
    let mut fallback = Scripted::new("fallback", vec![], ok());
    Arc::get_mut(&mut fallback).unwrap().prefill = true;
    let router = router(
        chains(&[], &["primary/m", "fallback/m"]),
        &[&primary, &fallback],
    );
    let answer = run(&router, explain()).await.unwrap();
    assert_eq!(primary.calls(), 1, "no retry once text has flowed");
    assert_eq!(answer.text, "fn renamed(answer from fallback");
    let seen = fallback.seen.lock().unwrap();
    let last = seen[0].1.last().unwrap();
    assert_eq!(
        (last.role, last.content.as_str()),
        (Role::Assistant, "fn renamed(")
    );
}

#[tokio::test(start_paused = true)]
async fn a_continuation_that_cannot_be_joined_gives_way_to_a_whole_answer_from_its_entry() {
    let primary = Scripted::new("primary", vec![], Behaviour::Cut("fn renamed("));
    // Answers the same whatever it is asked: no sign of where it goes on.
    let fallback = Scripted::new("fallback", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "fallback/m"]),
        &[&primary, &fallback],
    );
    let answer = run(&router, explain()).await.unwrap();
    assert_eq!(answer.text, "answer from fallback", "never the two joined");
    // The cut answer as the model's own turn, then the instruction to go on;
    // then the question alone.
    let seen = fallback.seen.lock().unwrap();
    let roles: Vec<Vec<Role>> = seen
        .iter()
        .map(|(_, m)| m.iter().map(|m| m.role).collect())
        .collect();
    assert_eq!(
        roles,
        [
            vec![Role::User, Role::Assistant, Role::User],
            vec![Role::User]
        ]
    );
    assert_eq!(seen[0].1[1].content, "fn renamed(");
    assert_eq!(
        seen[0].1[2].content,
        switchyard_base::prompts::CONTINUE_INSTRUCTION
    );
}

#[tokio::test(start_paused = true)]
async fn a_streamed_task_whose_continuation_cannot_be_joined_ends_with_the_cause() {
    let primary = Scripted::new("primary", vec![], Behaviour::Cut("fn renamed("));
    let fallback = Scripted::new("fallback", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "fallback/m"]),
        &[&primary, &fallback],
    );
    let request = TaskRequest {
        streamed: true,
        ..explain()
    };
    let err = run(&router, request).await.unwrap_err().to_string();
    assert!(
        err.contains("primary/m (medium): the stream was cut"),
        "{err}"
    );
    assert!(
        err.contains("fallback/m (medium): its continuation could not be joined"),
        "{err}"
    );
    assert_eq!(fallback.calls(), 1, "text already shown cannot be replaced");
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_is_shared_and_a_refactor_can_wait_for_it() {
    let resilience = Arc::new(Resilience::in_memory());
    let shared = |config: Config, providers: &[&Arc<Scripted>]| {
        sharing(config, providers, resilience.clone())
    };
    let down = Scripted::new("down", vec![], Behaviour::Fail(503));
    let first = shared(chains(&["down/m"], &[]), &[&down]);
    let err = run(&first, request(TaskKind::Refactor)).await.unwrap_err();
    assert!(
        matches!(
            err,
            RouteError::NothingHealthy {
                retry_later: true,
                ..
            }
        ),
        "{err}"
    );
    let calls = down.calls();
    assert_eq!(calls, 6, "the breaker opened after six failures in a row");

    // Another process (same shared state) does not call it at all.
    let second = shared(chains(&["down/m"], &[]), &[&down]);
    let err = run(&second, request(TaskKind::Refactor)).await.unwrap_err();
    assert!(err.to_string().contains("circuit open"), "{err}");
    assert_eq!(down.calls(), calls);
}

#[tokio::test(start_paused = true)]
async fn autocomplete_never_waits_to_retry() {
    let remote = Scripted::new("remote", vec![Behaviour::Fail(500)], ok());
    let mut config = chains(&[], &[]);
    config.autocomplete.chain = vec![
        switchyard_base::entry::ChainEntry::Remote(ModelRef::new("remote", "m")),
        switchyard_base::entry::ChainEntry::Local,
    ];
    let router = router(config, &[&remote]);
    let text = FimText {
        prefix: "fn a() {".into(),
        suffix: "}".into(),
        ..FimText::default()
    };
    let deadline = Instant::now() + Duration::from_millis(600);
    let served = router
        .autocomplete_remote(
            &text,
            ("file:///a.rs", None),
            deadline,
            &CancellationToken::new(),
        )
        .await;
    assert!(served.is_none());
    assert_eq!(remote.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_local_first_window_keeps_completions_local() {
    let remote = Scripted::new("remote", vec![], ok());
    let mut config = chains(&[], &[]);
    config.autocomplete.chain = vec![
        switchyard_base::entry::ChainEntry::Remote(ModelRef::new("remote", "m")),
        switchyard_base::entry::ChainEntry::Local,
    ];
    // Open since a minute ago, in the offset tests run with (UTC).
    let now = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    config.autocomplete.local_first = Some(switchyard_config::local_first::LocalFirstWindow {
        start: format!("{:02}:{:02}", now.hour(), now.minute()),
        minutes: 30,
    });
    let router = router(config, &[&remote]);
    let text = FimText {
        prefix: "fn a() {".into(),
        suffix: "}".into(),
        ..FimText::default()
    };
    let deadline = Instant::now() + Duration::from_millis(600);
    let served = router
        .autocomplete_remote(
            &text,
            ("file:///a.rs", None),
            deadline,
            &CancellationToken::new(),
        )
        .await;
    assert!(served.is_none());
    assert_eq!(remote.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_prompt_too_long_for_every_entry_is_trimmed_and_sent_again() {
    let too_long = fail_with(400, "context_length_exceeded", None);
    let primary = Scripted::new("primary", vec![too_long.clone(), too_long], ok());
    let first = router(chains(&[], &["primary/m"]), &[&primary]);
    let mut parts = PromptParts {
        language: "rust".into(),
        file_name: "a.rs".into(),
        before: "// context before\n".repeat(2_000),
        selection: "fn a() {}\n".into(),
        after: "// context after\n".repeat(2_000),
        instruction: "Explain.".into(),
    };
    let answer = run(
        &first,
        TaskRequest::new(TaskKind::Explain, "system", parts.clone()),
    )
    .await
    .unwrap();
    assert_eq!(answer.route.provider, "primary");
    let (sizes, kept_selection) = {
        let seen = primary.seen.lock().unwrap();
        let sizes: Vec<usize> = seen.iter().map(|(_, m)| m[0].content.len()).collect();
        let kept = seen.iter().all(|(_, m)| m[0].content.contains("fn a() {}"));
        (sizes, kept)
    };
    assert_eq!(
        sizes.len(),
        3,
        "two trimmed passes after the first: {sizes:?}"
    );
    assert!(sizes[0] > sizes[1] && sizes[1] > sizes[2], "{sizes:?}");
    assert!(kept_selection, "the selection is kept");

    // Nothing to trim around the selection: no pointless resend.
    parts.before.clear();
    parts.after.clear();
    let stuck = Scripted::new(
        "stuck",
        vec![],
        fail_with(400, "context_length_exceeded", None),
    );
    let second = router(chains(&[], &["stuck/m"]), &[&stuck]);
    let err = run(
        &second,
        TaskRequest::new(TaskKind::Explain, "system", parts),
    )
    .await;
    assert!(err.is_err());
    assert_eq!(stuck.calls(), 1);
}
