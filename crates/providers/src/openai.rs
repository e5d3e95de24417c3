//! OpenAI-compatible chat completions (`POST {base}/chat/completions`, streamed
//! as SSE `data:` lines ending in `[DONE]`). One implementation serves OpenAI,
//! OpenRouter, Ollama, the llama.cpp server and vLLM; they differ only in base
//! URL, key and extra headers. This module owns that wire format: request body,
//! chunks, the error shapes those servers send, and the `x-ratelimit-*` headers.

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

static FORMAT: WireFormat = WireFormat {
    rate_limits,
    error_body,
};

/// A provider speaking OpenAI-compatible chat completions.
#[derive(Clone)]
pub struct OpenAiProvider {
    endpoint: Endpoint,
    supports_prefill: bool,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("name", &self.endpoint.provider)
            .field("supports_prefill", &self.supports_prefill)
            .finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// `base_url` includes the version path (e.g. `https://api.openai.com/v1`,
    /// `http://127.0.0.1:11434/v1`). `extra_headers` go on every request
    /// (OpenRouter's `HTTP-Referer` and `X-Title`). Local servers need no key.
    /// `supports_prefill` says whether the server continues a final assistant
    /// message; most do not, and get a clean restart instead.
    pub fn new(
        name: &str,
        base_url: &str,
        api_key: Option<Secret>,
        extra_headers: Vec<(String, String)>,
        supports_prefill: bool,
    ) -> Result<Self, BuildError> {
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        let endpoint = Endpoint::new(name, &url, Auth::Bearer, api_key, extra_headers, &FORMAT)?;
        Ok(OpenAiProvider {
            endpoint,
            supports_prefill,
        })
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn supports_prefill(&self) -> bool {
        self.supports_prefill
    }

    fn stream(
        &self,
        request: ChatRequest,
        timeouts: Timeouts,
    ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
        sse::call(
            self.endpoint.clone(),
            request_body(&request),
            ChunkDecoder::default(),
            timeouts,
        )
    }
}

fn request_body(request: &ChatRequest) -> Value {
    let system = request
        .system
        .iter()
        .map(|text| json!({ "role": "system", "content": text }));
    let turns = request.messages.iter().map(|message| {
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        json!({ "role": role, "content": message.content })
    });
    let mut body = json!({
        "model": request.model,
        "messages": system.chain(turns).collect::<Vec<_>>(),
        // `max_tokens` rather than OpenAI's newer `max_completion_tokens`: every
        // compatible server reads it.
        "max_tokens": request.max_tokens,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    body
}

fn rate_limits(headers: &HeaderMap, _now: SystemTime) -> RateLimits {
    ratelimit::read(
        headers,
        |bucket: Bucket, field: Field| match bucket {
            Bucket::Requests | Bucket::Tokens => Some(format!(
                "x-ratelimit-{}-{}",
                field.as_str(),
                bucket.as_str()
            )),
            Bucket::InputTokens | Bucket::OutputTokens => None,
        },
        ratelimit::parse_go_duration,
    )
}

fn error_body(bytes: &[u8]) -> Option<ErrorBody> {
    error_in(&serde_json::from_slice(bytes).ok()?)
}

/// The error a JSON value reports, in any of the shapes compatible servers use:
/// `{"error":{"message","type","code"}}` (OpenAI, OpenRouter with a numeric
/// code), `{"error":"text"}`, or vLLM's `{"object":"error","message",...}`.
fn error_in(value: &Value) -> Option<ErrorBody> {
    let detail = match value.get("error") {
        Some(Value::Object(detail)) => detail,
        Some(Value::String(text)) => {
            return Some(ErrorBody {
                message: Some(text.clone()),
                ..ErrorBody::default()
            });
        }
        _ if value.get("object").and_then(Value::as_str) == Some("error") => value.as_object()?,
        _ => return None,
    };
    let text = |key: &str| match detail.get(key) {
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Number(number)) => Some(number.to_string()),
        _ => None,
    };
    Some(ErrorBody {
        error_type: text("type"),
        code: text("code"),
        message: text("message"),
    })
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<ChunkUsage>,
}

#[derive(Deserialize)]
struct Choice {
    delta: Option<ChoiceDelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceDelta {
    content: Option<String>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

/// Reads a chat completions stream: text from `choices[0].delta.content`, the
/// finish reason from whichever chunk carries it, usage from the usage chunk,
/// and the end at `[DONE]`.
#[derive(Default)]
pub(crate) struct ChunkDecoder {
    usage: Usage,
    finish_reason: Option<String>,
}

impl Decoder for ChunkDecoder {
    fn decode(&mut self, _event: &str, data: &str) -> Decoded {
        if data.trim() == "[DONE]" {
            return Decoded::End(Finish {
                reason: finish_reason(self.finish_reason.as_deref()),
                usage: self.usage,
            });
        }
        let value: Value = match serde_json::from_str(data) {
            Ok(value) => value,
            Err(e) => {
                return Decoded::Malformed(format!(
                    "unreadable chunk ({e}): {}",
                    sse::excerpt(data)
                ));
            }
        };
        if let Some(error) = error_in(&value) {
            return Decoded::InBand(error);
        }
        let chunk: Chunk = match serde_json::from_value(value) {
            Ok(chunk) => chunk,
            Err(e) => {
                return Decoded::Malformed(format!(
                    "unexpected chunk shape ({e}): {}",
                    sse::excerpt(data)
                ));
            }
        };
        if let Some(usage) = chunk.usage {
            self.usage = Usage {
                input_tokens: usage.prompt_tokens.unwrap_or(self.usage.input_tokens),
                output_tokens: usage.completion_tokens.unwrap_or(self.usage.output_tokens),
            };
        }
        let Some(choice) = chunk.choices.into_iter().next() else {
            return Decoded::Nothing;
        };
        match choice.finish_reason.as_deref() {
            // OpenRouter ends a failed generation with finish_reason "error" (the
            // chunk's `error` object, when present, was handled above).
            Some("error") => {
                return Decoded::InBand(ErrorBody {
                    error_type: Some("error".to_owned()),
                    message: Some("the stream finished with finish_reason \"error\"".to_owned()),
                    ..ErrorBody::default()
                });
            }
            Some(reason) => self.finish_reason = Some(reason.to_owned()),
            None => {}
        }
        match choice.delta.and_then(|delta| delta.content) {
            Some(text) => Decoded::Text(text),
            None => Decoded::Nothing,
        }
    }

    fn terminal(&self) -> &'static str {
        "data: [DONE]"
    }

    fn finished(&self) -> Option<Finish> {
        self.finish_reason.as_ref().map(|reason| Finish {
            reason: finish_reason(Some(reason)),
            usage: self.usage,
        })
    }
}

fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop") => FinishReason::EndTurn,
        Some("length") => FinishReason::MaxTokens,
        Some("content_filter") => FinishReason::Refusal,
        Some("tool_calls" | "function_call") => FinishReason::ToolUse,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::Other("unreported".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::header::{HeaderName, HeaderValue};

    use super::*;
    use crate::ChatMessage;

    fn decode_all(lines: &[&str]) -> Vec<Decoded> {
        let mut decoder = ChunkDecoder::default();
        lines
            .iter()
            .map(|data| decoder.decode("message", data))
            .collect()
    }

    #[test]
    fn a_full_stream_yields_text_then_finish_with_usage() {
        let decoded = decode_all(&[
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}"#,
            "[DONE]",
        ]);
        assert_eq!(
            decoded,
            vec![
                Decoded::Text(String::new()),
                Decoded::Text("Hello".into()),
                Decoded::Nothing,
                Decoded::Nothing,
                Decoded::End(Finish {
                    reason: FinishReason::EndTurn,
                    usage: Usage {
                        input_tokens: 9,
                        output_tokens: 12
                    }
                }),
            ]
        );
    }

    #[test]
    fn text_and_finish_reason_in_one_chunk_both_count() {
        let decoded = decode_all(&[
            r#"{"choices":[{"index":0,"delta":{"content":"end."},"finish_reason":"length"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(decoded[0], Decoded::Text("end.".into()));
        assert_eq!(
            decoded[1],
            Decoded::End(Finish {
                reason: FinishReason::MaxTokens,
                usage: Usage::default()
            })
        );
    }

    #[test]
    fn finish_reasons_map() {
        for (wire, reason) in [
            ("stop", FinishReason::EndTurn),
            ("length", FinishReason::MaxTokens),
            ("content_filter", FinishReason::Refusal),
            ("tool_calls", FinishReason::ToolUse),
            ("eos", FinishReason::Other("eos".into())),
        ] {
            let chunk =
                format!(r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":"{wire}"}}]}}"#);
            let decoded = decode_all(&[chunk.as_str(), "[DONE]"]);
            assert_eq!(
                decoded[1],
                Decoded::End(Finish {
                    reason,
                    usage: Usage::default()
                }),
                "{wire}"
            );
        }
    }

    #[test]
    fn in_band_errors_in_every_shape() {
        let openai = decode_all(&[
            r#"{"error":{"message":"The server had an error","type":"server_error","code":null}}"#,
        ]);
        assert_eq!(
            openai[0],
            Decoded::InBand(ErrorBody {
                error_type: Some("server_error".into()),
                code: None,
                message: Some("The server had an error".into())
            })
        );
        let openrouter = decode_all(&[
            r#"{"id":"gen-1","object":"chat.completion.chunk","error":{"code":502,"message":"Provider disconnected"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#,
        ]);
        assert_eq!(
            openrouter[0],
            Decoded::InBand(ErrorBody {
                error_type: None,
                code: Some("502".into()),
                message: Some("Provider disconnected".into())
            })
        );
        let vllm = decode_all(&[
            r#"{"object":"error","message":"out of memory","type":"InternalServerError","param":null,"code":500}"#,
        ]);
        assert!(
            matches!(&vllm[0], Decoded::InBand(body) if body.code.as_deref() == Some("500")),
            "{vllm:?}"
        );
        let bare_finish =
            decode_all(&[r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}]}"#]);
        assert!(
            matches!(bare_finish[0], Decoded::InBand(_)),
            "{bare_finish:?}"
        );
    }

    #[test]
    fn non_json_data_is_malformed() {
        let decoded = decode_all(&[r#"{"choices":[{"delta":{"content":"hel"#]);
        assert!(
            matches!(&decoded[0], Decoded::Malformed(m) if m.contains("unreadable chunk")),
            "{decoded:?}"
        );
        let decoded = decode_all(&["not json at all"]);
        assert!(matches!(decoded[0], Decoded::Malformed(_)), "{decoded:?}");
    }

    #[test]
    fn a_text_chunk_of_the_wrong_shape_is_malformed_not_skipped() {
        let decoded = decode_all(&[r#"{"choices":[{"index":0,"delta":{"content":42}}]}"#]);
        assert!(matches!(decoded[0], Decoded::Malformed(_)), "{decoded:?}");
    }

    #[test]
    fn error_bodies_parse_into_type_and_code() {
        let quota = br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        assert_eq!(
            error_body(quota),
            Some(ErrorBody {
                error_type: Some("insufficient_quota".into()),
                code: Some("insufficient_quota".into()),
                message: Some("You exceeded your current quota".into()),
            })
        );
        let rate = br#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
        assert_eq!(
            error_body(rate).unwrap().code.as_deref(),
            Some("rate_limit_exceeded")
        );
        let context = br#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let parsed = error_body(context).unwrap();
        assert_eq!(parsed.error_type.as_deref(), Some("invalid_request_error"));
        assert_eq!(parsed.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(
            error_body(br#"{"error":"model 'x' not found"}"#)
                .unwrap()
                .message
                .as_deref(),
            Some("model 'x' not found")
        );
        assert_eq!(error_body(b"Bad Gateway"), None);
        assert_eq!(error_body(br#"{"id":"x"}"#), None);
    }

    #[test]
    fn rate_limit_headers_parse_go_durations() {
        let headers: HeaderMap = [
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]
        .into_iter()
        .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
        .collect();
        let limits = rate_limits(&headers, SystemTime::now());
        assert_eq!(
            limits,
            RateLimits {
                requests_limit: Some(60),
                requests_remaining: Some(59),
                requests_reset: Some(Duration::from_secs(1)),
                tokens_limit: Some(150000),
                tokens_remaining: Some(149984),
                tokens_reset: Some(Duration::from_secs(360)),
                ..RateLimits::default()
            }
        );
    }

    #[test]
    fn request_body_puts_system_first_and_asks_for_usage() {
        let request = ChatRequest {
            model: "qwen".into(),
            system: Some("be brief".into()),
            messages: vec![ChatMessage {
                role: Role::User,
                content: "hi".into(),
            }],
            max_tokens: 32,
            temperature: Some(0.5),
        };
        assert_eq!(
            request_body(&request),
            json!({
                "model": "qwen",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                ],
                "max_tokens": 32,
                "stream": true,
                "stream_options": {"include_usage": true},
                "temperature": 0.5,
            })
        );
    }
}
