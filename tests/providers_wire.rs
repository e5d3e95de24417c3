//! The remote providers against the fake provider over real loopback HTTP:
//! streamed answers, every fault the fake injects, the phase timeouts, and the
//! API key kept out of every error.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use support::fake_provider::{Behaviour, FAKE_INPUT_TOKENS, FakeProvider, FakeRateLimits};
use support::timing;
use switchyard_providers::{
    ChatMessage, ChatRequest, FailureKind, Finish, FinishReason, Provider, ProviderError,
    ProviderKind, ResponseStream, Role, Secret, StreamEvent, Timeouts, Usage, build, try_build,
};

const KEY: &str = "sk-test-0123456789-very-secret";

/// Generous limits for tests that are not about timeouts: they catch hangs only.
const RELAXED: Timeouts = Timeouts {
    connect: Duration::from_secs(5),
    first_byte: Duration::from_secs(10),
    first_token: Duration::from_secs(10),
    idle: Duration::from_secs(10),
};

/// For tests that make one phase too slow: the fake waits far longer (5 s) than the limit.
const TIGHT: Duration = Duration::from_millis(300);
const FAKE_WAIT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    Anthropic,
    OpenAi,
}

const BOTH: [Api; 2] = [Api::Anthropic, Api::OpenAi];

fn provider(api: Api, fake: &FakeProvider) -> Arc<dyn Provider> {
    let key = Some(Secret::new(KEY));
    let built = match api {
        Api::Anthropic => try_build(
            "anthropic",
            ProviderKind::Anthropic,
            &fake.anthropic_url(),
            key,
            Vec::new(),
        ),
        Api::OpenAi => try_build(
            "openrouter",
            ProviderKind::Openai,
            &fake.openai_url(),
            key,
            vec![
                (
                    "HTTP-Referer".into(),
                    "https://example.invalid/switchyard".into(),
                ),
                ("X-Title".into(), "switchyard".into()),
            ],
        ),
    };
    built.expect("provider builds")
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "fake-model".into(),
        system: Some("You write Rust.".into()),
        messages: vec![ChatMessage {
            role: Role::User,
            content: "Write hello world.".into(),
        }],
        max_tokens: 256,
        temperature: None,
    }
}

/// What a call came to: the text streamed, then the finish or the error.
struct Outcome {
    text: String,
    end: Result<Finish, ProviderError>,
}

async fn drain(mut response: ResponseStream) -> Outcome {
    let mut text = String::new();
    while let Some(event) = response.events.next().await {
        match event {
            Ok(StreamEvent::Delta(delta)) => text.push_str(&delta),
            Ok(StreamEvent::Skipped(_)) => {}
            Ok(StreamEvent::End(finish)) => {
                assert!(response.events.next().await.is_none(), "events after End");
                return Outcome {
                    text,
                    end: Ok(finish),
                };
            }
            Err(error) => {
                assert!(
                    response.events.next().await.is_none(),
                    "events after an error"
                );
                return Outcome {
                    text,
                    end: Err(error),
                };
            }
        }
    }
    panic!("stream ended without End or an error");
}

async fn call(api: Api, fake: &FakeProvider, timeouts: Timeouts) -> Outcome {
    match provider(api, fake).stream(request(), timeouts).await {
        Ok(response) => drain(response).await,
        Err(error) => Outcome {
            text: String::new(),
            end: Err(error),
        },
    }
}

async fn call_error(api: Api, fake: &FakeProvider, timeouts: Timeouts) -> ProviderError {
    let outcome = call(api, fake, timeouts).await;
    match outcome.end {
        Err(error) => error,
        Ok(finish) => panic!(
            "{api:?}: expected an error, got {finish:?} after {:?}",
            outcome.text
        ),
    }
}

fn assert_no_key(error: &ProviderError) {
    assert!(!error.to_string().contains(KEY), "key in Display: {error}");
    assert!(
        !format!("{error:?}").contains(KEY),
        "key in Debug: {error:?}"
    );
}

// --- Streamed answers ---------------------------------------------------------

#[tokio::test]
async fn streamed_answer_yields_text_usage_finish_and_rate_limits() {
    let limits = FakeRateLimits {
        requests_limit: 50,
        requests_remaining: 49,
        requests_reset: Duration::from_secs(20),
        tokens_limit: 90_000,
        tokens_remaining: 80_000,
        tokens_reset: Duration::from_secs(360),
    };
    for api in BOTH {
        let fake = FakeProvider::start().await;
        fake.push(
            Behaviour::Ok {
                text: "fn main() { println!(\"hi\"); }".into(),
                chunks: 5,
                delay: Duration::from_millis(10),
            }
            .with_rate_limits(limits.clone()),
        );
        let response = provider(api, &fake)
            .stream(request(), RELAXED)
            .await
            .expect("stream opens");
        let reported = response.rate_limits.clone();
        let outcome = drain(response).await;

        assert_eq!(outcome.text, "fn main() { println!(\"hi\"); }", "{api:?}");
        assert_eq!(
            outcome.end.unwrap(),
            Finish {
                reason: FinishReason::EndTurn,
                usage: Usage {
                    input_tokens: FAKE_INPUT_TOKENS,
                    output_tokens: 5
                }
            },
            "{api:?}"
        );
        assert_eq!(reported.requests_limit, Some(50), "{api:?}");
        assert_eq!(reported.requests_remaining, Some(49), "{api:?}");
        assert_eq!(reported.tokens_limit, Some(90_000), "{api:?}");
        assert_eq!(reported.tokens_remaining, Some(80_000), "{api:?}");
        // Anthropic sends reset instants in whole seconds; OpenAI sends durations.
        let requests_reset = reported.requests_reset.expect("requests reset");
        assert!(
            requests_reset > Duration::from_secs(18) && requests_reset <= Duration::from_secs(21),
            "{api:?} {requests_reset:?}"
        );
        let tokens_reset = reported.tokens_reset.expect("tokens reset");
        assert!(
            tokens_reset > Duration::from_secs(358) && tokens_reset <= Duration::from_secs(361),
            "{api:?} {tokens_reset:?}"
        );
        if api == Api::Anthropic {
            assert_eq!(reported.input_tokens_limit, Some(90_000));
            assert_eq!(reported.output_tokens_remaining, Some(80_000));
        } else {
            assert_eq!(reported.input_tokens_limit, None);
        }
    }
}

#[tokio::test]
async fn anthropic_request_carries_key_version_and_stream_flag() {
    let fake = FakeProvider::start().await;
    call(Api::Anthropic, &fake, RELAXED)
        .await
        .end
        .expect("answer");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["model"], "fake-model");
    assert_eq!(sent.body["max_tokens"], 256);
    assert_eq!(sent.body["system"], "You write Rust.");
    assert_eq!(sent.body["messages"][0]["role"], "user");
}

#[tokio::test]
async fn openai_request_carries_bearer_usage_option_and_extra_headers() {
    let fake = FakeProvider::start().await;
    call(Api::OpenAi, &fake, RELAXED).await.end.expect("answer");
    let sent = &fake.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        sent.header("http-referer"),
        Some("https://example.invalid/switchyard")
    );
    assert_eq!(sent.header("x-title"), Some("switchyard"));
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"]["include_usage"], true);
    assert_eq!(sent.body["messages"][0]["role"], "system");
    assert_eq!(sent.body["messages"][1]["content"], "Write hello world.");
}

#[tokio::test]
async fn a_local_server_needs_no_key() {
    let fake = FakeProvider::start().await;
    let local = build(
        "ollama",
        ProviderKind::Openai,
        &fake.openai_url(),
        None,
        Vec::new(),
    );
    let outcome = drain(
        local
            .stream(request(), RELAXED)
            .await
            .expect("stream opens"),
    )
    .await;
    assert_eq!(outcome.text, "Hello from the fake");
    assert_eq!(fake.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn refusal_finishes_with_refusal() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::Refusal {
            text: "I can't help with that.".into(),
        })
        .await;
        let outcome = call(api, &fake, RELAXED).await;
        assert_eq!(outcome.text, "I can't help with that.", "{api:?}");
        assert_eq!(
            outcome.end.unwrap().reason,
            FinishReason::Refusal,
            "{api:?}"
        );
    }
}

#[tokio::test]
async fn truncated_answer_finishes_with_max_tokens() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::MaxTokens {
            text: "fn long_function(a: i32".into(),
        })
        .await;
        let outcome = call(api, &fake, RELAXED).await;
        assert_eq!(outcome.text, "fn long_function(a: i32", "{api:?}");
        assert_eq!(
            outcome.end.unwrap().reason,
            FinishReason::MaxTokens,
            "{api:?}"
        );
    }
}

// --- Refused requests ---------------------------------------------------------

#[tokio::test]
async fn rate_limit_429_carries_its_type_and_retry_after() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::RateLimited {
            retry_after: Some(7),
        })
        .await;
        let error = call_error(api, &fake, RELAXED).await;
        assert_eq!(error.kind, FailureKind::Status, "{api:?}");
        assert_eq!(error.status, Some(429), "{api:?}");
        assert_eq!(error.retry_after, Some(Duration::from_secs(7)), "{api:?}");
        match api {
            Api::Anthropic => assert_eq!(error.error_type.as_deref(), Some("rate_limit_error")),
            Api::OpenAi => assert_eq!(error.code.as_deref(), Some("rate_limit_exceeded")),
        }
        assert!(error.message.contains("429"), "{}", error.message);
    }
}

#[tokio::test]
async fn rate_limit_429_without_retry_after_has_none() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::RateLimited { retry_after: None }).await;
        let error = call_error(api, &fake, RELAXED).await;
        assert_eq!(error.status, Some(429), "{api:?}");
        assert_eq!(error.retry_after, None, "{api:?}");
    }
}

#[tokio::test]
async fn exhausted_credit_is_told_apart_from_a_rate_limit() {
    let fake = FakeProvider::with_default(Behaviour::QuotaExhausted).await;
    let openai = call_error(Api::OpenAi, &fake, RELAXED).await;
    assert_eq!(openai.status, Some(429));
    assert_eq!(openai.error_type.as_deref(), Some("insufficient_quota"));
    assert_eq!(openai.code.as_deref(), Some("insufficient_quota"));

    let anthropic = call_error(Api::Anthropic, &fake, RELAXED).await;
    assert_eq!(anthropic.status, Some(400));
    assert_eq!(
        anthropic.error_type.as_deref(),
        Some("invalid_request_error")
    );
    assert!(
        anthropic.message.contains("credit balance is too low"),
        "{}",
        anthropic.message
    );
}

#[tokio::test]
async fn overload_is_529_from_anthropic_and_503_from_openai() {
    let fake = FakeProvider::with_default(Behaviour::Overloaded).await;
    let anthropic = call_error(Api::Anthropic, &fake, RELAXED).await;
    assert_eq!(
        (anthropic.kind, anthropic.status),
        (FailureKind::Status, Some(529))
    );
    assert_eq!(anthropic.error_type.as_deref(), Some("overloaded_error"));

    let openai = call_error(Api::OpenAi, &fake, RELAXED).await;
    assert_eq!(openai.status, Some(503));
    assert_eq!(openai.error_type.as_deref(), Some("server_error"));
}

#[tokio::test]
async fn a_503_with_a_plain_text_body_quotes_the_body() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::Unavailable).await;
        let error = call_error(api, &fake, RELAXED).await;
        assert_eq!(error.status, Some(503), "{api:?}");
        assert_eq!(error.error_type, None, "{api:?}");
        assert!(
            error.message.contains("upstream connect error"),
            "{}",
            error.message
        );
    }
}

#[tokio::test]
async fn a_500_once_then_the_next_attempt_succeeds() {
    for api in BOTH {
        let fake = FakeProvider::start().await;
        fake.push(Behaviour::ServerError);
        let first = call_error(api, &fake, RELAXED).await;
        assert_eq!(first.status, Some(500), "{api:?}");
        match api {
            Api::Anthropic => assert_eq!(first.error_type.as_deref(), Some("api_error")),
            Api::OpenAi => assert_eq!(first.error_type.as_deref(), Some("server_error")),
        }
        let second = call(api, &fake, RELAXED).await;
        assert_eq!(second.text, "Hello from the fake", "{api:?}");
        assert_eq!(fake.request_count(), 2, "{api:?}");
    }
}

#[tokio::test]
async fn context_length_400_is_reported_with_each_formats_type() {
    let fake = FakeProvider::with_default(Behaviour::ContextLength).await;
    let anthropic = call_error(Api::Anthropic, &fake, RELAXED).await;
    assert_eq!(anthropic.status, Some(400));
    assert_eq!(
        anthropic.error_type.as_deref(),
        Some("invalid_request_error")
    );
    assert!(
        anthropic.message.contains("prompt is too long"),
        "{}",
        anthropic.message
    );

    let openai = call_error(Api::OpenAi, &fake, RELAXED).await;
    assert_eq!(openai.status, Some(400));
    assert_eq!(openai.code.as_deref(), Some("context_length_exceeded"));
}

#[tokio::test]
async fn unauthorized_401_never_repeats_the_key() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::Unauthorized).await;
        let error = call_error(api, &fake, RELAXED).await;
        assert_eq!(error.status, Some(401), "{api:?}");
        match api {
            Api::Anthropic => assert_eq!(error.error_type.as_deref(), Some("authentication_error")),
            // The fake quotes the key back in full; the client must scrub it.
            Api::OpenAi => {
                assert_eq!(error.code.as_deref(), Some("invalid_api_key"));
                assert!(error.message.contains("[redacted]"), "{}", error.message);
            }
        }
        assert_no_key(&error);
    }
}

#[tokio::test]
async fn connection_closed_before_headers_is_a_connect_failure() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::ResetBeforeHeaders).await;
        let error = call_error(api, &fake, RELAXED).await;
        assert_eq!(error.kind, FailureKind::Connect, "{api:?}: {error}");
        assert_eq!(error.status, None);
        assert_eq!(
            fake.request_count(),
            1,
            "{api:?}: one attempt, no silent retry"
        );
        assert_no_key(&error);
    }
}

#[tokio::test]
async fn nothing_listening_is_a_connect_failure() {
    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let provider = build(
        "anthropic",
        ProviderKind::Anthropic,
        &format!("http://{closed}"),
        Some(Secret::new(KEY)),
        Vec::new(),
    );
    let error = match provider.stream(request(), RELAXED).await {
        Err(error) => error,
        Ok(_) => panic!("connected to a closed port"),
    };
    assert_eq!(error.kind, FailureKind::Connect, "{error}");
    assert!(
        error
            .to_string()
            .starts_with("anthropic: could not connect"),
        "{error}"
    );
    assert_no_key(&error);
}

// --- Broken streams ------------------------------------------------------------

#[tokio::test]
async fn a_stream_cut_mid_body_is_stream_cut_with_the_partial_text() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::CutAfter {
            text: "AAAABBBBCCCCDDDD".into(),
            after_chunks: 2,
        })
        .await;
        let outcome = call(api, &fake, RELAXED).await;
        let error = outcome.end.expect_err("cut stream is an error");
        assert_eq!(error.kind, FailureKind::StreamCut, "{api:?}: {error}");
        assert_eq!(error.partial, "AAAABBBB", "{api:?}");
        assert_eq!(outcome.text, "AAAABBBB", "{api:?}");
    }
}

#[tokio::test]
async fn a_clean_end_after_the_finish_reason_but_without_the_terminal_event_is_finalised() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::MissingTerminal {
            text: "complete-looking text".into(),
        })
        .await;
        let outcome = call(api, &fake, RELAXED).await;
        let finish = outcome.end.unwrap_or_else(|e| panic!("{api:?}: {e}"));
        assert_eq!(outcome.text, "complete-looking text", "{api:?}");
        assert_eq!(finish.reason, FinishReason::EndTurn, "{api:?}");
        // The fake counts one output token per delta; the usage it reported stands.
        assert_eq!(finish.usage.output_tokens, 3, "{api:?}");
    }
}

#[tokio::test]
async fn a_malformed_chunk_is_skipped_and_the_answer_completes() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::MalformedChunk {
            text: "AAAABBBBCCCCDDDD".into(),
            after_chunks: 1,
        })
        .await;
        let outcome = call(api, &fake, RELAXED).await;
        assert!(outcome.end.is_ok(), "{api:?}: {:?}", outcome.end);
        assert_eq!(outcome.text, "AAAABBBBCCCCDDDD", "{api:?}");
    }
}

#[tokio::test]
async fn an_error_event_after_200_is_in_band_with_the_partial_text() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::InBandError {
            text: "AAAABBBBCCCCDDDD".into(),
            after_chunks: 2,
        })
        .await;
        let error = call_error(api, &fake, RELAXED).await;
        assert_eq!(error.kind, FailureKind::InBand, "{api:?}: {error}");
        assert_eq!(error.partial, "AAAABBBB", "{api:?}");
        match api {
            Api::Anthropic => assert_eq!(error.error_type.as_deref(), Some("overloaded_error")),
            // OpenRouter's mid-stream error chunk carries a numeric code.
            Api::OpenAi => assert_eq!(error.code.as_deref(), Some("502")),
        }
    }
}

#[tokio::test]
async fn an_openai_error_before_any_text_is_in_band() {
    let fake = FakeProvider::with_default(Behaviour::InBandError {
        text: "unused".into(),
        after_chunks: 0,
    })
    .await;
    let error = call_error(Api::OpenAi, &fake, RELAXED).await;
    assert_eq!(error.kind, FailureKind::InBand, "{error}");
    assert_eq!(error.error_type.as_deref(), Some("server_error"));
    assert_eq!(error.partial, "");
}

// --- Timeouts ---------------------------------------------------------------------

#[tokio::test]
async fn slow_headers_time_out_as_first_byte() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::ok("late").after_latency(FAKE_WAIT)).await;
        let error = call_error(
            api,
            &fake,
            Timeouts {
                first_byte: TIGHT,
                ..RELAXED
            },
        )
        .await;
        assert_eq!(
            error.kind,
            FailureKind::TimeoutFirstByte,
            "{api:?}: {error}"
        );
    }
}

#[tokio::test]
async fn slow_first_token_times_out_as_first_token() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::SlowFirstToken {
            delay: FAKE_WAIT,
            text: "late".into(),
        })
        .await;
        let error = call_error(
            api,
            &fake,
            Timeouts {
                first_token: TIGHT,
                ..RELAXED
            },
        )
        .await;
        assert_eq!(
            error.kind,
            FailureKind::TimeoutFirstToken,
            "{api:?}: {error}"
        );
        assert_eq!(error.partial, "", "{api:?}");
    }
}

#[tokio::test]
async fn a_stall_mid_stream_times_out_as_stalled_with_the_partial_text() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::StallMidStream {
            text: "AAAABBBBCCCCDDDD".into(),
            after_chunks: 3,
            stall: FAKE_WAIT,
        })
        .await;
        let error = call_error(
            api,
            &fake,
            Timeouts {
                idle: TIGHT,
                ..RELAXED
            },
        )
        .await;
        assert_eq!(error.kind, FailureKind::Stalled, "{api:?}: {error}");
        assert_eq!(error.partial, "AAAABBBBCCCC", "{api:?}");
    }
}

#[tokio::test]
async fn a_slow_but_steady_stream_is_not_a_stall() {
    for api in BOTH {
        let fake = FakeProvider::with_default(Behaviour::Ok {
            text: "steady tokens".into(),
            chunks: 4,
            delay: Duration::from_millis(50),
        })
        .await;
        let outcome = call(
            api,
            &fake,
            Timeouts {
                idle: Duration::from_secs(2),
                ..RELAXED
            },
        )
        .await;
        assert_eq!(outcome.text, "steady tokens", "{api:?}");
        assert!(outcome.end.is_ok(), "{api:?}");
    }
}

#[tokio::test]
async fn the_fake_records_each_attempt_with_its_time() {
    let fake = FakeProvider::start().await;
    fake.push(Behaviour::ServerError)
        .push(Behaviour::ServerError);
    for _ in 0..3 {
        let _ = call(Api::Anthropic, &fake, RELAXED).await;
    }
    assert_eq!(fake.request_count(), 3);
    for pair in fake.requests().windows(2) {
        timing::assert_in_order("the attempts, as recorded", pair[0].at, pair[1].at);
    }
}
