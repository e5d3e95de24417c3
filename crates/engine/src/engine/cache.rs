//! The KV cache as one value: the llama.cpp context, the token at each of its
//! positions, where a FIM prompt's suffix section sits and what of a resident
//! document it holds. Every change to the cache goes through a method here
//! that changes the mirror in the same step, so the two cannot drift apart:
//! a failed llama.cpp call clears both (ARCHITECTURE.md invariant 22).
//!
//! Readers (sampling, logits, reuse plans) see the context and the mirror
//! through shared borrows only. Which prompt to bring in, and how fast, is
//! the engine's (`prefill`, `window`).

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

use super::resident::{Lent, Residency};
use super::{CHUNK, LENT, MAIN, PARKED};
use crate::prompt::FimPrompt;
use crate::reuse::{self, MovedRun, SuffixSpan};

/// Which decoded tokens get logits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Logits {
    /// None: a prompt chunk before the last.
    None,
    /// The last token: it starts generation.
    Last,
    /// Every token: a generation step verifying a draft.
    All,
}

/// A copy of the cache taken out of llama.cpp, to switch back to.
pub(super) struct Snapshot {
    pub(super) tokens: Vec<i32>,
    suffix: Option<SuffixSpan>,
    moved_from: Option<usize>,
    residency: SavedResidency,
    state: SeqState,
}

/// What of a resident document a snapshot holds: a borrowing FIM prompt's
/// copy keeps the document's tail too, so one copy brings back both the
/// place and the document.
enum SavedResidency {
    None,
    Whole,
    Lent { lent: Lent, state: SeqState },
}

impl Snapshot {
    pub(super) fn byte_len(&self) -> usize {
        let lent = match &self.residency {
            SavedResidency::Lent { state, .. } => state.byte_len(),
            _ => 0,
        };
        self.state.byte_len() + lent
    }

    /// Tokens it holds: the longer of its prompt and its document (a lent
    /// tail put back), for sizing the store.
    pub(super) fn len(&self) -> usize {
        match &self.residency {
            SavedResidency::Lent { lent, .. } => lent.at + lent.tail.len(),
            _ => 0,
        }
        .max(self.tokens.len())
    }

    /// Whether it holds a resident document (not only a prompt of its own).
    pub(super) fn resident(&self) -> bool {
        !matches!(self.residency, SavedResidency::None)
    }

    /// The longest start `prompt` shares with it: with the prompt it holds,
    /// or with the document whose tail it keeps.
    pub(super) fn shared_with(&self, prompt: &[i32]) -> usize {
        let own = reuse::common_prefix(&self.tokens, prompt);
        match &self.residency {
            SavedResidency::Lent { lent, .. } if own >= lent.at => {
                own.max(lent.at + reuse::common_prefix(&lent.tail, &prompt[lent.at..]))
            }
            _ => own,
        }
    }

    /// The resident document it holds, a lent tail put back.
    pub(super) fn document(&self) -> Option<Vec<i32>> {
        match &self.residency {
            SavedResidency::None => None,
            SavedResidency::Whole => Some(self.tokens.clone()),
            SavedResidency::Lent { lent, .. } => Some(lent.document(&self.tokens)),
        }
    }

    /// Whether it holds the whole of `tokens` from their start.
    pub(super) fn holds(&self, tokens: &[i32]) -> bool {
        self.shared_with(tokens) == tokens.len()
    }
}

pub(super) struct KvCache<'m> {
    ctx: LlamaContext<'m>,
    /// The token at each position of the main sequence, in order.
    tokens: Vec<i32>,
    /// Where the main sequence holds a FIM prompt's suffix section.
    suffix: Option<SuffixSpan>,
    residency: Residency,
    batch: LlamaBatch<'static>,
    /// Batch index of the last decoded token with logits.
    logits_index: i32,
    /// Tokens in the last decode: a generation step's token and its draft.
    last_decode: usize,
    /// A moved suffix waits in `PARKED` while the gap before it is decoded.
    parked: bool,
    /// The first position whose KV a moved suffix gave, or that was
    /// computed after one: from there the cache holds an approximation of
    /// what an empty cache would compute (see `reuse::FRESH_SUFFIX_TOKENS`).
    moved_from: Option<usize>,
}

impl<'m> KvCache<'m> {
    pub(super) fn new(ctx: LlamaContext<'m>) -> KvCache<'m> {
        KvCache {
            ctx,
            tokens: Vec::new(),
            suffix: None,
            residency: Residency::None,
            batch: LlamaBatch::new(CHUNK, 1),
            logits_index: 0,
            last_decode: 0,
            parked: false,
            moved_from: None,
        }
    }

    pub(super) fn tokens(&self) -> &[i32] {
        &self.tokens
    }

    pub(super) fn len(&self) -> usize {
        self.tokens.len()
    }

    pub(super) fn suffix(&self) -> Option<SuffixSpan> {
        self.suffix
    }

    pub(super) fn residency(&self) -> &Residency {
        &self.residency
    }

    /// Whether a moved suffix is parked (see `park`).
    pub(super) fn parked(&self) -> bool {
        self.parked
    }

    /// Whether what the main sequence holds depends on a moved suffix: an
    /// answer from it may differ from an empty cache's.
    pub(super) fn holds_moved_suffix(&self) -> bool {
        self.moved_from.is_some()
    }

    /// For sampling and logits: a shared borrow cannot change the cache.
    pub(super) fn ctx(&self) -> &LlamaContext<'m> {
        &self.ctx
    }

    /// Where the logits that start (or continue) generation are.
    pub(super) fn logits_index(&self) -> i32 {
        self.logits_index
    }

    /// Decodes `tokens` after what the cache holds. On failure the cache is
    /// cleared: llama.cpp's state after a failed decode is not known.
    pub(super) fn decode(&mut self, tokens: &[i32], logits: Logits) -> Result<(), String> {
        let start = self.tokens.len();
        self.batch.clear();
        for (i, &token) in tokens.iter().enumerate() {
            let wanted = match logits {
                Logits::None => false,
                Logits::Last => i + 1 == tokens.len(),
                Logits::All => true,
            };
            self.batch
                .add(LlamaToken(token), (start + i) as i32, &[MAIN], wanted)
                .map_err(|e| format!("a batch of {} tokens: {e}", tokens.len()))?;
        }
        if let Err(e) = self.ctx.decode(&mut self.batch) {
            self.clear();
            return Err(format!("llama.cpp decode failed: {e}"));
        }
        self.tokens.extend_from_slice(tokens);
        self.last_decode = tokens.len();
        self.logits_index = tokens.len() as i32 - 1;
        Ok(())
    }

    /// After a generation step (`decode` with `Logits::All`): keeps its token
    /// and the first `accepted` draft tokens, drops the rest of the draft.
    pub(super) fn keep_of_step(&mut self, accepted: usize) -> Result<(), String> {
        let rejected = self.last_decode.saturating_sub(1 + accepted);
        self.logits_index = accepted as i32;
        if rejected > 0 {
            let keep = self.tokens.len() - rejected;
            self.remove_from(keep)
                .map_err(|e| format!("dropping a rejected draft from the cache: {e}"))?;
        }
        Ok(())
    }

    /// Keeps the first `keep` tokens, to write a prompt after them: a
    /// resident `document`, or a prompt of its own, which ends the document's
    /// residency unless its tail is lent (the prompt borrows its start).
    pub(super) fn rewrite_from(&mut self, keep: usize, document: bool) -> Result<(), String> {
        self.remove_from(keep)?;
        self.suffix = None;
        if document {
            self.residency = Residency::Whole;
        } else if matches!(self.residency, Residency::Whole) {
            self.residency = Residency::None;
        }
        Ok(())
    }

    /// Records where the prompt just brought in holds its suffix section, as
    /// far as the cache holds it: a partly decoded suffix is still worth
    /// moving next time.
    pub(super) fn set_suffix(&mut self, span: Option<SuffixSpan>) {
        self.suffix = span
            .map(|span| SuffixSpan {
                start: span.start,
                end: span.end.min(self.tokens.len()),
            })
            .filter(|span| span.end > span.start);
    }

    fn remove_from(&mut self, keep: usize) -> Result<(), String> {
        if keep >= self.tokens.len() {
            return Ok(());
        }
        match self.ctx.kv_cache_seq_rm(MAIN, Some(keep as u32), None) {
            Ok(_) => {
                self.tokens.truncate(keep);
                self.moved_from = self.moved_from.filter(|&from| from < keep);
                if let Some(span) = self.suffix {
                    self.set_suffix(Some(span));
                }
                Ok(())
            }
            Err(e) => {
                self.clear();
                Err(e.to_string())
            }
        }
    }

    /// Sets `run` aside in the parking sequence at its new positions, while
    /// the gap before it is decoded: llama.cpp requires each sequence's
    /// positions to stay consecutive.
    pub(super) fn park(&mut self, run: MovedRun) -> Result<(), String> {
        let (from, end) = (run.from as u32, (run.from + run.len) as u32);
        self.ctx
            .copy_kv_cache_seq(MAIN, PARKED, Some(from), Some(end))
            .and_then(|_| {
                self.ctx
                    .kv_cache_seq_add(PARKED, Some(from), Some(end), run.delta())
            })
            .map_err(|e| self.failed(e))?;
        self.parked = true;
        Ok(())
    }

    /// Brings the parked run back after the gap; `tokens` are its tokens, and
    /// the cache now holds everything before its new start.
    pub(super) fn unpark(&mut self, run: MovedRun, tokens: &[i32]) -> Result<(), String> {
        debug_assert_eq!(self.tokens.len(), run.to, "the gap is filled");
        debug_assert_eq!(tokens.len(), run.len);
        let (to, end) = (run.to as u32, (run.to + run.len) as u32);
        self.ctx
            .copy_kv_cache_seq(PARKED, MAIN, Some(to), Some(end))
            .map_err(|e| self.failed(e))?;
        self.tokens.extend_from_slice(tokens);
        self.moved_from = Some(self.moved_from.map_or(run.to, |from| from.min(run.to)));
        Ok(())
    }

    /// Drops whatever is parked.
    pub(super) fn drop_parked(&mut self) -> Result<(), String> {
        self.ctx
            .kv_cache_seq_rm(PARKED, None, None)
            .map_err(|e| self.failed(e))?;
        self.parked = false;
        Ok(())
    }

    /// A copy of the main sequence, and of a lent tail, to restore later.
    pub(super) fn snapshot(&self) -> Result<Snapshot, String> {
        let copy = |seq| {
            self.ctx
                .state_seq_get(seq, LlamaStateSeqFlags::empty())
                .map_err(|e| e.to_string())
        };
        let residency = match &self.residency {
            Residency::None => SavedResidency::None,
            Residency::Whole => SavedResidency::Whole,
            Residency::Lent(lent) => SavedResidency::Lent {
                lent: lent.clone(),
                state: copy(LENT)?,
            },
        };
        Ok(Snapshot {
            tokens: self.tokens.clone(),
            suffix: self.suffix,
            moved_from: self.moved_from,
            residency,
            state: copy(MAIN)?,
        })
    }

    /// Replaces the cache with `snapshot`, a lent tail included. On failure
    /// the cache is cleared.
    pub(super) fn restore(&mut self, snapshot: Snapshot) -> Result<(), String> {
        let lent_state = match &snapshot.residency {
            SavedResidency::Lent { state, .. } => Some(state),
            _ => None,
        };
        let restored = self
            .set_seq(MAIN, Some(&snapshot.state))
            .and_then(|_| self.set_seq(LENT, lent_state));
        if let Err(e) = restored {
            self.clear();
            return Err(e);
        }
        self.tokens = snapshot.tokens;
        self.suffix = snapshot.suffix;
        self.moved_from = snapshot.moved_from;
        self.residency = match snapshot.residency {
            SavedResidency::None => Residency::None,
            SavedResidency::Whole => Residency::Whole,
            SavedResidency::Lent { lent, .. } => Residency::Lent(lent),
        };
        Ok(())
    }

    /// Empties sequence `seq`, then writes `state` into it, where given.
    fn set_seq(&mut self, seq: i32, state: Option<&SeqState>) -> Result<(), String> {
        self.ctx
            .kv_cache_seq_rm(seq, None, None)
            .map_err(|e| e.to_string())?;
        match state {
            Some(state) => self
                .ctx
                .state_seq_set(state, seq)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Moves to a new context (another thread count), with what the cache
    /// held (a lent tail too) where it can be copied across, else empty. Not
    /// while a suffix is parked: callers wait for it to be back.
    pub(super) fn move_to(&mut self, ctx: LlamaContext<'m>) {
        debug_assert!(!self.parked, "a parked suffix is not copied across");
        let snapshot = match self.tokens.is_empty() {
            true => None,
            false => self
                .snapshot()
                .map_err(|e| tracing::debug!("copying the cache out failed: {e}"))
                .ok(),
        };
        self.ctx = ctx;
        self.forget();
        if let Some(snapshot) = snapshot
            && let Err(e) = self.restore(snapshot)
        {
            tracing::debug!("copying the cache in failed: {e}");
        }
    }

    /// A new, empty context (the naive baseline: one per request).
    pub(super) fn replace(&mut self, ctx: LlamaContext<'m>) {
        self.ctx = ctx;
        self.forget();
    }

    pub(super) fn clear(&mut self) {
        self.ctx.clear_kv_cache();
        self.forget();
    }

    fn forget(&mut self) {
        self.tokens.clear();
        self.suffix = None;
        self.parked = false;
        self.moved_from = None;
        self.residency = Residency::None;
    }

    /// Clears the cache after a failed llama.cpp call, whose effect is unknown.
    fn failed(&mut self, e: impl std::fmt::Display) -> String {
        self.clear();
        e.to_string()
    }

    /// Whether a lent tail stays lent for `prompt`: the FIM prompt in the
    /// cache keeps the document's start and serves `prompt` with less
    /// decoding than the document would (the user typing at the same place).
    pub(super) fn lent_stays(&self, prompt: &FimPrompt) -> bool {
        let Residency::Lent(lent) = &self.residency else {
            return false;
        };
        let len = prompt.tokens.len();
        let now = reuse::plan(
            &self.tokens,
            self.suffix,
            &prompt.tokens,
            prompt.suffix_span,
        );
        let document = lent.document(&self.tokens);
        let back = reuse::plan(&document, None, &prompt.tokens, prompt.suffix_span);
        !prompt.document
            && now.keep >= lent.at
            && now.tokens_to_decode(len) < back.tokens_to_decode(len)
    }

    /// Tokens the main sequence holds beyond a lent document's start: a
    /// borrowing FIM prompt's own, where one is lent.
    pub(super) fn own_tokens(&self) -> usize {
        match &self.residency {
            Residency::Lent(lent) => self.tokens.len() - lent.at,
            _ => 0,
        }
    }

    /// How much of a resident document's start a FIM prompt borrows, where
    /// one does.
    pub(super) fn lent_at(&self) -> usize {
        match &self.residency {
            Residency::Lent(lent) => lent.at,
            _ => 0,
        }
    }

    /// The resident document as it is with its lent tail back, where a
    /// FIM prompt borrows its start.
    pub(super) fn lent_document(&self) -> Option<Vec<i32>> {
        match &self.residency {
            Residency::Lent(lent) => Some(lent.document(&self.tokens)),
            _ => None,
        }
    }

    /// Sets the resident document's tail from `at` aside, for a FIM prompt to
    /// borrow its start.
    pub(super) fn lend(&mut self, at: usize) -> Result<(), String> {
        debug_assert!(matches!(self.residency, Residency::Whole));
        self.ctx
            .copy_kv_cache_seq(MAIN, LENT, Some(at as u32), None)
            .map_err(|e| self.failed(e))?;
        self.residency = Residency::Lent(Lent {
            at,
            tail: self.tokens[at..].to_vec(),
            moved_from: self.moved_from.map(|from| from.max(at)),
        });
        Ok(())
    }

    /// Puts the lent tail back after the document's start, where one is lent.
    pub(super) fn take_back_lent(&mut self) {
        let lent = match std::mem::take(&mut self.residency) {
            Residency::Lent(lent) => lent,
            // Not lent: the residency stays what it was.
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
                self.tokens.truncate(lent.at);
                self.tokens.extend_from_slice(&lent.tail);
                self.moved_from = self
                    .moved_from
                    .filter(|&from| from < lent.at)
                    .or(lent.moved_from);
                self.suffix = None;
                self.residency = Residency::Whole;
            }
            Err(e) => {
                tracing::debug!("taking the document's tail back failed: {e}; clearing the cache");
                self.clear();
            }
        }
    }
}
