//! The resident document: the open document's tokens kept in the KV cache in
//! file order from the window's start, so a completion anywhere in it decodes
//! only what is new at its cursor (ARCHITECTURE.md invariant 20).
//!
//! A prewarm makes the cache hold the document (`prompt::document`). A FIM
//! prompt then *borrows* its start: the document up to the cursor stays in
//! the main sequence, the rest is set aside in the `LENT` sequence (the cells
//! stay where they are, only their owner changes), and the suffix section is
//! decoded after the cursor. At the next job the tail comes back unless the
//! FIM prompt in the cache serves that job with less decoding (the user typing
//! at the same place); nothing is moved, so the document stays exactly what a
//! fresh context would hold.
//!
//! The lending itself is a change to the cache, so it lives with the cache
//! (`cache`); this module names what the cache holds of the document.

/// What of a resident document the cache holds.
#[derive(Default)]
pub(super) enum Residency {
    /// None: the cache holds a prompt of its own.
    #[default]
    None,
    /// The document (`prompt::document`), or the start of it, in `MAIN`.
    Whole,
    /// A FIM prompt borrowing the document's start; its tail waits in `LENT`.
    Lent(Lent),
}

/// A resident document's tail, set aside while a FIM prompt borrows its start.
#[derive(Clone)]
pub(super) struct Lent {
    /// The main sequence still holds the document's tokens before this position.
    pub at: usize,
    /// The document's tokens from `at`, in `LENT` at their own positions.
    pub tail: Vec<i32>,
    /// Where the tail's KV depends on a moved suffix (see `KvCache`).
    pub moved_from: Option<usize>,
}

impl Lent {
    /// The whole document again: `main`'s tokens before the tail, then the
    /// tail.
    pub fn document(&self, main: &[i32]) -> Vec<i32> {
        [&main[..self.at], &self.tail[..]].concat()
    }
}
