//! Who shares a quota: each process answers a roll call in the shared state
//! now and then and counts who else did, so that when the state cannot be
//! reached it knows how many processes split the quota, and takes its part
//! of it instead of the whole.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use switchyard_state::SharedState;

/// How often a process answers the roll call and counts.
pub(super) const ROLL_CALL: Duration = Duration::from_secs(10);
/// A member not heard from for this long has gone (closed or crashed).
const MEMBERSHIP: Duration = Duration::from_secs(30);

pub(super) struct Fleet {
    member: String,
    /// Processes that had answered at the last count, this one included.
    members: AtomicUsize,
    next_call: Mutex<Option<Instant>>,
}

impl Fleet {
    pub(super) fn new() -> Fleet {
        Fleet {
            member: format!("member/{}-{:08x}", std::process::id(), fastrand::u32(..)),
            members: AtomicUsize::new(1),
            next_call: Mutex::new(None),
        }
    }

    /// How many processes split the quota, as last counted (at least this one).
    pub(super) fn members(&self) -> usize {
        self.members.load(Ordering::Relaxed).max(1)
    }

    /// Whether a roll call is due; it is then counted as made.
    pub(super) fn due(&self) -> bool {
        let mut next = self.next_call.lock().expect("roll call lock");
        let now = Instant::now();
        if next.is_some_and(|at| now < at) {
            return false;
        }
        *next = Some(now + ROLL_CALL);
        true
    }

    /// Answers the roll call and counts who has. A count that fails keeps
    /// the last one: while the state is away, the fleet is as it was.
    pub(super) async fn roll_call(&self, state: &dyn SharedState) {
        let answered = state
            .update(
                &self.member,
                Some(MEMBERSHIP),
                Box::new(|_, now| Some(now.into())),
            )
            .await;
        if answered.is_err() {
            return;
        }
        if let Ok(members) = state.scan("member/").await {
            self.members.store(members.len().max(1), Ordering::Relaxed);
        }
    }
}
