//! The resident document: the open document's tokens kept in the KV cache in
//! file order from the window's start, so a completion anywhere in it decodes
//! only what is new at its cursor (ARCHITECTURE.md invariant 20).
//!
//! A prewarm makes the cache hold the document (`prompt::document`). A FIM
//! prompt then *borrows* its start: the document up to the cursor stays in
//! the main sequence, the rest is set aside in the `LENT` sequence (the cells
//! stay where they are, only their owner changes), and the suffix section is
//! decoded after the cursor. At the next job the tail comes back unless the
//! FIM prompt in the cache serves that job with less decoding (the user typing
//! at the same place); nothing is moved, so the document stays exactly what a
//! fresh context would hold.

use super::{Engine, LENT, MAIN};
use crate::providers::local::prompt::FimPrompt;
use crate::providers::local::reuse;

/// What of a resident document the cache holds.
#[derive(Default)]
pub(super) enum Residency {
    /// None: the cache holds a prompt of its own.
    #[default]
    None,
    /// The document (`prompt::document`), or the start of it, in `MAIN`.
    Whole,
    /// A FIM prompt borrowing the document's start; its tail waits in `LENT`.
    Lent(Lent),
}

/// A resident document's tail, set aside while a FIM prompt borrows its start.
pub(super) struct Lent {
    /// The main sequence still holds the document's tokens before this position.
    pub at: usize,
    /// The document's tokens from `at`, in `LENT` at their own positions.
    pub tail: Vec<i32>,
}

impl Engine<'_> {
    /// Before the cache is brought to `prompt`: takes a lent tail back, unless
    /// the FIM prompt in the cache serves `prompt` with no more decoding and
    /// keeps the document's start. Returns whether the tail stays lent.
    pub(super) fn settle_lent(&mut self, prompt: &FimPrompt) -> bool {
        let Residency::Lent(lent) = &self.residency else {
            return false;
        };
        let len = prompt.tokens.len();
        let now = reuse::plan(
            &self.cached,
            self.cached_suffix,
            &prompt.tokens,
            prompt.suffix_span,
        );
        let document = [&self.cached[..lent.at], &lent.tail[..]].concat();
        let back = reuse::plan(&document, None, &prompt.tokens, prompt.suffix_span);
        let stays = !prompt.document
            && now.keep >= lent.at
            && now.tokens_to_decode(len) <= back.tokens_to_decode(len);
        if !stays {
            self.take_back_lent();
        }
        stays
    }

    /// Sets the document's tail from `at` aside, for a FIM prompt to borrow its start.
    pub(super) fn lend(&mut self, at: usize) -> Result<(), String> {
        self.ctx
            .copy_kv_cache_seq(MAIN, LENT, Some(at as u32), None)
            .map_err(|e| e.to_string())?;
        self.residency = Residency::Lent(Lent {
            at,
            tail: self.cached[at..].to_vec(),
        });
        Ok(())
    }

    /// Puts the lent tail back after the document's start.
    pub(super) fn take_back_lent(&mut self) {
        let lent = match std::mem::take(&mut self.residency) {
            Residency::Lent(lent) => lent,
            other => {
                self.residency = other;
                return;
            }
        };
        let at = lent.at as u32;
        let returned = self
            .ctx
            .kv_cache_seq_rm(MAIN, Some(at), None)
            .and_then(|_| self.ctx.copy_kv_cache_seq(LENT, MAIN, Some(at), None))
            .and_then(|_| self.ctx.kv_cache_seq_rm(LENT, None, None));
        match returned {
            Ok(_) => {
                self.cached.truncate(lent.at);
                self.cached.extend_from_slice(&lent.tail);
                self.cached_suffix = None;
                self.residency = Residency::Whole;
            }
            Err(e) => {
                tracing::debug!("taking the document's tail back failed: {e}; clearing the cache");
                self.reset_cache();
            }
        }
    }
}
