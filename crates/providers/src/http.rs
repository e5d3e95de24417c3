//! HTTP plumbing shared by the remote providers: the connection pool, the
//! connect and first-byte timeouts, and turning a refused request into a
//! [`ProviderError`]. It knows a wire format only through [`WireFormat`].

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Response, Url};

use super::secret::Secret;
use super::{BuildError, FailureKind, ProviderError, RateLimits, Timeouts};

/// Error bodies larger than this are cut before parsing; they are diagnostics, not data.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// How much of an unparseable body an error message quotes.
const QUOTE_CHARS: usize = 300;

/// What an error body (or an in-band error event) says, in any wire format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ErrorBody {
    pub error_type: Option<String>,
    pub code: Option<String>,
    pub message: Option<String>,
}

/// The parts of a wire format the shared plumbing needs.
pub(crate) struct WireFormat {
    pub rate_limits: fn(&HeaderMap, SystemTime) -> RateLimits,
    /// Parses an error body; `None` when the bytes are not this format's error shape.
    pub error_body: fn(&[u8]) -> Option<ErrorBody>,
}

/// How a request carries the API key.
pub(crate) enum Auth {
    /// The bare key in the named header (Anthropic's `x-api-key`).
    Header(&'static str),
    /// `Authorization: Bearer <key>` (OpenAI and compatible servers).
    Bearer,
}

/// Where one provider's requests go and how they are signed.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub provider: String,
    url: Url,
    headers: HeaderMap,
    secret: Option<Secret>,
    format: &'static WireFormat,
}

/// A response that came back with a success status and an event stream.
pub(crate) struct Opened {
    pub response: Response,
    pub rate_limits: RateLimits,
}

impl Endpoint {
    /// The key's header is marked sensitive so no HTTP layer prints it.
    pub(crate) fn new(
        provider: &str,
        url: &str,
        auth: Auth,
        secret: Option<Secret>,
        headers: Vec<(String, String)>,
        format: &'static WireFormat,
    ) -> Result<Self, BuildError> {
        let url = Url::parse(url).map_err(|e| BuildError::BadUrl {
            provider: provider.to_owned(),
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(BuildError::BadUrl {
                provider: provider.to_owned(),
                url: url.to_string(),
                reason: "the scheme must be http or https".to_owned(),
            });
        }
        let mut map = HeaderMap::new();
        map.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        for (name, value) in headers {
            let bad = || BuildError::BadHeader {
                provider: provider.to_owned(),
                name: name.clone(),
            };
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let value = HeaderValue::from_str(&value).map_err(|_| bad())?;
            map.insert(header, value);
        }
        if let Some(secret) = &secret {
            let (name, text) = match auth {
                Auth::Header(name) => (HeaderName::from_static(name), secret.expose().to_owned()),
                Auth::Bearer => (
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {}", secret.expose()),
                ),
            };
            let mut value = HeaderValue::from_str(&text).map_err(|_| BuildError::BadKey {
                provider: provider.to_owned(),
            })?;
            value.set_sensitive(true);
            map.insert(name, value);
        }
        Ok(Endpoint {
            provider: provider.to_owned(),
            url,
            headers: map,
            secret,
            format,
        })
    }

    /// An error of `kind` from this provider; the key is scrubbed from `message`.
    pub(crate) fn error(&self, kind: FailureKind, message: impl Into<String>) -> ProviderError {
        ProviderError::new(self.provider.clone(), kind, self.scrub(message.into()))
    }

    /// An error built from an error body: `what` says where it came from.
    pub(crate) fn body_error(
        &self,
        kind: FailureKind,
        what: &str,
        body: ErrorBody,
    ) -> ProviderError {
        let label = body.error_type.as_deref().or(body.code.as_deref());
        let message = match (label, body.message.as_deref()) {
            (Some(label), Some(text)) => format!("{what} {label}: {text}"),
            (Some(label), None) => format!("{what} {label}"),
            (None, Some(text)) => format!("{what}: {text}"),
            (None, None) => what.to_owned(),
        };
        ProviderError {
            error_type: body.error_type.map(|text| self.scrub(text)),
            code: body.code.map(|text| self.scrub(text)),
            ..self.error(kind, message)
        }
    }

    /// `text` without the key: servers quote requests back in their errors.
    /// Scrub before cutting text short: a cut through the key would leave its
    /// start behind, which the scrub no longer recognises.
    pub(crate) fn scrub(&self, text: String) -> String {
        match &self.secret {
            Some(secret) if !secret.expose().is_empty() && text.contains(secret.expose()) => {
                secret.scrub(&text)
            }
            _ => text,
        }
    }

    /// Sends `body` and waits for response headers, within `timeouts.connect`
    /// for the connection and `timeouts.first_byte` for the whole exchange.
    pub(crate) async fn open(
        &self,
        body: &serde_json::Value,
        timeouts: &Timeouts,
    ) -> Result<Opened, ProviderError> {
        let client = client(timeouts.connect).map_err(|e| self.error(FailureKind::Connect, e))?;
        let send = client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .json(body)
            .send();
        let response = match tokio::time::timeout(timeouts.first_byte, send).await {
            Err(_) => {
                return Err(self.error(
                    FailureKind::TimeoutFirstByte,
                    format!("no response headers within {:?}", timeouts.first_byte),
                ));
            }
            Ok(Err(e)) => return Err(self.transport_error(&e, timeouts)),
            Ok(Ok(response)) => response,
        };
        let rate_limits = (self.format.rate_limits)(response.headers(), SystemTime::now());
        if !response.status().is_success() {
            return Err(self.failed_status(response, rate_limits, timeouts).await);
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match content_type {
            Some(kind)
                if !kind
                    .trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream") =>
            {
                Err(self
                    .not_a_stream(response, &kind, rate_limits, timeouts)
                    .await)
            }
            _ => Ok(Opened {
                response,
                rate_limits,
            }),
        }
    }

    /// The error a failing status carries, from its body where it says one.
    async fn failed_status(
        &self,
        response: Response,
        rate_limits: RateLimits,
        timeouts: &Timeouts,
    ) -> ProviderError {
        let status = response.status().as_u16();
        let retry_after = super::ratelimit::retry_after(response.headers(), SystemTime::now());
        let body = self.read_body(response, timeouts.idle).await;
        let what = format!("HTTP {status}");
        let error = match (self.format.error_body)(&body) {
            Some(parsed) => self.body_error(FailureKind::Status, &what, parsed),
            None => self.error(FailureKind::Status, quote(&what, &body)),
        };
        ProviderError {
            status: Some(status),
            retry_after,
            rate_limits,
            ..error
        }
    }

    /// A 200 that is not a stream: a proxy's error page, or a server that
    /// ignored `stream`.
    async fn not_a_stream(
        &self,
        response: Response,
        kind: &str,
        rate_limits: RateLimits,
        timeouts: &Timeouts,
    ) -> ProviderError {
        let body = self.read_body(response, timeouts.idle).await;
        let error = match (self.format.error_body)(&body) {
            Some(parsed) => self.body_error(FailureKind::InBand, "error in a 200 response", parsed),
            None => self.error(
                FailureKind::Malformed,
                quote(&format!("expected an event stream, got {kind}"), &body),
            ),
        };
        ProviderError {
            rate_limits,
            ..error
        }
    }

    fn transport_error(&self, error: &reqwest::Error, timeouts: &Timeouts) -> ProviderError {
        let detail = chain(error);
        let message = if error.is_connect() && error.is_timeout() {
            format!(
                "could not connect within {:?}: {detail}",
                pooled(timeouts.connect)
            )
        } else if error.is_connect() {
            format!("could not connect: {detail}")
        } else {
            format!("connection failed before a response: {detail}")
        };
        self.error(FailureKind::Connect, message)
    }

    /// Reads at most [`MAX_ERROR_BODY`] bytes, giving up after `idle` of silence.
    async fn read_body(&self, mut response: Response, idle: Duration) -> Vec<u8> {
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY {
            match tokio::time::timeout(idle, response.chunk()).await {
                Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(MAX_ERROR_BODY);
        // Before `quote` cuts it to a few hundred characters (see `scrub`).
        match &self.secret {
            Some(secret)
                if !secret.expose().is_empty()
                    && body
                        .windows(secret.expose().len())
                        .any(|w| w == secret.expose().as_bytes()) =>
            {
                secret.scrub(&String::from_utf8_lossy(&body)).into_bytes()
            }
            _ => body,
        }
    }
}

/// The HTTP clients, one per connect timeout as `pooled` rounds it.
static CLIENTS: OnceLock<Mutex<HashMap<Duration, reqwest::Client>>> = OnceLock::new();

/// The connect timeout a pool is kept for: `connect` rounded up to whole
/// seconds. A timeout drawn from what is left of a task differs at every
/// late attempt, and a client kept per exact value (each with its own pool,
/// idle-reaper task and certificate store) grew the process by one per such
/// attempt, for good. Rounding up never cuts a connection earlier than
/// asked, and `first_byte` bounds the whole exchange.
fn pooled(connect: Duration) -> Duration {
    Duration::from_secs(connect.as_secs() + u64::from(connect.subsec_nanos() > 0))
        .max(Duration::from_secs(1))
}

/// The client for `connect`: reqwest sets the connect timeout on the client,
/// so there is one per whole second, at most a dozen.
fn client(connect: Duration) -> Result<reqwest::Client, String> {
    let connect = pooled(connect);
    let mut clients = CLIENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(client) = clients.get(&connect) {
        return Ok(client.clone());
    }
    let client = reqwest::Client::builder()
        .connect_timeout(connect)
        .user_agent(concat!("switchyard/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("could not set up the HTTP client: {}", chain(&e)))?;
    clients.insert(connect, client.clone());
    Ok(client)
}

/// An error and its causes on one line: reqwest's own message rarely names the cause.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// `what`, followed by the start of `body` when there is one.
pub(crate) fn quote(what: &str, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return what.to_owned();
    }
    let mut quoted: String = text.chars().take(QUOTE_CHARS).collect();
    if quoted.len() < text.len() {
        quoted.push('…');
    }
    format!("{what}: {quoted}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_attempts_share_the_clients_of_a_dozen_connect_timeouts() {
        // What is left of a task when an attempt starts late, to the nanosecond.
        for millis in (1..=10_000u64).step_by(7) {
            let left = Duration::from_millis(millis) + Duration::from_nanos(millis * 13 % 1_000);
            client(left).unwrap();
        }
        let clients = CLIENTS.get().unwrap().lock().unwrap();
        assert!(clients.len() <= 11, "{} HTTP clients kept", clients.len());
        assert!(clients.keys().all(|connect| connect.subsec_nanos() == 0));
    }
}
