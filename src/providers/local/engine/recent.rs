//! Prompts the cache recently held, kept in memory (their KV state copied out
//! of llama.cpp), so switching back to a document or a place does not pay a
//! cold prompt again.
//!
//! When a prompt would throw away most of the cache, the cache is saved here
//! first; when a saved prompt shares a longer start with the new one than the
//! cache does, it is restored before the usual reuse plan runs.

use std::collections::VecDeque;

use super::cache::Snapshot;
use super::{CHUNK, Engine};
use crate::providers::local::prompt::FimPrompt;
use crate::providers::local::reuse::common_prefix;

/// At most this much memory for saved states (the test model's KV is ~12 KiB
/// a token; a 7B model's ~10 times that).
const MAX_BYTES: usize = 128 << 20;

/// Most recently saved first.
pub(super) struct RecentPrompts {
    saved: VecDeque<Snapshot>,
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

    pub(super) fn len(&self) -> usize {
        self.saved.len()
    }

    /// Memory the saved states take.
    pub(super) fn bytes(&self) -> usize {
        self.saved.iter().map(Snapshot::byte_len).sum()
    }

    /// Whether a prompt of `tokens` can be filled and saved without evicting
    /// a state held: the cache's own state is saved while it fills, and one
    /// slot stays free for a switch. The size of a state comes from those
    /// held (unknown while none is: a count of slots alone decides).
    pub(super) fn has_room_for(&self, tokens: usize) -> bool {
        let per_token = self
            .saved
            .iter()
            .map(|saved| saved.byte_len() / saved.tokens.len().max(1))
            .max()
            .unwrap_or(0);
        self.saved.len() + 2 <= self.capacity && self.bytes() + 2 * tokens * per_token <= MAX_BYTES
    }

    /// Saves `saved` first; a state it holds the whole of goes.
    fn push(&mut self, saved: Snapshot) {
        self.saved
            .retain(|held| !saved.tokens.starts_with(&held.tokens));
        self.saved.push_front(saved);
        self.saved.truncate(self.capacity);
        while self.bytes() > MAX_BYTES {
            self.saved.pop_back();
        }
    }
}

impl Engine<'_> {
    /// Before the cache is brought to `prompt`: a lent tail comes back; the
    /// cache is saved where `prompt` would throw most of it away, and a
    /// saved prompt sharing a longer start with `prompt` than the cache does
    /// is restored. A FIM prompt that borrowed the document is saved before
    /// the tail comes back only where it holds more of its own than a
    /// suffix section: else the document brings it back cheaply, and its
    /// copy would take a slot (and win a restore) from the document's.
    /// Failures only cost reuse.
    pub(super) fn switch_recent(&mut self, prompt: &FimPrompt) {
        if self.recent.capacity > 0 && self.cache.own_tokens() > self.budget.suffix + 2 * CHUNK {
            self.save_leaving(prompt);
        }
        self.cache.take_back_lent();
        if self.recent.capacity == 0 {
            return;
        }
        self.save_leaving(prompt);
        self.restore_better(prompt);
    }

    /// Saves the cache where `prompt` would throw most of it away.
    fn save_leaving(&mut self, prompt: &FimPrompt) {
        let cached = self.cache.tokens();
        let current = common_prefix(cached, &prompt.tokens);
        // A chat set aside for completions keeps whatever it has: at the
        // rate of typing it gets a chunk or two between them, and losing
        // those each time it would never start.
        let set_aside = self.chat.waiting && current < cached.len();
        // A resident document a FIM prompt borrows is set aside, not lost,
        // unless a saved prompt is restored over it.
        let lent = self.borrows_document(prompt, current) && self.better(prompt).is_none();
        let leaving = set_aside || !lent && cached.len() >= 2 * CHUNK && current < cached.len() / 2;
        if !leaving {
            return;
        }
        match self.cache.snapshot() {
            Ok(saved) => {
                let (tokens, bytes) = (saved.tokens.len(), saved.byte_len());
                self.recent.push(saved);
                tracing::debug!(
                    tokens,
                    bytes,
                    held = self.recent.len(),
                    held_bytes = self.recent.bytes(),
                    "saved the cache for a switch back"
                );
            }
            Err(e) => tracing::debug!("saving the cache for a later switch back failed: {e}"),
        }
    }

    /// The saved prompt sharing a chunk more of `prompt`'s start than the
    /// cache does (a restore replaces the whole cache), and how much.
    fn better(&self, prompt: &FimPrompt) -> Option<(usize, usize)> {
        let current = common_prefix(self.cache.tokens(), &prompt.tokens);
        self.recent
            .best(&prompt.tokens)
            .filter(|&(_, common)| common >= current + CHUNK)
    }

    /// Restores the saved prompt `better` finds.
    fn restore_better(&mut self, prompt: &FimPrompt) {
        let Some((index, common)) = self.better(prompt) else {
            return;
        };
        let snapshot = self.recent.saved.remove(index).expect("index from best");
        let tokens = snapshot.tokens.len();
        match self.cache.restore(snapshot) {
            Ok(()) => tracing::debug!(tokens, common, "restored a recent prompt"),
            Err(e) => {
                tracing::debug!("restoring a recent prompt failed: {e}; the cache was cleared")
            }
        }
    }
}
