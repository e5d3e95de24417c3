//! The jobs not yet served: what arrived while a job ran is looked at between
//! chunks and tokens, so background work stops for it and a chat yields to a
//! completion.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

use super::Job;

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
