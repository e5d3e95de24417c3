//! The retry policy and the hedge combinator on their own: the policy is a
//! decision over facts (no router, no shared state), and the race works
//! over any two attempts (plain futures here, not the pipeline).

use std::sync::Mutex;

use super::*;
use crate::attempt::{Failed, Failure};
use crate::beacon::Outcome;
use crate::hedge::{self, HedgeRan, Side};
use crate::request::Progress;
use crate::retry::{self, Decision, Facts, Then};
use switchyard_resilience::backoff::BackoffConfig;
use switchyard_resilience::classify::{ErrorClass, Fatal};

fn failed(class: ErrorClass) -> Failed {
    Failed::new("HTTP 503".into(), Outcome::Failed, Some(class))
}

fn facts() -> Facts<'static> {
    Facts {
        retry: 0,
        was_probe: false,
        interactive: false,
        alternative: false,
        room_to_wait: Duration::from_secs(600),
        provider: "anthropic",
    }
}

fn decide(failed: Failed, facts: Facts<'_>) -> Decision {
    retry::decide(&BackoffConfig::default(), failed, facts)
}

#[test]
fn a_transient_failure_is_retried_within_the_room_to_wait() {
    let decision = decide(failed(ErrorClass::Transient), facts());
    assert!(matches!(decision.then, Then::Retry(d) if d <= Duration::from_secs(1)));
    assert_eq!(decision.pause_quota, None);
    let cramped = Facts {
        room_to_wait: Duration::ZERO,
        ..facts()
    };
    let Then::Later(why) = decide(failed(ErrorClass::Transient), cramped).then else {
        panic!("no room to wait must hand on, parkable");
    };
    assert!(why.reason.contains("wait budget"), "{}", why.reason);
}

#[test]
fn a_rate_limit_pauses_the_quota_even_when_no_retry_follows() {
    let probe = Facts {
        was_probe: true,
        ..facts()
    };
    let decision = decide(failed(ErrorClass::RateLimit), probe);
    assert!(decision.pause_quota.is_some());
    assert!(matches!(decision.then, Then::Later(f) if f.reason.contains("recovery probe")));
}

/// Found by the soak: a 529 with `retry-after` sent interactive work on
/// to the next entry at once and paused nothing, so every other request,
/// in this process and the others, kept reaching the overloaded provider
/// before the time it named.
#[test]
fn a_retry_after_pauses_the_entry_for_everyone_even_when_this_request_moves_on() {
    let interactive = Facts {
        interactive: true,
        alternative: true,
        ..facts()
    };
    for class in [
        ErrorClass::Overloaded,
        ErrorClass::Transient,
        ErrorClass::RateLimit,
    ] {
        let said = Failed {
            retry_after: Some(Duration::from_secs(2)),
            ..failed(class.clone())
        };
        let decision = decide(said, interactive);
        assert_eq!(
            decision.pause_quota,
            Some(Duration::from_secs(2)),
            "{class:?}"
        );
    }
    let silent = decide(failed(ErrorClass::Overloaded), interactive);
    assert_eq!(
        silent.pause_quota, None,
        "an overload that names no time pauses no one"
    );
}

#[test]
fn interactive_work_moves_on_where_batch_work_waits() {
    let interactive = Facts {
        interactive: true,
        alternative: true,
        ..facts()
    };
    let overloaded = decide(failed(ErrorClass::Overloaded), interactive);
    assert!(matches!(overloaded.then, Then::MoveOn(f) if f.reason.contains("at once")));
    let second = Facts {
        retry: 1,
        ..interactive
    };
    let transient = decide(failed(ErrorClass::Transient), second);
    assert!(matches!(transient.then, Then::MoveOn(f) if f.reason.contains("one retry")));
    let batch = decide(failed(ErrorClass::Overloaded), facts());
    assert!(matches!(batch.then, Then::Retry(_)));
}

#[test]
fn slow_or_part_answered_entries_and_fatal_errors_never_retry() {
    let slow = Failed {
        slow: true,
        ..failed(ErrorClass::Transient)
    };
    assert!(matches!(decide(slow, facts()).then, Then::MoveOn(_)));
    let partial = Failed {
        partial: "half an answer".into(),
        ..failed(ErrorClass::Transient)
    };
    assert!(matches!(decide(partial, facts()).then, Then::MoveOn(_)));
    let auth = decide(failed(ErrorClass::Fatal(Fatal::Auth)), facts());
    assert!(matches!(auth.then, Then::MoveOn(f) if f.reason.len() > "HTTP 503".len()));
}

/// An attempt that shows text after `first_text`, then answers.
async fn attempt(
    name: &'static str,
    first_text: Duration,
    side: hedge::Contender<'_>,
) -> Result<&'static str, Failure> {
    side.forward(Progress::Trying {
        entry: ModelRef::new(name, "m"),
        tier: Tier::Large,
    });
    tokio::select! {
        _ = side.cancel.cancelled() => return Err(Failure::Cancelled),
        _ = tokio::time::sleep(first_text) => {}
    }
    side.forward(Progress::Delta(name.into()));
    tokio::select! {
        _ = side.cancel.cancelled() => Err(Failure::Cancelled),
        _ = tokio::time::sleep(Duration::from_millis(10)) => Ok(name),
    }
}

/// Races two plain attempts; what the front end heard.
async fn race(
    primary: u64,
    hedge: u64,
) -> (
    (Result<&'static str, Failure>, Side, HedgeRan),
    Vec<Progress>,
) {
    let heard = Mutex::new(Vec::new());
    let progress = |event| heard.lock().unwrap().push(event);
    let outcome = hedge::race(
        Duration::from_secs(1),
        &CancellationToken::new(),
        &progress,
        |side| attempt("primary", Duration::from_millis(primary), side),
        |side| attempt("hedge", Duration::from_millis(hedge), side),
    )
    .await;
    (outcome, heard.into_inner().unwrap())
}

fn names(heard: &[Progress]) -> Vec<String> {
    heard
        .iter()
        .map(|event| match event {
            Progress::Trying { entry, .. } => format!("trying {}", entry.provider),
            Progress::Delta(text) => text.clone(),
            Progress::Received { chars } => format!("{chars} chars"),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_primary_in_time_is_never_hedged() {
    let ((result, side, ran), heard) = race(500, 100).await;
    assert!(matches!(
        (result, side, ran),
        (Ok("primary"), Side::Primary, HedgeRan::No)
    ));
    assert_eq!(names(&heard), ["trying primary", "primary"]);
}

#[tokio::test(start_paused = true)]
async fn a_faster_hedge_wins_and_the_front_end_hears_only_it() {
    // The primary shows text at 3 s; the hedge starts at 1 s and shows text at 1.2 s.
    let ((result, side, ran), heard) = race(3_000, 200).await;
    assert!(matches!(
        (result, side, ran),
        (Ok("hedge"), Side::Hedge, HedgeRan::Yes)
    ));
    assert_eq!(names(&heard), ["trying hedge", "hedge"]);
}

#[tokio::test(start_paused = true)]
async fn a_slow_primary_still_wins_when_it_shows_text_before_the_hedge() {
    // Past the ceiling, but its text comes at 1.1 s, before the hedge's at 1.5 s.
    let ((result, side, ran), heard) = race(1_100, 500).await;
    assert!(matches!(result, Ok("primary")));
    assert!(matches!(side, Side::Primary));
    assert!(!ran.tried(), "a hedge cancelled for losing was not tried");
    assert_eq!(names(&heard), ["trying primary", "primary"]);
}
