//! What one task carries from attempt to attempt as it walks its plan, and
//! the lane one attempt runs in (alone, or as one side of a hedged race).

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::hedge::Racer;
use super::request::{Attempt, OnProgress, RouteError, TaskRequest};
use switchyard_base::task::{TaskKind, TaskProfile};
use switchyard_resilience::backoff::WaitBudget;

/// What one task has left as it walks its plan.
pub(super) struct RunState {
    pub deadline: Instant,
    pub waits: WaitBudget,
    /// The longest answer streamed so far, continued by the next attempt.
    pub partial: String,
    /// Something temporary (an open breaker, an empty quota, a spent wait
    /// budget) stood in the way: the task can be parked and resumed.
    pub retry_later: bool,
    /// Share of the input budget prompts are rendered to; halved when a
    /// model says the prompt is too long.
    pub input_scale: f64,
    /// An interactive task (explain, autocomplete): little patience per entry.
    pub interactive: bool,
    /// Another usable entry could take the request after this one.
    pub alternative: bool,
}

impl RunState {
    pub fn new(
        deadline: Instant,
        wait_budget: Duration,
        partial: String,
        interactive: bool,
    ) -> RunState {
        RunState {
            deadline,
            waits: WaitBudget::new(wait_budget),
            partial,
            retry_later: false,
            input_scale: 1.0,
            interactive,
            alternative: false,
        }
    }

    /// A task's state as it begins: its whole ceiling and wait budget ahead.
    pub fn begin(profile: &TaskProfile, request: &TaskRequest) -> RunState {
        RunState::new(
            Instant::now() + profile.total_ceiling() + profile.wait_budget(),
            profile.wait_budget(),
            request.continuation.clone(),
            request.kind != TaskKind::Refactor,
        )
    }

    /// How the task ends when a rule put in force since it began kept its
    /// next attempt back: with the answer streamed so far.
    pub fn stopped_by(self, rule: String, tried: Vec<Attempt>) -> RouteError {
        RouteError::StoppedByRule {
            rule,
            tried,
            partial: self.partial,
        }
    }

    /// The hedge's own state: same deadline and wait budget left.
    pub fn fork(&self) -> RunState {
        RunState {
            partial: self.partial.clone(),
            retry_later: false,
            ..*self
        }
    }

    /// Takes in what the hedge learned.
    pub fn absorb(&mut self, hedge: RunState) {
        self.retry_later |= hedge.retry_later;
        if hedge.partial.len() > self.partial.len() {
            self.partial = hedge.partial;
        }
    }

    /// How long a retry may still wait: within the task's deadline and its
    /// wait budget.
    pub fn room_to_wait(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .min(self.waits.left())
    }
}

/// Where one entry's attempts run: their cancellation, who hears their
/// progress, and the race they are one side of, if any.
#[derive(Clone, Copy)]
pub(super) struct Lane<'a> {
    pub cancel: &'a CancellationToken,
    pub progress: OnProgress<'a>,
    pub racer: Option<&'a Racer>,
}

impl<'a> Lane<'a> {
    pub fn alone(cancel: &'a CancellationToken, progress: OnProgress<'a>) -> Lane<'a> {
        Lane {
            cancel,
            progress,
            racer: None,
        }
    }
}
