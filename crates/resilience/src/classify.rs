//! Error classes: what a failure means for the next attempt. Judged from the
//! HTTP status AND the body's error type or code, because the same status means
//! different things (a 429 `rate_limit_error` passes; a 429 `insufficient_quota`
//! lasts until someone pays). In-band stream errors after HTTP 200 carry no
//! status and are judged by their body alone.

use switchyard_providers::{FailureKind, ProviderError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Too many requests or tokens for now: wait (honouring `retry-after`).
    RateLimit,
    /// The provider is shedding load (503, 529): wait longer, or go elsewhere.
    Overloaded,
    /// A fault of this one call (5xx, timeouts, resets, stalls, cut streams).
    Transient,
    /// Retrying the same model cannot help.
    Fatal(Fatal),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fatal {
    /// The prompt does not fit: a larger-context entry or a trimmed prompt.
    ContextLength,
    /// The model or its filter refused the content.
    Refusal,
    /// The key is missing, wrong or lacks permission.
    Auth,
    /// Out of credit or over a spend limit.
    Billing,
    /// The model or endpoint does not exist.
    NotFound,
    /// Anything else the provider rejected as malformed.
    BadRequest,
    /// Settings that cannot work; nothing was sent.
    Misconfigured,
}

impl ErrorClass {
    /// Whether another try on the same model can succeed.
    pub fn retryable(&self) -> bool {
        !matches!(self, ErrorClass::Fatal(_))
    }

    /// Whether the failure says something about the provider's health (and so
    /// counts toward its breaker). Rate limits are the governor's business and
    /// fatal errors are the request's own.
    pub fn counts_against_health(&self) -> bool {
        matches!(self, ErrorClass::Overloaded | ErrorClass::Transient)
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorClass::RateLimit => "rate limited",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::Transient => "transient",
            ErrorClass::Fatal(fatal) => fatal.as_str(),
        }
    }
}

impl Fatal {
    pub fn as_str(self) -> &'static str {
        match self {
            Fatal::ContextLength => "context length exceeded",
            Fatal::Refusal => "refused",
            Fatal::Auth => "authentication failed",
            Fatal::Billing => "out of credit",
            Fatal::NotFound => "model not found",
            Fatal::BadRequest => "bad request",
            Fatal::Misconfigured => "misconfigured",
        }
    }

    /// What the user can do about it, where it is theirs to fix.
    pub fn remedy(self, provider: &str) -> Option<String> {
        match self {
            Fatal::Auth => Some(format!(
                "check the API key for `{provider}` (its environment variable in the switchyard config)"
            )),
            Fatal::Billing => Some(format!(
                "the `{provider}` account is out of credit or over its spend limit: add credit or raise the limit"
            )),
            Fatal::NotFound => Some(format!(
                "check the model name configured for `{provider}` in the tier chains"
            )),
            Fatal::Misconfigured => Some(format!("fix the `{provider}` provider settings")),
            Fatal::ContextLength | Fatal::Refusal | Fatal::BadRequest => None,
        }
    }
}

pub fn classify(error: &ProviderError) -> ErrorClass {
    if error.kind == FailureKind::Misconfigured {
        return ErrorClass::Fatal(Fatal::Misconfigured);
    }
    let said = Said::of(error);
    // Body first: these hide behind statuses that otherwise mean "wait".
    if let Some(fatal) = fatal_said(&said, error.status) {
        return ErrorClass::Fatal(fatal);
    }
    match error.status {
        Some(429) => ErrorClass::RateLimit,
        Some(503 | 529) => ErrorClass::Overloaded,
        Some(401 | 403) => ErrorClass::Fatal(Fatal::Auth),
        Some(404) => ErrorClass::Fatal(Fatal::NotFound),
        Some(408 | 409 | 425) => ErrorClass::Transient,
        Some(status) if (400..500).contains(&status) => ErrorClass::Fatal(Fatal::BadRequest),
        Some(status) if status >= 500 => ErrorClass::Transient,
        // No failing status: an in-band error or a transport fault.
        _ => in_band(&said),
    }
}

/// The error's type, code and message, lower case, to look for words in.
struct Said {
    body: String,
    message: String,
}

impl Said {
    fn of(error: &ProviderError) -> Said {
        let body = [error.error_type.as_deref(), error.code.as_deref()]
            .into_iter()
            .flatten()
            .map(str::to_ascii_lowercase)
            .collect::<Vec<_>>()
            .join(" ");
        Said {
            body,
            message: error.message.to_ascii_lowercase(),
        }
    }

    fn any(&self, needles: &[&str]) -> bool {
        needles
            .iter()
            .any(|n| self.body.contains(n) || self.message.contains(n))
    }
}

/// The fatal errors a body names whatever the status says.
fn fatal_said(said: &Said, status: Option<u16>) -> Option<Fatal> {
    let billing = [
        "insufficient_quota",
        "billing",
        "spend limit",
        "credit balance",
        "payment_required",
    ];
    let context_length = [
        "context_length_exceeded",
        "context length",
        "context window",
        "prompt is too long",
        "maximum context",
        "too many tokens",
        "request_too_large",
    ];
    if said.any(&billing) || status == Some(402) {
        Some(Fatal::Billing)
    } else if said.any(&context_length) || status == Some(413) {
        Some(Fatal::ContextLength)
    } else if said.any(&["content_filter", "content_policy", "refusal", "safety"]) {
        Some(Fatal::Refusal)
    } else {
        None
    }
}

/// An error without a status, by what it says.
fn in_band(said: &Said) -> ErrorClass {
    if said.any(&["rate_limit"]) {
        ErrorClass::RateLimit
    } else if said.any(&["overloaded"]) {
        ErrorClass::Overloaded
    } else if said.any(&["authentication", "permission", "invalid_api_key"]) {
        ErrorClass::Fatal(Fatal::Auth)
    } else if said.any(&["not_found"]) {
        ErrorClass::Fatal(Fatal::NotFound)
    } else if said.any(&["invalid_request"]) {
        ErrorClass::Fatal(Fatal::BadRequest)
    } else {
        ErrorClass::Transient
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, error_type: &str, code: Option<&str>) -> ProviderError {
        let mut e = ProviderError::new("p", FailureKind::Status, "");
        e.status = Some(status);
        e.error_type = Some(error_type.into());
        e.code = code.map(Into::into);
        e
    }

    fn in_band(error_type: &str, message: &str) -> ProviderError {
        let mut e = ProviderError::new("p", FailureKind::InBand, message);
        e.error_type = Some(error_type.into());
        e
    }

    #[test]
    fn statuses_and_bodies_map_to_their_classes() {
        use ErrorClass::*;
        let cases = [
            (http(429, "rate_limit_error", None), RateLimit),
            (
                http(429, "requests", Some("rate_limit_exceeded")),
                RateLimit,
            ),
            (
                http(429, "insufficient_quota", Some("insufficient_quota")),
                Fatal(super::Fatal::Billing),
            ),
            (
                http(402, "payment_required", None),
                Fatal(super::Fatal::Billing),
            ),
            (http(503, "unavailable", None), Overloaded),
            (http(529, "overloaded_error", None), Overloaded),
            (http(500, "api_error", None), Transient),
            (http(502, "bad_gateway", None), Transient),
            (http(504, "timeout", None), Transient),
            (
                http(400, "invalid_request_error", None),
                Fatal(super::Fatal::BadRequest),
            ),
            (
                http(
                    400,
                    "invalid_request_error",
                    Some("context_length_exceeded"),
                ),
                Fatal(super::Fatal::ContextLength),
            ),
            (
                http(413, "request_too_large", None),
                Fatal(super::Fatal::ContextLength),
            ),
            (
                http(400, "invalid_request_error", Some("content_filter")),
                Fatal(super::Fatal::Refusal),
            ),
            (
                http(401, "authentication_error", None),
                Fatal(super::Fatal::Auth),
            ),
            (
                http(403, "permission_error", None),
                Fatal(super::Fatal::Auth),
            ),
            (
                http(404, "not_found_error", None),
                Fatal(super::Fatal::NotFound),
            ),
        ];
        for (error, class) in cases {
            assert_eq!(classify(&error), class, "{error:?}");
        }
    }

    #[test]
    fn a_prompt_too_long_message_is_context_length_even_without_a_code() {
        let mut e = http(400, "invalid_request_error", None);
        e.message = "prompt is too long: 210000 tokens > 200000 maximum".into();
        assert_eq!(classify(&e), ErrorClass::Fatal(Fatal::ContextLength));
    }

    #[test]
    fn in_band_errors_classify_like_their_http_twins() {
        assert_eq!(
            classify(&in_band("overloaded_error", "Overloaded")),
            ErrorClass::Overloaded
        );
        assert_eq!(
            classify(&in_band("rate_limit_error", "slow down")),
            ErrorClass::RateLimit
        );
        assert_eq!(
            classify(&in_band("api_error", "internal")),
            ErrorClass::Transient
        );
        assert_eq!(
            classify(&in_band("invalid_request_error", "bad")),
            ErrorClass::Fatal(Fatal::BadRequest)
        );
    }

    #[test]
    fn transport_faults_are_transient_and_settings_are_fatal() {
        for kind in [
            FailureKind::Connect,
            FailureKind::TimeoutFirstByte,
            FailureKind::TimeoutFirstToken,
            FailureKind::Stalled,
            FailureKind::StreamCut,
            FailureKind::Malformed,
        ] {
            assert_eq!(
                classify(&ProviderError::new("p", kind.clone(), "x")),
                ErrorClass::Transient,
                "{kind:?}"
            );
        }
        let e = ProviderError::new("p", FailureKind::Misconfigured, "bad url");
        assert_eq!(classify(&e), ErrorClass::Fatal(Fatal::Misconfigured));
        assert!(!classify(&e).retryable());
    }

    #[test]
    fn fatal_remedies_name_the_provider() {
        assert!(
            Fatal::Auth
                .remedy("anthropic")
                .unwrap()
                .contains("anthropic")
        );
        assert!(Fatal::Billing.remedy("openai").unwrap().contains("credit"));
        assert_eq!(Fatal::Refusal.remedy("x"), None);
    }
}
