//! Model providers: the streaming [`Provider`] interface and its implementations.
//! `local/` holds the in-process llama.cpp engine; the remote providers speak the
//! Anthropic Messages API and the OpenAI-compatible chat completions API.
//!
//! `anthropic` and `openai` each own one wire format; `http` (connection pool,
//! connect and first-byte timeouts, error responses) and `sse` (first-token and
//! idle timeouts, the terminal-event rule) are the plumbing they share;
//! `ratelimit` reads rate-limit header values; `secret` holds API keys.
//!
//! Architecture Invariant: wire formats live only in their provider module. The
//! rest of switchyard sees [`ChatRequest`], [`StreamEvent`] and [`ProviderError`].

pub mod anthropic;
mod http;
pub mod local;
pub mod openai;
pub mod ratelimit;
pub mod secret;
mod sse;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

/// Which remote API a configured provider speaks; configuration owns the type.
/// Which wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The Anthropic Messages API.
    Anthropic,
    /// Any OpenAI-compatible chat completions API (OpenAI, OpenRouter, Ollama, llama.cpp server, vLLM).
    Openai,
}
pub use anthropic::AnthropicProvider;
pub use openai::OpenAiProvider;
pub use secret::Secret;

/// What a remote task asks a chat model.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub system: Option<String>,
    /// Alternating turns. A final assistant message is a prefill: the model
    /// continues it (used to resume a cut stream where the provider allows).
    pub messages: Vec<ChatMessage>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// Limits on each phase of a call. Every remote call has all four.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    /// From sending the request to the response headers.
    pub first_byte: Duration,
    /// From the response headers to the first generated text.
    pub first_token: Duration,
    /// Longest silence between two stream events once text flows.
    pub idle: Duration,
}

/// One event of a streamed answer. A stream yields `Delta`s and then exactly one
/// `End`, or an error; a stream that stops without its terminal event is an
/// error (`FailureKind::StreamCut`), never a truncated success.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    Delta(String),
    /// An event that was not the wire format, skipped: the answer goes on,
    /// but it is a sign of a degraded provider. Repeated garbage ends the
    /// stream as `Malformed` instead.
    Skipped(String),
    End(Finish),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    pub reason: FinishReason,
    pub usage: Usage,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The model finished its answer.
    EndTurn,
    /// Cut by `max_tokens`.
    MaxTokens,
    StopSequence,
    /// The provider refused or filtered the content.
    Refusal,
    ToolUse,
    Other(String),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Rate-limit state reported by a response's headers (Anthropic
/// `anthropic-ratelimit-*`, OpenAI `x-ratelimit-*`). `None` where not reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimits {
    pub requests_limit: Option<u64>,
    pub requests_remaining: Option<u64>,
    pub requests_reset: Option<Duration>,
    pub tokens_limit: Option<u64>,
    pub tokens_remaining: Option<u64>,
    pub tokens_reset: Option<Duration>,
    pub input_tokens_limit: Option<u64>,
    pub input_tokens_remaining: Option<u64>,
    pub input_tokens_reset: Option<Duration>,
    pub output_tokens_limit: Option<u64>,
    pub output_tokens_remaining: Option<u64>,
    pub output_tokens_reset: Option<Duration>,
}

/// How a call failed, as observed (classification into retry classes happens elsewhere).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// Could not connect, or the connection was reset before a response.
    Connect,
    /// A non-success HTTP status.
    Status,
    TimeoutFirstByte,
    TimeoutFirstToken,
    /// The stream went silent for longer than `Timeouts::idle`.
    Stalled,
    /// The stream ended (or the connection dropped) before its terminal event.
    StreamCut,
    /// The provider sent something that is not its wire format.
    Malformed,
    /// An error event inside a stream that started with HTTP 200.
    InBand,
    /// The provider's settings cannot work (bad base URL, header or key); no
    /// request was sent. Fix the configuration; retrying cannot help.
    Misconfigured,
}

/// A typed provider error. Never contains an API key (ARCHITECTURE.md invariant 11).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{provider}: {message}")]
pub struct ProviderError {
    pub provider: String,
    pub kind: FailureKind,
    pub status: Option<u16>,
    /// Body-level error type, e.g. `rate_limit_error`, `overloaded_error`, `insufficient_quota`.
    pub error_type: Option<String>,
    /// Body-level error code where the provider sends one, e.g. `context_length_exceeded`.
    pub code: Option<String>,
    pub message: String,
    /// From `retry-after` (seconds or an HTTP date), when present.
    pub retry_after: Option<Duration>,
    pub rate_limits: RateLimits,
    /// Text streamed before the failure (for continuation).
    pub partial: String,
}

impl ProviderError {
    /// An error with no HTTP details (status, body type, headers, partial text).
    pub fn new(
        provider: impl Into<String>,
        kind: FailureKind,
        message: impl Into<String>,
    ) -> ProviderError {
        ProviderError {
            provider: provider.into(),
            kind,
            status: None,
            error_type: None,
            code: None,
            message: message.into(),
            retry_after: None,
            rate_limits: RateLimits::default(),
            partial: String::new(),
        }
    }
}

/// An answer being streamed, with the rate-limit state its headers reported.
pub struct ResponseStream {
    pub events: BoxStream<'static, Result<StreamEvent, ProviderError>>,
    pub rate_limits: RateLimits,
}

/// A chat model provider. Implementations enforce `Timeouts` and the terminal-event rule.
pub trait Provider: Send + Sync {
    /// The configured name (e.g. `anthropic`, `openrouter`).
    fn name(&self) -> &str;
    /// Whether a final assistant message is continued (prefill). Providers that
    /// reject it get a clean restart instead.
    fn supports_prefill(&self) -> bool;
    fn stream(
        &self,
        request: ChatRequest,
        timeouts: Timeouts,
    ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>>;
}

/// A provider's settings that cannot work; nothing was built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("provider {provider}: base URL {url:?} is not usable: {reason}")]
    BadUrl {
        provider: String,
        url: String,
        reason: String,
    },
    #[error("provider {provider}: header {name:?} is not a valid HTTP header name and value")]
    BadHeader { provider: String, name: String },
    #[error(
        "provider {provider}: the API key contains characters that cannot go in an HTTP header"
    )]
    BadKey { provider: String },
}

/// Builds the remote provider for one configured entry. `api_key` was already
/// read from the environment variable the configuration names. All providers
/// share one connection pool. Settings that cannot work give a provider whose
/// every call fails with [`FailureKind::Misconfigured`] and says why; use
/// [`try_build`] to catch them up front (`config check`).
pub fn build(
    name: &str,
    kind: ProviderKind,
    base_url: &str,
    api_key: Option<Secret>,
    extra_headers: Vec<(String, String)>,
) -> Arc<dyn Provider> {
    try_build(name, kind, base_url, api_key, extra_headers).unwrap_or_else(|error| {
        Arc::new(Misconfigured {
            name: name.to_owned(),
            error,
        })
    })
}

/// [`build`], reporting settings that cannot work instead of deferring them to the first call.
pub fn try_build(
    name: &str,
    kind: ProviderKind,
    base_url: &str,
    api_key: Option<Secret>,
    extra_headers: Vec<(String, String)>,
) -> Result<Arc<dyn Provider>, BuildError> {
    Ok(match kind {
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(
            name,
            base_url,
            api_key,
            extra_headers,
        )?),
        ProviderKind::Openai => Arc::new(OpenAiProvider::new(
            name,
            base_url,
            api_key,
            extra_headers,
            false,
        )?),
    })
}

/// Stands in for a provider whose settings cannot work, so one bad entry does
/// not stop the others from being built.
struct Misconfigured {
    name: String,
    error: BuildError,
}

impl Provider for Misconfigured {
    fn name(&self) -> &str {
        &self.name
    }

    fn supports_prefill(&self) -> bool {
        false
    }

    fn stream(
        &self,
        _request: ChatRequest,
        _timeouts: Timeouts,
    ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
        let error = ProviderError::new(
            self.name.clone(),
            FailureKind::Misconfigured,
            self.error.to_string(),
        );
        Box::pin(async move { Err(error) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_build_refuses_a_base_url_that_is_not_http() {
        let error = try_build(
            "local",
            ProviderKind::Openai,
            "localhost:11434",
            None,
            Vec::new(),
        )
        .err()
        .unwrap();
        assert!(matches!(error, BuildError::BadUrl { .. }), "{error:?}");
        assert!(error.to_string().contains("local"), "{error}");
    }

    #[test]
    fn try_build_refuses_an_invalid_extra_header_by_name() {
        let headers = vec![("X Title".to_owned(), "switchyard".to_owned())];
        let error = try_build(
            "openrouter",
            ProviderKind::Openai,
            "https://openrouter.ai/api/v1",
            None,
            headers,
        );
        assert_eq!(
            error.err(),
            Some(BuildError::BadHeader {
                provider: "openrouter".into(),
                name: "X Title".into()
            })
        );
    }

    #[tokio::test]
    async fn a_misconfigured_provider_fails_every_call_with_the_reason() {
        let provider = build(
            "broken",
            ProviderKind::Anthropic,
            "not a url",
            None,
            Vec::new(),
        );
        let request = ChatRequest {
            model: "m".into(),
            system: None,
            messages: Vec::new(),
            max_tokens: 1,
            temperature: None,
        };
        let timeouts = Timeouts {
            connect: Duration::from_secs(1),
            first_byte: Duration::from_secs(1),
            first_token: Duration::from_secs(1),
            idle: Duration::from_secs(1),
        };
        let error = provider.stream(request, timeouts).await.err().unwrap();
        assert_eq!(error.kind, FailureKind::Misconfigured);
        assert!(error.to_string().contains("not a url"), "{error}");
    }

    #[test]
    fn build_gives_prefill_to_anthropic_only() {
        let key = || Some(Secret::new("sk-test"));
        let anthropic = build(
            "a",
            ProviderKind::Anthropic,
            "https://api.anthropic.com",
            key(),
            Vec::new(),
        );
        let openai = build(
            "o",
            ProviderKind::Openai,
            "https://api.openai.com/v1",
            key(),
            Vec::new(),
        );
        assert!(anthropic.supports_prefill());
        assert!(!openai.supports_prefill());
        assert_eq!(anthropic.name(), "a");
    }

    #[test]
    fn a_provider_debug_never_shows_its_key() {
        let provider = AnthropicProvider::new(
            "a",
            "https://api.anthropic.com",
            Some(Secret::new("sk-ant-xyz")),
            Vec::new(),
        );
        assert!(!format!("{provider:?}").contains("sk-ant-xyz"));
    }
}
