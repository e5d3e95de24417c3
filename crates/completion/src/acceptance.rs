//! What became of a shown suggestion: accepted, partly accepted or ignored.
//! The client says so where it can (the inline item's command, run when the
//! user accepts it); otherwise the next edits at the cursor tell. The whole
//! suggestion inserted there is accepted (a classic item's edit, which also
//! rewrites the word typed before it, counts); a prefix of it that ends a
//! word (an editor's accept-word, or typing through it) and then anything
//! else is a partial accept; other text, a deletion at the cursor, a request
//! elsewhere in the document, a new suggestion or closing the document
//! ignores it. Only positions and lengths are kept, never the document.

use std::collections::HashMap;

/// A suggestion on screen, waiting to be settled.
#[derive(Clone, Debug)]
pub struct Shown {
    pub id: u64,
    /// Char offset where it was shown.
    pub at: usize,
    pub text: String,
    /// The line up to `at`, for an edit that rewrites the word before it.
    pub before: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Accepted { chars: usize },
    Partial { chars: usize },
    Ignored,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted { .. } => "accepted",
            Outcome::Partial { .. } => "partial",
            Outcome::Ignored => "ignored",
        }
    }

    /// Characters of the suggestion that went into the document.
    pub fn chars(self) -> usize {
        match self {
            Outcome::Accepted { chars } | Outcome::Partial { chars } => chars,
            Outcome::Ignored => 0,
        }
    }
}

/// One document edit: the char range it replaced (as the document was
/// before it) and the text put there.
#[derive(Clone, Debug)]
pub struct Edit<'a> {
    pub start: usize,
    pub end: usize,
    pub text: &'a str,
}

struct Pending {
    shown: Shown,
    /// Chars of the suggestion already in the document after `at`.
    matched: usize,
}

impl Pending {
    fn cursor(&self) -> usize {
        self.shown.at + self.matched
    }

    fn rest(&self) -> &str {
        let skip: usize = self
            .shown
            .text
            .chars()
            .take(self.matched)
            .map(char::len_utf8)
            .sum();
        &self.shown.text[skip..]
    }

    /// What the user kept, when the suggestion is settled now.
    fn settle(&self) -> Outcome {
        let chars: Vec<char> = self.shown.text.chars().collect();
        let word = |c: &char| c.is_alphanumeric() || *c == '_';
        let ends_a_word = self.matched > 0
            && (self.matched == chars.len()
                || !word(&chars[self.matched - 1])
                || !word(&chars[self.matched]));
        if self.matched >= chars.len() {
            Outcome::Accepted { chars: chars.len() }
        } else if ends_a_word {
            Outcome::Partial {
                chars: self.matched,
            }
        } else {
            Outcome::Ignored
        }
    }
}

/// The suggestions on screen, one per document, by id.
#[derive(Default)]
pub struct Watch {
    pending: HashMap<String, Pending>,
}

/// A settled suggestion: its id and what became of it.
pub type Settled = (u64, Outcome);

impl Watch {
    /// A new suggestion in `doc`; the one before it there is settled.
    pub fn shown(&mut self, doc: &str, shown: Shown) -> Option<Settled> {
        let before = self.left(doc);
        let pending = Pending { shown, matched: 0 };
        self.pending.insert(doc.to_owned(), pending);
        before
    }

    /// A request at `at` in `doc`: elsewhere than the cursor of the
    /// suggestion there, it settles it (the user moved on).
    pub fn requested(&mut self, doc: &str, at: usize) -> Option<Settled> {
        let moved = self.pending.get(doc).is_some_and(|p| p.cursor() != at);
        moved.then(|| self.left(doc)).flatten()
    }

    /// The client says the user accepted suggestion `id`.
    pub fn accepted(&mut self, id: u64) -> Option<Settled> {
        let doc = self
            .pending
            .iter()
            .find(|(_, p)| p.shown.id == id)
            .map(|(doc, _)| doc.clone())?;
        let pending = self.pending.remove(&doc)?;
        let chars = pending.shown.text.chars().count();
        Some((id, Outcome::Accepted { chars }))
    }

    /// The document closed, or its suggestion was replaced.
    pub fn left(&mut self, doc: &str) -> Option<Settled> {
        let pending = self.pending.remove(doc)?;
        Some((pending.shown.id, pending.settle()))
    }

    /// An edit of `doc`: it types through the suggestion, finishes it,
    /// leaves it (and is settled), or happens elsewhere (the suggestion's
    /// place moves with it).
    pub fn edited(&mut self, doc: &str, edit: &Edit<'_>) -> Option<Settled> {
        let pending = self.pending.get_mut(doc)?;
        let cursor = pending.cursor();
        let inserted = match () {
            _ if edit.start == cursor && edit.end == cursor => edit.text,
            // A classic item's edit: the word before the cursor, written again
            // with the suggestion after it.
            _ if edit.end == cursor && edit.start < cursor => {
                let replaced = edit.end - edit.start;
                let before = &pending.shown.before;
                let typed = pending.shown.text.chars().take(pending.matched);
                let written: Vec<char> = before.chars().chain(typed).collect();
                let tail: String = written[written.len().saturating_sub(replaced)..]
                    .iter()
                    .collect();
                match edit.text.strip_prefix(tail.as_str()) {
                    Some(rest) if tail.chars().count() == replaced => rest,
                    _ => return self.left(doc),
                }
            }
            _ if edit.end < pending.shown.at => {
                let (removed, added) = (edit.end - edit.start, edit.text.chars().count());
                pending.shown.at = pending.shown.at - removed + added;
                return None;
            }
            _ if edit.start > cursor => return None,
            _ => return self.left(doc),
        };
        let rest = pending.rest();
        let common = rest
            .chars()
            .zip(inserted.chars())
            .take_while(|(a, b)| a == b)
            .count();
        let finished = common == rest.chars().count();
        pending.matched += common;
        if finished || common < inserted.chars().count() {
            // Whole, or the user wrote something else from here on.
            return self.left(doc);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(id: u64, text: &str) -> Shown {
        Shown {
            id,
            at: 10,
            text: text.into(),
            before: "    let ".into(),
        }
    }

    fn insert(at: usize, text: &str) -> Edit<'_> {
        Edit {
            start: at,
            end: at,
            text,
        }
    }

    #[test]
    fn the_whole_suggestion_inserted_at_once_is_accepted() {
        let mut watch = Watch::default();
        watch.shown("a.rs", shown(1, "total = 0;"));
        let settled = watch.edited("a.rs", &insert(10, "total = 0;"));
        assert_eq!(settled, Some((1, Outcome::Accepted { chars: 10 })));
        assert_eq!(watch.left("a.rs"), None, "settled once");
    }

    #[test]
    fn a_word_accepted_then_other_text_is_a_partial_accept() {
        let mut watch = Watch::default();
        watch.shown("a.rs", shown(2, "total = 0;"));
        assert_eq!(watch.edited("a.rs", &insert(10, "total")), None);
        assert_eq!(
            watch.edited("a.rs", &insert(15, " ")),
            None,
            "typing through"
        );
        let settled = watch.edited("a.rs", &insert(16, "+= 1;"));
        assert_eq!(settled, Some((2, Outcome::Partial { chars: 6 })));
    }

    #[test]
    fn typing_something_else_or_moving_away_ignores_it() {
        let mut watch = Watch::default();
        watch.shown("a.rs", shown(3, "total = 0;"));
        // "t" matches, but it is no whole word: still ignored.
        assert_eq!(watch.edited("a.rs", &insert(10, "t")), None);
        let settled = watch.edited("a.rs", &insert(11, "mp"));
        assert_eq!(settled, Some((3, Outcome::Ignored)));
        watch.shown("a.rs", shown(4, "total = 0;"));
        assert_eq!(watch.requested("a.rs", 10), None, "the same place");
        assert_eq!(watch.requested("a.rs", 42), Some((4, Outcome::Ignored)));
    }

    #[test]
    fn a_classic_item_rewriting_the_typed_word_counts_as_accepted() {
        let mut watch = Watch::default();
        watch.shown(
            "a.rs",
            Shown {
                before: "    let to".into(),
                ..shown(5, "tal = 0;")
            },
        );
        let edit = Edit {
            start: 8,
            end: 10,
            text: "total = 0;",
        };
        assert_eq!(
            watch.edited("a.rs", &edit),
            Some((5, Outcome::Accepted { chars: 8 }))
        );
    }

    #[test]
    fn edits_above_move_the_suggestion_and_the_client_can_settle_it() {
        let mut watch = Watch::default();
        watch.shown("a.rs", shown(6, "total = 0;"));
        assert_eq!(watch.edited("a.rs", &insert(0, "// note\n")), None);
        assert_eq!(watch.requested("a.rs", 18), None, "moved with the edit");
        assert_eq!(
            watch.accepted(6),
            Some((6, Outcome::Accepted { chars: 10 }))
        );
        assert_eq!(watch.accepted(6), None);
    }
}
