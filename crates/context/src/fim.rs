//! The prefix/suffix window around the cursor for fill-in-the-middle prompts.
//!
//! The window is cut at a line boundary that stays put while the user types (the
//! *anchor*), because the engine reuses its KV cache only up to the first token
//! that differs: a window that slid with every keystroke would re-decode it all.
//! Sizes here are in chars, chosen so the window fits the token budget; the engine
//! then enforces the budget exactly with the model's tokenizer.

use std::time::Duration;

use ropey::{Rope, RopeSlice};

use switchyard_engine::FimText;
use switchyard_engine::prompt::suffix_room;

/// Chars per token assumed when sizing the window: low for code, so the window
/// rarely exceeds the token budget and the engine rarely has to trim it.
pub const CHARS_PER_TOKEN: usize = 3;
/// A new anchor leaves this share of the prefix budget free for typing.
const ANCHOR_FILL: f64 = 0.75;
/// A kept anchor must still give the prefix at least this share of its budget:
/// an anchor set for a cursor further down (the end of the file, when it was
/// opened) would otherwise leave a request higher up a few lines of prefix.
const ANCHOR_MIN_FILL: f64 = 0.5;
/// At most this share of the prefix budget goes to the heads of the scopes the
/// window starts inside.
pub(super) const HEADS_SHARE: usize = 5;
/// Special tokens of a FIM prompt (prefix, suffix and middle markers, BOS).
const SPECIAL_TOKENS: usize = 4;

/// At a new place the suffix is decoded afresh (the resident document holds
/// the prefix): its tokens are what this share of the request's budget decodes
/// at the measured prompt speed, so the rest is left for the answer.
const SUFFIX_SHARE_OF_BUDGET: f64 = 0.35;

/// A window's suffix is never cut below this by the speed: the rest of the
/// cursor's line and the next one or two. At a new place the suffix section
/// is what a request decodes (the span's document holds the prefix), so on a
/// busy machine (67 prompt tokens/s) a floor of 64 took the whole second.
/// Tests that need the same answer at any speed pin a budget long enough
/// that the speed never cuts the suffix.
const MIN_SUFFIX_TOKENS: usize = 16;

/// Suffix tokens of a window: `configured`, but at most what decodes in
/// [`SUFFIX_SHARE_OF_BUDGET`] of `budget` at `prompt_tokens_per_s` (a busy
/// machine gets a shorter suffix, not a late answer), and at least
/// [`MIN_SUFFIX_TOKENS`].
pub fn affordable_suffix(configured: usize, prompt_tokens_per_s: f64, budget: Duration) -> usize {
    let affordable = prompt_tokens_per_s * budget.as_secs_f64() * SUFFIX_SHARE_OF_BUDGET;
    configured.min((affordable as usize).max(MIN_SUFFIX_TOKENS))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowBudget {
    pub prefix_tokens: usize,
    pub suffix_tokens: usize,
}

impl WindowBudget {
    /// Splits an input budget the way the engine assembles the prompt: the
    /// suffix gets its share (at most `suffix_ceiling`), the prefix the rest.
    pub fn for_input(input_tokens: usize, suffix_ceiling: usize) -> WindowBudget {
        let room = input_tokens.saturating_sub(SPECIAL_TOKENS);
        let suffix_tokens = suffix_room(room, suffix_ceiling);
        WindowBudget {
            prefix_tokens: room - suffix_tokens,
            suffix_tokens,
        }
    }
}

/// Prefix, suffix and the line the prefix starts at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub text: FimText,
    pub anchor_line: usize,
}

/// The window around `cursor` (a char index). `previous_anchor` is the anchor this
/// document used last time; it is kept while the prefix from it still fits and
/// fills enough of the budget.
///
/// When the window starts inside a function or a class, the lines that open
/// them (the signature, the `impl` or `class` line) come first: the model sees
/// what it is completing even when the body is longer than the window. They
/// depend on the anchor only, so they stay put while the user types.
pub fn window(
    rope: &Rope,
    cursor: usize,
    budget: WindowBudget,
    previous_anchor: Option<usize>,
) -> Window {
    let cursor = cursor.min(rope.len_chars());
    let max_prefix = budget.prefix_tokens * CHARS_PER_TOKEN;
    let max_heads = max_prefix / HEADS_SHARE;
    let cursor_line = rope.char_to_line(cursor);
    let body = |line: usize| cursor - rope.line_to_char(line);
    let fits = |line: usize| body(line) + scope_heads(rope, line, max_heads).len() <= max_prefix;

    let fresh_anchor = || {
        let target = (max_prefix as f64 * ANCHOR_FILL) as usize;
        let mut line = cursor_line;
        while line > 0 && body(line - 1) <= target {
            line -= 1;
        }
        line
    };
    let anchor_line = match previous_anchor {
        Some(line) if line <= cursor_line && fits(line) => {
            let fresh = fresh_anchor();
            let full_enough = body(line) as f64 >= max_prefix as f64 * ANCHOR_MIN_FILL;
            if line <= fresh || full_enough {
                line
            } else {
                fresh
            }
        }
        _ => fresh_anchor(),
    };
    let heads = scope_heads(rope, anchor_line, max_heads);
    // A single line longer than the budget: cut inside it.
    let prefix_start = rope
        .line_to_char(anchor_line)
        .max(cursor.saturating_sub(max_prefix - heads.len()));
    let suffix_end = (cursor + budget.suffix_tokens * CHARS_PER_TOKEN).min(rope.len_chars());
    Window {
        text: FimText {
            prefix: heads + &rope.slice(prefix_start..cursor).to_string(),
            suffix: rope.slice(cursor..suffix_end).to_string(),
            ..FimText::default()
        },
        anchor_line,
    }
}

/// How far up the scope heads are looked for.
const HEADS_LOOKBACK_LINES: usize = 2_000;

/// The lines above `line` that open the scopes it sits in, outermost first, at
/// most `max_chars` of them (the innermost are kept). A scope head is the
/// nearest line above with less indentation; blank lines, comments and lines
/// that close a bracket are not heads.
pub(super) fn scope_heads(rope: &Rope, line: usize, max_chars: usize) -> String {
    let first_text = (line..rope.len_lines())
        .take(HEADS_LOOKBACK_LINES)
        .find_map(|l| indentation(rope.line(l)));
    let Some(mut indent) = first_text else {
        return String::new();
    };
    let mut heads = Vec::new();
    let mut used = 0;
    for above in (line.saturating_sub(HEADS_LOOKBACK_LINES)..line).rev() {
        if indent == 0 {
            break;
        }
        // Most lines are skipped here, without copying them out of the rope.
        let Some(this) = indentation(rope.line(above)) else {
            continue;
        };
        if this >= indent {
            continue;
        }
        let text = rope.line(above).to_string();
        if !opens_scope(text.trim_start()) {
            continue;
        }
        indent = this;
        if used + text.len() > max_chars {
            break;
        }
        used += text.len();
        heads.push(text);
    }
    heads.reverse();
    heads.concat()
}

/// Leading whitespace of a line with text on it; `None` for a blank line.
pub(crate) fn indentation(line: RopeSlice) -> Option<usize> {
    line.chars().position(|c| !c.is_whitespace())
}

fn opens_scope(text: &str) -> bool {
    const NOT_HEADS: [&str; 8] = ["#", "//", "/*", "*", "--", "}", ")", "]"];
    !NOT_HEADS.iter().any(|p| text.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered_lines(n: usize) -> String {
        (0..n).map(|i| format!("line {i:04}\n")).collect()
    }

    const BUDGET: WindowBudget = WindowBudget {
        prefix_tokens: 100,
        suffix_tokens: 10,
    };

    #[test]
    fn window_starts_at_a_line_and_fits_the_budget() {
        let rope = Rope::from_str(&numbered_lines(200));
        let cursor = rope.line_to_char(150);
        let w = window(&rope, cursor, BUDGET, None);
        assert!(w.text.prefix.starts_with("line "));
        assert!(w.text.prefix.len() <= 300);
        assert!(
            w.text.prefix.len() >= 200,
            "uses most of the budget: {}",
            w.text.prefix.len()
        );
        assert_eq!(w.text.suffix, "line 0150\nline 0151\nline 0152\n");
    }

    #[test]
    fn the_suffix_is_what_a_third_of_the_budget_decodes() {
        let second = Duration::from_secs(1);
        assert_eq!(affordable_suffix(128, 200.0, second), 70);
        assert_eq!(
            affordable_suffix(128, 1000.0, second),
            128,
            "at most as configured"
        );
        assert_eq!(
            affordable_suffix(128, 140.0, second * 3),
            128,
            "an invoked request's budget"
        );
        assert_eq!(affordable_suffix(128, 140.0, second), 49, "idle, 1 s");
        assert_eq!(affordable_suffix(128, 67.0, second), 23, "one core busy");
        assert_eq!(
            affordable_suffix(128, 20.0, second),
            MIN_SUFFIX_TOKENS,
            "never below the cursor's next lines"
        );
    }

    #[test]
    fn anchor_stays_while_typing_and_moves_when_the_prefix_outgrows_it() {
        let rope = Rope::from_str(&numbered_lines(200));
        let first = window(&rope, rope.line_to_char(150), BUDGET, None);
        let next = window(
            &rope,
            rope.line_to_char(152),
            BUDGET,
            Some(first.anchor_line),
        );
        assert_eq!(next.anchor_line, first.anchor_line);
        let far = window(
            &rope,
            rope.line_to_char(190),
            BUDGET,
            Some(first.anchor_line),
        );
        assert!(far.anchor_line > first.anchor_line);
    }

    #[test]
    fn anchor_after_the_cursor_is_replaced() {
        let rope = Rope::from_str(&numbered_lines(200));
        let w = window(&rope, rope.line_to_char(10), BUDGET, Some(50));
        assert!(w.anchor_line <= 10);
    }

    #[test]
    fn one_huge_line_is_cut_inside() {
        let rope = Rope::from_str(&"x".repeat(10_000));
        let w = window(&rope, 9_000, BUDGET, None);
        assert_eq!(w.text.prefix.len(), 300);
        assert_eq!(w.text.suffix.len(), 30);
    }

    /// A class with a method whose body is longer than the window.
    fn long_method() -> String {
        let mut text = String::from(
            "import os\n\nclass Store:\n    # cached entries\n\n    def evict(self, now):\n",
        );
        for i in 0..60 {
            text.push_str(&format!("        step_{i:02} = now + {i}\n"));
        }
        text.push_str("        return None\n");
        text
    }

    #[test]
    fn a_window_inside_a_long_function_starts_with_its_heads() {
        let rope = Rope::from_str(&long_method());
        let cursor = rope.line_to_char(50) + 8;
        let w = window(&rope, cursor, BUDGET, None);
        assert!(w.anchor_line > 6, "the body alone fills the window");
        assert!(
            w.text
                .prefix
                .starts_with("class Store:\n    def evict(self, now):\n        step_"),
            "{:?}",
            w.text.prefix
        );
        assert!(w.text.prefix.len() <= 300);
    }

    #[test]
    fn heads_stay_put_while_typing() {
        let mut text = long_method();
        let rope = Rope::from_str(&text);
        let cursor = rope.line_to_char(50) + 8;
        let first = window(&rope, cursor, BUDGET, None);
        text.insert_str(rope.char_to_byte(cursor), "x = 1\n        y");
        let typed = Rope::from_str(&text);
        let next = window(&typed, cursor + 15, BUDGET, Some(first.anchor_line));
        assert_eq!(next.anchor_line, first.anchor_line);
        assert!(next.text.prefix.starts_with(&first.text.prefix));
    }

    #[test]
    fn an_anchor_far_below_a_higher_request_is_replaced() {
        let rope = Rope::from_str(&numbered_lines(200));
        let opened_at_end = window(&rope, rope.len_chars(), BUDGET, None);
        let request = rope.line_to_char(opened_at_end.anchor_line + 2);
        let w = window(&rope, request, BUDGET, Some(opened_at_end.anchor_line));
        assert!(w.anchor_line < opened_at_end.anchor_line);
        assert!(w.text.prefix.len() >= 150, "{}", w.text.prefix.len());
    }

    #[test]
    fn comments_and_closing_brackets_are_not_heads() {
        let text =
            "impl Store {\n    fn a() {\n    }\n    // note\n    fn b() {\n        let x = 1;\n";
        let rope = Rope::from_str(text);
        assert_eq!(scope_heads(&rope, 5, 1000), "impl Store {\n    fn b() {\n");
    }

    #[test]
    fn the_budget_gives_the_suffix_a_quarter_at_most() {
        assert_eq!(
            WindowBudget::for_input(260, 128),
            WindowBudget {
                prefix_tokens: 192,
                suffix_tokens: 64
            }
        );
        assert_eq!(WindowBudget::for_input(2000, 128).suffix_tokens, 128);
    }
}
