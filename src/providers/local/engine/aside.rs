//! Completion before prewarm before chat: a local chat answer (an explain
//! with no remote provider) yields to every completion and prewarm that
//! arrives while its prompt is decoded or its answer generated, so ghost text
//! keeps its budget, and its cache follows the user, while an explain runs on
//! the local model (ARCHITECTURE.md invariant 21).
//!
//! Nothing is copied by hand: the completion's own switch saves the chat's
//! cache among the recent prompts (`recent`), and the chat brings its tokens
//! so far back with the usual prefill, which restores that saved state and
//! decodes only the last token again, for its logits. Were the state
//! evicted, the prefill decodes the tokens again: slower, never wrong.

use super::generate::Generated;
use super::prefill::{Prefill, SyncError};
use super::{Engine, Interrupt, Job, Stopped};
use crate::providers::local::prompt::FimPrompt;
use crate::providers::local::{CompletionJob, EngineError, Generation, StopReason};

impl Engine<'_> {
    /// Whether a completion or prewarm waits (everything that has arrived is
    /// looked at).
    pub(super) fn ahead_of_chat_waiting(&mut self) -> bool {
        while let Ok(job) = self.rx.try_recv() {
            self.pending.push_back(job);
        }
        self.pending.iter().any(goes_before_chat)
    }

    /// Serves what waits ahead of the chat, completions first, each kind in
    /// its order; other jobs stay queued. A prewarm's fill stops at the next
    /// job that arrives, so a completion never waits behind one.
    fn serve_ahead_of_chat(&mut self) {
        loop {
            let next = self.position_of(|job| matches!(job, Job::Complete(..)));
            let next = next.or_else(|| self.position_of(|job| matches!(job, Job::Prewarm(..))));
            match next.and_then(|at| self.pending.remove(at)) {
                Some(Job::Complete(job, reply)) => self.complete(job, reply),
                Some(Job::Prewarm(prewarm, done)) => self.prewarm_then_tell(&prewarm, done),
                _ => return,
            }
        }
    }

    fn position_of(&self, wanted: impl Fn(&Job) -> bool) -> Option<usize> {
        self.pending.iter().position(wanted)
    }

    /// Brings the cache to `prompt` (see `sync_prompt`); where `interrupt`
    /// yields, serves the completions and prewarms that arrive meanwhile and
    /// goes on.
    pub(super) fn sync_yielding(
        &mut self,
        prompt: &FimPrompt,
        interrupt: &Interrupt,
    ) -> Result<Prefill, SyncError> {
        loop {
            match self.sync_prompt(prompt, interrupt) {
                Err(SyncError::Stopped(Stopped::Preempted, _)) if interrupt.yields => {
                    self.serve_ahead_of_chat();
                }
                other => return other,
            }
        }
    }

    /// Generates `job`'s answer; where `interrupt` yields, serves each
    /// completion and prewarm that waits and then brings the answer's tokens
    /// back.
    pub(super) fn generate_yielding(
        &mut self,
        job: &mut CompletionJob,
        answer: &mut Generation,
        interrupt: &Interrupt,
    ) -> Result<(), EngineError> {
        let mut bytes = Vec::new();
        loop {
            match self.generate(job, answer, &mut bytes, interrupt.yields)? {
                Generated::Ended => return Ok(()),
                Generated::Yielded => {}
            }
            let so_far = FimPrompt {
                tokens: self.cached.clone(),
                suffix_span: None,
                document: false,
                prefix_trimmed: 0,
                suffix_trimmed: 0,
            };
            self.serve_ahead_of_chat();
            match self.sync_yielding(&so_far, interrupt) {
                Ok(_) => {}
                Err(SyncError::Stopped(stopped, _)) => {
                    answer.stop = match stopped {
                        Stopped::Deadline => StopReason::Deadline,
                        Stopped::Cancelled | Stopped::Preempted => StopReason::Cancelled,
                    };
                    return Ok(());
                }
                Err(SyncError::Decode(reason)) => {
                    self.reset_cache();
                    return Err(EngineError::Failed(reason));
                }
            }
        }
    }
}

fn goes_before_chat(job: &Job) -> bool {
    matches!(job, Job::Complete(..) | Job::Prewarm(..))
}
