//! Hedged requests: when an interactive task's entry has not produced its
//! first token by the task's first-token ceiling, the next healthy entry is
//! started alongside; whichever produces text first wins and the other is
//! cancelled. At most one hedge per request; both go through breaker and
//! governor like any attempt, and the beacon records both.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tokio_util::sync::CancellationToken;

use super::Router;
use super::attempt::Failure;
use super::pipeline::RunState;
use super::plan::Candidate;
use super::request::{OnProgress, Progress, TaskRequest};
use crate::providers::Usage;
use crate::task::TaskProfile;

/// Who produced text first. The moment one side claims the win, the other
/// side is cancelled: its attempt, a retry it was about to send, a backoff
/// it was sleeping through.
#[derive(Debug)]
pub(super) struct Race {
    winner: AtomicU8,
    /// Each side's cancellation, by racer number (1 and 2).
    sides: [CancellationToken; 2],
}

/// One side of a race.
#[derive(Clone, Debug)]
pub(super) struct Racer {
    race: Arc<Race>,
    me: u8,
}

impl Racer {
    /// Claims the win at this racer's first token; `false` when the other
    /// side already has it (this one should stop).
    pub(super) fn claim(&self) -> bool {
        let race = &self.race.winner;
        if race
            .compare_exchange(0, self.me, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let other = if self.me == 1 { 1 } else { 0 };
            self.race.sides[other].cancel();
            return true;
        }
        race.load(Ordering::Acquire) == self.me
    }

    pub(super) fn won(&self) -> bool {
        self.race.winner.load(Ordering::Acquire) == self.me
    }

    /// The other side won: this side's cancellation is the race's doing.
    pub(super) fn lost(&self) -> bool {
        !matches!(self.race.winner.load(Ordering::Acquire), 0) && !self.won()
    }
}

/// Forwards one racer's events only once it has won, so a front end never
/// sees text (or a model name) from the side that loses.
struct RacerProgress<'a> {
    racer: Racer,
    inner: OnProgress<'a>,
    /// The racer's latest `Trying`, told when it wins.
    pending: Mutex<Option<Progress>>,
}

impl RacerProgress<'_> {
    fn forward(&self, event: Progress) {
        if let Progress::Trying { .. } = event {
            *self.pending.lock().expect("pending lock") = Some(event.clone());
            if !self.racer.won() {
                return;
            }
        }
        if !self.racer.won() {
            return;
        }
        if let Some(trying) = self.pending.lock().expect("pending lock").take() {
            (self.inner)(trying);
            if matches!(event, Progress::Trying { .. }) {
                return;
            }
        }
        (self.inner)(event);
    }
}

pub(super) enum Side {
    Primary,
    Hedge,
}

pub(super) enum HedgeRan {
    No,
    Yes,
    Failed(Failure),
}

impl HedgeRan {
    /// Whether the hedge's entry was really tried: it answered or failed on
    /// its own (not merely cancelled for losing the race), so the chain need
    /// not try it again.
    pub(super) fn tried(&self) -> bool {
        matches!(self, HedgeRan::Yes | HedgeRan::Failed(Failure::Failed(_)))
    }
}

impl Router {
    /// Serves `primary`, hedged by `hedge` after the first-token ceiling.
    /// Returns the outcome, which side it came from, and whether the hedge
    /// ran (with its failure when both failed). A primary that fails before
    /// the ceiling is not hedged: the caller fails over as usual.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn hedged(
        &self,
        primary: &Candidate,
        hedge: &Candidate,
        request: &TaskRequest,
        profile: &TaskProfile,
        run: &mut RunState,
        cancel: &CancellationToken,
        progress: OnProgress<'_>,
    ) -> (Result<(String, Usage), Failure>, Side, HedgeRan) {
        let (cancel_primary, cancel_hedge) = (cancel.child_token(), cancel.child_token());
        let race = Arc::new(Race {
            winner: AtomicU8::new(0),
            sides: [cancel_primary.clone(), cancel_hedge.clone()],
        });
        let racer = |me| Racer {
            race: race.clone(),
            me,
        };
        let primary_progress = RacerProgress {
            racer: racer(1),
            inner: progress,
            pending: Mutex::new(None),
        };
        let hedge_progress = RacerProgress {
            racer: racer(2),
            inner: progress,
            pending: Mutex::new(None),
        };
        let mut hedge_run = run.fork(racer(2));
        run.racer = Some(racer(1));
        let hedge_started = AtomicBool::new(false);
        let primary_forward = |e| primary_progress.forward(e);
        let hedge_forward = |e| hedge_progress.forward(e);
        let outcome = {
            let primary_call = self.serve_entry(
                primary,
                request,
                profile,
                run,
                &cancel_primary,
                &primary_forward,
            );
            let hedge_call = async {
                tokio::select! {
                    _ = cancel_hedge.cancelled() => return Err(Failure::Cancelled),
                    _ = tokio::time::sleep(profile.first_token_ceiling()) => {}
                }
                if hedge_progress.racer.lost() {
                    // The primary's first token came in time: nothing to hedge.
                    return Err(Failure::Cancelled);
                }
                hedge_started.store(true, Ordering::Release);
                tracing::info!(
                    "{} has no first token after {:.1} s; hedging with {}",
                    primary.entry,
                    profile.first_token_ceiling().as_secs_f64(),
                    hedge.entry
                );
                self.serve_entry(
                    hedge,
                    request,
                    profile,
                    &mut hedge_run,
                    &cancel_hedge,
                    &hedge_forward,
                )
                .await
            };
            tokio::pin!(primary_call, hedge_call);
            tokio::select! {
                result = &mut primary_call => {
                    // The primary is done (won or failed): a hedge not yet started never starts.
                    if result.is_ok() || !hedge_started.load(Ordering::Acquire) {
                        cancel_hedge.cancel();
                        let _ = hedge_call.await;
                        (result, Side::Primary, HedgeRan::No)
                    } else {
                        let hedge_result = hedge_call.await;
                        match hedge_result {
                            Ok(answer) => (Ok(answer), Side::Hedge, HedgeRan::Yes),
                            Err(hedge_failure) => (result, Side::Primary, HedgeRan::Failed(hedge_failure)),
                        }
                    }
                }
                result = &mut hedge_call => {
                    let started = hedge_started.load(Ordering::Acquire);
                    match result {
                        Ok(answer) => {
                            cancel_primary.cancel();
                            let _ = primary_call.await;
                            (Ok(answer), Side::Hedge, HedgeRan::Yes)
                        }
                        Err(_) if !started => (primary_call.await, Side::Primary, HedgeRan::No),
                        Err(hedge_failure) => {
                            (primary_call.await, Side::Primary, HedgeRan::Failed(hedge_failure))
                        }
                    }
                }
            }
        };
        run.racer = None;
        run.absorb(hedge_run);
        outcome
    }
}
