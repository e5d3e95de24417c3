//! Answers generated ahead of their request. Where the user has arrived (a
//! revealed cursor) and the span there is filled, the engine generates the
//! answer at the cursor while the user reads. A request whose prompt is the
//! span's, token for token, is answered from it without decoding: its own
//! stop rule runs over the same tokens, so it ends where a live generation
//! would (ARCHITECTURE.md invariant 23). Any job stops the generation ahead,
//! and only a whole answer is kept.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::generate::{Asker, Written};
use super::{Engine, Interrupt};
use crate::prompt::FimPrompt;
use crate::{AnswerAhead, CompletionJob, EngineError, FimText, Generation, StopReason, StopRule};
use switchyard_base::cancel::CancelFlag;

/// An answer ahead has no request's deadline; this bounds a runaway one.
const AHEAD_LIMIT: Duration = Duration::from_secs(60);

/// An answer generated ahead, whole.
pub(super) struct Ahead {
    /// Its prompt's digest (`FimPrompt::digest`).
    digest: u64,
    /// The text after each generated token.
    texts: Vec<String>,
    /// Why it ended: the end of the text, its line count or its token limit.
    stop: StopReason,
    near_tie_at: Option<usize>,
    moved_suffix: bool,
}

impl Ahead {
    /// Where a request's `stop` rule and `max_tokens` end this answer, as a
    /// live generation checks them (the token limit before each token, the
    /// rule after it): how many tokens, and why. Where the request wants
    /// more than was generated ahead (more lines), the answer ends there as
    /// at a token limit: a longer piece of the same answer than a live
    /// generation cut by the deadline gives.
    fn ends(&self, max_tokens: usize, stop: &mut StopRule) -> (usize, StopReason) {
        for (generated, text) in self.texts.iter().enumerate() {
            if generated >= max_tokens {
                return (generated, StopReason::MaxTokens);
            }
            if stop(text) {
                return (generated + 1, StopReason::Rule);
            }
        }
        let generated = self.texts.len();
        match self.stop {
            StopReason::EndOfText if generated < max_tokens => (generated, StopReason::EndOfText),
            _ => (generated, StopReason::MaxTokens),
        }
    }
}

impl Engine<'_> {
    /// Generates the answer to `window`'s prompt ahead of its request,
    /// within `limits`; any job that arrives stops it.
    pub(super) fn answer_ahead(&mut self, window: &FimText, limits: AnswerAhead) {
        let prompt = self.build_prompt(window);
        let digest = prompt.digest();
        if self
            .ahead
            .as_ref()
            .is_some_and(|ahead| ahead.digest == digest)
        {
            tracing::debug!("answer ahead kept: its prompt is the same");
            return;
        }
        if self.jobs.preempt(self.sheltered) {
            tracing::debug!("answer ahead stopped: a newer job arrived");
            return;
        }
        let background = Interrupt {
            cancel: None,
            deadline: None,
            preemptible: true,
            yields: false,
        };
        if let Err(e) = self.sync_prompt(&prompt, &background) {
            tracing::debug!("answer ahead stopped: {e}");
            return;
        }
        let started = Instant::now();
        let (answer, texts) = match self.generate_ahead(limits, prompt.healed.clone()) {
            Ok(generated) => generated,
            Err(e) => {
                tracing::debug!("answer ahead stopped: {e}");
                return;
            }
        };
        let whole = matches!(
            answer.stop,
            StopReason::EndOfText | StopReason::Rule | StopReason::MaxTokens
        );
        tracing::debug!(
            tokens = answer.tokens_generated,
            ms = started.elapsed().as_millis(),
            stop = ?answer.stop,
            "answer ahead {}",
            if whole { "done" } else { "stopped" }
        );
        if whole {
            self.ahead = Some(Ahead {
                digest,
                texts,
                stop: answer.stop,
                near_tie_at: answer.near_tie_at,
                moved_suffix: answer.moved_suffix,
            });
        }
    }

    /// Generates from the prompt the cache holds, within `limits`, spelling
    /// `healed` first: the answer, and its text after each token.
    fn generate_ahead(
        &mut self,
        limits: AnswerAhead,
        healed: Vec<u8>,
    ) -> Result<(Generation, Vec<String>), EngineError> {
        let texts = Arc::new(Mutex::new(Vec::new()));
        let seen = texts.clone();
        let mut job = CompletionJob {
            text: FimText::default(),
            span: None,
            max_tokens: limits.max_tokens,
            stop: Box::new(move |text: &str| {
                seen.lock().expect("texts lock").push(text.to_owned());
                text.matches('\n').count() >= limits.lines
            }),
            deadline: Instant::now() + AHEAD_LIMIT,
            cancel: CancelFlag::default(),
        };
        let mut answer = Generation::cancelled();
        let mut written = Written::healing(healed);
        self.generate(&mut job, &mut answer, &mut written, Asker::Ahead)?;
        drop(job);
        let texts = std::mem::take(&mut *texts.lock().expect("texts lock"));
        Ok((answer, texts))
    }

    /// `job`'s answer from the one generated ahead for `prompt`, if any.
    pub(super) fn answered_ahead(
        &self,
        prompt: &FimPrompt,
        job: &mut CompletionJob,
    ) -> Option<Generation> {
        // Most requests find none: no digest of their prompt is taken then.
        let ahead = self.ahead.as_ref()?;
        let digest = prompt.digest();
        if ahead.digest != digest {
            return None;
        }
        let (tokens, stop) = ahead.ends(job.max_tokens, &mut job.stop);
        let text = match tokens {
            0 => String::new(),
            n => ahead.texts[n - 1].clone(),
        };
        Some(Generation {
            near_tie_at: ahead.near_tie_at.filter(|&at| at < text.len()),
            text,
            stop,
            tokens_generated: tokens,
            tokens_ahead: tokens,
            prompt_tokens: prompt.tokens.len(),
            prompt_digest: digest,
            moved_suffix: ahead.moved_suffix,
            ..Generation::cancelled()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ahead(texts: &[&str], stop: StopReason) -> Ahead {
        Ahead {
            digest: 0,
            texts: texts.iter().map(|t| t.to_string()).collect(),
            stop,
            near_tie_at: None,
            moved_suffix: false,
        }
    }

    #[test]
    fn a_request_ends_an_answer_ahead_where_it_would_end_a_live_one() {
        let line = |text: &str| text.contains('\n');
        let never = |_: &str| false;
        // (the answer ahead, how it ended, the request's rule and token limit, where it ends)
        type Case = (&'static [&'static str], StopReason, fn(&str) -> bool, usize);
        let cases: [(Case, (usize, StopReason)); 7] = [
            // The request's rule ends it within what was generated.
            (
                (&["a", "ab\n"], StopReason::Rule, line, 9),
                (2, StopReason::Rule),
            ),
            (
                (&["a", "a\n", "a\nb"], StopReason::EndOfText, line, 9),
                (2, StopReason::Rule),
            ),
            // The model ended the text: so would it live.
            (
                (&["a", "ab"], StopReason::EndOfText, line, 9),
                (2, StopReason::EndOfText),
            ),
            (
                (&[], StopReason::EndOfText, never, 9),
                (0, StopReason::EndOfText),
            ),
            // The request's token limit comes first, even before the end.
            (
                (&["a", "ab", "abc"], StopReason::Rule, never, 2),
                (2, StopReason::MaxTokens),
            ),
            (
                (&["a", "ab"], StopReason::EndOfText, never, 2),
                (2, StopReason::MaxTokens),
            ),
            // The request wants more lines than were generated ahead: cut.
            (
                (&["a\n", "a\nb\n"], StopReason::Rule, never, 9),
                (2, StopReason::MaxTokens),
            ),
        ];
        for ((texts, stopped, rule, max_tokens), expected) in cases {
            let mut rule: StopRule = Box::new(rule);
            assert_eq!(
                ahead(texts, stopped).ends(max_tokens, &mut rule),
                expected,
                "{texts:?} ended by {stopped:?}, at most {max_tokens} tokens"
            );
        }
    }
}
