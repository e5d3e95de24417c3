//! Completion before chat: a local chat answer (an explain with no remote
//! provider) yields to every completion that arrives while its prompt is
//! decoded or its answer generated, so ghost text keeps its budget while an
//! explain runs on the local model (ARCHITECTURE.md invariant 21).
//!
//! Two limits keep the chat alive under a stream of completions. It stops
//! yielding its prompt once what is left of it would no longer decode before
//! its first piece is due (`ChatTurn::hold_from`): a chat past its first-token
//! ceiling fails, and ghost text at the rate of typing would otherwise keep
//! it from ever starting. And while a chat waits, a completion does no
//! background fill after its answer, and prewarms wait for the chat: fills
//! take seconds, and served ahead of the chat they starved it (measured:
//! every explain past its 10 s ceiling, `benches/explain_beside_ghost_text`).
//!
//! Nothing is copied by hand: the completion's own switch saves the chat's
//! cache among the recent prompts (`recent`), and the chat brings its tokens
//! so far back with the usual prefill, which restores that saved state and
//! decodes only the last token again, for its logits. Were the state
//! evicted, the prefill decodes the tokens again: slower, never wrong.

use std::time::{Duration, Instant};

use super::generate::{Asker, Generated, Written};
use super::prefill::{Prefill, SyncError};
use super::{CHUNK, Engine, Interrupt, Job, Stopped};
use crate::prompt::FimPrompt;
use crate::{CompletionJob, EngineError, Generation, StopReason};

/// A local chat and the completions it yields to.
#[derive(Default)]
pub(super) struct ChatTurn {
    /// A chat waits while completions are answered: they fill nothing more.
    pub(super) waiting: bool,
    /// When the chat in progress stops yielding its prompt.
    pub(super) hold_from: Option<Instant>,
}

/// What a held chat keeps in hand beyond its prompt's decode at the measured
/// speed: the chunk in flight, a slower chunk at depth, the router's own
/// steps.
const HOLD_MARGIN: Duration = Duration::from_secs(1);

impl Engine<'_> {
    /// Whether a completion waits (everything that has arrived is looked
    /// at), unless the chat must now hold on to keep its first-token promise.
    pub(super) fn completion_waiting(&mut self) -> bool {
        let holding = self
            .chat
            .hold_from
            .is_some_and(|from| Instant::now() >= from);
        !holding && self.jobs.completion_waits()
    }

    /// Answers the completions waiting, in their order; other jobs stay
    /// queued, and no fill follows an answer while the chat waits.
    fn answer_waiting_completions(&mut self) {
        self.chat.waiting = true;
        while let Some(Job::Complete(job, reply, window)) = self.jobs.take_completion() {
            self.complete(job, reply, window);
        }
        self.chat.waiting = false;
    }

    /// When a chat whose first piece is due `by` must stop yielding its
    /// prompt, which the cache lacks `to_decode` tokens of: in time to decode
    /// them all, with a second to spare.
    pub(super) fn hold_from(&self, by: Instant, to_decode: usize) -> Instant {
        let decode = self.costs.chunk.mul_f64(to_decode as f64 / CHUNK as f64);
        by.checked_sub(decode + HOLD_MARGIN)
            .unwrap_or_else(Instant::now)
    }

    /// Brings the cache to `prompt` (see `sync_prompt`); where `interrupt`
    /// yields, answers the completions that arrive meanwhile and goes on.
    pub(super) fn sync_yielding(
        &mut self,
        prompt: &FimPrompt,
        interrupt: &Interrupt,
    ) -> Result<Prefill, SyncError> {
        loop {
            match self.sync_prompt(prompt, interrupt) {
                Err(SyncError::Stopped(Stopped::Preempted, _)) if interrupt.yields => {
                    self.answer_waiting_completions();
                }
                other => return other,
            }
        }
    }

    /// Generates `job`'s answer, which spells `healed` first (see
    /// `healing`); where `interrupt` yields, answers each completion that
    /// waits and then brings the answer's tokens back.
    pub(super) fn generate_yielding(
        &mut self,
        job: &mut CompletionJob,
        answer: &mut Generation,
        healed: Vec<u8>,
        interrupt: &Interrupt,
    ) -> Result<(), EngineError> {
        let mut written = Written::healing(healed);
        let asker = match interrupt.yields {
            true => Asker::Chat,
            false => Asker::Request,
        };
        loop {
            match self.generate(job, answer, &mut written, asker)? {
                Generated::Ended => return Ok(()),
                Generated::Yielded => {}
            }
            let so_far = FimPrompt {
                tokens: self.cache.tokens().to_vec(),
                suffix_span: None,
                document: false,
                prefix_trimmed: 0,
                suffix_trimmed: 0,
                healed: Vec::new(),
            };
            self.answer_waiting_completions();
            match self.sync_yielding(&so_far, interrupt) {
                Ok(_) => {}
                Err(SyncError::Stopped(stopped, _)) => {
                    answer.stop = match stopped {
                        Stopped::Deadline => StopReason::Deadline,
                        Stopped::Cancelled | Stopped::Preempted => StopReason::Cancelled,
                    };
                    return Ok(());
                }
                Err(SyncError::Decode(reason)) => return Err(EngineError::Failed(reason)),
            }
        }
    }
}
