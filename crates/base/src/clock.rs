//! Wall-clock time as the crate stores and shares it: milliseconds since the
//! Unix epoch (status timestamps, parked tasks, audit records, shared state).
//! Durations and deadlines use `tokio::time::Instant`, never this.
//!
//! [`Clock`] is the same thing handed to a component from outside, so a test
//! can run that component on tokio's paused clock instead.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (0 on a clock before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Where a component reads its now, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// [`now_ms`]: the one clock separate processes share.
    Wall,
    /// Tokio's clock, in ms since `origin`: it stands still in a test with a
    /// paused clock until the test moves it. Only meaningful inside one
    /// process, and only between users of the same `Clock` value.
    Tokio { origin: tokio::time::Instant },
}

impl Clock {
    /// Tokio's clock, starting at 0 now.
    pub fn tokio() -> Clock {
        Clock::Tokio {
            origin: tokio::time::Instant::now(),
        }
    }

    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::Wall => now_ms(),
            Clock::Tokio { origin } => origin.elapsed().as_millis() as u64,
        }
    }
}
