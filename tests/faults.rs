//! Provider faults (issue #7): each scenario runs through the gateway (whole
//! answers and streaming) AND the language server's explain command, each
//! against its own fake providers, and asserts the outcome the caller sees AND
//! the conduct the fake saw (attempt count and spacing).
//!
//! The default profile scales ceilings, backoff and the faults' waits down
//! together; `FAULTS_FULL=1 cargo test --test faults` runs the real lengths
//! (see `support::scenario::Profile` and docs/HOSTILE.md). Through the binary
//! a scenario checks who answered, how many requests each fake saw and in
//! which order; a promise not to act early is a lower bound. How soon each
//! thing happens (backoff ceilings and jitter, the idle ceiling, moving on at
//! once, canary spacing, recovery, a trip waking a waiting retry) is checked
//! on the paused clock in crates/router/src/tests (faults.rs and routing.rs), where
//! the machine's speed cannot move it.

mod support;

use std::time::Duration;

use serde_json::json;
use support::fake_provider::{Behaviour, FAKE_INPUT_TOKENS, FakeProvider, RecordedRequest};
use support::scenario::{
    CannedError, Front, PRIMARY, Profile, Reply, Rig, SECONDARY, Setup, Wire, each_front, prefill,
    tokens, words,
};
use support::timing;
use tokio::time::Instant;

async fn fakes() -> (FakeProvider, FakeProvider) {
    (FakeProvider::start().await, FakeProvider::start().await)
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The time from one recorded request to another.
fn between(earlier: &RecordedRequest, later: &RecordedRequest) -> Duration {
    later.at.saturating_duration_since(earlier.at)
}

/// The full answer a cut stream was part of, 60 tokens in the fake's four chunks of 15.
const WHOLE: usize = 60;

fn rest_after(chunks: usize) -> String {
    let all = tokens(WHOLE);
    let done: Vec<&str> = words(&all)[..chunks * WHOLE / 4].to_vec();
    format!(" {}", words(&all)[done.len()..].join(" "))
}

// 1. 429 with retry-after 2 s, once: wait it out, one retry, same provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s01_a_429_with_retry_after_is_waited_out_and_retried_once_on_the_same_provider() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.push(Behaviour::RateLimited {
            retry_after: Some(2),
        });
        // As in the real profile (10 s), the first-token ceiling (when the hedge
        // starts) is longer than the provider's retry-after.
        let ceiling = profile.first_token.max(Duration::from_secs(6));
        let setup = Setup {
            extra: json!({"tasks": {"explain": {"first_token_ms": ms(ceiling)}}}),
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        assert_eq!(reply.served().model, PRIMARY, "{front:?}");
        assert_eq!(reply.served().text, "Hello from the fake", "{front:?}");
        assert_eq!(primary.user_request_count(), 2, "{front:?}: one retry");
        assert_eq!(secondary.user_request_count(), 0, "{front:?}: no failover");
        // Not before retry-after (how soon after it: routing.rs, paused).
        timing::assert_at_least(
            &format!("{front:?}: the retry"),
            primary.gaps()[0],
            Duration::from_secs(2),
        );
    })
    .await;
}

// 2. 429 without retry-after, persistent: jittered exponential backoff,
// bounded attempts, then the secondary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s02_a_persistent_429_backs_off_with_jitter_then_fails_over() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.set_default(Behaviour::RateLimited { retry_after: None });
        // Fast: a wait budget spent before the hedge would start, so the
        // failover is the budget's doing. Full: the real 30 s budget and 10 s hedge.
        let wait = if profile.full {
            profile.wait
        } else {
            Duration::from_millis(1_500)
        };
        let setup = Setup {
            extra: json!({"tasks": {"explain": {"wait_ms": ms(wait)}}}),
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        assert_eq!(reply.served().model, SECONDARY, "{front:?}");
        let attempts = primary.user_request_count();
        // At least one retry; at most the first attempt plus the account's
        // retry budget (ten, shared by every process).
        assert!(
            (2..=12).contains(&attempts),
            "{front:?}: {attempts} attempts on the primary"
        );
        assert_eq!(secondary.user_request_count(), 1, "{front:?}");
        // Each wait at least half its exponential ceiling (equal jitter);
        // their upper bounds and the wait budget: faults.rs, paused.
        for (i, gap) in primary.gaps().iter().enumerate() {
            let ceiling = (profile.rate_limit_base * (1 << i.min(16))).min(profile.backoff_cap);
            timing::assert_at_least(&format!("{front:?}: wait {i}"), *gap, ceiling / 2);
        }
        timing::assert_in_order(
            &format!("{front:?}: failed over only after the primary gave up"),
            primary.user_requests().last().unwrap().at,
            secondary.user_requests()[0].at,
        );
    })
    .await;
}

// 3. 500 once: one retry on the same provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s03_a_single_500_is_retried_once_on_the_same_provider() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.push(Behaviour::ServerError);
        let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
        let reply = rig.ask().await;
        assert_eq!(reply.served().model, PRIMARY, "{front:?}");
        assert_eq!(primary.user_request_count(), 2, "{front:?}: one retry");
        assert_eq!(secondary.user_request_count(), 0, "{front:?}");
    })
    .await;
}

// 4. 503 persistent: an interactive request moves to the next healthy entry
// at once (the entry says it is overloaded), and the next request skips it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s04_a_persistent_503_hands_the_request_to_the_next_entry_at_once() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.set_default(Behaviour::Unavailable);
        let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
        let reply = rig.ask().await;
        assert_eq!(reply.served().model, SECONDARY, "{front:?}");
        assert_eq!(
            primary.user_request_count(),
            1,
            "{front:?}: no same-entry retry"
        );
        assert_eq!(secondary.user_request_count(), 1, "{front:?}");
        assert_eq!(rig.ask().await.served().model, SECONDARY, "{front:?}");
        assert_eq!(
            primary.user_request_count(),
            1,
            "{front:?}: the next request skips it"
        );
    })
    .await;
}

// 5. TCP reset before the headers: retried or failed over; answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s05_a_reset_before_headers_is_retried_or_failed_over() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.push(Behaviour::ResetBeforeHeaders);
        let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
        let reply = rig.ask().await;
        let served = reply.served();
        assert_eq!(served.text, "Hello from the fake", "{front:?}");
        let (p, s) = (primary.user_request_count(), secondary.user_request_count());
        if served.model == PRIMARY {
            assert_eq!((p, s), (2, 0), "{front:?}: retried once on the primary");
        } else {
            assert_eq!((p, s), (1, 1), "{front:?}: failed over once");
        }
    })
    .await;
}

/// Scenarios 6 and 7: the primary gives no first token; the secondary serves,
/// started no sooner than the first-token ceiling, while the fault still holds
/// the primary (the fault outlasts the ceiling, so an answer that waited for
/// the primary would be the primary's).
fn assert_served_after_the_ceiling(
    front: Front,
    profile: &Profile,
    reply: &support::scenario::Reply,
    primary: &FakeProvider,
    secondary: &FakeProvider,
) {
    assert_eq!(reply.served().model, SECONDARY, "{front:?}");
    assert_eq!(primary.user_request_count(), 1, "{front:?}");
    assert_eq!(secondary.user_request_count(), 1, "{front:?}");
    // The ceiling runs from when the task started (the caller's request),
    // which is a little before the primary's request reached the fake.
    let started = secondary.user_requests()[0]
        .at
        .saturating_duration_since(reply.sent);
    timing::assert_at_least(
        &format!("{front:?}: the secondary's start"),
        started,
        profile.first_token,
    );
}

// 6. No response at all: timed out at the first-token ceiling, well before 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s06_a_provider_that_never_answers_is_abandoned_at_the_first_token_ceiling() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.set_default(Behaviour::ok("too late").after_latency(profile.silence));
        let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
        let reply = rig.ask().await;
        assert_served_after_the_ceiling(front, &profile, &reply, &primary, &secondary);
    })
    .await;
}

// 7. First token after 20 s (fast: well after the ceiling): hedged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s07_a_late_first_token_is_hedged_and_the_secondary_serves() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.set_default(Behaviour::SlowFirstToken {
            delay: profile.slow_first_token,
            text: "too late".into(),
        });
        let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
        let reply = rig.ask().await;
        assert_served_after_the_ceiling(front, &profile, &reply, &primary, &secondary);
        assert_eq!(reply.served().text, "Hello from the fake", "{front:?}");
    })
    .await;
}

// 8. Stream cut after 45 of 60 tokens: the Anthropic-wire fallback continues
// it (prefill), so the answer is complete; never a truncated success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s08_a_cut_stream_is_completed_by_a_fallback_that_continues_it() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.push(Behaviour::CutAfter {
            text: tokens(WHOLE),
            after_chunks: 3,
        });
        secondary.set_default(Behaviour::ok(&rest_after(3)));
        let setup = Setup {
            primary: Wire::OpenAi,
            secondary: Wire::Anthropic,
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        let served = reply.served();
        assert_eq!(served.model, SECONDARY, "{front:?}");
        assert_eq!(
            words(&served.text),
            words(&tokens(WHOLE)),
            "{front:?}: the whole answer, once"
        );
        assert_eq!(
            primary.user_request_count(),
            1,
            "{front:?}: no retry mid-answer"
        );
        assert_eq!(secondary.user_request_count(), 1, "{front:?}");
        let sent = prefill(&secondary.user_requests()[0].body);
        let first_45 = words(&tokens(WHOLE))[..45].join(" ");
        assert_eq!(sent.as_deref(), Some(first_45.as_str()), "{front:?}");
        if front == Front::GatewayStream {
            // Both models streamed, in order, and the end names the one that finished it.
            assert_eq!(served.chunk_models.first().unwrap(), PRIMARY, "{front:?}");
            assert_eq!(served.chunk_models.last().unwrap(), SECONDARY, "{front:?}");
        }
    })
    .await;
}

// 9. A stream that stalls (fast: past idle_ms) is detected, failed over and
// completed; the server stays healthy and the next request works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s09_a_stalled_stream_fails_over_and_the_server_stays_healthy() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.push(Behaviour::StallMidStream {
            text: tokens(WHOLE),
            after_chunks: 2,
            stall: profile.stall,
        });
        secondary.set_default(Behaviour::ok(&rest_after(2)));
        let setup = Setup {
            primary: Wire::OpenAi,
            secondary: Wire::Anthropic,
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        let served = reply.served();
        assert_eq!(served.model, SECONDARY, "{front:?}");
        assert_eq!(words(&served.text), words(&tokens(WHOLE)), "{front:?}");
        // Not before the idle ceiling; and, served by the secondary, before
        // the stall ended (at the ceiling itself: faults.rs, paused).
        let detected = between(&primary.user_requests()[0], &secondary.user_requests()[0]);
        timing::assert_at_least(&format!("{front:?}: the stall"), detected, profile.idle);

        assert!(rig.healthy().await, "{front:?}");
        let next = rig.ask().await;
        assert_eq!(next.served().model, PRIMARY, "{front:?}");
        assert_eq!(primary.user_request_count(), 2, "{front:?}");
    })
    .await;
}

// 9b. The same stall with the real ordering of the ceilings (idle 30 s > first
// token 10 s): the stall is detected after the hedge point. Fast: idle = first
// token + 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s09b_a_stall_detected_after_the_first_token_ceiling_still_fails_over() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        let idle = profile
            .idle
            .max(profile.first_token + Duration::from_secs(1));
        primary.push(Behaviour::StallMidStream {
            text: tokens(WHOLE),
            after_chunks: 2,
            stall: idle * 3,
        });
        secondary.set_default(Behaviour::ok(&rest_after(2)));
        let setup = Setup {
            primary: Wire::OpenAi,
            secondary: Wire::Anthropic,
            extra: json!({"tasks": {"explain": {"idle_ms": ms(idle)}}}),
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        let served = reply.served();
        assert_eq!(served.model, SECONDARY, "{front:?}");
        assert_eq!(words(&served.text), words(&tokens(WHOLE)), "{front:?}");
    })
    .await;
}

// An answer that streams past the first-token ceiling is not hedged: its first
// token came in time, so the secondary is never asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s09c_a_long_answer_that_started_in_time_is_not_hedged() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        // Twelve deltas, the first at once, each within the idle ceiling, the
        // last well after the first-token ceiling.
        primary.set_default(Behaviour::Ok {
            text: tokens(WHOLE),
            chunks: 12,
            delay: (profile.idle / 2).min(profile.first_token / 4),
        });
        let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
        let reply = rig.ask().await;
        assert_eq!(reply.served().model, PRIMARY, "{front:?}");
        assert_eq!(
            secondary.user_request_count(),
            0,
            "{front:?}: hedged although the first token came at once"
        );
    })
    .await;
}

// 10. One malformed event in an otherwise complete stream is skipped: the
// whole answer, from the same entry, never a truncated success or a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10_a_malformed_chunk_is_skipped_and_the_answer_completes() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.push(Behaviour::MalformedChunk {
            text: tokens(WHOLE),
            after_chunks: 2,
        });
        secondary.set_default(Behaviour::ok(&rest_after(2)));
        let setup = Setup {
            primary: Wire::OpenAi,
            secondary: Wire::Anthropic,
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        let served = reply.served();
        assert_eq!(served.model, PRIMARY, "{front:?}");
        assert_eq!(
            words(&served.text),
            words(&tokens(WHOLE)),
            "{front:?}: {served:?}"
        );
        assert_eq!(
            (primary.user_request_count(), secondary.user_request_count()),
            (1, 0),
            "{front:?}"
        );
        assert!(rig.healthy().await, "{front:?}: {}", rig.log());
        assert_eq!(rig.ask().await.served().model, PRIMARY, "{front:?}");
    })
    .await;
}

// 11. The stream ends after its finish reason but without its terminal event:
// finalised, with the usage reported, by that provider (both wire formats).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_a_stream_without_its_terminal_event_is_finalised_with_its_usage() {
    each_front(|front, profile| async move {
        for wire in [Wire::Anthropic, Wire::OpenAi] {
            let (primary, secondary) = fakes().await;
            primary.push(Behaviour::MissingTerminal {
                text: "It inserts or updates.".into(),
            });
            let setup = Setup {
                primary: wire,
                ..Setup::default()
            };
            let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
            let reply = rig.ask().await;
            let served = reply.served();
            assert_eq!(served.model, PRIMARY, "{front:?} {wire:?}");
            assert_eq!(served.text, "It inserts or updates.", "{front:?} {wire:?}");
            assert_eq!(
                primary.user_request_count(),
                1,
                "{front:?} {wire:?}: no retry"
            );
            assert_eq!(secondary.user_request_count(), 0, "{front:?} {wire:?}");
            if let Some(usage) = &served.usage {
                assert_eq!(
                    usage["prompt_tokens"], FAKE_INPUT_TOKENS,
                    "{front:?} {wire:?}: {usage}"
                );
                assert_eq!(usage["completion_tokens"], 3, "{front:?} {wire:?}: {usage}");
            }
        }
    })
    .await;
}

// 12. 400 context length: no retry on that model; the next entry serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_context_length_is_not_retried_and_the_next_entry_serves() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.set_default(Behaviour::ContextLength);
        let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
        let reply = rig.ask().await;
        assert_eq!(reply.served().model, SECONDARY, "{front:?}");
        assert_eq!(primary.user_request_count(), 1, "{front:?}: never retried");
        assert_eq!(secondary.user_request_count(), 1, "{front:?}");
    })
    .await;
}

// 13. Content filter: not retried, the reason reaches the caller, no other
// provider is asked (stop_reason refusal / finish_reason content_filter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13_a_content_filter_refusal_ends_the_task_with_its_reason() {
    each_front(|front, profile| async move {
        for wire in [Wire::Anthropic, Wire::OpenAi] {
            let (primary, secondary) = fakes().await;
            primary.set_default(Behaviour::Refusal {
                text: "I can't help with that.".into(),
            });
            let setup = Setup {
                primary: wire,
                ..Setup::default()
            };
            let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
            let reply = rig.ask().await;
            let failed = reply.failed();
            assert!(
                failed.message.contains("refused") && failed.message.contains(PRIMARY),
                "{front:?} {wire:?}: {failed:?}"
            );
            match front {
                Front::Gateway => {
                    assert_eq!(failed.status, Some(400), "{front:?} {wire:?}");
                    assert_eq!(failed.code.as_deref(), Some("content_refused"));
                }
                // The refusal's own text may already have streamed; the error follows it.
                Front::GatewayStream => assert!(failed.code.is_some(), "{failed:?}"),
                Front::Lsp | Front::LspRefactor => {}
            }
            assert_eq!(
                primary.user_request_count(),
                1,
                "{front:?} {wire:?}: no retry"
            );
            assert_eq!(
                secondary.user_request_count(),
                0,
                "{front:?} {wire:?}: no other provider"
            );
        }
    })
    .await;
}

// 13b. The same as Azure OpenAI sends it: HTTP 400 with code `content_filter`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13b_a_400_content_filter_is_not_retried_and_its_reason_propagates() {
    each_front(|front, profile| async move {
        let filtered = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.";
        let primary = CannedError::start(
            400,
            "Bad Request",
            json!({"error": {"message": filtered, "type": null, "param": "prompt", "code": "content_filter", "status": 400}}),
        )
        .await;
        let secondary = FakeProvider::start().await;
        let setup = Setup {
            primary: Wire::OpenAi,
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        let failed = reply.failed();
        assert!(
            failed.message.contains(PRIMARY)
                && failed.message.contains("content_filter")
                && failed.message.contains("content management policy"),
            "{front:?}: {failed:?}"
        );
        if front != Front::Lsp {
            // Nothing was streamed before the refusal: a plain HTTP error.
            assert_eq!(failed.status, Some(400), "{front:?}: {failed:?}");
            assert_eq!(failed.code.as_deref(), Some("content_refused"), "{failed:?}");
        }
        assert_eq!(primary.request_count(), 1, "{front:?}: no retry");
        assert_eq!(secondary.user_request_count(), 0, "{front:?}: no other provider");
    })
    .await;
}

// The provider error's text already starts with "HTTP 400 content_filter: " and
// the router's `describe` prefixes the same again; likewise "HTTP 503: HTTP 503: ".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13c_an_error_names_its_status_once() {
    each_front(|front, profile| async move {
        let primary = CannedError::start(
            400,
            "Bad Request",
            json!({"error": {"message": "filtered", "type": null, "param": "prompt", "code": "content_filter", "status": 400}}),
        )
        .await;
        let secondary = FakeProvider::start().await;
        let setup = Setup {
            primary: Wire::OpenAi,
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        let message = &reply.failed().message;
        assert_eq!(message.matches("HTTP 400").count(), 1, "{front:?}: {message}");
    })
    .await;
}

// 14. Cut stream, and the fallback takes no prefill (OpenAI wire): it still
// continues the answer, from the cut text given as its own turn and an
// instruction to begin with its last words and go on, so every front end
// gets the whole answer; when the continuation fails too, the error names
// both failures, the cut first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_a_cut_stream_is_continued_where_prefill_is_not_accepted() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.push(Behaviour::CutAfter {
            text: tokens(WHOLE),
            after_chunks: 2,
        });
        secondary.set_default(Behaviour::continues(&tokens(WHOLE)));
        let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
        let reply = rig.ask().await;
        let served = reply.served();
        assert_eq!(served.model, SECONDARY, "{front:?}");
        assert_eq!(
            words(&served.text),
            words(&tokens(WHOLE)),
            "{front:?}: {served:?}"
        );
        assert_eq!(primary.user_request_count(), 1, "{front:?}");
        assert_eq!(secondary.user_request_count(), 1, "{front:?}");
        let continuation = &secondary.user_requests()[0].body;
        let messages = continuation["messages"].as_array().unwrap();
        let roles: Vec<&str> = messages
            .iter()
            .filter_map(|m| m["role"].as_str())
            .filter(|r| *r != "system")
            .collect();
        assert_eq!(
            roles,
            ["user", "assistant", "user"],
            "{front:?}: {continuation}"
        );
        assert_eq!(
            prefill(continuation),
            None,
            "{front:?}: no prefill on this wire"
        );

        // When the continuation fails too, the error names both failures, the cut first.
        primary.push(Behaviour::CutAfter {
            text: tokens(WHOLE),
            after_chunks: 2,
        });
        secondary.set_default(Behaviour::Unavailable);
        let reply = rig.ask().await;
        let failed = reply.failed();
        let message = failed.message.to_lowercase();
        let cut = message.find("cut").unwrap_or(usize::MAX);
        let unavailable = message.find("503").unwrap_or(0);
        assert!(
            message.contains(PRIMARY) && message.contains(SECONDARY) && cut < unavailable,
            "{front:?}: {failed:?}"
        );
        if front == Front::GatewayStream {
            assert_eq!(failed.code.as_deref(), Some("stream_failed"), "{failed:?}");
        }
    })
    .await;
}

// 15. The primary is down for 60 s (fast: 3 s), then healthy; one request
// every 4 s (fast: 0.2 s) for 80 s (fast: 4 s): every request served, none
// sent to the primary while it is out of user traffic, canaries test it
// meanwhile, and it serves users again after recovering. Canary spacing and
// how soon it is back: faults.rs, paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_an_outage_keeps_users_off_the_primary_and_canaries_bring_it_back() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.set_default(Behaviour::Unavailable);
        let setup = Setup {
            extra: json!({
                "resilience": {"breaker": {"failures": 3, "cooldown_ms": ms(profile.cooldown)}}
            }),
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let interval = profile.outage / 15;
        let start = Instant::now();
        let mut recovered = None;
        let mut first_answered = None;
        let mut replies = Vec::new();
        for request in 0..20u32 {
            tokio::time::sleep_until(start + interval * request).await;
            if request == 15 {
                primary.set_default(Behaviour::ok("SWITCHYARD-CANARY-OK back"));
                recovered = Some(Instant::now());
            }
            replies.push(rig.ask().await);
            if request == 0 {
                first_answered = Some(Instant::now());
            }
        }
        let recovered = recovered.unwrap();
        for reply in &replies {
            reply.served();
        }
        let first_answered = first_answered.unwrap();
        let offsets = |requests: &[RecordedRequest]| -> Vec<Duration> {
            requests
                .iter()
                .map(|r| r.at.saturating_duration_since(start))
                .collect()
        };
        let (users, canaries): (Vec<_>, Vec<_>) =
            primary.requests().into_iter().partition(|r| !r.is_canary());
        eprintln!(
            "{front:?}: users at {:?}, canaries at {:?}, recovered at {:?}",
            offsets(&users),
            offsets(&canaries),
            recovered - start
        );
        // The first request finds the primary overloaded (and may retry it
        // once); no user request goes there after that until it has recovered.
        let met_the_outage = users.iter().filter(|r| r.at < recovered);
        for user in met_the_outage {
            timing::assert_in_order(
                &format!("{front:?}: a user request on the primary while it was down"),
                user.at,
                first_answered,
            );
        }
        let first_canary = canaries.first().expect("canaries tested the primary");
        timing::assert_in_order(
            &format!("{front:?}: a canary during the outage"),
            first_canary.at,
            recovered,
        );
        // Back: users reach the primary again after it recovered.
        let last_user = users.last().expect("user requests");
        timing::assert_in_order(
            &format!("{front:?}: users on the primary after its recovery"),
            recovered,
            last_user.at,
        );
        assert_eq!(rig.ask().await.served().model, PRIMARY, "{front:?}");
    })
    .await;
}

// 16. 503, then the fallback answers: the response names the fallback model
// and reports its usage only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s16_the_fallback_is_named_and_only_its_usage_reported() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.set_default(Behaviour::Unavailable);
        secondary.set_default(Behaviour::ok("It inserts or updates."));
        let setup = Setup {
            extra: json!({"tasks": {"explain": {"wait_ms": 0}}}),
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let reply = rig.ask().await;
        let served = reply.served();
        assert_eq!(served.model, SECONDARY, "{front:?}");
        assert_eq!(served.text, "It inserts or updates.", "{front:?}");
        if let Some(usage) = &served.usage {
            assert_eq!(
                *usage,
                json!({"prompt_tokens": FAKE_INPUT_TOKENS, "completion_tokens": 3, "total_tokens": FAKE_INPUT_TOKENS + 3}),
                "{front:?}"
            );
        }
        assert!(
            served.chunk_models.iter().all(|m| m == SECONDARY),
            "{front:?}: {:?}",
            served.chunk_models
        );
        assert_eq!(
            (primary.user_request_count(), secondary.user_request_count()),
            (1, 1),
            "{front:?}"
        );
    })
    .await;
}

// 17. Two requests meet a 500 at once. The first waits to retry the primary
// (equal jitter: at least half the transient backoff), the second's failure
// opens the breaker: that wakes the first, and both are answered by the
// secondary at once, not when the backoff or the hedge would end the wait.
// Both of those are at least 10 s away, so the bound on "at once" (scaled to
// the machine) has room for a machine many times slower; the exact promise
// is in faults.rs on the paused clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s17_a_breaker_trip_wakes_requests_waiting_to_retry_that_entry() {
    each_front(|front, profile| async move {
        let (primary, secondary) = fakes().await;
        primary.set_default(Behaviour::ServerError);
        let backoff = Duration::from_secs(20);
        let setup = Setup {
            extra: json!({
                "tasks": {"explain": {"wait_ms": ms(4 * backoff), "first_token_ms": 14_000}},
                "resilience": {
                    "breaker": {"failures": 2},
                    "backoff": {"transient_ms": ms(backoff), "cap_ms": ms(4 * backoff)}
                }
            }),
            ..Setup::default()
        };
        let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
        let replies = rig.ask_concurrently(2).await;
        for reply in &replies {
            assert_eq!(reply.served().model, SECONDARY, "{front:?}");
            // Without the wake-up the first would wait for its backoff or,
            // sooner, the hedge at the first-token ceiling.
            timing::assert_within(
                &format!("{front:?}: a request waiting on a breaker that opened"),
                reply.elapsed,
                Duration::from_millis(1_500),
            );
        }
        assert_eq!(
            primary.user_request_count(),
            2,
            "{front:?}: no retry after the trip"
        );
    })
    .await;
}

// 18. 502 for good, as a router sends it (OpenRouter's JSON, OpenAI wire) or
// a proxy in front of the API (an HTML page, Anthropic wire): a transient
// fault, so one retry on the same entry, then the fallback's whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s18_a_502_is_retried_once_as_transient_then_the_fallback_answers() {
    each_front(|front, profile| async move {
        for wire in [Wire::Anthropic, Wire::OpenAi] {
            let (primary, secondary) = fakes().await;
            primary.set_default(Behaviour::BadGateway);
            secondary.set_default(Behaviour::ok("It inserts or updates."));
            let setup = Setup {
                primary: wire,
                secondary: wire.other(),
                ..Setup::default()
            };
            let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
            let reply = rig.ask().await;
            let served = reply.served();
            assert_eq!(served.model, SECONDARY, "{front:?} {wire:?}");
            assert_eq!(served.text, "It inserts or updates.", "{front:?} {wire:?}");
            assert_eq!(
                (primary.user_request_count(), secondary.user_request_count()),
                (2, 1),
                "{front:?} {wire:?}: one retry of the primary, then the fallback"
            );
        }
    })
    .await;
}

/// The event text of `whole` streamed in the fake's four deltas on `wire`,
/// as a client reads it (no chunk framing): what a cut's byte counts.
async fn event_text(wire: Wire, whole: &str) -> String {
    let fake = FakeProvider::with_default(Behaviour::cut_at_byte(whole, usize::MAX)).await;
    let url = match wire {
        Wire::Anthropic => format!("{}/v1/messages", fake.anthropic_url()),
        Wire::OpenAi => format!("{}/chat/completions", fake.openai_url()),
    };
    let response = reqwest::Client::new()
        .post(url)
        .json(&json!({"messages": []}))
        .send()
        .await
        .expect("the fake answers");
    response.text().await.expect("a whole body")
}

/// Where to cut `body`, the event text of `whole`, with what each place is.
fn cuts(body: &str, whole: &str) -> Vec<(&'static str, usize)> {
    let first = body.find(words(whole)[0]).expect("the first delta");
    let third = body.find(words(whole)[30]).expect("the third delta");
    vec![
        ("inside the first event", 10),
        (
            "after the opening events",
            body[..first].rfind("\n\n").unwrap() + 2,
        ),
        ("mid-character in the first delta", first + 1),
        ("mid-JSON of the third delta", third + 20),
        ("inside the terminal event", body.len() - 4),
        ("at the very end (no cut)", body.len()),
    ]
}

/// The caller's verdict on a cut stream: the whole answer, or a typed error
/// (streamed: after the answer's start only), never a garbled success.
fn assert_whole_or_typed_error(what: &str, front: Front, reply: &Reply, whole: &str) {
    let failed = match &reply.result {
        Ok(served) => {
            assert_eq!(words(&served.text), words(whole), "{what}: garbled");
            return;
        }
        Err(failed) => failed,
    };
    assert!(!failed.message.trim().is_empty(), "{what}: {failed:?}");
    match front {
        Front::Gateway => assert!(
            failed.status != Some(200) && failed.code.is_some(),
            "{what}: an untyped error {failed:?}"
        ),
        Front::GatewayStream => {
            assert!(failed.code.is_some(), "{what}: an untyped error {failed:?}");
            let (streamed, whole) = (words(&failed.streamed).join(" "), words(whole).join(" "));
            assert!(
                whole.starts_with(&streamed),
                "{what}: streamed {streamed:?}"
            );
        }
        Front::Lsp | Front::LspRefactor => {}
    }
}

// 19. A stream cut at any byte (inside its first event, between events,
// mid-JSON, mid-character, inside its terminal event) on either wire ends in
// the whole answer (retried, or continued by the other wire's fallback) or a
// typed error, never a garbled success. A cut before the last word is noticed
// (another request); at the body's very end it is no cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19_a_stream_cut_at_any_byte_ends_whole_or_in_a_typed_error() {
    each_front(|front, profile| async move {
        // Two bytes a character: a cut can split one.
        let whole = tokens(WHOLE).replace('t', "ŧ");
        let last = words(&whole)[WHOLE - 1];
        for wire in [Wire::Anthropic, Wire::OpenAi] {
            let body = event_text(wire, &whole).await;
            let all_text = body.find(last).unwrap() + last.len();
            for (place, at_byte) in cuts(&body, &whole) {
                let what = format!("{front:?} {wire:?} cut {place} (byte {at_byte})");
                let primary = FakeProvider::with_default(Behaviour::ok(&whole)).await;
                primary.push(Behaviour::cut_at_byte(&whole, at_byte));
                let secondary = FakeProvider::with_default(Behaviour::continues(&whole)).await;
                let setup = Setup {
                    primary: wire,
                    secondary: wire.other(),
                    ..Setup::default()
                };
                let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
                let reply = rig.ask().await;
                assert_whole_or_typed_error(&what, front, &reply, &whole);
                let asked = primary.user_request_count() + secondary.user_request_count();
                if at_byte < all_text {
                    assert!(
                        asked >= 2,
                        "{what}: a cut answer taken whole from one request"
                    );
                }
                if at_byte == body.len() {
                    assert_eq!(reply.served().model, PRIMARY, "{what}");
                    assert_eq!(secondary.user_request_count(), 0, "{what}");
                }
            }
        }
    })
    .await;
}
