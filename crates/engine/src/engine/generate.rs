//! Generation: greedy decoding with speculative drafts (ARCHITECTURE.md
//! invariant 15), the text as it is emitted, and the step costs that decide
//! how long a draft pays.

use std::time::{Duration, Instant};

use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::cache::Logits;
use super::{Engine, Interrupt, NEAR_TIE, Residency, Stopped};
use crate::lookup;
use crate::{CompletionJob, EngineError, Generation, StopReason};

/// What an answer has generated, and the text taken back from its prompt
/// that it spells first (token healing, see `healing`).
pub(super) struct Written {
    bytes: Vec<u8>,
    healed: Vec<u8>,
}

impl Written {
    pub(super) fn healing(healed: Vec<u8>) -> Written {
        Written {
            bytes: Vec::new(),
            healed,
        }
    }

    /// What is still to spell of the text taken back; `None` once spelled.
    fn left_to_heal(&self) -> Option<&[u8]> {
        self.healed
            .get(self.bytes.len()..)
            .filter(|left| !left.is_empty())
    }

    /// The answer's length so far, in bytes of its text.
    fn text_len(&self) -> usize {
        self.bytes.len().saturating_sub(self.healed.len())
    }

    /// The answer's text: what follows the text taken back, to its last
    /// whole character.
    fn text(&self) -> String {
        complete_utf8(self.bytes.get(self.healed.len()..).unwrap_or_default())
    }
}

/// How a stretch of generation ended.
pub(super) enum Generated {
    Ended,
    /// A completion waits; the chat goes on after it.
    Yielded,
}

/// Whose answer is generated, which says what stops it early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Asker {
    /// A request: its cancel flag and deadline.
    Request,
    /// A chat: also yields to a completion that waits (see `aside`).
    Chat,
    /// An answer ahead of its request (see `ahead`): any job stops it.
    Ahead,
}

/// What comes before the next generated token.
enum Flow {
    Go,
    Stop(StopReason),
    /// A chat gives way to a waiting completion.
    Yield,
}

impl Engine<'_> {
    /// Greedy generation. With drafting on, each step decodes the sampled token
    /// together with an n-gram lookup draft of what may follow; a draft token
    /// stands only where greedy sampling picks it from the batch's logits, so the
    /// text is the same as one token at a time, in fewer decode steps.
    ///
    /// Generates until the answer ends, or (a chat) until a completion
    /// waits: `Yielded`, to go on with the same `answer` and `written` once
    /// the cache holds its tokens again. While the text taken back from the
    /// prompt is not yet spelled again, the token chosen is the best that
    /// spells it, and no draft follows.
    pub(super) fn generate(
        &mut self,
        job: &mut CompletionJob,
        answer: &mut Generation,
        written: &mut Written,
        asker: Asker,
    ) -> Result<Generated, EngineError> {
        let mut sampler = LlamaSampler::greedy();
        answer.moved_suffix |= self.cache.holds_moved_suffix();
        let set_aside = match self.cache.residency() {
            Residency::Lent(lent) => lent.tail.len(),
            _ => 0,
        };
        let room = (self.context_tokens as usize).saturating_sub(self.cache.len() + set_aside);
        let max_tokens = job.max_tokens.min(answer.tokens_generated + room);
        let interrupt = Interrupt {
            cancel: Some(&job.cancel),
            deadline: Some(job.deadline),
            preemptible: asker == Asker::Ahead,
            yields: asker == Asker::Chat,
        };
        loop {
            if answer.tokens_generated >= max_tokens {
                answer.stop = StopReason::MaxTokens;
                break;
            }
            match self.before_token(&interrupt, asker, answer.tokens_generated) {
                Flow::Go => {}
                Flow::Stop(stop) => {
                    answer.stop = stop;
                    break;
                }
                Flow::Yield => return Ok(Generated::Yielded),
            }
            let index = self.cache.logits_index();
            let healing = written.left_to_heal().and_then(|left| {
                let logits = self.cache.ctx().get_logits_ith(index);
                self.pieces.best_agreeing(logits, left)
            });
            let (token, margin) = healing.unwrap_or_else(|| {
                let token = sampler.sample(self.cache.ctx(), index);
                (token, self.margin(index, token))
            });
            if let Some(stop) = self.emit(token, margin, &mut job.stop, answer, written) {
                answer.stop = stop;
                break;
            }
            let step = (token.0, max_tokens - answer.tokens_generated, job.deadline);
            let stop = self.draft_and_verify(step, &mut job.stop, &mut sampler, answer, written)?;
            if let Some(stop) = stop {
                answer.stop = stop;
                break;
            }
        }
        Ok(Generated::Ended)
    }

    /// Whether the next token may be generated, by the interrupt's rules.
    fn before_token(&mut self, interrupt: &Interrupt, asker: Asker, generated: usize) -> Flow {
        match self.check(interrupt, self.costs.token) {
            Some(Stopped::Deadline) => Flow::Stop(StopReason::Deadline),
            Some(Stopped::Preempted) if asker == Asker::Ahead => Flow::Stop(StopReason::Cancelled),
            // The first piece goes out before a chat yields.
            Some(Stopped::Preempted) if generated > 0 => Flow::Yield,
            Some(Stopped::Preempted) | None => Flow::Go,
            Some(Stopped::Cancelled) => Flow::Stop(StopReason::Cancelled),
        }
    }

    /// Decodes `token` with the draft that follows it and keeps what greedy
    /// sampling confirms; why generation ends, if it does.
    fn draft_and_verify(
        &mut self,
        (token, left, deadline): (i32, usize, std::time::Instant),
        rule: &mut crate::StopRule,
        sampler: &mut LlamaSampler,
        answer: &mut Generation,
        written: &mut Written,
    ) -> Result<Option<StopReason>, EngineError> {
        let step = match written.left_to_heal() {
            Some(_) => vec![token],
            None => self.step_with_draft(token, left, deadline),
        };
        let decode_started = Instant::now();
        let decoded = self.cache.decode(&step, Logits::All);
        self.note_generation_step(step.len() - 1, decode_started.elapsed());
        decoded.map_err(EngineError::Failed)?;
        let (accepted, stop) = self.verify(&step[1..], sampler, rule, answer, written);
        self.cache
            .keep_of_step(accepted)
            .map_err(EngineError::Failed)?;
        Ok(stop)
    }

    /// Adds the draft tokens greedy sampling picks from the step's logits
    /// (the logits at batch index i predict the token after index i) to the
    /// answer. Returns how many stood and why generation ends, if it does.
    fn verify(
        &mut self,
        draft: &[i32],
        sampler: &mut LlamaSampler,
        rule: &mut crate::StopRule,
        answer: &mut Generation,
        written: &mut Written,
    ) -> (usize, Option<StopReason>) {
        let mut stop = None;
        let mut accepted = 0;
        for &drafted in draft {
            let predicted = sampler.sample(self.cache.ctx(), accepted as i32);
            if predicted.0 != drafted {
                break;
            }
            accepted += 1;
            let margin = self.margin(accepted as i32 - 1, predicted);
            stop = self.emit(predicted, margin, rule, answer, written);
            if stop.is_some() {
                break;
            }
        }
        answer.tokens_drafted += draft.len();
        answer.tokens_accepted += accepted;
        if !draft.is_empty() {
            self.drafting.acceptance.note(draft.len(), accepted);
        }
        (accepted, stop)
    }

    /// Adds a token chosen by `margin` over the next best to the answer, or
    /// says why generation ends here.
    fn emit(
        &self,
        token: LlamaToken,
        margin: f32,
        stop: &mut crate::StopRule,
        answer: &mut Generation,
        written: &mut Written,
    ) -> Option<StopReason> {
        let vocab = self.model.vocab();
        if vocab.is_eog(token)
            || vocab.is_control(token)
            || [self.fim.prefix, self.fim.suffix, self.fim.middle].contains(&token.0)
        {
            return Some(StopReason::EndOfText);
        }
        if answer.near_tie_at.is_none() && margin < NEAR_TIE {
            answer.near_tie_at = Some(written.text_len());
        }
        written
            .bytes
            .extend(vocab.token_to_piece(token, false, None));
        answer.tokens_generated += 1;
        answer.text = written.text();
        stop(&answer.text).then_some(StopReason::Rule)
    }

    /// How far the chosen token's logit at batch `index` is ahead of the next best.
    fn margin(&self, index: i32, chosen: LlamaToken) -> f32 {
        let logits = self.cache.ctx().get_logits_ith(index);
        let best = logits[chosen.0 as usize];
        let runner_up = logits
            .iter()
            .enumerate()
            .filter(|&(t, _)| t != chosen.0 as usize)
            .map(|(_, &l)| l)
            .fold(f32::NEG_INFINITY, f32::max);
        best - runner_up
    }

    /// A generation step: `token`, then what to verify after it, a lookup
    /// draft as long as it pays, no longer than `left` tokens, cut to what the
    /// step can decode before `deadline`.
    fn step_with_draft(&mut self, token: i32, left: usize, deadline: Instant) -> Vec<i32> {
        let time_left = deadline.saturating_duration_since(Instant::now());
        let affordable = time_left.saturating_sub(self.costs.token).as_secs_f64()
            / self.costs.draft_token.as_secs_f64().max(1e-6);
        let acceptance = &mut self.drafting.acceptance;
        let mut worth = acceptance.worth(self.costs.token, self.costs.draft_token);
        if worth == 0 && acceptance.explore() {
            worth = 1;
        }
        let max = self
            .drafting
            .max_tokens
            .min(left)
            .min(affordable as usize)
            .min(worth);
        let history = [self.cache.tokens(), &[token]].concat();
        [&[token], lookup::draft(&history, max)].concat()
    }

    /// Folds a generation step's time into the cost of one token and of each
    /// extra draft token in the same batch.
    fn note_generation_step(&mut self, drafted: usize, took: Duration) {
        let costs = &mut self.costs;
        if drafted == 0 {
            costs.token = (costs.token + took) / 2;
        } else {
            let extra = took.saturating_sub(costs.token) / drafted as u32;
            costs.draft_token = (costs.draft_token * 3 + extra) / 4;
        }
    }
}

/// The longest valid UTF-8 prefix: a multi-byte character split across tokens
/// appears once its last byte has been generated.
fn complete_utf8(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(e) => String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_multibyte_character_waits_for_its_last_byte() {
        let bytes = "é".as_bytes();
        assert_eq!(complete_utf8(&bytes[..1]), "");
        assert_eq!(complete_utf8(bytes), "é");
    }
}
