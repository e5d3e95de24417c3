//! Wall-clock time as the crate stores and shares it: milliseconds since the
//! Unix epoch (status timestamps, parked tasks, audit records, shared state).
//! Durations and deadlines use `tokio::time::Instant`, never this.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (0 on a clock before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
