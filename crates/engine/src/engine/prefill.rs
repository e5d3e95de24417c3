//! Prefill: bringing the KV cache to a prompt while decoding as little as possible.
//!
//! Keeps the common token prefix, moves an unchanged suffix to its new positions
//! (a RoPE shift through the parking sequence) and decodes the rest in chunks,
//! checking the cancel flag, deadline and newer jobs between chunks. A FIM
//! prompt borrows a resident document's start (see `resident`).

use std::time::{Duration, Instant};

use super::cache::Logits;
use super::load::context_params;
use super::{CHUNK, Engine, Interrupt, Residency, Stopped};
use crate::prompt::FimPrompt;
use crate::reuse;

/// What bringing the cache to a prompt took.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Prefill {
    /// Prompt tokens the cache lacked when the job came.
    pub to_decode: usize,
    /// Of those, the ones decoded before the job stopped (all, unless stopped).
    pub decoded: usize,
}

impl Engine<'_> {
    /// Brings the KV cache to `prompt`, decoding only what the cache lacks.
    pub(super) fn sync_prompt(
        &mut self,
        prompt: &FimPrompt,
        interrupt: &Interrupt,
    ) -> Result<Prefill, SyncError> {
        if !self.reuse_cache {
            self.fresh_context()?;
        } else if !self.cache.lent_stays(prompt) {
            self.switch_recent(prompt);
        }
        let plan = reuse::plan(
            self.cache.tokens(),
            self.cache.suffix(),
            &prompt.tokens,
            prompt.suffix_span,
        );
        let mut prefill = Prefill {
            to_decode: plan.tokens_to_decode(prompt.tokens.len()),
            decoded: 0,
        };
        if self.borrows_document(prompt, plan.keep) {
            self.cache.lend(plan.keep).map_err(SyncError::Decode)?;
        }
        if let Some(run) = plan.moved {
            self.cache.park(run).map_err(SyncError::Decode)?;
        }
        // A FIM prompt that did not borrow the document's start overwrites it.
        self.cache
            .rewrite_from(plan.keep, prompt.document)
            .map_err(SyncError::Decode)?;

        if let Some(run) = plan.moved {
            // Fill the gap before the moved run; if stopped, drop the run so the
            // cache stays a contiguous run of known tokens.
            let gap =
                self.decode_into_cache(&prompt.tokens[..run.to], interrupt, &mut prefill.decoded);
            if gap.is_ok() {
                let moved = &prompt.tokens[run.to..run.to + run.len];
                self.cache.unpark(run, moved).map_err(SyncError::Decode)?;
            }
            self.cache.drop_parked().map_err(SyncError::Decode)?;
            gap.map_err(|stopped| SyncError::Stopped(stopped, prefill))?;
        }
        let filled = self.decode_into_cache(&prompt.tokens, interrupt, &mut prefill.decoded);
        self.cache.set_suffix(prompt.suffix_span);
        filled.map_err(|stopped| SyncError::Stopped(stopped, prefill))?;
        Ok(prefill)
    }

    /// Whether `prompt`, sharing `keep` tokens with the cache, borrows a
    /// resident document's start: a FIM prompt does, where the context has
    /// room for the document, its own tokens and an answer. A prompt that
    /// shares none of it (a chat) borrows nothing: lent, the document would
    /// keep the chat from being saved when a completion sets it aside.
    pub(super) fn borrows_document(&self, prompt: &FimPrompt, keep: usize) -> bool {
        let room = self.cache.len() + (prompt.tokens.len() - keep) + self.answer_room
            <= self.context_tokens as usize;
        matches!(self.cache.residency(), Residency::Whole) && keep > 0 && !prompt.document && room
    }

    /// Decodes what the cache lacks of `target` (it holds its start) in
    /// chunks; the last token gets logits.
    fn decode_into_cache(
        &mut self,
        target: &[i32],
        interrupt: &Interrupt,
        decoded: &mut usize,
    ) -> Result<(), Stopped> {
        let chunk = chunk_len(self.costs.chunk, interrupt.preemptible);
        while self.cache.len() < target.len() {
            // Between chunks: a build started beside the editor changes the
            // thread count before the next one.
            self.follow_load();
            let start = self.cache.len();
            let end = (start + chunk).min(target.len());
            if let Some(stopped) = self.check(
                interrupt,
                self.costs
                    .chunk
                    .mul_f64((end - start) as f64 / CHUNK as f64),
            ) {
                return Err(stopped);
            }
            let logits = match end == target.len() {
                true => Logits::Last,
                false => Logits::None,
            };
            let started = Instant::now();
            if let Err(e) = self.cache.decode(&target[start..end], logits) {
                tracing::error!("{e}; the cache was cleared");
                return Err(Stopped::Cancelled);
            }
            self.note_prompt_chunk(end - start, started.elapsed());
            *decoded += end - start;
        }
        Ok(())
    }

    /// The naive baseline: a new context for every request.
    fn fresh_context(&mut self) -> Result<(), SyncError> {
        let ctx = self
            .model
            .new_context(
                self.backend,
                context_params(self.context_tokens, self.tuning.threads),
            )
            .map_err(|e| SyncError::Decode(format!("creating a llama.cpp context: {e}")))?;
        self.cache.replace(ctx);
        Ok(())
    }
}

/// The longest a request should wait for a background chunk already in flight.
const BACKGROUND_CHUNK_TIME: Duration = Duration::from_millis(150);

/// Fewest tokens in a background chunk: below this a decode call is mostly
/// its fixed overhead.
const MIN_BACKGROUND_CHUNK: usize = CHUNK / 4;

/// Tokens per decode call. A job's own prompt goes in full chunks, the fastest
/// per token. Background work goes in chunks that end within
/// `BACKGROUND_CHUNK_TIME` at the measured speed: a request that arrives waits
/// for the chunk in flight, and with one core busy (~60 tokens/s on one
/// thread) a request's shortest cut already takes half its second, so a
/// half chunk in flight (270 ms) made a third of cold requests miss
/// (BENCHMARKS.md). Chunks under half a chunk are not taken as a speed
/// measurement.
fn chunk_len(chunk_cost: Duration, background: bool) -> usize {
    if !background {
        return CHUNK;
    }
    let affordable = BACKGROUND_CHUNK_TIME.as_secs_f64() / chunk_cost.as_secs_f64().max(1e-6);
    ((affordable * CHUNK as f64) as usize).clamp(MIN_BACKGROUND_CHUNK, CHUNK)
}

pub(super) enum SyncError {
    Stopped(Stopped, Prefill),
    Decode(String),
}

impl std::fmt::Display for SyncError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncError::Stopped(Stopped::Cancelled, _) => f.write_str("cancelled"),
            SyncError::Stopped(Stopped::Deadline, _) => f.write_str("deadline"),
            SyncError::Stopped(Stopped::Preempted, _) => f.write_str("a newer job arrived"),
            SyncError::Decode(reason) => f.write_str(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost_at(tokens_per_s: f64) -> Duration {
        Duration::from_secs_f64(CHUNK as f64 / tokens_per_s)
    }

    #[test]
    fn background_chunks_end_within_their_time() {
        assert_eq!(chunk_len(cost_at(220.0), true), CHUNK, "fast: full chunks");
        assert_eq!(chunk_len(cost_at(170.0), true), 25);
        // The test machine idle (~90 tokens/s) and with one core busy (~55).
        assert_eq!(chunk_len(cost_at(90.0), true), 13);
        assert_eq!(chunk_len(cost_at(55.0), true), 8);
        assert_eq!(
            chunk_len(cost_at(20.0), true),
            MIN_BACKGROUND_CHUNK,
            "never below the floor"
        );
        assert_eq!(
            chunk_len(cost_at(55.0), false),
            CHUNK,
            "a request's own prompt"
        );
    }
}
