//! The daily local-first window: for a configured stretch of each day (say the
//! first 30 minutes of the workday) completions prefer the local engine even
//! when a remote entry comes first in `autocomplete.chain`, so a team knows its
//! fallback works before it needs it.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use time::{OffsetDateTime, UtcOffset};

/// `[autocomplete.local_first]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalFirstWindow {
    /// Local time of day it opens, `HH:MM`.
    pub start: String,
    pub minutes: u32,
}

static LOCAL_OFFSET: OnceLock<UtcOffset> = OnceLock::new();

/// Reads this machine's UTC offset. Call while the process has one thread:
/// the `time` crate reads the local offset only then (doing it later races
/// with `setenv` in other threads), so the CLI does it first thing.
pub fn capture_local_offset() {
    let offset = UtcOffset::current_local_offset().unwrap_or(UtcOffset::UTC);
    let _ = LOCAL_OFFSET.set(offset);
}

impl LocalFirstWindow {
    /// Minutes after midnight it opens, or why `start` is not a time of day.
    pub fn start_minute(&self) -> Result<u32, String> {
        let invalid = || format!("`{}` is not a time of day as HH:MM", self.start);
        let (hours, minutes) = self.start.split_once(':').ok_or_else(invalid)?;
        let (hours, minutes): (u32, u32) = (
            hours.parse().map_err(|_| invalid())?,
            minutes.parse().map_err(|_| invalid())?,
        );
        if hours > 23 || minutes > 59 {
            return Err(invalid());
        }
        Ok(hours * 60 + minutes)
    }

    /// Whether `at` falls inside the window (which may run past midnight).
    pub fn contains(&self, at: OffsetDateTime) -> bool {
        let Ok(start) = self.start_minute() else {
            return false;
        };
        let now = u32::from(at.hour()) * 60 + u32::from(at.minute());
        let since_start = (now + 24 * 60 - start) % (24 * 60);
        since_start < self.minutes
    }

    pub fn is_open_now(&self) -> bool {
        let offset = *LOCAL_OFFSET.get().unwrap_or(&UtcOffset::UTC);
        self.contains(OffsetDateTime::now_utc().to_offset(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn window(start: &str, minutes: u32) -> LocalFirstWindow {
        LocalFirstWindow {
            start: start.into(),
            minutes,
        }
    }

    #[test]
    fn the_window_opens_at_its_start_for_its_minutes() {
        let w = window("09:00", 30);
        assert!(!w.contains(datetime!(2026-11-30 08:59 UTC)));
        assert!(w.contains(datetime!(2026-11-30 09:00 UTC)));
        assert!(w.contains(datetime!(2026-11-30 09:29 UTC)));
        assert!(!w.contains(datetime!(2026-11-30 09:30 UTC)));
    }

    #[test]
    fn a_window_may_run_past_midnight() {
        let w = window("23:50", 20);
        assert!(w.contains(datetime!(2026-11-30 23:55 UTC)));
        assert!(w.contains(datetime!(2026-12-01 00:05 UTC)));
        assert!(!w.contains(datetime!(2026-12-01 00:10 UTC)));
    }

    #[test]
    fn a_bad_start_is_named() {
        assert!(
            window("9h", 30)
                .start_minute()
                .unwrap_err()
                .contains("`9h`")
        );
        assert!(window("24:00", 30).start_minute().is_err());
    }
}
