//! Prefill: bringing the KV cache to a prompt while decoding as little as possible.
//!
//! Keeps the common token prefix, moves an unchanged suffix to its new positions
//! (a RoPE shift through the parking sequence) and decodes the rest in chunks,
//! checking the cancel flag, deadline and newer jobs between chunks. A FIM
//! prompt borrows a resident document's start (see `resident`).

use std::time::{Duration, Instant};

use llama_cpp_2::context::kv_cache::KvCacheConversionError;
use llama_cpp_2::token::LlamaToken;

use super::load::context_params;
use super::{CHUNK, Engine, Interrupt, MAIN, PARKED, Residency, Stopped};
use crate::providers::local::prompt::FimPrompt;
use crate::providers::local::reuse::{self, SuffixSpan};

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
        } else if !self.settle_lent(prompt) {
            self.switch_recent(&prompt.tokens);
        }
        let plan = reuse::plan(
            &self.cached,
            self.cached_suffix,
            &prompt.tokens,
            prompt.suffix_span,
        );
        let mut prefill = Prefill {
            to_decode: plan.tokens_to_decode(prompt.tokens.len()),
            decoded: 0,
        };
        // A FIM prompt borrows a resident document's start, where the context
        // has room for both and an answer. A prompt that shares none of it (a
        // chat) borrows nothing: lent, the document would keep the chat from
        // being saved when a completion sets it aside.
        let room_to_lend = self.cached.len() + (prompt.tokens.len() - plan.keep) + self.answer_room
            <= self.context_tokens as usize;
        let borrows = plan.keep > 0 && !prompt.document;
        if matches!(self.residency, Residency::Whole) && borrows && room_to_lend {
            self.lend(plan.keep).map_err(SyncError::Decode)?;
        }
        let mem = |e: KvCacheConversionError| SyncError::Decode(e.to_string());
        if let Some(run) = plan.moved {
            // llama.cpp requires each sequence's positions to stay consecutive, so the
            // run waits in the parking sequence, moved to its new positions, while
            // the gap before it is decoded into the main sequence.
            let (from, end) = (run.from as u32, (run.from + run.len) as u32);
            self.ctx
                .copy_kv_cache_seq(MAIN, PARKED, Some(from), Some(end))
                .map_err(mem)?;
            self.ctx
                .kv_cache_seq_add(PARKED, Some(from), Some(end), run.delta())
                .map_err(mem)?;
        }
        self.ctx
            .kv_cache_seq_rm(MAIN, Some(plan.keep as u32), None)
            .map_err(mem)?;
        self.cached.truncate(plan.keep);
        self.cached_suffix = None;
        // A FIM prompt that did not borrow the document's start overwrote it.
        if prompt.document {
            self.residency = Residency::Whole;
        } else if matches!(self.residency, Residency::Whole) {
            self.residency = Residency::None;
        }

        if let Some(run) = plan.moved {
            // Fill the gap before the moved run; if stopped, drop the run so the
            // cache stays a contiguous run of known tokens.
            let gap =
                self.decode_into_cache(&prompt.tokens[..run.to], interrupt, &mut prefill.decoded);
            if gap.is_ok() {
                let (to, end) = (run.to as u32, (run.to + run.len) as u32);
                self.ctx
                    .copy_kv_cache_seq(PARKED, MAIN, Some(to), Some(end))
                    .map_err(mem)?;
                self.cached
                    .extend_from_slice(&prompt.tokens[run.to..run.to + run.len]);
            }
            self.ctx.kv_cache_seq_rm(PARKED, None, None).map_err(mem)?;
            gap.map_err(|stopped| SyncError::Stopped(stopped, prefill))?;
        }
        let filled = self.decode_into_cache(&prompt.tokens, interrupt, &mut prefill.decoded);
        // A partly decoded suffix is still worth moving next time.
        self.cached_suffix = prompt
            .suffix_span
            .map(|span| SuffixSpan {
                start: span.start,
                end: span.end.min(self.cached.len()),
            })
            .filter(|span| span.end > span.start);
        filled.map_err(|stopped| SyncError::Stopped(stopped, prefill))?;
        Ok(prefill)
    }

    /// Decodes `target[self.cached.len()..]` in chunks; the last token gets logits.
    fn decode_into_cache(
        &mut self,
        target: &[i32],
        interrupt: &Interrupt,
        decoded: &mut usize,
    ) -> Result<(), Stopped> {
        let chunk = chunk_len(self.chunk_cost, interrupt.preemptible);
        while self.cached.len() < target.len() {
            let start = self.cached.len();
            let end = (start + chunk).min(target.len());
            if let Some(stopped) = self.check(
                interrupt,
                self.chunk_cost.mul_f64((end - start) as f64 / CHUNK as f64),
            ) {
                return Err(stopped);
            }
            self.batch.clear();
            for (pos, &token) in (start..end).zip(&target[start..end]) {
                let last = pos + 1 == target.len();
                // Capacity is CHUNK and the chunk never exceeds it.
                let _ = self.batch.add(LlamaToken(token), pos as i32, &[MAIN], last);
            }
            let started = Instant::now();
            if let Err(e) = self.ctx.decode(&mut self.batch) {
                tracing::error!("llama.cpp decode failed: {e}; clearing the cache");
                self.reset_cache();
                return Err(Stopped::Cancelled);
            }
            self.note_prompt_chunk(end - start, started.elapsed());
            self.logits_index = (end - start) as i32 - 1;
            self.cached.extend_from_slice(&target[start..end]);
            *decoded += end - start;
        }
        Ok(())
    }

    pub(super) fn reset_cache(&mut self) {
        self.ctx.clear_kv_cache();
        self.forget_cache();
    }

    /// The cache's contents are gone (cleared, or a new context).
    pub(super) fn forget_cache(&mut self) {
        self.cached.clear();
        self.cached_suffix = None;
        self.residency = Residency::None;
    }

    /// The naive baseline: a new context for every request.
    fn fresh_context(&mut self) -> Result<(), SyncError> {
        self.ctx = self
            .model
            .new_context(
                self.backend,
                context_params(self.context_tokens, self.threads),
            )
            .map_err(|e| SyncError::Decode(format!("creating a llama.cpp context: {e}")))?;
        self.forget_cache();
        Ok(())
    }
}

/// The longest a request should wait for a background chunk already in flight.
const BACKGROUND_CHUNK_TIME: Duration = Duration::from_millis(150);

/// Tokens per decode call. A job's own prompt goes in full chunks, the fastest
/// per token. Background work goes in chunks that end within
/// `BACKGROUND_CHUNK_TIME` at the measured speed: a request that arrives waits
/// for the chunk in flight, and under a CPU hog a full chunk takes ~0.6 s of its
/// 1 s. Never below half a chunk: shorter ones are mostly per-call overhead,
/// and their time is not taken as a speed measurement.
fn chunk_len(chunk_cost: Duration, background: bool) -> usize {
    if !background {
        return CHUNK;
    }
    let affordable = BACKGROUND_CHUNK_TIME.as_secs_f64() / chunk_cost.as_secs_f64().max(1e-6);
    ((affordable * CHUNK as f64) as usize).clamp(CHUNK / 2, CHUNK)
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
        // The test machine idle (~90 tokens/s) and under a CPU hog (~55).
        assert_eq!(
            chunk_len(cost_at(90.0), true),
            CHUNK / 2,
            "never below half"
        );
        assert_eq!(chunk_len(cost_at(55.0), true), CHUNK / 2);
        assert_eq!(
            chunk_len(cost_at(55.0), false),
            CHUNK,
            "a request's own prompt"
        );
    }
}
