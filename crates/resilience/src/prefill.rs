//! Which models refuse an assistant prefill, learned from the 400 that says
//! so and shared by every process, so each model is asked that way once: a
//! cut answer is then continued by a continuation request instead.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_state::SharedState;

/// Forgotten after this long, in case the provider starts accepting prefills.
const TTL: Duration = Duration::from_secs(7 * 24 * 3600);

fn key(entry: &str) -> String {
    format!("noprefill/{entry}")
}

/// Whether a provider's error message says it rejected the prefill.
pub fn rejects_prefill(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("prefill")
        || (message.contains("assistant") && message.contains("last"))
        || message.contains("final assistant")
}

pub struct Prefills {
    state: Arc<dyn SharedState>,
    rejected: Mutex<HashSet<String>>,
}

impl Prefills {
    pub fn new(state: Arc<dyn SharedState>) -> Prefills {
        Prefills {
            state,
            rejected: Mutex::default(),
        }
    }

    /// `entry` (an `EntryKey` path) refused a prefill: remember it for all.
    pub async fn learn_rejected(&self, entry: &str) {
        self.rejected
            .lock()
            .expect("prefill lock")
            .insert(entry.to_owned());
        let result = self
            .state
            .update(&key(entry), Some(TTL), Box::new(|_, _| Some(true.into())))
            .await;
        if let Err(error) = result {
            tracing::warn!("{entry}: could not share that it rejects prefills: {error}");
        }
    }

    pub fn rejected(&self, entry: &str) -> bool {
        self.rejected.lock().expect("prefill lock").contains(entry)
    }

    /// Takes in what other processes learned.
    pub async fn refresh(&self) {
        if let Ok(records) = self.state.scan("noprefill/").await {
            let learned = records
                .into_iter()
                .filter_map(|(stored, _)| stored.strip_prefix("noprefill/").map(str::to_owned));
            self.rejected.lock().expect("prefill lock").extend(learned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_state::memory::MemoryState;

    #[tokio::test(start_paused = true)]
    async fn a_rejection_learned_in_one_process_holds_in_another() {
        let state = Arc::new(MemoryState::new());
        let (a, b) = (Prefills::new(state.clone()), Prefills::new(state));
        a.learn_rejected("acct/p/m").await;
        assert!(!b.rejected("acct/p/m"));
        b.refresh().await;
        assert!(b.rejected("acct/p/m"));
    }

    #[test]
    fn the_400_that_names_the_prefill_is_recognised() {
        assert!(rejects_prefill(
            "This model does not support assistant message prefill."
        ));
        assert!(rejects_prefill(
            "the final assistant content cannot end with whitespace"
        ));
        assert!(!rejects_prefill("max_tokens: must be at most 4096"));
    }
}
