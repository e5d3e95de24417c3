//! Hedging as a combinator over any two attempts: the primary starts at
//! once; when it has shown no text by the ceiling, the hedge starts
//! alongside; whichever shows text first wins and the other is cancelled (its
//! attempt, a retry it was about to send, a backoff it was sleeping through).
//! The front end only ever hears the winner. What the two attempts are is
//! the caller's business: each is handed a [`Contender`] to run as.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::attempt::Failure;
use super::request::{OnProgress, Progress};

/// Who showed text first. The moment one side claims the win, the other
/// side is cancelled.
#[derive(Debug)]
struct Race {
    winner: AtomicU8,
    /// Each side's cancellation, by racer number (1 and 2).
    sides: [CancellationToken; 2],
}

/// One side of a race, as the attempt running it sees it.
#[derive(Clone, Debug)]
pub(super) struct Racer {
    race: Arc<Race>,
    me: u8,
}

impl Racer {
    /// Claims the win at this racer's first text; `false` when the other
    /// side already has it.
    fn claim(&self) -> bool {
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

    fn won(&self) -> bool {
        self.race.winner.load(Ordering::Acquire) == self.me
    }

    /// The other side won: this side's cancellation is the race's doing.
    pub(super) fn lost(&self) -> bool {
        !matches!(self.race.winner.load(Ordering::Acquire), 0) && !self.won()
    }
}

/// What one side of a race runs with: its own cancellation, and a progress
/// channel that claims the win at the first text and forwards events only
/// once this side has won.
pub(super) struct Contender<'p> {
    pub cancel: CancellationToken,
    pub racer: Racer,
    inner: OnProgress<'p>,
    /// The side's latest `Trying`, told when it wins.
    pending: Mutex<Option<Progress>>,
}

impl Contender<'_> {
    pub(super) fn forward(&self, event: Progress) {
        if let Progress::Trying { .. } = event {
            *self.pending.lock().expect("pending lock") = Some(event);
            if self.racer.won() {
                self.tell_pending();
            }
            return;
        }
        let text = matches!(event, Progress::Delta(_) | Progress::Received { .. });
        if !(self.racer.won() || text && self.racer.claim()) {
            return;
        }
        self.tell_pending();
        (self.inner)(event);
    }

    fn tell_pending(&self) {
        if let Some(trying) = self.pending.lock().expect("pending lock").take() {
            (self.inner)(trying);
        }
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
    /// its own (not merely cancelled for losing the race) or was kept back
    /// by a rule, so the chain need not try it again.
    pub(super) fn tried(&self) -> bool {
        matches!(
            self,
            HedgeRan::Yes | HedgeRan::Failed(Failure::Failed(_) | Failure::Forbidden(_))
        )
    }
}

/// Runs `primary`, hedged by `hedge` once `ceiling` passes without text from
/// the primary. Returns the outcome, which side it came from, and whether the
/// hedge ran (with its failure when both failed). A primary that fails
/// before the ceiling is not hedged: the caller fails over as usual.
pub(super) async fn race<'p, T, P, H>(
    ceiling: Duration,
    cancel: &CancellationToken,
    progress: OnProgress<'p>,
    primary: impl FnOnce(Contender<'p>) -> P,
    hedge: impl FnOnce(Contender<'p>) -> H,
) -> (Result<T, Failure>, Side, HedgeRan)
where
    P: Future<Output = Result<T, Failure>>,
    H: Future<Output = Result<T, Failure>>,
{
    let (cancel_primary, cancel_hedge) = (cancel.child_token(), cancel.child_token());
    let race = Arc::new(Race {
        winner: AtomicU8::new(0),
        sides: [cancel_primary.clone(), cancel_hedge.clone()],
    });
    let contender = |me: u8, cancel: &CancellationToken| Contender {
        cancel: cancel.clone(),
        racer: Racer {
            race: race.clone(),
            me,
        },
        inner: progress,
        pending: Mutex::new(None),
    };
    let hedge_side = contender(2, &cancel_hedge);
    let primary_call = primary(contender(1, &cancel_primary));
    let hedge_started = AtomicBool::new(false);
    let hedge_call = async {
        tokio::select! {
            _ = cancel_hedge.cancelled() => return Err(Failure::Cancelled),
            _ = tokio::time::sleep(ceiling) => {}
        }
        if hedge_side.racer.lost() {
            // The primary's first text came in time: nothing to hedge.
            return Err(Failure::Cancelled);
        }
        hedge_started.store(true, Ordering::Release);
        hedge(hedge_side).await
    };
    tokio::pin!(primary_call, hedge_call);
    let cancels = (&cancel_primary, &cancel_hedge);
    finish(primary_call, hedge_call, &hedge_started, cancels).await
}

/// Waits for the race to end: the first side to answer wins, a hedge that
/// never started is no side at all, and the primary's failure stands when
/// the hedge failed too.
async fn finish<T>(
    mut primary_call: Pin<&mut impl Future<Output = Result<T, Failure>>>,
    mut hedge_call: Pin<&mut impl Future<Output = Result<T, Failure>>>,
    hedge_started: &AtomicBool,
    (cancel_primary, cancel_hedge): (&CancellationToken, &CancellationToken),
) -> (Result<T, Failure>, Side, HedgeRan) {
    tokio::select! {
        result = &mut primary_call => {
            // The primary is done (won or failed): a hedge not yet started never starts.
            if result.is_ok() || !hedge_started.load(Ordering::Acquire) {
                cancel_hedge.cancel();
                let _ = hedge_call.await;
                return (result, Side::Primary, HedgeRan::No);
            }
            match hedge_call.await {
                Ok(answer) => (Ok(answer), Side::Hedge, HedgeRan::Yes),
                Err(hedge_failure) => (result, Side::Primary, HedgeRan::Failed(hedge_failure)),
            }
        }
        result = &mut hedge_call => match result {
            Ok(answer) => {
                cancel_primary.cancel();
                let _ = primary_call.await;
                (Ok(answer), Side::Hedge, HedgeRan::Yes)
            }
            Err(_) if !hedge_started.load(Ordering::Acquire) => {
                (primary_call.await, Side::Primary, HedgeRan::No)
            }
            Err(hedge_failure) => (primary_call.await, Side::Primary, HedgeRan::Failed(hedge_failure)),
        }
    }
}
