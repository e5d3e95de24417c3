//! Prompts the cache recently held, kept in memory (their KV state copied out
//! of llama.cpp), so switching back to a document or a place does not pay a
//! cold prompt again.
//!
//! When a prompt would throw away most of the cache, the cache is saved here
//! first; when a saved prompt shares a longer start with the new one than the
//! cache does, it is restored before the usual reuse plan runs.

use std::cmp::Reverse;
use std::collections::VecDeque;

use super::cache::Snapshot;
use super::{CHUNK, Engine};
use crate::prompt::FimPrompt;
use crate::reuse::common_prefix;

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

    /// The saved prompt sharing the longest start with `prompt` (a saved
    /// borrowing prompt's document counts), and how long. Among equals a
    /// resident document wins, then the latest saved.
    fn best(&self, prompt: &[i32]) -> Option<(usize, usize)> {
        self.saved
            .iter()
            .enumerate()
            .map(|(i, saved)| (i, saved.shared_with(prompt), saved.resident()))
            .max_by_key(|&(i, common, resident)| (common, resident, Reverse(i)))
            .map(|(i, common, _)| (i, common))
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
            .map(|saved| saved.byte_len() / saved.len().max(1))
            .max()
            .unwrap_or(0);
        self.saved.len() + 2 <= self.capacity && self.bytes() + 2 * tokens * per_token <= MAX_BYTES
    }

    /// Saves `saved` first; a state it holds the whole of goes, and so does
    /// another place in the same document (one place per document is kept).
    fn push(&mut self, saved: Snapshot) {
        let document = saved.document();
        self.saved.retain(|held| {
            !saved.holds(&held.tokens) && (document.is_none() || held.document() != document)
        });
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
    /// is restored. A FIM prompt that borrowed the document and holds more
    /// than a chunk of its own (its suffix section, its answer) is saved
    /// with the lent tail as it is left: the document alone brings back only
    /// its start, and coming back to the place decoded the rest again (a
    /// 186-token suffix section and answer took 1.3 s). A prompt that
    /// borrows no more than a chunk (another file's, sharing the markers
    /// and context before the text) holds no place in the document. Failures
    /// only cost reuse.
    pub(super) fn switch_recent(&mut self, prompt: &FimPrompt) {
        let place = self.cache.lent_at() > CHUNK && self.cache.own_tokens() > CHUNK;
        let place_left = (self.recent.capacity > 0 && place).then(|| self.cache.snapshot());
        self.cache.take_back_lent();
        if self.recent.capacity == 0 {
            return;
        }
        match place_left {
            Some(copy) => self.save(copy),
            None => self.save_leaving(prompt),
        }
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
        if leaving {
            self.save(self.cache.snapshot());
        }
    }

    fn save(&mut self, copy: Result<Snapshot, String>) {
        match copy {
            Ok(saved) => {
                let (tokens, bytes) = (saved.len(), saved.byte_len());
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

    /// Restores the saved prompt `better` finds; a borrowing prompt's tail
    /// comes back at once unless that prompt serves `prompt` best.
    fn restore_better(&mut self, prompt: &FimPrompt) {
        let Some((index, common)) = self.better(prompt) else {
            return;
        };
        let snapshot = self.recent.saved.remove(index).expect("index from best");
        let tokens = snapshot.len();
        match self.cache.restore(snapshot) {
            Ok(()) => tracing::debug!(tokens, common, "restored a recent prompt"),
            Err(e) => {
                tracing::debug!("restoring a recent prompt failed: {e}; the cache was cleared")
            }
        }
        if !self.cache.lent_stays(prompt) {
            self.cache.take_back_lent();
        }
    }
}
