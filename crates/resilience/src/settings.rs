//! `[resilience]` as the configuration file spells it: the shared state, how
//! it backs off, and how often it re-checks. The configuration layer reads it
//! from the file; this module owns what it means.

use serde::{Deserialize, Serialize};

use super::{backoff, breaker, governor};

/// `[resilience]`: what every switchyard process shares, and how it backs off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResilienceConfig {
    /// Where breakers and quota buckets live: `file` (this machine, the
    /// default), `file:///dir`, `redis://host:port` (a team) or `memory`.
    pub state: String,
    /// When the shared state cannot be reached: `open` carries on unshared,
    /// `closed` refuses remote calls until it is back.
    pub when_unavailable: switchyard_state::WhenUnavailable,
    pub backoff: backoff::BackoffConfig,
    pub breaker: breaker::BreakerConfig,
    pub governor: governor::GovernorConfig,
    /// How often parked tasks are retried and shared status re-read.
    pub resume_interval_ms: u64,
    /// How often entries out of user traffic (an open breaker, a health
    /// verdict) get a canary: a healthy one brings them back.
    pub canary_interval_ms: u64,
    /// How often the primary of each tier gets a canary; 0 is off.
    pub primary_canary_ms: u64,
    /// How far back health beacons look.
    pub beacon_window_ms: u64,
    /// The fewest samples a beacon judges slowness or degradation from.
    pub beacon_min_samples: usize,
}

impl Default for ResilienceConfig {
    fn default() -> Self {
        ResilienceConfig {
            state: "file".into(),
            when_unavailable: Default::default(),
            backoff: Default::default(),
            breaker: Default::default(),
            governor: Default::default(),
            resume_interval_ms: 5_000,
            canary_interval_ms: 10_000,
            primary_canary_ms: 0,
            beacon_window_ms: 60_000,
            beacon_min_samples: 3,
        }
    }
}
