//! The Anthropic Messages API (`POST /v1/messages`, streamed as SSE). This
//! module owns that wire format: request body, event types, error bodies and
//! the `anthropic-ratelimit-*` headers.

use std::time::SystemTime;

use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{Auth, Endpoint, ErrorBody, WireFormat};
use super::ratelimit::{self, Bucket, Field};
use super::secret::Secret;
use super::sse::{self, Decoded, Decoder};
use super::{
    BuildError, ChatRequest, Finish, FinishReason, Provider, ProviderError, RateLimits,
    ResponseStream, Role, Timeouts, Usage,
};

const API_VERSION: &str = "2023-06-01";

static FORMAT: WireFormat = WireFormat {
    rate_limits,
    error_body,
};

/// A provider speaking the Anthropic Messages API. Prefill is supported: a final
/// assistant message is continued.
#[derive(Clone)]
pub struct AnthropicProvider {
    endpoint: Endpoint,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("name", &self.endpoint.provider)
            .finish_non_exhaustive()
    }
}

impl AnthropicProvider {
    /// `base_url` is the API root without `/v1` (e.g. `https://api.anthropic.com`).
    /// `extra_headers` go on every request (e.g. `anthropic-beta`).
    pub fn new(
        name: &str,
        base_url: &str,
        api_key: Option<Secret>,
        extra_headers: Vec<(String, String)>,
    ) -> Result<Self, BuildError> {
        let url = format!("{}/v1/messages", base_url.trim_end_matches('/'));
        let mut headers = vec![("anthropic-version".to_owned(), API_VERSION.to_owned())];
        headers.extend(extra_headers);
        let endpoint = Endpoint::new(
            name,
            &url,
            Auth::Header("x-api-key"),
            api_key,
            headers,
            &FORMAT,
        )?;
        Ok(AnthropicProvider { endpoint })
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn supports_prefill(&self) -> bool {
        true
    }

    fn stream(
        &self,
        request: ChatRequest,
        timeouts: Timeouts,
    ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
        sse::call(
            self.endpoint.clone(),
            request_body(&request),
            MessageDecoder::default(),
            timeouts,
        )
    }
}

fn request_body(request: &ChatRequest) -> Value {
    let last = request.messages.len().saturating_sub(1);
    let messages: Vec<Value> = request
        .messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let role = match message.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            // The API rejects a prefill that ends in whitespace.
            let content = if i == last && message.role == Role::Assistant {
                message.content.trim_end()
            } else {
                message.content.as_str()
            };
            json!({ "role": role, "content": content })
        })
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
        "stream": true,
    });
    if let Some(system) = &request.system {
        body["system"] = json!(system);
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    body
}

fn rate_limits(headers: &HeaderMap, now: SystemTime) -> RateLimits {
    ratelimit::read(
        headers,
        |bucket: Bucket, field: Field| {
            Some(format!(
                "anthropic-ratelimit-{}-{}",
                bucket.as_str(),
                field.as_str()
            ))
        },
        |value| ratelimit::parse_reset_instant(value, now),
    )
}

/// `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
fn error_body(bytes: &[u8]) -> Option<ErrorBody> {
    let envelope: ErrorEnvelope = serde_json::from_slice(bytes).ok()?;
    Some(envelope.error.into())
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(rename = "type")]
    kind: Option<String>,
    message: Option<String>,
}

impl From<ErrorDetail> for ErrorBody {
    fn from(detail: ErrorDetail) -> Self {
        ErrorBody {
            error_type: detail.kind,
            code: None,
            message: detail.message,
        }
    }
}

/// The events of a Messages stream. Events this reader does not need (ping,
/// content_block_start/stop, and any added later) fall into `Other`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum MessageEvent {
    MessageStart {
        message: StartedMessage,
    },
    ContentBlockDelta {
        delta: BlockDelta,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        usage: Option<UsageCounts>,
    },
    MessageStop {},
    Error {
        error: ErrorDetail,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartedMessage {
    usage: Option<UsageCounts>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    /// Tool input, thinking and signature deltas carry no answer text.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct UsageCounts {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

/// Reads a Messages stream: usage from `message_start` and `message_delta`, the
/// stop reason from `message_delta`, and the end at `message_stop`.
#[derive(Default)]
pub(crate) struct MessageDecoder {
    usage: Usage,
    stop_reason: Option<String>,
}

impl MessageDecoder {
    fn count(&mut self, usage: Option<UsageCounts>) {
        let Some(usage) = usage else { return };
        if let Some(input) = usage.input_tokens {
            self.usage.input_tokens = input;
        }
        if let Some(output) = usage.output_tokens {
            self.usage.output_tokens = output;
        }
    }
}

impl Decoder for MessageDecoder {
    fn decode(&mut self, event: &str, data: &str) -> Decoded {
        let parsed: MessageEvent = match serde_json::from_str(data) {
            Ok(parsed) => parsed,
            Err(e) => {
                return Decoded::Malformed(format!(
                    "unreadable {event} event ({e}): {}",
                    sse::excerpt(data)
                ));
            }
        };
        match parsed {
            MessageEvent::MessageStart { message } => {
                self.count(message.usage);
                Decoded::Nothing
            }
            MessageEvent::ContentBlockDelta {
                delta: BlockDelta::TextDelta { text },
            } => Decoded::Text(text),
            MessageEvent::ContentBlockDelta {
                delta: BlockDelta::Other,
            } => Decoded::Nothing,
            MessageEvent::MessageDelta { delta, usage } => {
                self.count(usage);
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                Decoded::Nothing
            }
            MessageEvent::MessageStop {} => Decoded::End(Finish {
                reason: finish_reason(self.stop_reason.as_deref()),
                usage: self.usage,
            }),
            MessageEvent::Error { error } => Decoded::InBand(error.into()),
            MessageEvent::Other => Decoded::Nothing,
        }
    }

    fn terminal(&self) -> &'static str {
        "message_stop"
    }

    fn finished(&self) -> Option<Finish> {
        self.stop_reason.as_ref().map(|reason| Finish {
            reason: finish_reason(Some(reason)),
            usage: self.usage,
        })
    }
}

fn finish_reason(stop_reason: Option<&str>) -> FinishReason {
    match stop_reason {
        Some("end_turn") => FinishReason::EndTurn,
        Some("max_tokens") => FinishReason::MaxTokens,
        Some("stop_sequence") => FinishReason::StopSequence,
        Some("tool_use") => FinishReason::ToolUse,
        Some("refusal") => FinishReason::Refusal,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::Other("unreported".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::header::{HeaderName, HeaderValue};
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;

    use super::*;
    use crate::ChatMessage;

    fn decode_all(events: &[(&str, &str)]) -> Vec<Decoded> {
        let mut decoder = MessageDecoder::default();
        events
            .iter()
            .map(|(event, data)| decoder.decode(event, data))
            .collect()
    }

    #[test]
    fn a_full_stream_yields_text_then_finish_with_usage() {
        let decoded = decode_all(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            ("ping", r#"{"type": "ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" world"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]);
        let meaningful: Vec<_> = decoded
            .into_iter()
            .filter(|d| *d != Decoded::Nothing)
            .collect();
        assert_eq!(
            meaningful,
            vec![
                Decoded::Text("Hello".into()),
                Decoded::Text(" world".into()),
                Decoded::End(Finish {
                    reason: FinishReason::EndTurn,
                    usage: Usage {
                        input_tokens: 25,
                        output_tokens: 15
                    }
                }),
            ]
        );
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        for (wire, reason) in [
            ("max_tokens", FinishReason::MaxTokens),
            ("stop_sequence", FinishReason::StopSequence),
            ("tool_use", FinishReason::ToolUse),
            ("refusal", FinishReason::Refusal),
            ("pause_turn", FinishReason::Other("pause_turn".into())),
        ] {
            let delta = format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"{wire}"}},"usage":{{"output_tokens":3}}}}"#
            );
            let decoded = decode_all(&[
                ("message_delta", delta.as_str()),
                ("message_stop", r#"{"type":"message_stop"}"#),
            ]);
            assert_eq!(
                decoded[1],
                Decoded::End(Finish {
                    reason,
                    usage: Usage {
                        input_tokens: 0,
                        output_tokens: 3
                    }
                }),
                "{wire}"
            );
        }
    }

    #[test]
    fn in_band_error_event_carries_type_and_message() {
        let decoded = decode_all(&[(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )]);
        assert_eq!(
            decoded,
            vec![Decoded::InBand(ErrorBody {
                error_type: Some("overloaded_error".into()),
                code: None,
                message: Some("Overloaded".into())
            })]
        );
    }

    #[test]
    fn non_json_data_is_malformed() {
        let decoded = decode_all(&[(
            "content_block_delta",
            r#"{"type":"content_block_delta","delta":{"type":"text_de"#,
        )]);
        assert!(
            matches!(&decoded[0], Decoded::Malformed(m) if m.contains("content_block_delta")),
            "{decoded:?}"
        );
    }

    #[test]
    fn text_delta_without_text_is_malformed_not_skipped() {
        let decoded = decode_all(&[(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}}"#,
        )]);
        assert!(matches!(decoded[0], Decoded::Malformed(_)), "{decoded:?}");
    }

    #[test]
    fn unknown_events_and_deltas_are_skipped() {
        let decoded = decode_all(&[
            ("future_event", r#"{"type":"future_event","stuff":[1,2]}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#,
            ),
        ]);
        assert_eq!(decoded, vec![Decoded::Nothing, Decoded::Nothing]);
    }

    #[test]
    fn error_bodies_parse_into_type_and_message() {
        let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"},"request_id":"req_1"}"#;
        assert_eq!(
            error_body(body),
            Some(ErrorBody {
                error_type: Some("rate_limit_error".into()),
                code: None,
                message: Some(
                    "Number of request tokens has exceeded your per-minute rate limit".into()
                ),
            })
        );
        assert_eq!(error_body(b"<html>502 Bad Gateway</html>"), None);
    }

    #[test]
    fn rate_limit_headers_parse_with_resets_relative_to_now() {
        let now: SystemTime = OffsetDateTime::parse("2025-06-01T12:00:00Z", &Rfc3339)
            .unwrap()
            .into();
        let headers: HeaderMap = [
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-requests-reset", "2025-06-01T12:00:01Z"),
            ("anthropic-ratelimit-tokens-limit", "90000"),
            ("anthropic-ratelimit-tokens-remaining", "80000"),
            ("anthropic-ratelimit-tokens-reset", "2025-06-01T12:00:30Z"),
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-input-tokens-remaining", "39000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2025-06-01T12:01:00Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "8000"),
            ("anthropic-ratelimit-output-tokens-remaining", "7000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2025-06-01T12:00:02.500Z",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
        .collect();
        let limits = rate_limits(&headers, now);
        assert_eq!(
            limits,
            RateLimits {
                requests_limit: Some(50),
                requests_remaining: Some(49),
                requests_reset: Some(Duration::from_secs(1)),
                tokens_limit: Some(90000),
                tokens_remaining: Some(80000),
                tokens_reset: Some(Duration::from_secs(30)),
                input_tokens_limit: Some(40000),
                input_tokens_remaining: Some(39000),
                input_tokens_reset: Some(Duration::from_secs(60)),
                output_tokens_limit: Some(8000),
                output_tokens_remaining: Some(7000),
                output_tokens_reset: Some(Duration::from_millis(2500)),
            }
        );
    }

    #[test]
    fn request_body_streams_with_system_and_trims_prefill() {
        let request = ChatRequest {
            model: "claude-x".into(),
            system: Some("be brief".into()),
            messages: vec![
                ChatMessage {
                    role: Role::User,
                    content: "write fn".into(),
                },
                ChatMessage {
                    role: Role::Assistant,
                    content: "fn main() {\n".into(),
                },
            ],
            max_tokens: 64,
            temperature: None,
        };
        let body = request_body(&request);
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 64,
                "system": "be brief",
                "stream": true,
                "messages": [
                    {"role": "user", "content": "write fn"},
                    {"role": "assistant", "content": "fn main() {"},
                ],
            })
        );
    }
}
