//! Spans: stretches of an open document, from stable starts, that the engine
//! keeps resident in its KV cache (ARCHITECTURE.md invariant 20).
//!
//! The document is cut into blocks of whole lines. Every place in a block
//! shares one span, which starts at the block above it (the first block's
//! places start at the top of the file): a request anywhere in the block finds
//! the document up to its cursor in the cache, and decodes only its suffix
//! section, whatever the machine's speed. The prefix is then between one and
//! two blocks long.
//!
//! A block is a power-of-two number of lines (from the document's mean line
//! length, so typing does not change it) and starts at the first top-level
//! item at or after its multiple of lines: typing never moves a start, and an
//! inserted line moves one only where it falls between a multiple and its item.

use ropey::Rope;

use super::fim::{CHARS_PER_TOKEN, HEADS_SHARE, WindowBudget, indentation, scope_heads};
use switchyard_engine::FimText;

/// Fewest lines in a block.
const MIN_BLOCK_LINES: usize = 4;

/// The span serving one place: its window there, and its document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// The line the span starts at.
    pub start_line: usize,
    /// Prefix from the span's start to the cursor (after the heads of the
    /// scopes it starts inside), suffix from the cursor.
    pub window: FimText,
    /// The span in file order, as far as its windows reach: what the engine
    /// keeps resident, and what every window of the span begins with.
    pub document: String,
}

/// The span at `cursor` (a char index) for windows of `budget`, in blocks of
/// about `block_chars`. `None` when neither the span starting a block above
/// nor the cursor's own block fits the prefix budget (very long lines).
pub fn at(rope: &Rope, cursor: usize, budget: WindowBudget, block_chars: usize) -> Option<Span> {
    let cursor = cursor.min(rope.len_chars());
    let max_prefix = budget.prefix_tokens * CHARS_PER_TOKEN;
    let max_heads = max_prefix / HEADS_SHARE;
    let blocks = Blocks::of(rope, block_chars);
    let cursor_line = rope.char_to_line(cursor);
    let own = blocks.containing(cursor_line);
    let candidates = [own.checked_sub(1), Some(own)];
    let (start_line, heads) = candidates.into_iter().flatten().find_map(|block| {
        let line = blocks.start(block);
        let heads = scope_heads(rope, line, max_heads);
        let prefix = heads.len() + cursor - rope.line_to_char(line);
        (prefix <= max_prefix).then_some((line, heads))
    })?;
    let start = rope.line_to_char(start_line);
    let reach = (budget.prefix_tokens + budget.suffix_tokens) * CHARS_PER_TOKEN;
    let document_end = (start + reach.saturating_sub(heads.len())).min(rope.len_chars());
    let suffix_end = (cursor + budget.suffix_tokens * CHARS_PER_TOKEN).min(rope.len_chars());
    Some(Span {
        start_line,
        window: FimText {
            prefix: heads.clone() + &rope.slice(start..cursor).to_string(),
            suffix: rope.slice(cursor..suffix_end).to_string(),
            spanned: true,
            ..FimText::default()
        },
        document: heads + &rope.slice(start..document_end).to_string(),
    })
}

/// The spans of the blocks around `cursor`'s, nearest first (below, then
/// above, then two below...), up to `count`: where the fill grows once the
/// cursor's own span is resident. Spans sharing a start with the cursor's or
/// with each other (the top of the file) are left out.
pub fn around(
    rope: &Rope,
    cursor: usize,
    budget: WindowBudget,
    block_chars: usize,
    count: usize,
) -> Vec<Span> {
    let cursor = cursor.min(rope.len_chars());
    let blocks = Blocks::of(rope, block_chars);
    let own = blocks.containing(rope.char_to_line(cursor));
    let last = rope.len_lines().saturating_sub(1) / blocks.lines;
    let own_start = at(rope, cursor, budget, block_chars).map(|span| span.start_line);
    let mut spans: Vec<Span> = Vec::new();
    for distance in 1..=last.max(own) {
        let below = Some(own + distance).filter(|&block| block <= last);
        for block in [below, own.checked_sub(distance)].into_iter().flatten() {
            if spans.len() == count {
                return spans;
            }
            let place = rope.line_to_char(blocks.start(block));
            let Some(span) = at(rope, place, budget, block_chars) else {
                continue;
            };
            let seen = own_start == Some(span.start_line)
                || spans.iter().any(|s| s.start_line == span.start_line);
            if !seen {
                spans.push(span);
            }
        }
    }
    spans.truncate(count);
    spans
}

/// The blocks of one document.
struct Blocks<'r> {
    rope: &'r Rope,
    lines: usize,
}

impl<'r> Blocks<'r> {
    /// Blocks of about `block_chars` at the document's mean line length,
    /// rounded down to a power of two lines.
    fn of(rope: &'r Rope, block_chars: usize) -> Blocks<'r> {
        let mean_line = (rope.len_chars() / rope.len_lines().max(1)).max(1);
        let lines = (block_chars / mean_line).max(MIN_BLOCK_LINES);
        Blocks {
            rope,
            lines: 1 << lines.ilog2(),
        }
    }

    /// The first line of block `index`: the first top-level item at or after
    /// its multiple of lines, within the block; else the multiple itself.
    fn start(&self, index: usize) -> usize {
        let first = index * self.lines;
        if index == 0 {
            return 0;
        }
        let end = (first + self.lines).min(self.rope.len_lines());
        (first..end)
            .find(|&line| starts_item(self.rope, line))
            .unwrap_or(first)
    }

    /// The block `line` is in.
    fn containing(&self, line: usize) -> usize {
        let index = line / self.lines;
        if index > 0 && line < self.start(index) {
            index - 1
        } else {
            index
        }
    }
}

/// Whether `line` begins a top-level item: text at the left margin that is
/// not a comment or a closing bracket (a Rust attribute counts: it belongs
/// to the item below it).
fn starts_item(rope: &Rope, line: usize) -> bool {
    if indentation(rope.line(line)) != Some(0) {
        return false;
    }
    let text: String = rope.line(line).chars().take(3).collect();
    const NOT_ITEMS: [&str; 8] = ["//", "/*", "*", "--", "}", ")", "]", "#"];
    text.starts_with("#[") || !NOT_ITEMS.iter().any(|p| text.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: WindowBudget = WindowBudget {
        prefix_tokens: 400,
        suffix_tokens: 40,
    };
    /// Two blocks fill the prefix budget.
    const BLOCK_CHARS: usize = 400 * CHARS_PER_TOKEN / 2;

    /// Top-level functions of `body` lines each, every line 20 chars.
    fn functions(count: usize, body: usize) -> String {
        let mut text = String::new();
        for f in 0..count {
            text.push_str(&format!("def fn_{f:04}(x):    \n"));
            for l in 0..body {
                text.push_str(&format!("    y{l:03} = x + {l:04}\n"));
            }
        }
        text
    }

    fn span_at_line(rope: &Rope, line: usize, column: usize) -> Span {
        at(rope, rope.line_to_char(line) + column, BUDGET, BLOCK_CHARS).expect("a span")
    }

    #[test]
    fn every_place_in_a_block_shares_one_start_and_its_prefix_fits() {
        let rope = Rope::from_str(&functions(40, 9));
        // 20 chars a line: blocks of 600 / 20 = 30, rounded down to 16 lines.
        let starts: Vec<usize> = (0..rope.len_lines() - 1)
            .map(|line| span_at_line(&rope, line, 4).start_line)
            .collect();
        for (line, &start) in starts.iter().enumerate() {
            assert!(start <= line);
            let span = span_at_line(&rope, line, 4);
            assert!(span.window.prefix.len() <= BUDGET.prefix_tokens * CHARS_PER_TOKEN);
            assert!(span.document.starts_with(&span.window.prefix));
            assert!(span.window.spanned);
        }
        let distinct: std::collections::BTreeSet<usize> = starts.iter().copied().collect();
        assert!(
            distinct.len() <= rope.len_lines() / 16 + 1,
            "one start per block: {distinct:?}"
        );
        assert_eq!(starts[0], 0);
        assert_eq!(starts[20], 0, "the second block's span starts at the top");
        for &start in &distinct {
            assert!(
                start == 0 || rope.line(start).to_string().starts_with("def "),
                "line {start} starts an item"
            );
        }
    }

    #[test]
    fn the_spans_around_a_place_go_outward_and_each_starts_once() {
        let rope = Rope::from_str(&functions(40, 9));
        let cursor = rope.line_to_char(200) + 4;
        let own = span_at_line(&rope, 200, 4).start_line;
        let spans = around(&rope, cursor, BUDGET, BLOCK_CHARS, 4);
        let starts: Vec<usize> = spans.iter().map(|span| span.start_line).collect();
        assert_eq!(starts.len(), 4, "{starts:?}");
        assert!(
            starts[0] > own && starts[1] < own,
            "below, then above: {starts:?}"
        );
        assert!(
            starts[2] > starts[0] && starts[3] < starts[1],
            "then further: {starts:?}"
        );
        let blocks = Blocks::of(&rope, BLOCK_CHARS);
        for (start, span) in starts.iter().zip(&spans) {
            // Each is the span a request in the block below its start gets.
            let line = blocks.start(blocks.containing(*start) + 1) + 1;
            let served = span_at_line(&rope, line, 4);
            assert_eq!(served.start_line, *start);
            assert_eq!(served.document, span.document);
        }
        // At the top of the file the blocks above are gone, and the second
        // block's span starts where the first's does: one start each.
        let top = around(&rope, 10, BUDGET, BLOCK_CHARS, 4);
        let top_starts: Vec<usize> = top.iter().map(|span| span.start_line).collect();
        assert!(top_starts.iter().all(|&start| start > 0), "{top_starts:?}");
        let distinct: std::collections::BTreeSet<usize> = top_starts.iter().copied().collect();
        assert_eq!(distinct.len(), top_starts.len());
        assert!(around(&rope, cursor, BUDGET, BLOCK_CHARS, 0).is_empty());
    }

    #[test]
    fn the_document_holds_every_window_of_the_span_with_its_suffix() {
        let rope = Rope::from_str(&functions(40, 9));
        for line in [0, 17, 63, 100, 250] {
            let span = span_at_line(&rope, line, 6);
            let window = format!("{}{}", span.window.prefix, span.window.suffix);
            assert!(span.document.starts_with(&window), "line {line}");
        }
    }

    #[test]
    fn typing_and_inserting_a_line_above_keep_the_start() {
        let text = functions(40, 9);
        let rope = Rope::from_str(&text);
        let before = span_at_line(&rope, 150, 8);
        // Typing at the cursor.
        let mut typed = text.clone();
        typed.insert_str(rope.line_to_char(150) + 8, "abc");
        let typed = Rope::from_str(&typed);
        assert_eq!(span_at_line(&typed, 150, 11).start_line, before.start_line);
        // A line inserted inside the span, above the cursor: the start is
        // the same item, now one line down.
        let mut inserted = text.clone();
        let at = rope.line_to_char(before.start_line + 3);
        inserted.insert_str(at, "    z = 1           \n");
        let inserted = Rope::from_str(&inserted);
        let after = span_at_line(&inserted, 151, 8);
        assert_eq!(
            inserted.line(after.start_line).to_string(),
            rope.line(before.start_line).to_string()
        );
    }

    #[test]
    fn a_start_inside_an_item_brings_its_heads() {
        // One long function: no item starts after the first line.
        let rope = Rope::from_str(&functions(1, 200));
        let span = span_at_line(&rope, 150, 4);
        assert!(span.start_line > 0);
        assert!(span.window.prefix.starts_with("def fn_0000(x):"));
        assert!(span.document.starts_with(&span.window.prefix));
    }

    #[test]
    fn lines_too_long_for_the_budget_have_no_span() {
        let rope = Rope::from_str(&"x".repeat(10_000));
        assert_eq!(at(&rope, 9_000, BUDGET, BLOCK_CHARS), None);
        let short = Rope::from_str("fn main() {}\n");
        assert_eq!(at(&short, 5, BUDGET, BLOCK_CHARS).unwrap().start_line, 0);
    }
}
