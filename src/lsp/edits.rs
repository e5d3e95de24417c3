//! Turning a rewritten selection into minimal text edits, and finding the code a
//! code action works on when the selection is empty.

use ropey::Rope;
use similar::{DiffTag, TextDiff};
use tower_lsp_server::ls_types::{Range, TextEdit};

use super::position::{self, PositionEncoding};

/// Edits that turn the text at `[start, end)` (char indices) into `replacement`,
/// touching only the lines that differ.
pub fn minimal_edits(
    rope: &Rope,
    start: usize,
    end: usize,
    replacement: &str,
    encoding: PositionEncoding,
) -> Vec<TextEdit> {
    let original = rope.slice(start..end).to_string();
    let diff = TextDiff::from_lines(&original, replacement);
    let old_lines: Vec<&str> = original.split_inclusive('\n').collect();
    let new_lines: Vec<&str> = replacement.split_inclusive('\n').collect();
    let char_offset = |line: usize| {
        old_lines[..line]
            .iter()
            .map(|l| l.chars().count())
            .sum::<usize>()
    };
    diff.ops()
        .iter()
        .filter(|op| op.tag() != DiffTag::Equal)
        .map(|op| {
            let (old, new) = (op.old_range(), op.new_range());
            let from = start + char_offset(old.start);
            let to = start + char_offset(old.end);
            TextEdit {
                range: Range::new(
                    position::from_char(rope, from, encoding),
                    position::from_char(rope, to, encoding),
                ),
                new_text: new_lines[new.clone()].concat(),
            }
        })
        .collect()
}

/// The item around `line` (a function, impl, struct...): from the nearest
/// unindented line above to its closing unindented bracket line. Falls back to
/// the line itself.
pub fn enclosing_item(rope: &Rope, line: usize) -> (usize, usize) {
    let text = |l: usize| rope.line(l).to_string();
    let is_top = |l: usize| {
        let t = text(l);
        !t.trim().is_empty() && !t.starts_with([' ', '\t', '}', ')', ']'])
    };
    let last = rope.len_lines().saturating_sub(1);
    let Some(start) = (0..=line.min(last)).rev().find(|&l| is_top(l)) else {
        return (line, line);
    };
    let mut end = (start + 1..=last)
        .find(|&l| text(l).starts_with(['}', ')', ']']) || is_top(l))
        .map_or(last, |l| if is_top(l) { l - 1 } else { l });
    while end > start && text(end).trim().is_empty() {
        end -= 1;
    }
    if end < line {
        (line, line)
    } else {
        (start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changed_lines_are_edited() {
        let rope = Rope::from_str("fn a() {\n    let x = 1;\n    x\n}\n");
        let edits = minimal_edits(
            &rope,
            0,
            rope.len_chars(),
            "fn a() {\n    let x = 2;\n    x\n}\n",
            PositionEncoding::Utf16,
        );
        assert_eq!(edits.len(), 1);
        assert_eq!(edits[0].range.start.line, 1);
        assert_eq!(edits[0].range.end.line, 2);
        assert_eq!(edits[0].new_text, "    let x = 2;\n");
    }

    #[test]
    fn identical_text_needs_no_edit() {
        let rope = Rope::from_str("a\nb\n");
        assert!(
            minimal_edits(
                &rope,
                0,
                rope.len_chars(),
                "a\nb\n",
                PositionEncoding::Utf16
            )
            .is_empty()
        );
    }

    #[test]
    fn the_enclosing_function_is_found_from_inside_it() {
        let rope = Rope::from_str("use x;\n\nfn a() {\n    one();\n    two();\n}\n\nfn b() {}\n");
        assert_eq!(enclosing_item(&rope, 4), (2, 5));
        assert_eq!(enclosing_item(&rope, 7), (7, 7));
    }
}
