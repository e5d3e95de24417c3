//! The breaker record and its state machine: phase, window, trips and recovery.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::BreakerConfig;
use switchyard_state::Json;

pub(super) fn slot_width(config: &BreakerConfig) -> u64 {
    (config.window_ms / SLOTS).max(1)
}

/// Breakers live this long after their last event, then start closed again.
pub(super) const RECORD_TTL: Duration = Duration::from_secs(24 * 3600);
/// The window is kept as this many slots, so the record stays small.
const SLOTS: u64 = 6;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub open: bool,
    pub consecutive: u32,
    /// (slot start ms, successes, failures), oldest first.
    pub window: Vec<(u64, u32, u32)>,
    pub open_until: u64,
    /// Trips since the breaker last closed.
    pub trips: u32,
    pub reason: String,
    /// Lifetime counts, for status and the dashboard.
    pub total_trips: u64,
    pub recoveries: u64,
    /// The fencing token of the latest probe granted: only its holder's
    /// verdict moves the breaker. Never reset, so a token is never reused.
    #[serde(default)]
    pub probe_token: u64,
    /// Lifetime count of verdicts refused as stale: their probe's lease
    /// lapsed and a later probe was granted.
    #[serde(default)]
    pub stale_verdicts: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Closed,
    Open,
    /// Cooled down; waiting for (or running) the one probe.
    HalfOpen,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Closed => "closed",
            Phase::Open => "open",
            Phase::HalfOpen => "half-open",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(super) fn decode(stored: Option<Json>) -> Record {
    stored
        .and_then(|json| serde_json::from_value(json).ok())
        .unwrap_or_default()
}

pub(super) fn encode(record: &Record) -> Option<Json> {
    Some(serde_json::to_value(record).expect("breaker record serialises"))
}

impl Record {
    pub(super) fn phase(&self, now: u64) -> Phase {
        match (self.open, now >= self.open_until) {
            (false, _) => Phase::Closed,
            (true, false) => Phase::Open,
            (true, true) => Phase::HalfOpen,
        }
    }

    pub(super) fn note(&mut self, successes: u32, failures: u32, now: u64, config: &BreakerConfig) {
        let width = slot_width(config);
        let start = now - now % width;
        self.window.retain(|(at, _, _)| at + config.window_ms > now);
        match self.window.last_mut() {
            Some(slot) if slot.0 == start => {
                slot.1 += successes;
                slot.2 += failures;
            }
            _ => self.window.push((start, successes, failures)),
        }
    }

    pub(super) fn error_rate(&self) -> (u32, f64) {
        let (ok, failed) = self
            .window
            .iter()
            .fold((0, 0), |(o, f), (_, so, sf)| (o + so, f + sf));
        let total = ok + failed;
        (
            total,
            if total == 0 {
                0.0
            } else {
                failed as f64 / total as f64
            },
        )
    }

    pub(super) fn trip(&mut self, now: u64, reason: String, config: &BreakerConfig) {
        // Not doubled on repeated trips: canaries test an open breaker every
        // canary interval, so a longer wait would only delay the recovery.
        self.open = true;
        self.open_until = now + config.cooldown_ms;
        self.trips += 1;
        self.total_trips += 1;
        self.reason = reason;
    }

    pub(super) fn close(&mut self) {
        self.open = false;
        self.consecutive = 0;
        self.trips = 0;
        self.window.clear();
        self.recoveries += 1;
        self.reason.clear();
    }
}
