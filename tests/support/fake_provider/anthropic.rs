//! The fake's Anthropic Messages wire format: `event:`/`data:` SSE, error
//! bodies `{"type":"error","error":{…}}`, `anthropic-ratelimit-*` headers.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::reply::{
    Answer, Chunked, Ending, ErrorBody, Events, Failure, Stop, chunk, end_body, send_deltas,
};
use super::{FAKE_INPUT_TOKENS, FakeRateLimits};

/// What a model that takes no prefill says to one.
pub(super) const PREFILL_REJECTED: &str = "This model does not support assistant message prefill. The conversation must end with a user message.";

/// What a CDN in front of the API answers when it cannot reach it.
const BAD_GATEWAY_PAGE: &str = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n</body>\r\n</html>\r\n";

pub(super) fn failure(failure: Failure) -> (u16, &'static str, ErrorBody) {
    let body = |kind: &str, message: &str| {
        ErrorBody::Json(
            json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}),
        )
    };
    match failure {
        Failure::RateLimited(_) => (
            429,
            "Too Many Requests",
            body(
                "rate_limit_error",
                "This request would exceed the rate limit for your organization of 50 requests per minute.",
            ),
        ),
        Failure::QuotaExhausted => (
            400,
            "Bad Request",
            body(
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            ),
        ),
        Failure::Unavailable => (
            503,
            "Service Unavailable",
            body("api_error", "Service unavailable"),
        ),
        Failure::Overloaded(_) => (529, "Overloaded", body("overloaded_error", "Overloaded")),
        Failure::ServerError => (
            500,
            "Internal Server Error",
            body("api_error", "Internal server error"),
        ),
        Failure::ContextLength => (
            400,
            "Bad Request",
            body(
                "invalid_request_error",
                "prompt is too long: 215000 tokens > 200000 maximum",
            ),
        ),
        Failure::Unauthorized => (
            401,
            "Unauthorized",
            body("authentication_error", "invalid x-api-key"),
        ),
        Failure::PrefillRejected => (
            400,
            "Bad Request",
            body("invalid_request_error", PREFILL_REJECTED),
        ),
        // Not the API's JSON: the proxy's own page.
        Failure::BadGateway => (502, "Bad Gateway", ErrorBody::Html(BAD_GATEWAY_PAGE)),
    }
}

/// The tokens numbers are repeated for the input- and output-token buckets.
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
        (
            "input-tokens",
            limits.tokens_limit,
            limits.tokens_remaining,
            limits.tokens_reset,
        ),
        (
            "output-tokens",
            limits.tokens_limit,
            limits.tokens_remaining,
            limits.tokens_reset,
        ),
    ];
    let mut headers = Vec::new();
    for (bucket, limit, remaining, reset) in buckets {
        headers.push((
            format!("anthropic-ratelimit-{bucket}-limit"),
            limit.to_string(),
        ));
        headers.push((
            format!("anthropic-ratelimit-{bucket}-remaining"),
            remaining.to_string(),
        ));
        headers.push((
            format!("anthropic-ratelimit-{bucket}-reset"),
            rfc3339_after(reset),
        ));
    }
    headers
}

/// The instant `after` from now, as RFC 3339 in whole seconds rounded up (as Anthropic sends resets).
fn rfc3339_after(after: Duration) -> String {
    let at = OffsetDateTime::from(SystemTime::now() + after);
    let at = at.replace_nanosecond(0).expect("zero nanoseconds") + time::Duration::SECOND;
    at.format(&Rfc3339).expect("format RFC 3339")
}

fn sse(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

fn delta(text: &str) -> String {
    let data = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}});
    sse("content_block_delta", &data)
}

pub(super) async fn stream(socket: &mut Chunked<'_>, answer: Answer) -> std::io::Result<()> {
    let start = json!({
        "type": "message_start",
        "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "content": [], "model": "fake-model",
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": FAKE_INPUT_TOKENS, "output_tokens": 1},
        },
    });
    chunk(socket, &sse("message_start", &start)).await?;
    let block = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
    chunk(socket, &sse("content_block_start", &block)).await?;
    chunk(socket, &sse("ping", &json!({"type": "ping"}))).await?;
    let events = Events {
        delta,
        malformed: "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"trunc\n\n",
        in_band: |_: usize| {
            sse(
                "error",
                &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            )
        },
    };
    if !send_deltas(socket, &answer, events).await? {
        return Ok(());
    }
    chunk(
        socket,
        &sse(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
    )
    .await?;
    let stop_reason = match answer.stop {
        Stop::EndTurn => "end_turn",
        Stop::MaxTokens => "max_tokens",
        Stop::Refusal => "refusal",
    };
    let message_delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": answer.deltas.len()},
    });
    chunk(socket, &sse("message_delta", &message_delta)).await?;
    if answer.ending != Ending::CleanEofWithoutTerminal {
        chunk(
            socket,
            &sse("message_stop", &json!({"type": "message_stop"})),
        )
        .await?;
    }
    end_body(socket).await
}
