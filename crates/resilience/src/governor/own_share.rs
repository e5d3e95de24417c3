//! The governor of a process's own share of each quota, used while the
//! shared state is away: buckets in memory, each limit split over the
//! processes at the last roll call ([`super::fleet`]).

use std::sync::Arc;

use tokio::time::Instant;

use super::fleet::Fleet;
use super::{Governor, GovernorConfig, Quota, Reservation, Starved};
use switchyard_base::task::TaskKind;
use switchyard_state::memory::MemoryState;
use switchyard_state::{StateError, WhenUnavailable};

impl Governor {
    pub(super) fn own_share(config: &GovernorConfig, fleet: Arc<Fleet>) -> Governor {
        Governor {
            state: Arc::new(MemoryState::new()),
            config: config.clone(),
            when_unavailable: WhenUnavailable::Closed,
            views: Arc::default(),
            fleet,
            own_share: None,
        }
    }

    /// Whether this is the governor of a process's own share.
    pub(super) fn is_own_share(&self) -> bool {
        self.own_share.is_none()
    }

    /// A meter's per-minute limit as this governor keeps it: the whole, or
    /// in the own-share governor this process's part.
    pub(super) fn limit_here(&self, limit: u64) -> f64 {
        match self.is_own_share() {
            true => limit as f64 / self.fleet.members() as f64,
            false => limit as f64,
        }
    }

    /// The limits this process last read for `key`, however long ago.
    fn last_learned(&self, key: &str) -> Option<Quota> {
        self.views.lock().expect("views lock").get(key)?.learned
    }

    /// While the shared state is away: this process's part of the quota it
    /// last knew, from buckets of its own; with no quota known (or in the
    /// own-share governor, which never finds its state away), ungoverned.
    pub(super) async fn admit_on_own_share(
        &self,
        key: &str,
        kind: TaskKind,
        configured: Quota,
        (input_tokens, max_output_tokens): (u64, u64),
        deadline: Instant,
        error: &StateError,
    ) -> Result<Reservation, Starved> {
        let quota = configured.or(self.last_learned(key).unwrap_or_default());
        match &self.own_share {
            Some(own) if !quota.is_empty() => {
                tracing::warn!(
                    "quota state unavailable, governing 1/{} of {key}'s quota here: {error}",
                    self.fleet.members()
                );
                own.admit(key, kind, quota, input_tokens, max_output_tokens, deadline)
                    .await
            }
            _ => {
                tracing::warn!(
                    "quota state unavailable, no quota known, sending ungoverned: {error}"
                );
                let mut ungoverned = self.reservation(key, configured);
                ungoverned.granted = true;
                Ok(ungoverned)
            }
        }
    }
}
