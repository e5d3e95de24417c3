//! Repository context: snippets of the places the user has been (in other
//! documents or far away in this one) and the definitions, found in other open
//! documents, of identifiers around the cursor. They form one block in front of
//! the FIM prompt.
//!
//! A window is never given a snippet of lines it shows itself
//! ([`RepositoryContext::block_beside`]): the snippet is the place as it was
//! at the pause (the empty line the user is about to fill), the window shows
//! it as it is, and the model copies the snippet (it ended the line at once
//! at revealed cursors, where the pause had just added the place). The place
//! paused at is the newest snippet, so the block beside it is a start of the
//! block elsewhere, and the cache keeps it when the user moves on.
//!
//! The block changes only while the user is idle (ARCHITECTURE.md
//! invariant 16), the way llama.vim's ring
//! buffer does): a pause at a place adds that place and its definitions, for
//! later, and the engine refills the block and the window in the background
//! (the completion service decides how long a pause must be).
//! Moving to a new place and typing there never changes the block, so every
//! keystroke's prompt starts with the tokens already in the cache. Snippets are
//! appended, oldest first, because growing the block keeps its cached start;
//! when it would outgrow its budget, its oldest half goes at once, so the
//! costly re-decode of the whole block is rare.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use ropey::Rope;

use super::fim::indentation;
use switchyard_engine::Snippet;

/// A place within this many lines of a snippet's start is that snippet's
/// place: it is not added again.
const SAME_PLACE_LINES: usize = 40;
/// Lines of a place kept above and below the cursor.
const PLACE_ABOVE: usize = 2;
const PLACE_BELOW: usize = 22;
/// Lines around the cursor whose identifiers are looked up.
const LOOKUP_ABOVE: usize = 10;
const LOOKUP_BELOW: usize = 5;
/// Most definitions added at one refresh, and most lines of each.
const MAX_DEFINITIONS: usize = 3;
const DEFINITION_LINES: usize = 12;
/// Doc comments, attributes and decorators above a definition kept with it.
const LEADING_LINES: usize = 4;

/// The documents open in the editor now: (URI, text).
pub type OpenDocuments = Vec<(String, Rope)>;

#[derive(Default)]
pub struct RepositoryContext {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Oldest first, the order the block is built in.
    entries: Vec<Entry>,
    /// The block as prompts see it; rebuilt when `entries` change.
    block: Arc<[Snippet]>,
    /// The block last given beside a window, less the entries at these
    /// indices; kept so every keystroke there gets the same block (the
    /// engine knows a block it tokenized by its pointer).
    beside: Option<(Vec<usize>, Arc<[Snippet]>)>,
}

struct Entry {
    doc: String,
    /// The document lines the snippet holds, to recognise its place.
    lines: Range<usize>,
    snippet: Snippet,
}

impl RepositoryContext {
    /// The whole block now, oldest snippet first.
    #[cfg(test)]
    fn block(&self) -> Arc<[Snippet]> {
        self.state.lock().expect("repository lock").block.clone()
    }

    /// The block for a window showing `lines` of `doc`: without the
    /// snippets of those lines, which the window shows as they are now.
    pub fn block_beside(&self, doc: &str, lines: Range<usize>) -> Arc<[Snippet]> {
        let mut state = self.state.lock().expect("repository lock");
        let shown: Vec<usize> = state
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.doc == doc && e.lines.start < lines.end && lines.start < e.lines.end)
            .map(|(index, _)| index)
            .collect();
        if shown.is_empty() {
            return state.block.clone();
        }
        if let Some((left_out, block)) = &state.beside
            && *left_out == shown
        {
            return block.clone();
        }
        let block: Arc<[Snippet]> = (state.entries.iter().enumerate())
            .filter(|(index, _)| !shown.contains(index))
            .map(|(_, e)| e.snippet.clone())
            .collect();
        state.beside = Some((shown, block.clone()));
        block
    }

    /// The user has paused at `line` of `doc`: the place (unless the block
    /// has it already) and the definitions of identifiers around it found in
    /// the other `open` documents join the block, at most half of
    /// `budget_chars` at once; the block stays within `budget_chars`. `true`
    /// when the block changed.
    pub fn refresh(
        &self,
        doc: &str,
        rope: &Rope,
        line: usize,
        open: &OpenDocuments,
        budget_chars: usize,
    ) -> bool {
        if budget_chars == 0 {
            return false;
        }
        let most = budget_chars / 4;
        let line = line.min(rope.len_lines().saturating_sub(1));
        let mut state = self.state.lock().expect("repository lock");
        let mut arriving: Vec<Entry> = Vec::new();
        let start = line.saturating_sub(PLACE_ABOVE);
        let known = state
            .entries
            .iter()
            .any(|e| e.doc == doc && e.lines.start.abs_diff(start) <= SAME_PLACE_LINES);
        if !known {
            let end = (line + PLACE_BELOW).min(rope.len_lines());
            arriving.extend(entry(doc, rope, start..end, most));
        }
        let wanted = identifiers_near(rope, line);
        let mut found: Vec<(usize, Entry)> = open
            .iter()
            .filter(|(uri, _)| uri != doc)
            .flat_map(|(uri, rope)| {
                definitions(rope, &wanted)
                    .filter_map(|(rank, lines)| entry(uri, rope, lines, most).map(|e| (rank, e)))
            })
            .collect();
        found.sort_by_key(|(rank, _)| *rank);
        arriving.extend(found.into_iter().take(MAX_DEFINITIONS).map(|(_, e)| e));
        state.add(arriving, budget_chars)
    }

    /// Drops a closed document's snippets.
    pub fn forget(&self, doc: &str) {
        let mut state = self.state.lock().expect("repository lock");
        let before = state.entries.len();
        state.entries.retain(|e| e.doc != doc);
        if state.entries.len() != before {
            state.publish();
        }
    }
}

impl State {
    fn chars(&self) -> usize {
        self.entries.iter().map(|e| e.snippet.text.len()).sum()
    }

    /// Appends what the block does not hold yet, up to half the budget at
    /// once. When the budget is exceeded, the oldest entries go down to half
    /// the budget at once: rebuilding the whole block is costly, so rare.
    fn add(&mut self, arriving: Vec<Entry>, budget_chars: usize) -> bool {
        let mut changed = false;
        let mut added = 0;
        for new in arriving {
            // A definition the user already paused at is in the block.
            let covered = |e: &Entry| {
                e.doc == new.doc && e.lines.start <= new.lines.start && new.lines.end <= e.lines.end
            };
            if self.entries.iter().any(covered) {
                continue;
            }
            let size = new.snippet.text.len();
            if added + size > budget_chars / 2 {
                continue;
            }
            let mut total = self.chars() + size;
            if total > budget_chars {
                let mut drop = 0;
                while drop < self.entries.len() && total > budget_chars / 2 {
                    total -= self.entries[drop].snippet.text.len();
                    drop += 1;
                }
                self.entries.drain(..drop);
            }
            added += size;
            self.entries.push(new);
            changed = true;
        }
        if changed {
            self.publish();
        }
        changed
    }

    fn publish(&mut self) {
        self.block = self.entries.iter().map(|e| e.snippet.clone()).collect();
        self.beside = None;
    }
}

/// A snippet of `lines` of a document, cut to `most_chars` at a line end;
/// `None` when it holds no text.
fn entry(doc: &str, rope: &Rope, lines: Range<usize>, most_chars: usize) -> Option<Entry> {
    let mut text = String::new();
    let mut end = lines.start;
    for line in lines.clone() {
        let line_text = rope.line(line).to_string();
        if text.len() + line_text.len() > most_chars {
            break;
        }
        text.push_str(&line_text);
        end = line + 1;
    }
    (!text.trim().is_empty()).then(|| Entry {
        doc: doc.to_owned(),
        lines: lines.start..end,
        snippet: Snippet {
            path: display_path(doc),
            text,
        },
    })
}

/// The last two components of a document's path: enough for the model to tell
/// files apart, without the user's directory layout.
pub fn display_path(uri: &str) -> String {
    let path = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    parts[parts.len().saturating_sub(2)..].join("/")
}

/// Identifiers on the lines around `line`, nearest lines first, each once.
fn identifiers_near(rope: &Rope, line: usize) -> Vec<String> {
    let last = rope.len_lines().saturating_sub(1);
    let mut order: Vec<usize> = vec![line];
    for d in 1..=LOOKUP_ABOVE.max(LOOKUP_BELOW) {
        if d <= LOOKUP_ABOVE && line >= d {
            order.push(line - d);
        }
        if d <= LOOKUP_BELOW && line + d <= last {
            order.push(line + d);
        }
    }
    let mut seen = HashSet::new();
    let mut names = Vec::new();
    for l in order {
        for name in identifiers(&rope.line(l).to_string()) {
            if name.len() >= 3 && seen.insert(name.to_owned()) {
                names.push(name.to_owned());
            }
        }
    }
    names
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
}

/// Words that introduce a definition of the name after them, across the
/// languages editors commonly hold (Rust, Python, JS/TS, Go, C-like).
const DEFINERS: [&str; 15] = [
    "fn",
    "struct",
    "enum",
    "trait",
    "type",
    "union",
    "mod",
    "const",
    "static",
    "macro_rules!",
    "def",
    "class",
    "function",
    "interface",
    "func",
];
/// Words that may stand before a definer.
const MODIFIERS: [&str; 8] = [
    "pub", "export", "async", "unsafe", "extern", "default", "abstract", "final",
];

/// The definitions in `rope` of names in `wanted`: (the name's place in
/// `wanted`, the definition's lines).
fn definitions<'a>(
    rope: &'a Rope,
    wanted: &'a [String],
) -> impl Iterator<Item = (usize, Range<usize>)> + 'a {
    (0..rope.len_lines()).filter_map(move |l| {
        // Most lines are not definitions; look at their first words only.
        let head: String = rope.line(l).chars().take(120).collect();
        let name = defined_name(&head)?;
        let rank = wanted.iter().position(|w| w == name)?;
        Some((rank, definition_lines(rope, l)))
    })
}

/// The name a line defines, if it starts with a definition.
fn defined_name(line: &str) -> Option<&str> {
    let is_modifier = |w: &&str| MODIFIERS.contains(w) || w.starts_with("pub(") || *w == "mut";
    let mut words = line.split_whitespace().skip_while(is_modifier);
    let mut definer = words.next()?;
    let mut rest = words.next()?;
    // `const fn`, `static mut`: the last definer word counts.
    while DEFINERS.contains(&rest) || rest == "mut" {
        (definer, rest) = (rest, words.next()?);
    }
    if !DEFINERS.contains(&definer) {
        return None;
    }
    identifiers(rest)
        .next()
        .filter(|name| rest.starts_with(name))
}

/// The lines of the definition starting at `line`: its doc comments and
/// attributes above, then the item until its indentation closes, at most
/// [`DEFINITION_LINES`].
fn definition_lines(rope: &Rope, line: usize) -> Range<usize> {
    let indent = |l: usize| indentation(rope.line(l));
    let mut start = line;
    while start > 0 && line - start < LEADING_LINES {
        let above = rope.line(start - 1).to_string();
        let above = above.trim_start();
        if ["///", "//", "#", "@", "/**", "*"]
            .iter()
            .any(|p| above.starts_with(p))
        {
            start -= 1;
        } else {
            break;
        }
    }
    let own = indent(line).unwrap_or(0);
    let last = rope.len_lines().min(line + DEFINITION_LINES);
    let mut end = line + 1;
    while end < last {
        match indent(end) {
            None => end += 1,
            Some(width) if width > own => end += 1,
            Some(_) => {
                let text = rope.line(end).to_string();
                if text.trim_start().starts_with([')', '}', ']']) {
                    end += 1;
                }
                break;
            }
        }
    }
    while end > line + 1 && indent(end - 1).is_none() {
        end -= 1;
    }
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: &str = "use std::fmt;\n\n/// Bytes in a page.\npub const PAGE_SIZE: usize = 4096;\n\n/// A cache of pages.\npub struct PageCache {\n    pages: Vec<u8>,\n}\n\nfn unrelated() {}\n";

    fn open(docs: &[(&str, &str)]) -> OpenDocuments {
        docs.iter()
            .map(|(uri, text)| (uri.to_string(), Rope::from_str(text)))
            .collect()
    }

    #[test]
    fn a_pause_adds_the_place_and_definitions_from_other_documents() {
        let context = RepositoryContext::default();
        let main =
            Rope::from_str("fn main() {\n    let cache = PageCache::new(PAGE_SIZE);\n    \n}\n");
        let docs = open(&[
            ("file:///p/src/cache.rs", LIB),
            ("file:///p/src/main.rs", ""),
        ]);
        assert!(context.refresh("file:///p/src/main.rs", &main, 2, &docs, 3_000));
        let block = context.block();
        let texts: Vec<&str> = block.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                main.to_string().as_str(),
                "/// A cache of pages.\npub struct PageCache {\n    pages: Vec<u8>,\n}\n",
                "/// Bytes in a page.\npub const PAGE_SIZE: usize = 4096;\n",
            ]
        );
        assert_eq!(block[1].path, "src/cache.rs");
    }

    #[test]
    fn the_block_grows_by_appending_and_only_at_new_places() {
        let context = RepositoryContext::default();
        let docs = OpenDocuments::new();
        let a = Rope::from_str(LIB);
        let b = Rope::from_str(&"let x = 1;\n".repeat(200));
        assert!(context.refresh("file:///p/a.rs", &a, 6, &docs, 3_000));
        let block = context.block();
        assert!(block[0].text.contains("pub struct PageCache"));
        // Pausing again at the same place, edited or not: the very same block.
        assert!(!context.refresh("file:///p/a.rs", &Rope::from_str("x\n"), 8, &docs, 3_000));
        assert!(Arc::ptr_eq(&block, &context.block()));
        assert!(context.refresh("file:///p/b.rs", &b, 100, &docs, 3_000));
        assert!(context.block().starts_with(&block), "appended, not rebuilt");
        assert!(context.refresh("file:///p/b.rs", &b, 180, &docs, 3_000));
        assert_eq!(context.block().len(), 3);
    }

    #[test]
    fn an_overfull_block_drops_its_oldest_half() {
        let context = RepositoryContext::default();
        let text: String = (0..2_000).map(|i| format!("let v{i} = {i};\n")).collect();
        let rope = Rope::from_str(&text);
        let docs = OpenDocuments::new();
        for place in 0..12 {
            context.refresh("file:///p/a.rs", &rope, place * 100, &docs, 1_600);
        }
        let block = context.block();
        let chars: usize = block.iter().map(|s| s.text.len()).sum();
        assert!(chars <= 1_600, "{chars}");
        assert!(
            block.last().unwrap().text.contains("v1100 "),
            "the newest place is kept"
        );
    }

    #[test]
    fn a_window_is_not_given_a_snippet_of_the_lines_it_shows() {
        let context = RepositoryContext::default();
        let text: String = (0..300).map(|i| format!("let v{i} = {i};\n")).collect();
        let (a, docs) = (Rope::from_str(&text), OpenDocuments::new());
        // The user paused at line 10, then at 200 (the hole: an empty line).
        context.refresh("file:///p/a.rs", &a, 10, &docs, 3_000);
        context.refresh("file:///p/a.rs", &a, 200, &docs, 3_000);
        assert_eq!(context.block().len(), 2);
        let beside = context.block_beside("file:///p/a.rs", 150..230);
        assert_eq!(beside.len(), 1);
        assert!(
            beside[0].text.starts_with("let v8 = 8;"),
            "{}",
            beside[0].text
        );
        // Every keystroke there: the same block, and a start of the whole one.
        assert!(Arc::ptr_eq(
            &beside,
            &context.block_beside("file:///p/a.rs", 151..231)
        ));
        assert!(context.block().starts_with(&beside));
        // Another document, or lines of this one the snippets do not show.
        assert!(Arc::ptr_eq(
            &context.block(),
            &context.block_beside("file:///p/b.rs", 150..230)
        ));
        assert!(Arc::ptr_eq(
            &context.block(),
            &context.block_beside("file:///p/a.rs", 100..150)
        ));
    }

    #[test]
    fn a_closed_document_leaves_the_block() {
        let context = RepositoryContext::default();
        let docs = OpenDocuments::new();
        context.refresh("file:///p/a.rs", &Rope::from_str(LIB), 6, &docs, 3_000);
        context.refresh(
            "file:///p/b.rs",
            &Rope::from_str("let b = 2;\n"),
            0,
            &docs,
            3_000,
        );
        assert_eq!(context.block().len(), 2);
        context.forget("file:///p/a.rs");
        assert_eq!(context.block().len(), 1);
        assert!(
            !context.refresh("file:///p/a.rs", &Rope::new(), 0, &docs, 3_000),
            "nothing to add"
        );
    }

    #[test]
    fn definers_and_their_names() {
        assert_eq!(
            defined_name("pub(crate) fn parse(input: &str)"),
            Some("parse")
        );
        assert_eq!(defined_name("    async def fetch(self):"), Some("fetch"));
        assert_eq!(defined_name("export function render() {"), Some("render"));
        assert_eq!(defined_name("let parse = 1;"), None);
        assert_eq!(defined_name("fn"), None);
        assert_eq!(display_path("file:///home/u/p/src/lib.rs"), "src/lib.rs");
    }
}
