//! The user says no while a task runs: local-only mode (or a path rule) put
//! in force after the task began stops its every further remote attempt, the
//! hedge, a retry, a failover and a rescue alike, whichever router the task
//! runs on. Counted where it matters: the requests the providers receive.

use super::*;
use switchyard_privacy::rules::{InForce, LocalOnlyRules};

/// What a task meets, and when the user says no.
struct Road {
    name: &'static str,
    kind: TaskKind,
    /// The medium tier's entries, of `primary` and `secondary`.
    chain: &'static [&'static str],
    primary: Behaviour,
    said_no_at: Duration,
    /// The rule put in force: local-only mode, else a path rule for the document.
    path_rule: bool,
    /// The primary's own answer still comes (it was asked before).
    primary_answers: bool,
}

fn roads() -> Vec<Road> {
    let road = |name, kind, chain, primary, said_no_at: u64| Road {
        name,
        kind,
        chain,
        primary,
        said_no_at: Duration::from_millis(said_no_at),
        path_rule: false,
        primary_answers: false,
    };
    let both: &[&str] = &["primary/m", "secondary/m"];
    let slow = Behaviour::Answer {
        first_token: Duration::from_secs(15),
        reason: FinishReason::EndTurn,
    };
    let never = Behaviour::Answer {
        first_token: Duration::from_secs(600),
        reason: FinishReason::EndTurn,
    };
    vec![
        // Hedged at the 10 s first-token ceiling, after the user said no.
        Road {
            primary_answers: true,
            ..road("the hedge", TaskKind::Explain, both, slow, 2_000)
        },
        road(
            "a retry after a 529 with retry-after",
            TaskKind::Explain,
            &["primary/m"],
            fail_with(529, "overloaded_error", Some(5)),
            1_000,
        ),
        // A refactor is not hedged: its first-token ceiling moves it on.
        road("a failover", TaskKind::Refactor, both, never, 1_000),
        road(
            "a mid-stream rescue",
            TaskKind::Explain,
            both,
            Behaviour::Stall("half an answer "),
            100,
        ),
        Road {
            path_rule: true,
            ..road(
                "a rescue, a path rule added",
                TaskKind::Explain,
                both,
                Behaviour::Stall("half an answer "),
                100,
            )
        },
    ]
}

/// Puts the road's rule in force, as the core does on the user's word.
fn say_no(router: &Router, path_rule: bool) {
    router.rules.change(|now| {
        if !path_rule {
            return InForce {
                local_only: Some("local-only mode is on".into()),
                documents: now.documents.clone(),
            };
        }
        let privacy = switchyard_config::PrivacyConfig {
            local_only_paths: vec!["src/**".into()],
            ..Default::default()
        };
        InForce {
            local_only: None,
            documents: Arc::new(LocalOnlyRules::new(&privacy, &[]).0),
        }
    });
}

#[tokio::test(start_paused = true)]
async fn nothing_is_sent_after_the_user_says_no() {
    for road in roads() {
        let primary = Scripted::new("primary", vec![road.primary.clone()], road.primary.clone());
        let secondary = Scripted::new("secondary", vec![], ok());
        let mut config = chains(&[], road.chain);
        config.tasks.refactor.tier = Tier::Medium;
        config.tasks.refactor.first_token_ms = 5_000;
        let router = router(config, &[&primary, &secondary]);
        let origin = Origin {
            document: Some("/w/src/a.rs".into()),
            ..Origin::default()
        };
        let task = TaskRequest {
            origin,
            ..request(road.kind)
        };
        let (result, said_no_at) = tokio::join!(run(&router, task), async {
            tokio::time::sleep(road.said_no_at).await;
            say_no(&router, road.path_rule);
            Instant::now()
        });

        let name = road.name;
        let arrivals = [primary.arrivals(false), secondary.arrivals(false)].concat();
        let after = arrivals.iter().filter(|at| **at >= said_no_at).count();
        assert_eq!(after, 0, "{name}: {after} requests after the user said no");
        assert_eq!(primary.calls(), 1, "{name}");
        match result {
            Ok(answer) if road.primary_answers => {
                assert_eq!(answer.route.provider, "primary", "{name}");
                let hedge = &answer.attempts[0];
                assert!(
                    hedge.outcome.starts_with("not sent: local-only"),
                    "{name}: {hedge}"
                );
            }
            Err(RouteError::StoppedByRule { rule, partial, .. }) if !road.primary_answers => {
                let expected = if road.path_rule {
                    "src/**"
                } else {
                    "local-only mode is on"
                };
                assert!(rule.contains(expected), "{name}: {rule}");
                let streamed = matches!(road.primary, Behaviour::Stall(_));
                assert_eq!(partial.is_empty(), !streamed, "{name}: {partial:?}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_answer_says_why_it_stopped() {
    let primary = Scripted::new("primary", vec![], Behaviour::Stall("half an answer "));
    let secondary = Scripted::new("secondary", vec![], ok());
    let router = router(
        chains(&[], &["primary/m", "secondary/m"]),
        &[&primary, &secondary],
    );
    let (result, ()) = tokio::join!(run(&router, explain()), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        say_no(&router, false);
    });
    let message = result.unwrap_err().to_string();
    assert_eq!(
        message,
        "local-only mode is on (since this task began): nothing more of it was sent to a \
         remote model, and its answer stops after the 15 characters that had come"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_to_retry_ends_when_the_user_says_no() {
    let rate_limited = fail_with(429, "rate_limit_error", Some(5));
    let primary = Scripted::new("primary", vec![rate_limited], ok());
    let router = router(chains(&[], &["primary/m"]), &[&primary]);
    let ((result, ended), said_no_at) = tokio::join!(
        async { (run(&router, explain()).await, Instant::now()) },
        async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            say_no(&router, false);
            Instant::now()
        }
    );
    assert!(
        matches!(result, Err(RouteError::StoppedByRule { .. })),
        "{result:?}"
    );
    assert_eq!(
        ended, said_no_at,
        "the user waits for nothing once they said no"
    );
    assert_eq!(primary.calls(), 1);
}

/// What a provider may do with a request, for the property below.
fn fault(which: usize) -> Behaviour {
    match which {
        0 => ok(),
        1 => Behaviour::Answer {
            first_token: Duration::from_secs(15),
            reason: FinishReason::EndTurn,
        },
        2 => fail_with(529, "overloaded_error", Some(3)),
        3 => fail_with(429, "rate_limit_error", None),
        4 => Behaviour::Fail(500),
        5 => Behaviour::Stall("half an answer "),
        _ => Behaviour::Cut("half an answer "),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Whatever the providers do, whichever the task, whenever the user says
    /// no: no provider is called after it (counted as each call is made; the
    /// paused clock runs on one thread, so the count taken as the rules
    /// change is exact).
    #[test]
    fn no_attempt_is_made_after_the_user_says_no(
        primary_faults in proptest::collection::vec(0..7usize, 1..4),
        secondary_fault in 0..7usize,
        said_no_ms in 0u64..20_000,
        refactor: bool,
        path_rule: bool,
    ) {
        paused_clock().block_on(async {
            let script: Vec<Behaviour> = primary_faults.iter().map(|f| fault(*f)).collect();
            let primary = Scripted::new("primary", script, ok());
            let secondary = Scripted::new("secondary", vec![fault(secondary_fault)], ok());
            let mut config = chains(&[], &["primary/m", "secondary/m"]);
            config.tasks.refactor.tier = Tier::Medium;
            let router = router(config, &[&primary, &secondary]);
            let origin = Origin { document: Some("/w/src/a.rs".into()), ..Origin::default() };
            let kind = if refactor { TaskKind::Refactor } else { TaskKind::Explain };
            let task = TaskRequest { origin, ..request(kind) };
            let (result, calls_then) = tokio::join!(run(&router, task), async {
                tokio::time::sleep(Duration::from_millis(said_no_ms)).await;
                say_no(&router, path_rule);
                primary.calls() + secondary.calls()
            });
            let calls = primary.calls() + secondary.calls();
            proptest::prop_assert_eq!(calls, calls_then, "{:?}", result);
            Ok(())
        })?;
    }
}
