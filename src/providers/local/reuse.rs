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

/// The suffix marker and the suffix tokens nearest the cursor are always decoded
/// afresh: their KV was computed against the old end of the prefix and carries it
/// (a fully shifted suffix kept suggesting the answer for text typed three
/// keystrokes earlier). Measured on the test model: with 8 or more fresh tokens
/// warm answers equal a fresh context's.
pub const FRESH_SUFFIX_TOKENS: usize = 8;

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
    let keep = common_prefix(cached, prompt).min(prompt.len().saturating_sub(1));
    // Only the far part of the suffix is shifted. The cached part may have been
    // decoded only in part: it is reusable when it starts the new prompt's suffix.
    let far = |span: SuffixSpan| SuffixSpan {
        start: (span.start + FRESH_SUFFIX_TOKENS).min(span.end),
        end: span.end,
    };
    let shifted_suffix = match (cached_suffix.map(far), prompt_suffix.map(far)) {
        (Some(old), Some(new)) => {
            let len = old.end - old.start;
            let fits = keep <= old.start
                && keep <= new.start
                && old.end <= cached.len()
                && new.start + len <= new.end;
            (fits
                && len >= MIN_SHIFTED_SPAN
                && cached[old.start..old.end] == prompt[new.start..new.start + len])
                .then_some((old, new.start))
        }
        _ => None,
    };
    ReusePlan {
        keep,
        shifted_suffix,
    }
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
        let mut tokens = prefix.to_vec();
        let start = tokens.len();
        tokens.push(90);
        tokens.extend((0..suffix as i32).map(|i| 1000 + i));
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
    fn typing_at_the_cursor_shifts_the_far_suffix_and_re_decodes_the_near_one() {
        let (old, old_span) = prompt(&[1, 2, 3], 40);
        let (new, new_span) = prompt(&[1, 2, 3, 4], 40);
        let plan = plan(&old, old_span, &new, new_span);
        assert_eq!(plan.keep, 3);
        assert_eq!(
            plan.shifted_suffix,
            Some((
                SuffixSpan {
                    start: 3 + F,
                    end: 44
                },
                4 + F
            ))
        );
        // the typed token, the marker and the near suffix tokens, and the middle marker
        assert_eq!(plan.tokens_to_decode(new.len()), 1 + F + 1);
    }

    #[test]
    fn changed_suffix_is_re_decoded() {
        let (old, old_span) = prompt(&[1, 2], 40);
        let (mut new, new_span) = prompt(&[1, 2], 40);
        new[40] = 7;
        let plan = plan(&old, old_span, &new, new_span);
        assert_eq!(plan.keep, 40);
        assert_eq!(plan.shifted_suffix, None);
    }

    #[test]
    fn a_partly_decoded_suffix_is_shifted_and_the_rest_decoded() {
        let (full, _) = prompt(&[1, 2], 40);
        // The cache holds the prefix, the marker and the first 30 suffix tokens only.
        let cached = &full[..33];
        let (new, new_span) = prompt(&[1, 2, 3], 40);
        let plan = plan(cached, span(2, 33), &new, new_span);
        assert_eq!(
            plan.shifted_suffix,
            Some((
                SuffixSpan {
                    start: 2 + F,
                    end: 33
                },
                3 + F
            ))
        );
        assert_eq!(
            plan.tokens_to_decode(new.len()),
            new.len() - 2 - (33 - 2 - F)
        );
    }

    #[test]
    fn short_suffix_is_not_worth_shifting() {
        let (old, old_span) = prompt(&[1, 2], F + 2);
        let (new, new_span) = prompt(&[1, 3], F + 2);
        assert_eq!(plan(&old, old_span, &new, new_span).shifted_suffix, None);
    }

    #[test]
    fn empty_cache_decodes_everything() {
        let new = [1, 2, 3];
        let plan = plan(&[], None, &new, None);
        assert_eq!(plan.keep, 0);
        assert_eq!(plan.tokens_to_decode(3), 3);
    }
}
