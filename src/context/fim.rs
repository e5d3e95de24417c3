//! The prefix/suffix window around the cursor for fill-in-the-middle prompts.
//!
//! The window is cut at a line boundary that stays put while the user types (the
//! *anchor*), because the engine reuses its KV cache only up to the first token
//! that differs: a window that slid with every keystroke would re-decode it all.
//! Sizes here are in chars, chosen so the window fits the token budget; the engine
//! then enforces the budget exactly with the model's tokenizer.

use ropey::Rope;

use crate::providers::local::FimText;

/// Chars per token assumed when sizing the window: low for code, so the window
/// rarely exceeds the token budget and the engine rarely has to trim it.
pub const CHARS_PER_TOKEN: usize = 3;
/// A new anchor leaves this share of the prefix budget free for typing.
const ANCHOR_FILL: f64 = 0.75;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowBudget {
    pub prefix_tokens: usize,
    pub suffix_tokens: usize,
}

/// Prefix, suffix and the line the prefix starts at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub text: FimText,
    pub anchor_line: usize,
}

/// The window around `cursor` (a char index). `previous_anchor` is the anchor this
/// document used last time; it is kept while the prefix from it still fits.
pub fn window(
    rope: &Rope,
    cursor: usize,
    budget: WindowBudget,
    previous_anchor: Option<usize>,
) -> Window {
    let cursor = cursor.min(rope.len_chars());
    let max_prefix = budget.prefix_tokens * CHARS_PER_TOKEN;
    let cursor_line = rope.char_to_line(cursor);
    let fits = |line: usize| cursor - rope.line_to_char(line) <= max_prefix;

    let anchor_line = match previous_anchor {
        Some(line) if line <= cursor_line && fits(line) => line,
        _ => {
            let target = (max_prefix as f64 * ANCHOR_FILL) as usize;
            let mut line = cursor_line;
            while line > 0 && cursor - rope.line_to_char(line - 1) <= target {
                line -= 1;
            }
            line
        }
    };
    // A single line longer than the budget: cut inside it.
    let prefix_start = rope
        .line_to_char(anchor_line)
        .max(cursor.saturating_sub(max_prefix));
    let suffix_end = (cursor + budget.suffix_tokens * CHARS_PER_TOKEN).min(rope.len_chars());
    Window {
        text: FimText {
            prefix: rope.slice(prefix_start..cursor).to_string(),
            suffix: rope.slice(cursor..suffix_end).to_string(),
        },
        anchor_line,
    }
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
}
