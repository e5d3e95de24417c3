//! Open documents, kept as ropes and edited incrementally.
//!
//! Architecture invariant: every method is synchronous. Handlers call them before
//! their first `.await`, so edits apply in arrival order even though the framework
//! runs handlers concurrently (tower-lsp#284).

use dashmap::DashMap;
use ropey::Rope;
use tower_lsp_server::ls_types::{Position, TextDocumentContentChangeEvent, Uri};

use super::position::{self, PositionEncoding, PositionError};
use switchyard_completion::suitability::unsuitable;

#[derive(Clone, Debug)]
pub struct Document {
    pub rope: Rope,
    pub version: i32,
    pub language_id: String,
    /// Where the user probably is (a char index): just after the latest edit,
    /// or where the editor last revealed the cursor (see [`DocumentStore::reveal`]).
    pub cursor: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("unknown document {0}: it was never opened (textDocument/didOpen)")]
    Unknown(String),
    #[error("stale change to {uri}: version {got} is not newer than {have}; ignored")]
    StaleVersion { uri: String, got: i32, have: i32 },
    #[error("change to {uri}: {source}")]
    Range { uri: String, source: PositionError },
}

/// One edit of a `didChange`, as applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Chars `start..end` replaced by `text`.
    Edit {
        start: usize,
        end: usize,
        text: String,
    },
    /// The whole text replaced.
    Replaced,
}

#[derive(Debug, Default)]
pub struct DocumentStore {
    docs: DashMap<Uri, Document>,
}

impl DocumentStore {
    pub fn open(&self, uri: Uri, text: &str, version: i32, language_id: String) {
        let document = Document {
            rope: Rope::from_str(text),
            version,
            language_id,
            cursor: None,
        };
        self.docs.insert(uri, document);
    }

    pub fn close(&self, uri: &Uri) {
        self.docs.remove(uri);
    }

    /// A cheap copy (ropes share structure) that later edits won't disturb.
    pub fn get(&self, uri: &Uri) -> Result<Document, DocumentError> {
        self.docs
            .get(uri)
            .map(|d| d.clone())
            .ok_or_else(|| DocumentError::Unknown(uri.as_str().to_owned()))
    }

    /// Every open document suitable for completion: (URI, text), cheap copies.
    pub fn texts(&self) -> Vec<(String, Rope)> {
        self.docs
            .iter()
            .filter(|d| unsuitable(&d.rope).is_none())
            .map(|d| (d.key().as_str().to_owned(), d.rope.clone()))
            .collect()
    }

    /// Notes where the editor showed the cursor without an edit (VS Code asks
    /// for the code actions of the cursor's range whenever it moves); `true`
    /// when that is a new place, worth a prewarm.
    pub fn reveal(
        &self,
        uri: &Uri,
        at: Position,
        encoding: PositionEncoding,
    ) -> Result<bool, DocumentError> {
        let mut doc = self
            .docs
            .get_mut(uri)
            .ok_or_else(|| DocumentError::Unknown(uri.as_str().to_owned()))?;
        let cursor =
            position::to_char(&doc.rope, at, encoding).map_err(|source| DocumentError::Range {
                uri: uri.as_str().to_owned(),
                source,
            })?;
        let moved = doc.cursor != Some(cursor);
        doc.cursor = Some(cursor);
        Ok(moved)
    }

    /// Applies one `didChange`. All edits or none: a bad range leaves the
    /// document as it was. Returns the edits as char ranges, each in the
    /// text as the edits before it left it.
    pub fn change(
        &self,
        uri: &Uri,
        version: i32,
        changes: Vec<TextDocumentContentChangeEvent>,
        encoding: PositionEncoding,
    ) -> Result<Vec<Applied>, DocumentError> {
        let mut doc = self
            .docs
            .get_mut(uri)
            .ok_or_else(|| DocumentError::Unknown(uri.as_str().to_owned()))?;
        if version <= doc.version {
            return Err(DocumentError::StaleVersion {
                uri: uri.as_str().to_owned(),
                got: version,
                have: doc.version,
            });
        }
        let mut rope = doc.rope.clone();
        let mut cursor = doc.cursor;
        let mut applied = Vec::with_capacity(changes.len());
        for change in changes {
            match change.range {
                Some(range) => {
                    let range_error = |source| DocumentError::Range {
                        uri: uri.as_str().to_owned(),
                        source,
                    };
                    let start =
                        position::to_char(&rope, range.start, encoding).map_err(range_error)?;
                    let end = position::to_char(&rope, range.end, encoding).map_err(range_error)?;
                    let (start, end) = (start.min(end), start.max(end));
                    rope.remove(start..end);
                    rope.insert(start, &change.text);
                    cursor = Some(start + change.text.chars().count());
                    applied.push(Applied::Edit {
                        start,
                        end,
                        text: change.text,
                    });
                }
                None => {
                    rope = Rope::from_str(&change.text);
                    cursor = None;
                    applied.push(Applied::Replaced);
                }
            }
        }
        doc.rope = rope;
        doc.version = version;
        doc.cursor = cursor;
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_lsp_server::ls_types::{Position, Range};

    fn uri() -> Uri {
        "file:///tmp/a.rs".parse().unwrap()
    }

    fn edit(l0: u32, c0: u32, l1: u32, c1: u32, text: &str) -> TextDocumentContentChangeEvent {
        TextDocumentContentChangeEvent {
            range: Some(Range::new(Position::new(l0, c0), Position::new(l1, c1))),
            range_length: None,
            text: text.into(),
        }
    }

    #[test]
    fn incremental_edits_apply_in_order_and_track_the_edit_position() {
        let store = DocumentStore::default();
        store.open(uri(), "fn main() {\n}\n", 1, "rust".into());
        store
            .change(
                &uri(),
                2,
                vec![edit(0, 11, 0, 11, "\n    let"), edit(1, 7, 1, 7, " x")],
                PositionEncoding::Utf16,
            )
            .unwrap();
        let doc = store.get(&uri()).unwrap();
        assert_eq!(doc.rope.to_string(), "fn main() {\n    let x\n}\n");
        assert_eq!(doc.version, 2);
        assert_eq!(doc.cursor, Some(21));
    }

    #[test]
    fn stale_version_changes_nothing() {
        let store = DocumentStore::default();
        store.open(uri(), "abc", 5, "rust".into());
        let err = store
            .change(
                &uri(),
                5,
                vec![edit(0, 0, 0, 0, "x")],
                PositionEncoding::Utf16,
            )
            .unwrap_err();
        assert!(matches!(
            err,
            DocumentError::StaleVersion {
                got: 5,
                have: 5,
                ..
            }
        ));
        assert_eq!(store.get(&uri()).unwrap().rope.to_string(), "abc");
    }

    #[test]
    fn a_bad_range_rejects_the_whole_change() {
        let store = DocumentStore::default();
        store.open(uri(), "abc", 1, "rust".into());
        let err = store
            .change(
                &uri(),
                2,
                vec![edit(0, 0, 0, 0, "x"), edit(9, 0, 9, 0, "y")],
                PositionEncoding::Utf16,
            )
            .unwrap_err();
        assert!(err.to_string().contains("past the end"), "{err}");
        let doc = store.get(&uri()).unwrap();
        assert_eq!((doc.rope.to_string().as_str(), doc.version), ("abc", 1));
    }

    #[test]
    fn unknown_document_is_a_clear_error() {
        let store = DocumentStore::default();
        assert!(
            store
                .get(&uri())
                .unwrap_err()
                .to_string()
                .contains("never opened")
        );
    }
}
