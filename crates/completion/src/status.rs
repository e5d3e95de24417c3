//! The completion state the editor shows: loading, ready, off here (the
//! document's language is turned off), snoozed, failing, or late when most
//! recent automatic requests missed the budget, with why.

use std::collections::VecDeque;

use super::{CompletionRequest, CompletionService, NoSuggestion, Suggestion, Trigger};
use switchyard_engine::EngineError;
use tokio::sync::watch;

/// How many recent automatic requests the "late" state looks at.
const RECENT: usize = 8;
/// Late when more than this many of them missed the budget.
const LATE_ABOVE: usize = RECENT / 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionState {
    Loading,
    Ready,
    /// Off for the document last asked about (its language's rule).
    Off,
    Snoozed,
    /// Most recent automatic requests missed the budget.
    Late,
    /// No model to complete with.
    Failed,
}

impl CompletionState {
    pub fn as_str(self) -> &'static str {
        match self {
            CompletionState::Loading => "loading",
            CompletionState::Ready => "ready",
            CompletionState::Off => "off",
            CompletionState::Snoozed => "snoozed",
            CompletionState::Late => "late",
            CompletionState::Failed => "failed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletionStatus {
    pub state: CompletionState,
    pub reason: Option<String>,
    /// When a snooze ends (ms since the epoch).
    pub until_ms: Option<u64>,
}

impl Default for CompletionStatus {
    fn default() -> CompletionStatus {
        CompletionStatus {
            state: CompletionState::Loading,
            reason: None,
            until_ms: None,
        }
    }
}

impl CompletionStatus {
    /// Whether this state, after `other`, is a change worth telling a user
    /// who reads messages: a new state (but the end of a load), a new reason
    /// to be off or failing, a new snooze end (a late state's count moving on
    /// is not).
    pub fn differs_for_a_reader(&self, other: &CompletionStatus) -> bool {
        // The model's load has its own progress that ends in "ready".
        if (self.state, other.state) == (CompletionState::Ready, CompletionState::Loading) {
            return false;
        }
        self.state != other.state
            || self.until_ms != other.until_ms
            || (self.state != CompletionState::Late && self.reason != other.reason)
    }

    /// One line for editors that show messages rather than the status
    /// object (Helix), at wall-clock time `now_ms`.
    pub fn message(&self, now_ms: u64) -> String {
        let reason = self.reason.as_deref().unwrap_or("no reason given");
        match self.state {
            CompletionState::Loading => "loading the local model".to_owned(),
            CompletionState::Ready => "ready".to_owned(),
            CompletionState::Off => format!("off: {reason}"),
            CompletionState::Snoozed => {
                let left_ms = self.until_ms.unwrap_or(now_ms).saturating_sub(now_ms);
                let minutes = left_ms.div_ceil(60_000);
                format!("snoozed for {minutes} more min (switchyard.resumeCompletions resumes)")
            }
            CompletionState::Late => format!("late: {reason}"),
            CompletionState::Failed => format!("failed: {reason}"),
        }
    }
}

/// Why the recent automatic requests that reached the engine were late
/// (`None`: in time).
#[derive(Default)]
pub(super) struct Recent {
    requests: VecDeque<Option<Lateness>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Lateness {
    /// The prompt was still filling at the deadline.
    Prompt,
    /// The answer itself missed the deadline.
    Answer,
}

impl Recent {
    /// Notes an automatic request's result; what never reached the engine
    /// (skipped, snoozed, off, no model, superseded) says nothing of speed.
    pub fn note(&mut self, result: &Result<(), NoSuggestion>) {
        let lateness = match result {
            Ok(()) | Err(NoSuggestion::Empty) => None,
            Err(NoSuggestion::PromptStillFilling) => Some(Lateness::Prompt),
            Err(NoSuggestion::DeadlineMissed | NoSuggestion::Cut { .. }) => Some(Lateness::Answer),
            Err(_) => return,
        };
        if self.requests.len() == RECENT {
            self.requests.pop_front();
        }
        self.requests.push_back(lateness);
    }

    /// Why completions are late, when most recent requests were.
    pub fn late(&self) -> Option<String> {
        let late: Vec<Lateness> = self.requests.iter().flatten().copied().collect();
        if late.len() <= LATE_ABOVE {
            return None;
        }
        let prompt = late.iter().filter(|l| **l == Lateness::Prompt).count();
        Some(format!(
            "{} of the last {} suggestions missed the budget: {}",
            late.len(),
            self.requests.len(),
            if 2 * prompt >= late.len() {
                "the prompt does not fill in time (a busy machine, or a budget too small for it)"
            } else {
                "the model answers too slowly (a busy machine)"
            }
        ))
    }
}

impl CompletionService {
    /// The model could not be had (resolved, downloaded or loaded).
    pub fn model_failed(&self, reason: String) {
        *self.model_failure.lock().expect("failure lock") = Some(reason);
        self.publish_status();
    }

    pub fn subscribe_status(&self) -> watch::Receiver<CompletionStatus> {
        self.status.subscribe()
    }

    /// Recomputes the completion state; subscribers hear of it only when it changed.
    pub fn publish_status(&self) {
        let now = self.current_status();
        self.status.send_if_modified(|status| {
            let changed = *status != now;
            *status = now;
            changed
        });
    }

    fn current_status(&self) -> CompletionStatus {
        let status = |state, reason: Option<String>| CompletionStatus {
            state,
            reason,
            until_ms: None,
        };
        if let Some(until_ms) = self.snooze().until_ms() {
            return CompletionStatus {
                until_ms: Some(until_ms),
                ..status(CompletionState::Snoozed, None)
            };
        }
        if !self.config().enabled {
            let reason = NoSuggestion::Disabled.to_string();
            return status(CompletionState::Off, Some(reason));
        }
        if let Some(reason) = self.off_here.lock().expect("off lock").clone() {
            return status(CompletionState::Off, Some(reason));
        }
        let engine = self.engine.read().expect("engine lock").clone();
        match engine.map(|engine| engine.model()) {
            // Being resolved or downloaded, unless that failed.
            None => {
                return match self.model_failure.lock().expect("failure lock").clone() {
                    Some(reason) => status(CompletionState::Failed, Some(reason)),
                    None => status(CompletionState::Loading, None),
                };
            }
            Some(Err(EngineError::Loading)) => return status(CompletionState::Loading, None),
            Some(Err(e)) => return status(CompletionState::Failed, Some(e.to_string())),
            Some(Ok(_)) => {}
        }
        match self.recent.lock().expect("recent lock").late() {
            Some(reason) => status(CompletionState::Late, Some(reason)),
            None => status(CompletionState::Ready, None),
        }
    }

    /// Takes in how a request went, for the completion state.
    pub(super) fn noted(
        &self,
        request: &CompletionRequest,
        result: &Result<Suggestion, NoSuggestion>,
    ) {
        let result = result.as_ref().map(|_| ()).map_err(Clone::clone);
        if request.language.is_some() {
            *self.off_here.lock().expect("off lock") = match &result {
                Err(off @ NoSuggestion::LanguageOff(_)) => Some(off.to_string()),
                _ => None,
            };
        }
        if request.trigger == Trigger::Automatic {
            self.recent.lock().expect("recent lock").note(&result);
        }
        self.publish_status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_hears_of_new_states_and_reasons_but_not_of_a_late_count() {
        let status = |state, reason: &str, until_ms| CompletionStatus {
            state,
            reason: (!reason.is_empty()).then(|| reason.to_owned()),
            until_ms,
        };
        let late = status(CompletionState::Late, "5 of the last 8", None);
        assert!(!late.differs_for_a_reader(&status(
            CompletionState::Late,
            "6 of the last 8",
            None
        )));
        let off = status(CompletionState::Off, "markdown", None);
        assert!(off.differs_for_a_reader(&status(CompletionState::Off, "plaintext", None)));
        assert!(off.differs_for_a_reader(&status(CompletionState::Ready, "", None)));
        let snoozed = status(CompletionState::Snoozed, "", Some(120_000));
        assert!(snoozed.differs_for_a_reader(&status(CompletionState::Snoozed, "", Some(60_000))));
        assert_eq!(
            snoozed.message(30_000),
            "snoozed for 2 more min (switchyard.resumeCompletions resumes)"
        );
        assert_eq!(off.message(0), "off: markdown");
        let loading = status(CompletionState::Loading, "", None);
        assert!(!status(CompletionState::Ready, "", None).differs_for_a_reader(&loading));
    }

    #[test]
    fn most_recent_requests_late_makes_the_state_late_with_its_cause() {
        let mut recent = Recent::default();
        for _ in 0..4 {
            recent.note(&Err(NoSuggestion::PromptStillFilling));
            recent.note(&Ok(()));
        }
        assert_eq!(recent.late(), None, "half late is not late");
        recent.note(&Err(NoSuggestion::PromptStillFilling));
        recent.note(&Err(NoSuggestion::Cancelled));
        assert_eq!(recent.late(), None, "a cancel says nothing; four of eight");
        recent.note(&Err(NoSuggestion::PromptStillFilling));
        let late = recent.late().expect("five of eight");
        assert!(late.contains("prompt does not fill"), "{late}");
        for _ in 0..8 {
            recent.note(&Ok(()));
        }
        assert_eq!(recent.late(), None, "in time again");
    }
}
