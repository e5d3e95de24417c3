//! Whether a document is worth completing in at all: every front end asks
//! the same question (the service for each request, the language server
//! before it prewarms or lends a document to the repository context), so a
//! binary or huge file is treated alike everywhere.

use ropey::Rope;

/// Larger documents are kept in sync but never completed in: completion
/// context is a window around the cursor anyway.
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// Why `rope` is not worth completing in (binary content, an oversized
/// file), or `None`.
pub fn unsuitable(rope: &Rope) -> Option<&'static str> {
    if rope.len_bytes() > MAX_DOCUMENT_BYTES {
        Some("document is too large")
    } else if rope.chunks().any(|c| c.contains('\0')) {
        Some("document looks binary")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_oversized_documents_are_not_completed_in() {
        assert_eq!(unsuitable(&Rope::from_str("fn main() {}\n")), None);
        assert_eq!(
            unsuitable(&Rope::from_str("ELF\0\0\u{1}")),
            Some("document looks binary")
        );
        let huge = "x".repeat(MAX_DOCUMENT_BYTES + 1);
        assert_eq!(
            unsuitable(&Rope::from_str(&huge)),
            Some("document is too large")
        );
    }
}
