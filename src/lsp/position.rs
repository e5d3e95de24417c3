//! LSP positions <-> rope char indices, in the negotiated encoding.
//!
//! Per the LSP spec a character offset past the end of its line means the line's
//! end; a line past the end of the document is an error.

use ropey::Rope;
use tower_lsp_server::ls_types::Position;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PositionEncoding {
    Utf8,
    #[default]
    Utf16,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("position {line}:{character} is past the end of the document ({lines} lines)")]
pub struct PositionError {
    pub line: u32,
    pub character: u32,
    pub lines: usize,
}

/// Char index of `pos` in `rope`.
pub fn to_char(
    rope: &Rope,
    pos: Position,
    encoding: PositionEncoding,
) -> Result<usize, PositionError> {
    let line_index = pos.line as usize;
    if line_index >= rope.len_lines() {
        return Err(PositionError {
            line: pos.line,
            character: pos.character,
            lines: rope.len_lines(),
        });
    }
    let line_start = rope.line_to_char(line_index);
    let line = rope.line(line_index);
    let mut units = 0usize;
    let mut chars = 0usize;
    for c in line.chars() {
        if c == '\n' || c == '\r' || units >= pos.character as usize {
            break;
        }
        units += match encoding {
            PositionEncoding::Utf8 => c.len_utf8(),
            PositionEncoding::Utf16 => c.len_utf16(),
        };
        chars += 1;
    }
    Ok(line_start + chars)
}

/// LSP position of char index `index` (clamped to the document's end).
pub fn from_char(rope: &Rope, index: usize, encoding: PositionEncoding) -> Position {
    let index = index.min(rope.len_chars());
    let line = rope.char_to_line(index);
    let line_start = rope.line_to_char(line);
    let character: usize = rope
        .slice(line_start..index)
        .chars()
        .map(|c| match encoding {
            PositionEncoding::Utf8 => c.len_utf8(),
            PositionEncoding::Utf16 => c.len_utf16(),
        })
        .sum();
    Position::new(line as u32, character as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_counts_surrogate_pairs_and_utf8_counts_bytes() {
        let rope = Rope::from_str("a😀b\nx");
        // 😀 is 2 UTF-16 units and 4 UTF-8 bytes; 'b' follows it.
        assert_eq!(
            to_char(&rope, Position::new(0, 3), PositionEncoding::Utf16).unwrap(),
            2
        );
        assert_eq!(
            to_char(&rope, Position::new(0, 5), PositionEncoding::Utf8).unwrap(),
            2
        );
        assert_eq!(
            from_char(&rope, 2, PositionEncoding::Utf16),
            Position::new(0, 3)
        );
        assert_eq!(
            from_char(&rope, 2, PositionEncoding::Utf8),
            Position::new(0, 5)
        );
    }

    #[test]
    fn character_past_line_end_clamps_to_the_line_end() {
        let rope = Rope::from_str("ab\ncd");
        assert_eq!(
            to_char(&rope, Position::new(0, 99), PositionEncoding::Utf16).unwrap(),
            2
        );
    }

    #[test]
    fn line_past_the_end_is_an_error() {
        let rope = Rope::from_str("ab\ncd");
        let err = to_char(&rope, Position::new(5, 0), PositionEncoding::Utf16).unwrap_err();
        assert_eq!(err.lines, 2);
        assert!(err.to_string().contains("past the end"));
    }
}
