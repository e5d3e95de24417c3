//! The jobs not yet served: what arrived while a job ran is looked at between
//! chunks and tokens, so background work stops for it and a chat yields to a
//! completion.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

use super::{EditorWindow, Job};

/// Jobs not yet served, in arrival order.
pub(super) struct Queue {
    pub(super) rx: Receiver<Job>,
    /// Arrived while a job ran (looked at between chunks and tokens).
    pub(super) pending: VecDeque<Job>,
}

impl Queue {
    pub(super) fn new(rx: Receiver<Job>) -> Queue {
        Queue {
            rx,
            pending: VecDeque::new(),
        }
    }

    /// Whether a job waits: one looked at already, or one arriving now.
    pub(super) fn arrived(&mut self) -> bool {
        if !self.pending.is_empty() {
            return true;
        }
        match self.rx.try_recv() {
            Ok(job) => {
                self.pending.push_back(job);
                true
            }
            Err(TryRecvError::Empty) => false,
            // Nobody can ask anything any more: background work is pointless.
            Err(TryRecvError::Disconnected) => true,
        }
    }

    /// Whether a job waits that stops a background fill: any job, except
    /// that a fill `sheltered` for the user's window lets other windows'
    /// prewarms wait their turn (a window opening files beside the one the
    /// user asks in would otherwise take every fill from it).
    pub(super) fn preempt(&mut self, sheltered: Option<EditorWindow>) -> bool {
        let Some(users) = sheltered else {
            return self.arrived();
        };
        loop {
            match self.rx.try_recv() {
                Ok(job) => self.pending.push_back(job),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return true,
            }
        }
        self.pending
            .iter()
            .any(|job| !matches!(job, Job::Prewarm(_, _, from) if *from != users))
    }

    /// Whether no job comes for `quiet` (one that does is kept).
    pub(super) fn quiet_for(&mut self, quiet: Duration) -> bool {
        if !self.pending.is_empty() {
            return false;
        }
        match self.rx.recv_timeout(quiet) {
            Ok(job) => {
                self.pending.push_back(job);
                false
            }
            Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => false,
        }
    }

    /// Whether a completion waits: everything that has arrived is looked at.
    pub(super) fn completion_waits(&mut self) -> bool {
        while let Ok(job) = self.rx.try_recv() {
            self.pending.push_back(job);
        }
        self.pending
            .iter()
            .any(|job| matches!(job, Job::Complete(..)))
    }

    /// The first completion that has arrived, taken out; other jobs stay
    /// in their order.
    pub(super) fn take_completion(&mut self) -> Option<Job> {
        let at = self
            .pending
            .iter()
            .position(|job| matches!(job, Job::Complete(..)))?;
        self.pending.remove(at)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::{CompletionJob, FimText, Prewarm};
    use switchyard_base::cancel::CancelFlag;

    fn prewarm(from: u64) -> Job {
        Job::Prewarm(Prewarm::default(), None, EditorWindow(from))
    }

    fn completion(from: u64) -> Job {
        let job = CompletionJob {
            text: FimText::default(),
            span: None,
            max_tokens: 1,
            stop: Box::new(|_: &str| true),
            deadline: std::time::Instant::now(),
            cancel: CancelFlag::default(),
        };
        Job::Complete(job, tokio::sync::oneshot::channel().0, EditorWindow(from))
    }

    #[test]
    fn a_fill_for_the_users_window_lets_only_other_windows_prewarms_wait() {
        // (the fill sheltered for, the job waiting, whether it stops the fill)
        type Case = (Option<u64>, fn(u64) -> Job, u64, bool);
        let cases: [Case; 6] = [
            (None, prewarm, 1, true),
            (None, completion, 1, true),
            (Some(0), prewarm, 1, false),
            (Some(0), prewarm, 0, true),
            (Some(0), completion, 1, true),
            (Some(1), prewarm, 0, false),
        ];
        for (sheltered, job, from, stops) in cases {
            let (send, receive) = mpsc::channel();
            let mut queue = Queue::new(receive);
            send.send(job(from)).unwrap();
            assert_eq!(
                queue.preempt(sheltered.map(EditorWindow)),
                stops,
                "sheltered for {sheltered:?}, a job from window {from}"
            );
            assert_eq!(queue.pending.len(), 1, "the job stays queued");
        }
    }
}
