//! Per-minute quotas and their meters, and the header math: spare capacity, headroom, floors.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use switchyard_base::task::TaskKind;
use switchyard_providers::RateLimits;

#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GovernorConfig {
    /// Share of the quota this fleet takes while it knows only the configured
    /// quota; once headers report the remaining capacity, it takes what is spare.
    pub share: f64,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        GovernorConfig { share: 0.9 }
    }
}

/// Per-minute quotas an account has with one provider (configured, or learned
/// from the `*-limit` headers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quota {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub input_tokens_per_minute: Option<u64>,
    pub output_tokens_per_minute: Option<u64>,
}

impl Quota {
    pub(super) fn learned(limits: &RateLimits) -> Quota {
        Quota {
            requests_per_minute: limits.requests_limit,
            tokens_per_minute: limits.tokens_limit,
            input_tokens_per_minute: limits.input_tokens_limit,
            output_tokens_per_minute: limits.output_tokens_limit,
        }
    }

    /// Configured values win; learned ones fill the gaps.
    pub(super) fn or(self, other: Quota) -> Quota {
        Quota {
            requests_per_minute: self.requests_per_minute.or(other.requests_per_minute),
            tokens_per_minute: self.tokens_per_minute.or(other.tokens_per_minute),
            input_tokens_per_minute: self
                .input_tokens_per_minute
                .or(other.input_tokens_per_minute),
            output_tokens_per_minute: self
                .output_tokens_per_minute
                .or(other.output_tokens_per_minute),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        *self == Quota::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Meter {
    Requests,
    Tokens,
    InputTokens,
    OutputTokens,
}

impl Meter {
    pub(super) const ALL: [Meter; 4] = [
        Meter::Requests,
        Meter::Tokens,
        Meter::InputTokens,
        Meter::OutputTokens,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Meter::Requests => "requests",
            Meter::Tokens => "tokens",
            Meter::InputTokens => "input_tokens",
            Meter::OutputTokens => "output_tokens",
        }
    }

    pub(super) fn limit(self, quota: &Quota) -> Option<u64> {
        match self {
            Meter::Requests => quota.requests_per_minute,
            Meter::Tokens => quota.tokens_per_minute,
            Meter::InputTokens => quota.input_tokens_per_minute,
            Meter::OutputTokens => quota.output_tokens_per_minute,
        }
    }

    pub(super) fn reset(self, limits: &RateLimits) -> Option<Duration> {
        match self {
            Meter::Requests => limits.requests_reset,
            Meter::Tokens => limits.tokens_reset,
            Meter::InputTokens => limits.input_tokens_reset,
            Meter::OutputTokens => limits.output_tokens_reset,
        }
    }

    pub(super) fn remaining(self, limits: &RateLimits) -> Option<u64> {
        match self {
            Meter::Requests => limits.requests_remaining,
            Meter::Tokens => limits.tokens_remaining,
            Meter::InputTokens => limits.input_tokens_remaining,
            Meter::OutputTokens => limits.output_tokens_remaining,
        }
    }

    pub(super) fn amount(self, input: u64, output: u64) -> f64 {
        (match self {
            Meter::Requests => 1,
            Meter::Tokens => input + output,
            Meter::InputTokens => input,
            Meter::OutputTokens => output,
        }) as f64
    }
}

/// How far above the headroom a task kind stops drawing: interactive work
/// may go lowest.
pub(super) fn priority_floor(kind: TaskKind) -> f64 {
    match kind {
        TaskKind::Autocomplete => 1.0,
        TaskKind::Explain => 1.5,
        TaskKind::Refactor => 2.0,
    }
}

/// Tokens left for the other users of the account: what their share of the
/// quota brings in ten seconds, enough for their next request.
pub(super) fn headroom(limit: f64, share: f64) -> f64 {
    (limit * (1.0 - share) / 6.0).max(1.0)
}

/// What the provider's bucket for a per-minute `limit` holds now, by the
/// headers of one response: `remaining` as of when it counted the request,
/// plus what it has refilled since. It counted the request after we reserved
/// it, so the refill since the reservation bounds that from above; the reset
/// time ("full again in ...") pins it where the provider sends one. Without
/// this, every response would set the level back by the refill during its
/// own latency, and the fleet would leave that much of the quota unused.
pub(super) fn spare_now(
    limit: f64,
    remaining: f64,
    reset: Option<Duration>,
    since_reserved: Duration,
) -> f64 {
    let refill_per_sec = limit / 60.0;
    let mut spare = remaining + refill_per_sec * since_reserved.as_secs_f64();
    if let Some(reset) = reset {
        spare = spare.min(limit - refill_per_sec * reset.as_secs_f64());
    }
    spare.max(remaining).min(limit)
}
