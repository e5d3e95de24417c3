//! Planning how much of the KV cache a new prompt can keep.
//!
//! Pure functions over token slices, so the plan is unit-tested without a model.
//! The engine applies the plan to the llama.cpp context.

/// Where the suffix section (suffix marker + suffix tokens, excluding the final
/// "middle" marker) sits inside a FIM prompt, `[start, end)`. Only
/// prefix-suffix-middle prompts have one that can move; suffix-first prompts
/// keep their suffix in the common prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuffixSpan {
    pub start: usize,
    pub end: usize,
}

/// What to do with the cached tokens before decoding a new prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReusePlan {
    /// Cached tokens `[0, keep)` are identical to the prompt's and stay.
    pub keep: usize,
    /// Cached suffix tokens that reappear unchanged further on in the
    /// prompt's suffix: moved (a RoPE shift) instead of decoded again.
    pub moved: Option<MovedRun>,
}

/// `len` cached tokens at `from` that the prompt has at `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovedRun {
    pub from: usize,
    pub to: usize,
    pub len: usize,
}

impl MovedRun {
    /// How far the run's positions move.
    pub fn delta(&self) -> i32 {
        self.to as i32 - self.from as i32
    }
}

/// Shortest run worth moving: below this, decoding it is as cheap.
pub const MIN_MOVED_RUN: usize = 8;

/// The suffix marker and the suffix tokens nearest the cursor are always decoded
/// afresh: their KV was computed against the old end of the prefix and carries it
/// (a fully shifted suffix kept suggesting the answer for text typed three
/// keystrokes earlier). The rest of the moved run still carries it: on the
/// test model about one answer in four on a moved suffix differs from a fresh
/// context's (BENCHMARKS.md), where moving nothing costs typing 1.45x the
/// model time.
///
/// A moved suffix is the one approximation a warm cache makes (ARCHITECTURE.md
/// invariant 23), and marked: the cache knows from where its KV rests on one,
/// and an answer built on it says so (`Generation::moved_suffix`).
///
/// Only a suffix moves, and only to a suffix: the same text decoded as the
/// document's own continuation (no suffix marker before it) gives other answers
/// (measured: 11 of 40 differed), so a completion never borrows it.
pub const FRESH_SUFFIX_TOKENS: usize = 8;

/// Where the cursor splits a token differently than before, the suffixes'
/// first tokens differ: the run may start this many tokens later.
const ALIGNMENT_SLACK: usize = 4;

impl ReusePlan {
    /// Tokens of the new prompt that must be decoded under this plan.
    pub fn tokens_to_decode(&self, prompt_len: usize) -> usize {
        prompt_len - self.keep - self.moved.map_or(0, |run| run.len)
    }
}

/// Plans reuse of `cached` (the tokens whose KV is in the context, in position
/// order, with a FIM suffix section at `cached_suffix`) for `prompt`, whose
/// suffix section is at `prompt_suffix`. At least the prompt's last token is
/// always re-decoded, because its logits start generation.
pub fn plan(
    cached: &[i32],
    cached_suffix: Option<SuffixSpan>,
    prompt: &[i32],
    prompt_suffix: Option<SuffixSpan>,
) -> ReusePlan {
    let keep = common_prefix(cached, prompt).min(prompt.len().saturating_sub(1));
    let moved = match (cached_suffix, prompt_suffix) {
        (Some(from), Some(to)) => moved_run(cached, keep, from, prompt, to),
        _ => None,
    };
    ReusePlan { keep, moved }
}

/// The longest run of the cached suffix (after the kept start) that the
/// prompt's suffix repeats after its fresh tokens; among equals, the one
/// moving least.
fn moved_run(
    cached: &[i32],
    keep: usize,
    source: SuffixSpan,
    prompt: &[i32],
    span: SuffixSpan,
) -> Option<MovedRun> {
    let end = span.end.min(prompt.len().saturating_sub(1));
    let first = span.start.max(keep) + FRESH_SUFFIX_TOKENS;
    let (source_start, source_end) = (source.start.max(keep), source.end.min(cached.len()));
    for to in first..(first + ALIGNMENT_SLACK).min(end) {
        if to + MIN_MOVED_RUN > end {
            return None;
        }
        let key = &prompt[to..to + MIN_MOVED_RUN];
        let best = (source_start..source_end.saturating_sub(MIN_MOVED_RUN - 1))
            .filter(|&from| &cached[from..from + MIN_MOVED_RUN] == key)
            .map(|from| MovedRun {
                from,
                to,
                len: common_prefix(&cached[from..source_end], &prompt[to..end]),
            })
            .max_by_key(|run| (run.len, std::cmp::Reverse(run.delta().unsigned_abs())));
        if best.is_some() {
            return best;
        }
    }
    None
}

/// How many leading tokens two token runs share.
pub fn common_prefix(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: usize = FRESH_SUFFIX_TOKENS;

    fn span(start: usize, end: usize) -> Option<SuffixSpan> {
        Some(SuffixSpan { start, end })
    }

    /// `prefix` tokens, the suffix marker 90, `suffix` tokens 1000.., the middle marker 91.
    fn prompt(prefix: &[i32], suffix: usize) -> (Vec<i32>, Option<SuffixSpan>) {
        fim(
            prefix,
            &(0..suffix as i32).map(|i| 1000 + i).collect::<Vec<_>>(),
        )
    }

    fn fim(prefix: &[i32], suffix: &[i32]) -> (Vec<i32>, Option<SuffixSpan>) {
        let mut tokens = prefix.to_vec();
        let start = tokens.len();
        tokens.push(90);
        tokens.extend_from_slice(suffix);
        let end = tokens.len();
        tokens.push(91);
        (tokens, span(start, end))
    }

    #[test]
    fn identical_prompt_re_decodes_only_the_last_token() {
        let p = [1, 2, 3, 4];
        let plan = plan(&p, None, &p, None);
        assert_eq!(plan.keep, 3);
        assert_eq!(plan.tokens_to_decode(p.len()), 1);
    }

    #[test]
    fn typing_at_the_cursor_moves_the_far_suffix_and_re_decodes_the_near_one() {
        let (old, old_span) = prompt(&[1, 2, 3], 40);
        let (new, new_span) = prompt(&[1, 2, 3, 4], 40);
        let plan = plan(&old, old_span, &new, new_span);
        assert_eq!(plan.keep, 3);
        assert_eq!(
            plan.moved,
            Some(MovedRun {
                from: 3 + F,
                to: 4 + F,
                len: 41 - F
            })
        );
        // the typed token, the marker and the near suffix tokens, and the middle marker
        assert_eq!(plan.tokens_to_decode(new.len()), 1 + F + 1);
    }

    #[test]
    fn a_token_split_differently_at_the_cursor_is_skipped_over() {
        // The old suffix started with token 500; the new one has 41 and 42 there.
        let (old, old_span) = fim(
            &[1, 2],
            &[&[500][..], &(43..80).collect::<Vec<_>>()].concat(),
        );
        let (new, new_span) = fim(&[1, 2, 3], &(41..80).collect::<Vec<_>>());
        let plan = plan(&old, old_span, &new, new_span);
        let run = plan.moved.expect("the suffix after the split moves");
        assert_eq!(
            &new[run.to..run.to + run.len],
            &old[run.from..run.from + run.len]
        );
        assert_eq!(
            run.to + run.len,
            new.len() - 1,
            "the run reaches the middle marker"
        );
    }

    #[test]
    fn the_document_before_a_suffix_is_never_moved_into_it() {
        // The cache holds the document as a prefix, without a suffix section.
        let document: Vec<i32> = (1..=100).collect();
        let (new, new_span) = fim(&document[..40], &document[40..70]);
        let plan = plan(&document, None, &new, new_span);
        assert_eq!(plan.keep, 40);
        assert_eq!(plan.moved, None);
        // A suffix section that has the same text does move.
        let (old, old_span) = fim(&document[..39], &document[39..70]);
        assert!(plan_moves(&old, old_span, &new, new_span));
    }

    fn plan_moves(
        old: &[i32],
        old_span: Option<SuffixSpan>,
        new: &[i32],
        new_span: Option<SuffixSpan>,
    ) -> bool {
        plan(old, old_span, new, new_span).moved.is_some()
    }

    #[test]
    fn changed_suffix_is_re_decoded() {
        let (old, old_span) = prompt(&[1, 2], 40);
        let (mut new, new_span) = prompt(&[1, 2], 40);
        new[40] = 7;
        let plan = plan(&old, old_span, &new, new_span);
        assert_eq!(plan.keep, 40);
        assert_eq!(plan.moved, None);
    }

    #[test]
    fn a_partly_decoded_suffix_is_moved_and_the_rest_decoded() {
        let (full, _) = prompt(&[1, 2], 40);
        // The cache holds the prefix, the marker and the first 30 suffix tokens only.
        let cached = &full[..33];
        let (new, new_span) = prompt(&[1, 2, 3], 40);
        let plan = plan(cached, span(2, 33), &new, new_span);
        assert_eq!(
            plan.moved,
            Some(MovedRun {
                from: 2 + F,
                to: 3 + F,
                len: 33 - 2 - F
            })
        );
        assert_eq!(
            plan.tokens_to_decode(new.len()),
            new.len() - 2 - (33 - 2 - F)
        );
    }

    #[test]
    fn short_suffix_is_not_worth_moving() {
        let (old, old_span) = prompt(&[1, 2], F + 2);
        let (new, new_span) = prompt(&[1, 3], F + 2);
        assert!(!plan_moves(&old, old_span, &new, new_span));
    }

    #[test]
    fn empty_cache_decodes_everything() {
        let new = [1, 2, 3];
        let plan = plan(&[], None, &new, None);
        assert_eq!(plan.keep, 0);
        assert_eq!(plan.tokens_to_decode(3), 3);
    }
}
