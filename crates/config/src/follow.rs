//! Waiting on the configuration: loops that run every so often read their
//! interval from the configuration in force at each pass, and an edit cuts
//! their sleep short, so a changed interval applies at once, not after the
//! old one ran out.

use std::time::Duration;

use tokio::sync::watch;

/// Sleeps `length`, or less when the configuration in force (whatever
/// `changes` carries of it) changes meanwhile (`false`). Once no change can
/// come (`changes` is `None` or its sender is gone) it just sleeps.
pub async fn sleep_or_change<T>(
    length: Duration,
    changes: &mut Option<watch::Receiver<T>>,
) -> bool {
    let Some(receiver) = changes else {
        tokio::time::sleep(length).await;
        return true;
    };
    tokio::select! {
        () = tokio::time::sleep(length) => true,
        changed = receiver.changed() => {
            if changed.is_err() {
                *changes = None;
            }
            false
        }
    }
}
