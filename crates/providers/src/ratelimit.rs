//! Reading rate-limit state from response headers. Each provider module names
//! its own headers (wire formats stay there); this module owns the value
//! formats they share: counts, Go-style durations (`6m0s`), RFC 3339 reset
//! instants and `retry-after`.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use time::OffsetDateTime;
use time::format_description::well_known::{Rfc2822, Rfc3339};

use super::RateLimits;

/// The quota a rate-limit header describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bucket {
    Requests,
    Tokens,
    InputTokens,
    OutputTokens,
}

/// Which number about a bucket a header carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Limit,
    Remaining,
    Reset,
}

impl Bucket {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Bucket::Requests => "requests",
            Bucket::Tokens => "tokens",
            Bucket::InputTokens => "input-tokens",
            Bucket::OutputTokens => "output-tokens",
        }
    }
}

impl Field {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Field::Limit => "limit",
            Field::Remaining => "remaining",
            Field::Reset => "reset",
        }
    }
}

/// Collects [`RateLimits`] from `headers`. `name` gives the header for a bucket
/// and field (`None` where the format has none); `reset` turns a reset value
/// into the time left until the quota refills. Unparseable values read as absent.
pub(crate) fn read(
    headers: &HeaderMap,
    name: impl Fn(Bucket, Field) -> Option<String>,
    reset: impl Fn(&str) -> Option<Duration>,
) -> RateLimits {
    let text = |bucket, field| {
        let header = name(bucket, field)?;
        headers.get(header.as_str())?.to_str().ok().map(str::trim)
    };
    let count = |bucket| text(bucket, Field::Limit).and_then(|v| v.parse().ok());
    let remaining = |bucket| text(bucket, Field::Remaining).and_then(|v| v.parse().ok());
    let reset_in = |bucket| text(bucket, Field::Reset).and_then(&reset);
    RateLimits {
        requests_limit: count(Bucket::Requests),
        requests_remaining: remaining(Bucket::Requests),
        requests_reset: reset_in(Bucket::Requests),
        tokens_limit: count(Bucket::Tokens),
        tokens_remaining: remaining(Bucket::Tokens),
        tokens_reset: reset_in(Bucket::Tokens),
        input_tokens_limit: count(Bucket::InputTokens),
        input_tokens_remaining: remaining(Bucket::InputTokens),
        input_tokens_reset: reset_in(Bucket::InputTokens),
        output_tokens_limit: count(Bucket::OutputTokens),
        output_tokens_remaining: remaining(Bucket::OutputTokens),
        output_tokens_reset: reset_in(Bucket::OutputTokens),
    }
}

/// A Go `time.Duration` string as OpenAI sends it: `6m0s`, `1s`, `20ms`,
/// `1h30m`, `1.5s`. A bare number is read as seconds. Hand-written because the
/// duration crates read humantime's grammar, which lacks Go's fractional units.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let mut rest = text;
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return None;
        }
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds_per_unit;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// The time from `now` until an RFC 3339 instant (Anthropic's reset headers);
/// zero when the instant has passed.
pub fn parse_reset_instant(text: &str, now: SystemTime) -> Option<Duration> {
    let at = OffsetDateTime::parse(text.trim(), &Rfc3339).ok()?;
    Some(until(at, now))
}

/// A `retry-after` value: delay-seconds or an HTTP date (IMF-fixdate).
pub fn parse_retry_after(text: &str, now: SystemTime) -> Option<Duration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = OffsetDateTime::parse(text, &Rfc2822).ok()?;
    Some(until(at, now))
}

/// How long the server asked us to wait: `retry-after-ms` (sent by OpenAI)
/// takes precedence over `retry-after`.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let from_ms = value("retry-after-ms")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok());
    from_ms.or_else(|| value("retry-after").and_then(|v| parse_retry_after(v, now)))
}

fn until(at: OffsetDateTime, now: SystemTime) -> Duration {
    Duration::try_from(at - OffsetDateTime::from(now)).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    fn at(rfc3339: &str) -> SystemTime {
        OffsetDateTime::parse(rfc3339, &Rfc3339).unwrap().into()
    }

    #[test]
    fn go_durations_in_the_forms_openai_sends() {
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(
            parse_go_duration("1h30m0s"),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("250us"), Some(Duration::from_micros(250)));
        assert_eq!(parse_go_duration("60"), Some(Duration::from_secs(60)));
    }

    #[test]
    fn go_duration_rejects_garbage() {
        for bad in ["", "s", "6x", "1h-2m", "abc", "1..2s", "-1s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reset_instant_is_time_left_from_now() {
        let now = at("2025-01-01T00:00:00Z");
        assert_eq!(
            parse_reset_instant("2025-01-01T00:00:30Z", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_reset_instant("2025-01-01T01:00:00+01:00", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_reset_instant("2025-01-01T00:00:00.500Z", now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_reset_instant("2024-12-31T23:59:00Z", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_reset_instant("in a minute", now), None);
    }

    #[test]
    fn retry_after_in_seconds_or_http_date() {
        let now = at("2015-10-21T07:28:00Z");
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:45 GMT", now),
            Some(Duration::from_secs(45))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn retry_after_ms_takes_precedence() {
        let now = SystemTime::UNIX_EPOCH;
        let both = headers(&[("retry-after-ms", "1500"), ("retry-after", "2")]);
        assert_eq!(retry_after(&both, now), Some(Duration::from_millis(1500)));
        let seconds_only = headers(&[("retry-after", "2")]);
        assert_eq!(
            retry_after(&seconds_only, now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn read_collects_named_headers_and_ignores_bad_values() {
        let map = headers(&[
            ("x-requests-limit", "100"),
            ("x-requests-remaining", "99"),
            ("x-requests-reset", "1s"),
            ("x-tokens-limit", "lots"),
        ]);
        let limits = read(
            &map,
            |bucket, field| Some(format!("x-{}-{}", bucket.as_str(), field.as_str())),
            parse_go_duration,
        );
        assert_eq!(limits.requests_limit, Some(100));
        assert_eq!(limits.requests_remaining, Some(99));
        assert_eq!(limits.requests_reset, Some(Duration::from_secs(1)));
        assert_eq!(limits.tokens_limit, None);
        assert_eq!(limits.input_tokens_limit, None);
    }
}
