//! Fill-in-the-middle prompts built from the model's own special tokens.
//!
//! The tokens come from the GGUF vocabulary (llama.cpp recognises the FIM tokens of
//! Qwen2.5-Coder, CodeLlama, StarCoder2, DeepSeek-Coder and Codestral, from metadata
//! or token text). Codestral-style vocabularies (`[PREFIX]`/`[SUFFIX]`) are trained
//! suffix-first; the rest prefix-suffix-middle.

use super::reuse::{SuffixSpan, common_prefix};

/// The FIM special tokens of a model and the order its training used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FimTokens {
    pub prefix: i32,
    pub suffix: i32,
    pub middle: i32,
    /// Tokens to put before the prompt (BOS for models that want one).
    pub bos: Option<i32>,
    pub order: FimOrder,
    /// Repository-level tokens (Qwen2.5-Coder's `<|repo_name|>` and
    /// `<|file_sep|>`): the repository's name, then each file's path and text.
    pub repo: Option<i32>,
    pub file_sep: Option<i32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FimOrder {
    /// `<pre> prefix <suf> suffix <mid>`
    PrefixSuffixMiddle,
    /// `<suf> suffix <pre> prefix <mid>`
    SuffixPrefixMiddle,
}

impl FimOrder {
    /// Suffix-first when the prefix token is spelled the Codestral way.
    pub fn from_prefix_token_text(text: &str) -> Self {
        if text.trim() == "[PREFIX]" {
            FimOrder::SuffixPrefixMiddle
        } else {
            FimOrder::PrefixSuffixMiddle
        }
    }
}

/// Token budget of one FIM prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptBudget {
    /// All input tokens, special tokens included.
    pub input: usize,
    /// At most this many of them for the suffix; the suffix is kept short because
    /// in prefix-suffix-middle order it sits after the part that changes.
    pub suffix: usize,
    /// Tokens for the repository context in front of the FIM prompt (not part
    /// of `input`): snippets of other places, which stay cached while typing.
    pub repository: usize,
}

/// Suffix tokens a prompt with `room` tokens for text gets: the configured
/// ceiling, but at most a quarter of the room, so a small budget (a busy or slow
/// machine) still leaves the prefix, which says most about what comes next,
/// three quarters of it.
pub fn suffix_room(room: usize, ceiling: usize) -> usize {
    ceiling.min(room / 4)
}

/// An assembled prompt and where its suffix section is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FimPrompt {
    pub tokens: Vec<i32>,
    /// Suffix marker and suffix tokens (not the middle marker), when they follow the prefix.
    pub suffix_span: Option<SuffixSpan>,
    /// A resident document (its text in file order, no suffix or middle), not a FIM prompt.
    pub document: bool,
    /// Prefix tokens dropped from the front to meet the budget.
    pub prefix_trimmed: usize,
    /// Suffix tokens dropped from the end to meet the budget.
    pub suffix_trimmed: usize,
    /// The text of the prefix's last token, taken back because the prefix
    /// ends inside a word (token healing, `engine/healing.rs`): the answer
    /// spells it again first, and leaves it out.
    pub healed: Vec<u8>,
}

impl FimPrompt {
    /// A digest of the tokens, to tell whether two answers had one prompt.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        self.tokens.hash(&mut hasher);
        // Without it, `foo(` and a healed `foo(x` can share their tokens.
        self.healed.hash(&mut hasher);
        hasher.finish()
    }
}

/// Assembles a prompt from tokenized repository context, prefix and suffix,
/// keeping the prefix's end and the suffix's start (nearest the cursor) when
/// the budget forces a cut. The context (already within its own budget) comes
/// first, so it stays in the KV cache while the window changes.
pub fn assemble(
    fim: &FimTokens,
    context: &[i32],
    prefix: &[i32],
    suffix: &[i32],
    budget: PromptBudget,
) -> FimPrompt {
    let room = budget.input.saturating_sub(specials(fim));
    let suffix_len = suffix.len().min(suffix_room(room, budget.suffix));
    let prefix_len = prefix.len().min(room - suffix_len);
    layout(
        fim,
        context,
        prefix,
        suffix,
        prefix.len() - prefix_len,
        suffix_len,
    )
}

/// The prompt whose window keeps `prefix` from `start` (where a window the
/// cache holds starts), with as much suffix as `assemble` gives that much
/// prefix; `None` where that window is over the budget's input.
pub fn assemble_from(
    fim: &FimTokens,
    context: &[i32],
    prefix: &[i32],
    suffix: &[i32],
    start: usize,
    budget: PromptBudget,
) -> Option<FimPrompt> {
    let prefix_len = prefix.len().checked_sub(start)?;
    // The suffix is at most a quarter of the room: a third of the prefix.
    let suffix_len = suffix.len().min(budget.suffix).min(prefix_len / 3);
    (specials(fim) + prefix_len + suffix_len <= budget.input)
        .then(|| layout(fim, context, prefix, suffix, start, suffix_len))
}

/// Where `held`, the prefix section of a window the cache holds, starts in
/// `prefix`: the start sharing the longest run with it, at least its first
/// tokens (a few tokens alike are chance).
pub fn start_of(held: &[i32], prefix: &[i32]) -> Option<usize> {
    let needed = held.len().min(MIN_HELD_RUN);
    (0..prefix.len())
        .map(|start| (start, common_prefix(&prefix[start..], held)))
        .filter(|&(_, run)| run >= needed && run > 0)
        .max_by_key(|&(start, run)| (run, std::cmp::Reverse(start)))
        .map(|(start, _)| start)
}

/// A window the cache holds is found again by this many tokens of its prefix.
const MIN_HELD_RUN: usize = 8;

/// The prefix section of a prefix-suffix-middle prompt: the tokens between
/// the prefix marker and the suffix section.
pub fn prefix_section<'t>(
    fim: &FimTokens,
    tokens: &'t [i32],
    suffix_span: Option<SuffixSpan>,
) -> Option<&'t [i32]> {
    let before_suffix = tokens.get(..suffix_span?.start)?;
    let marker = before_suffix.iter().position(|&t| t == fim.prefix)?;
    Some(&before_suffix[marker + 1..])
}

/// Special tokens a FIM prompt adds to its text.
fn specials(fim: &FimTokens) -> usize {
    3 + usize::from(fim.bos.is_some())
}

/// The prompt in the model's order: `prefix` from `prefix_start`, the first
/// `suffix_len` tokens of `suffix`.
fn layout(
    fim: &FimTokens,
    context: &[i32],
    prefix: &[i32],
    suffix: &[i32],
    prefix_start: usize,
    suffix_len: usize,
) -> FimPrompt {
    let prefix_kept = &prefix[prefix_start..];
    let suffix_kept = &suffix[..suffix_len];
    let mut tokens =
        Vec::with_capacity(specials(fim) + context.len() + prefix_kept.len() + suffix_len);
    tokens.extend(fim.bos);
    tokens.extend_from_slice(context);
    let suffix_span = match fim.order {
        FimOrder::PrefixSuffixMiddle => {
            tokens.push(fim.prefix);
            tokens.extend_from_slice(prefix_kept);
            let start = tokens.len();
            tokens.push(fim.suffix);
            tokens.extend_from_slice(suffix_kept);
            let end = tokens.len();
            tokens.push(fim.middle);
            Some(SuffixSpan { start, end })
        }
        FimOrder::SuffixPrefixMiddle => {
            tokens.push(fim.suffix);
            tokens.extend_from_slice(suffix_kept);
            tokens.push(fim.prefix);
            tokens.extend_from_slice(prefix_kept);
            tokens.push(fim.middle);
            None
        }
    };
    FimPrompt {
        tokens,
        suffix_span,
        document: false,
        prefix_trimmed: prefix_start,
        suffix_trimmed: suffix.len() - suffix_len,
        healed: Vec::new(),
    }
}

/// The prompt a resident document keeps in the cache: what a FIM prompt of
/// this document starts with (the repository context and the prefix marker,
/// for prefix-suffix-middle models), then the document's text in file order
/// from the window's start, cut at the end to the budget. A completion
/// anywhere in it finds its prefix here, and its suffix further on.
/// Suffix-first models start their prompts with the suffix: nothing of the
/// document would be shared, so they keep none (`None`).
pub fn document(
    fim: &FimTokens,
    context: &[i32],
    text: &[i32],
    budget: PromptBudget,
) -> Option<FimPrompt> {
    if fim.order != FimOrder::PrefixSuffixMiddle {
        return None;
    }
    let specials = 1 + usize::from(fim.bos.is_some());
    let kept = text.len().min(budget.input.saturating_sub(specials));
    let mut tokens = Vec::with_capacity(specials + context.len() + kept);
    tokens.extend(fim.bos);
    tokens.extend_from_slice(context);
    tokens.push(fim.prefix);
    tokens.extend_from_slice(&text[..kept]);
    Some(FimPrompt {
        tokens,
        suffix_span: None,
        document: true,
        prefix_trimmed: 0,
        suffix_trimmed: text.len() - kept,
        healed: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN: FimTokens = FimTokens {
        prefix: 100,
        suffix: 101,
        middle: 102,
        bos: None,
        order: FimOrder::PrefixSuffixMiddle,
        repo: None,
        file_sep: None,
    };

    #[test]
    fn prefix_suffix_middle_layout() {
        let p = assemble(
            &QWEN,
            &[],
            &[1, 2],
            &[3],
            PromptBudget {
                input: 100,
                suffix: 10,
                repository: 0,
            },
        );
        assert_eq!(p.tokens, vec![100, 1, 2, 101, 3, 102]);
        assert_eq!(p.suffix_span, Some(SuffixSpan { start: 3, end: 5 }));
    }

    #[test]
    fn suffix_first_layout_for_codestral_tokens() {
        let fim = FimTokens {
            order: FimOrder::from_prefix_token_text("[PREFIX]"),
            ..QWEN
        };
        let p = assemble(
            &fim,
            &[],
            &[1, 2],
            &[3],
            PromptBudget {
                input: 100,
                suffix: 10,
                repository: 0,
            },
        );
        assert_eq!(p.tokens, vec![101, 3, 100, 1, 2, 102]);
        assert_eq!(p.suffix_span, None);
    }

    #[test]
    fn over_budget_keeps_the_text_nearest_the_cursor() {
        let prefix: Vec<i32> = (0..50).collect();
        let suffix: Vec<i32> = (50..80).collect();
        let p = assemble(
            &QWEN,
            &[],
            &prefix,
            &suffix,
            PromptBudget {
                input: 23,
                suffix: 5,
                repository: 0,
            },
        );
        assert_eq!(p.tokens.len(), 23);
        assert_eq!(p.tokens[1], 35, "prefix keeps its last 15 tokens");
        assert_eq!(
            &p.tokens[17..22],
            &[50, 51, 52, 53, 54],
            "suffix keeps its first 5"
        );
        assert_eq!((p.prefix_trimmed, p.suffix_trimmed), (35, 25));
    }

    #[test]
    fn bos_is_counted_in_the_budget() {
        let fim = FimTokens {
            bos: Some(7),
            ..QWEN
        };
        let prefix: Vec<i32> = (0..50).collect();
        let p = assemble(
            &fim,
            &[],
            &prefix,
            &[],
            PromptBudget {
                input: 10,
                suffix: 5,
                repository: 0,
            },
        );
        assert_eq!(p.tokens.len(), 10);
        assert_eq!(p.tokens[0], 7);
    }

    #[test]
    fn a_window_held_in_the_cache_is_found_again_after_typing() {
        let budget = PromptBudget {
            input: 40,
            suffix: 8,
            repository: 0,
        };
        let cut = PromptBudget {
            input: 30,
            ..budget
        };
        let prefix: Vec<i32> = (0..50).collect();
        let suffix: Vec<i32> = (50..80).collect();
        let held = assemble(&QWEN, &[7], &prefix, &suffix, cut);
        let section = prefix_section(&QWEN, &held.tokens, held.suffix_span).unwrap();
        assert_eq!(section, &prefix[held.prefix_trimmed..]);
        // Two tokens typed: the window is found where it started, and keeps
        // everything the cache holds before its suffix section.
        let typed: Vec<i32> = (0..50).chain([90, 91]).collect();
        let start = start_of(section, &typed).unwrap();
        assert_eq!(start, held.prefix_trimmed);
        let again = assemble_from(&QWEN, &[7], &typed, &suffix, start, budget).unwrap();
        let before_suffix = held.suffix_span.unwrap().start;
        assert_eq!(again.tokens[..before_suffix], held.tokens[..before_suffix]);
        assert_eq!(&again.tokens[before_suffix..before_suffix + 2], &[90, 91]);
        // Typed past the budget: no such window.
        let long: Vec<i32> = (0..60).collect();
        assert_eq!(
            assemble_from(&QWEN, &[7], &long, &suffix, start, budget),
            None
        );
        // Text that does not hold the window.
        let other: Vec<i32> = (100..150).collect();
        assert_eq!(start_of(section, &other), None);
    }

    #[test]
    fn a_document_starts_as_its_fim_prompts_do_and_is_cut_at_the_end() {
        let budget = PromptBudget {
            input: 10,
            suffix: 5,
            repository: 0,
        };
        let text: Vec<i32> = (0..50).collect();
        let doc = document(&QWEN, &[7], &text, budget).unwrap();
        let fim = assemble(&QWEN, &[7], &text[..4], &text[4..6], budget);
        assert_eq!(doc.tokens[..6], fim.tokens[..6]);
        assert_eq!(doc.tokens.len(), 1 + 10, "the context, then the budget");
        let suffix_first = FimTokens {
            order: FimOrder::SuffixPrefixMiddle,
            ..QWEN
        };
        assert_eq!(document(&suffix_first, &[], &text, budget), None);
    }
}
