//! Planning how much of the KV cache a new prompt can keep.
//!
//! Pure functions over token slices, so the plan is unit-tested without a model.
//! The engine applies the plan to the llama.cpp context.

/// Where the suffix section (suffix marker + suffix tokens, excluding the final
/// "middle" marker) sits inside a FIM prompt. Only prefix-suffix-middle prompts
/// have one that can move; suffix-first prompts keep their suffix in the common prefix.
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
    /// A cached suffix span that reappears unchanged in the new prompt: it is
    /// moved (RoPE shift) from `from.start` to `to_start` instead of re-decoded.
    pub shifted_suffix: Option<(SuffixSpan, usize)>,
}

/// Shortest suffix span worth shifting: below this, re-decoding is as cheap.
pub const MIN_SHIFTED_SPAN: usize = 8;

impl ReusePlan {
    /// Tokens of the new prompt that must be decoded under this plan.
    pub fn tokens_to_decode(&self, prompt_len: usize) -> usize {
        let shifted = self
            .shifted_suffix
            .map_or(0, |(span, _)| span.end - span.start);
        prompt_len - self.keep - shifted
    }
}

/// Plans reuse of `cached` (the tokens whose KV is in the context, in position
/// order) for `prompt`. At least the prompt's last token is always re-decoded,
/// because its logits start generation.
pub fn plan(
    cached: &[i32],
    cached_suffix: Option<SuffixSpan>,
    prompt: &[i32],
    prompt_suffix: Option<SuffixSpan>,
) -> ReusePlan {
    let common = cached
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count();
    let keep = common.min(prompt.len().saturating_sub(1));
    let shifted_suffix = match (cached_suffix, prompt_suffix) {
        (Some(old), Some(new))
            if keep <= old.start
                && keep <= new.start
                && old.end <= cached.len()
                && new.end < prompt.len()
                && old.end - old.start >= MIN_SHIFTED_SPAN
                && cached[old.start..old.end] == prompt[new.start..new.end] =>
        {
            Some((old, new.start))
        }
        _ => None,
    };
    ReusePlan {
        keep,
        shifted_suffix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: usize, end: usize) -> Option<SuffixSpan> {
        Some(SuffixSpan { start, end })
    }

    #[test]
    fn identical_prompt_re_decodes_only_the_last_token() {
        let p = [1, 2, 3, 4];
        let plan = plan(&p, None, &p, None);
        assert_eq!(plan.keep, 3);
        assert_eq!(plan.tokens_to_decode(p.len()), 1);
    }

    #[test]
    fn typing_at_the_cursor_shifts_the_unchanged_suffix() {
        // prefix [1,2,3] | suffix marker 90 + suffix [5..12] | middle 91
        let old: Vec<i32> = [1, 2, 3, 90, 5, 6, 7, 8, 9, 10, 11, 12, 91, 40, 41].to_vec();
        let new: Vec<i32> = [1, 2, 3, 4, 90, 5, 6, 7, 8, 9, 10, 11, 12, 91].to_vec();
        let plan = plan(&old, span(3, 12), &new, span(4, 13));
        assert_eq!(plan.keep, 3);
        assert_eq!(
            plan.shifted_suffix,
            Some((SuffixSpan { start: 3, end: 12 }, 4))
        );
        // the typed token and the middle marker
        assert_eq!(plan.tokens_to_decode(new.len()), 2);
    }

    #[test]
    fn changed_suffix_is_re_decoded() {
        let old: Vec<i32> = [1, 2, 90, 5, 6, 7, 8, 9, 10, 11, 12, 91].to_vec();
        let new: Vec<i32> = [1, 2, 90, 5, 6, 7, 8, 9, 10, 11, 13, 91].to_vec();
        let plan = plan(&old, span(2, 11), &new, span(2, 11));
        assert_eq!(plan.keep, 10);
        assert_eq!(plan.shifted_suffix, None);
    }

    #[test]
    fn short_suffix_is_not_worth_shifting() {
        let old = [1, 2, 90, 5, 91];
        let new = [1, 3, 90, 5, 91];
        assert_eq!(
            plan(&old, span(2, 4), &new, span(2, 4)).shifted_suffix,
            None
        );
    }

    #[test]
    fn empty_cache_decodes_everything() {
        let new = [1, 2, 3];
        let plan = plan(&[], None, &new, None);
        assert_eq!(plan.keep, 0);
        assert_eq!(plan.tokens_to_decode(3), 3);
    }
}
