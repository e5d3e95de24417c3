//! The fake's OpenAI chat completions wire format: `data:` chunks ending in
//! `data: [DONE]` (with OpenRouter's keep-alive comments and mid-stream error
//! chunks), error bodies `{"error":{…}}`, `x-ratelimit-*` headers.

use std::time::Duration;

use serde_json::{Value, json};

use super::reply::{
    Answer, Chunked, Ending, ErrorBody, Events, Failure, Stop, chunk, end_body, send_deltas,
};
use super::{FAKE_INPUT_TOKENS, FakeRateLimits};

/// `bearer` is quoted back in the 401, in full (OpenAI masks it) so tests can
/// check that the client scrubs it.
pub(super) fn failure(failure: Failure, bearer: &str) -> (u16, &'static str, ErrorBody) {
    let body = |kind: &str, code: Option<&str>, message: &str| {
        ErrorBody::Json(
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
        )
    };
    match failure {
        Failure::RateLimited(_) => (
            429,
            "Too Many Requests",
            body(
                "requests",
                Some("rate_limit_exceeded"),
                "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
            ),
        ),
        Failure::QuotaExhausted => (
            429,
            "Too Many Requests",
            body(
                "insufficient_quota",
                Some("insufficient_quota"),
                "You exceeded your current quota, please check your plan and billing details.",
            ),
        ),
        Failure::Unavailable | Failure::Overloaded(_) => (
            503,
            "Service Unavailable",
            body(
                "server_error",
                None,
                "The engine is currently overloaded, please try again later.",
            ),
        ),
        Failure::ServerError => (
            500,
            "Internal Server Error",
            body(
                "server_error",
                None,
                "The server had an error while processing your request. Sorry about that!",
            ),
        ),
        Failure::ContextLength => (
            400,
            "Bad Request",
            body(
                "invalid_request_error",
                Some("context_length_exceeded"),
                "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.",
            ),
        ),
        Failure::PrefillRejected => (
            400,
            "Bad Request",
            body(
                "invalid_request_error",
                None,
                super::anthropic::PREFILL_REJECTED,
            ),
        ),
        Failure::BadGateway => (502, "Bad Gateway", ErrorBody::Json(bad_gateway())),
        Failure::Unauthorized => (
            401,
            "Unauthorized",
            body(
                "invalid_request_error",
                Some("invalid_api_key"),
                &format!(
                    "Incorrect API key provided: {bearer}. You can find your API key in your account settings."
                ),
            ),
        ),
    }
}

/// OpenRouter's 502: not OpenAI's shape, the status as a number and the
/// upstream in `metadata`.
fn bad_gateway() -> Value {
    json!({"error": {
        "code": 502,
        "message": "Your chosen model is down or we received an invalid response from it.",
        "metadata": {"provider_name": "Upstream", "raw": "upstream returned an empty response"},
    }})
}

pub(super) fn rate_limit_headers(limits: &FakeRateLimits) -> Vec<(String, String)> {
    let buckets = [
        (
            "requests",
            limits.requests_limit,
            limits.requests_remaining,
            limits.requests_reset,
        ),
        (
            "tokens",
            limits.tokens_limit,
            limits.tokens_remaining,
            limits.tokens_reset,
        ),
    ];
    let mut headers = Vec::new();
    for (bucket, limit, remaining, reset) in buckets {
        headers.push((format!("x-ratelimit-limit-{bucket}"), limit.to_string()));
        headers.push((
            format!("x-ratelimit-remaining-{bucket}"),
            remaining.to_string(),
        ));
        headers.push((format!("x-ratelimit-reset-{bucket}"), go_duration(reset)));
    }
    headers
}

/// A duration as Go prints it (`6m0s`, `1s`, `20ms`, `1h30m0s`), as OpenAI sends resets.
fn go_duration(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        return format!("{}ms", duration.as_millis());
    }
    let total = duration.as_secs();
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    let millis = duration.subsec_millis();
    let seconds = if millis == 0 {
        format!("{seconds}s")
    } else {
        format!(
            "{seconds}.{}s",
            format!("{millis:03}").trim_end_matches('0')
        )
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

fn data(value: &Value) -> String {
    format!("data: {value}\n\n")
}

fn choice_chunk(delta: Value, finish_reason: Option<&str>) -> String {
    data(&json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        "usage": null,
    }))
}

/// Before any text: OpenAI's error line. After some: OpenRouter's error chunk.
fn in_band(sent: usize) -> String {
    if sent == 0 {
        data(
            &json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error", "param": null, "code": null}}),
        )
    } else {
        data(&json!({
            "id": "gen-fake", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "fake-model",
            "provider": "upstream", "error": {"code": 502, "message": "Provider disconnected unexpectedly"},
            "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
        }))
    }
}

pub(super) async fn stream(socket: &mut Chunked<'_>, answer: Answer) -> std::io::Result<()> {
    // OpenRouter keeps a waiting connection alive with SSE comments.
    chunk(socket, ": OPENROUTER PROCESSING\n\n").await?;
    chunk(
        socket,
        &choice_chunk(json!({"role": "assistant", "content": ""}), None),
    )
    .await?;
    let events = Events {
        delta: |text: &str| choice_chunk(json!({"content": text}), None),
        malformed: "data: {\"id\":\"chatcmpl-fake\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"trunc\n\n",
        in_band,
    };
    if !send_deltas(socket, &answer, events).await? {
        return Ok(());
    }
    let finish_reason = match answer.stop {
        Stop::EndTurn => "stop",
        Stop::MaxTokens => "length",
        Stop::Refusal => "content_filter",
    };
    chunk(socket, &choice_chunk(json!({}), Some(finish_reason))).await?;
    let output = answer.deltas.len() as u64;
    let usage = json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "fake-model",
        "choices": [],
        "usage": {"prompt_tokens": FAKE_INPUT_TOKENS, "completion_tokens": output, "total_tokens": FAKE_INPUT_TOKENS + output},
    });
    chunk(socket, &data(&usage)).await?;
    if answer.ending != Ending::CleanEofWithoutTerminal {
        chunk(socket, "data: [DONE]\n\n").await?;
    }
    end_body(socket).await
}
