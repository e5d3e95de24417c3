//! Prompts the cache recently held, kept in memory (their KV state copied out
//! of llama.cpp), so switching back to a document or a place does not pay a
//! cold prompt again.
//!
//! When a prompt would throw away most of the cache, the cache is saved here
//! first; when a saved prompt shares a longer start with the new one than the
//! cache does, it is restored before the usual reuse plan runs.

use std::collections::VecDeque;

use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};

use super::{CHUNK, Engine, MAIN, Residency};
use crate::providers::local::reuse::{SuffixSpan, common_prefix};

/// At most this much memory for saved states (the test model's KV is ~12 KiB
/// a token; a 7B model's ~10 times that).
const MAX_BYTES: usize = 128 << 20;

struct Saved {
    tokens: Vec<i32>,
    suffix: Option<SuffixSpan>,
    resident: bool,
    state: SeqState,
}

/// Most recently saved first.
pub(super) struct RecentPrompts {
    saved: VecDeque<Saved>,
    capacity: usize,
}

impl RecentPrompts {
    pub(super) fn new(capacity: usize) -> RecentPrompts {
        RecentPrompts {
            saved: VecDeque::new(),
            capacity,
        }
    }

    /// The saved prompt sharing the longest start with `prompt`, and how long.
    fn best(&self, prompt: &[i32]) -> Option<(usize, usize)> {
        self.saved
            .iter()
            .enumerate()
            .map(|(i, saved)| (i, common_prefix(&saved.tokens, prompt)))
            .max_by_key(|&(_, common)| common)
    }

    /// The longest start a saved prompt shares with `prompt`.
    pub(super) fn longest_common(&self, prompt: &[i32]) -> Option<usize> {
        self.best(prompt).map(|(_, common)| common)
    }

    fn push(&mut self, saved: Saved) {
        self.saved.push_front(saved);
        self.saved.truncate(self.capacity);
        while self.saved.iter().map(|s| s.state.byte_len()).sum::<usize>() > MAX_BYTES {
            self.saved.pop_back();
        }
    }
}

impl Engine<'_> {
    /// Before the cache is brought to `prompt`: saves the cache when the prompt
    /// would throw most of it away, and restores a saved prompt that shares a
    /// longer start with `prompt` than the cache does. Failures only cost reuse.
    pub(super) fn switch_recent(&mut self, prompt: &[i32]) {
        if self.recent.capacity == 0 {
            return;
        }
        let current = common_prefix(&self.cached, prompt);
        // A chat set aside for completions keeps whatever it has: at the
        // rate of typing it gets a chunk or two between them, and losing
        // those each time it would never start.
        let set_aside = self.chat_waiting && current < self.cached.len();
        let leaving =
            set_aside || self.cached.len() >= 2 * CHUNK && current < self.cached.len() / 2;
        // A restore replaces the whole cache: worth it for a chunk or more.
        let better = self
            .recent
            .best(prompt)
            .filter(|&(_, common)| common >= current + CHUNK);
        let saved = if leaving {
            match self.ctx.state_seq_get(MAIN, LlamaStateSeqFlags::empty()) {
                Ok(state) => Some(Saved {
                    tokens: self.cached.clone(),
                    suffix: self.cached_suffix,
                    resident: matches!(self.residency, Residency::Whole),
                    state,
                }),
                Err(e) => {
                    tracing::debug!("saving the cache for a later switch back failed: {e}");
                    None
                }
            }
        } else {
            None
        };
        if let Some((index, common)) = better {
            self.restore(index, common);
        }
        if let Some(saved) = saved {
            self.recent.push(saved);
        }
    }

    fn restore(&mut self, index: usize, common: usize) {
        let saved = self.recent.saved.remove(index).expect("index from best");
        let restored = self
            .ctx
            .kv_cache_seq_rm(MAIN, None, None)
            .map_err(|e| e.to_string())
            .and_then(|_| {
                self.ctx
                    .state_seq_set(&saved.state, MAIN)
                    .map_err(|e| e.to_string())
            });
        match restored {
            Ok(()) => {
                tracing::debug!(
                    tokens = saved.tokens.len(),
                    common,
                    "restored a recent prompt"
                );
                self.cached = saved.tokens;
                self.cached_suffix = saved.suffix;
                self.residency = match saved.resident {
                    true => Residency::Whole,
                    false => Residency::None,
                };
            }
            Err(e) => {
                tracing::debug!("restoring a recent prompt failed: {e}; clearing the cache");
                self.reset_cache();
            }
        }
    }
}
