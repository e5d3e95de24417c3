//! Waiting for an effect another process shows in its own time (an editor's
//! screen, a page, a file it writes, a stats count): look again until it is
//! there or a generous deadline, scaled to this machine, has passed; never a
//! fixed sleep before a check. Where the action itself may be lost or come to
//! nothing (keys typed while a menu hands over, an empty answer while a
//! model's cache is cold), [`retrying`] does the action again.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::timing;

/// How long a test waits for an effect before it fails, before scaling:
/// generous, since a wait ends as soon as its effect shows.
pub const PATIENCE: Duration = Duration::from_secs(120);
/// How long to wait before looking again.
const EVERY: Duration = Duration::from_millis(200);

/// Runs `attempt` until it gives `Ok`, for up to `patience` scaled to this
/// machine: the first `Ok`, or the last `Err` (what was seen instead, for
/// the failure's message) once the time is up.
pub async fn eventually<T, E>(
    patience: Duration,
    mut attempt: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = Instant::now() + timing::scaled(patience);
    loop {
        let seen = attempt().await;
        if seen.is_ok() || Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// Does `act` (told how many times it was done before), gives its effect up
/// to `each` to pass `check`, and does it again while it does not, for up to
/// `patience`; both times scaled to this machine. The first `Ok`, or the last
/// `Err` once the time is up.
pub async fn retrying<T, E>(
    patience: Duration,
    each: Duration,
    mut act: impl AsyncFnMut(u32),
    mut check: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = Instant::now() + timing::scaled(patience);
    let mut tries = 0;
    loop {
        act(tries).await;
        tries += 1;
        let seen = eventually(each, &mut check).await;
        if seen.is_ok() || Instant::now() >= deadline {
            return seen;
        }
    }
}

/// The text of the file at `path` once it contains `needle`; fails with
/// what it held after `patience` (scaled).
pub async fn file_containing(path: &Path, needle: &str, patience: Duration) -> String {
    let read = async || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            Ok(text)
        } else {
            Err(text)
        }
    };
    eventually(patience, read).await.unwrap_or_else(|text| {
        panic!(
            "{} never held {needle:?}; it holds:\n{text}",
            path.display()
        )
    })
}
