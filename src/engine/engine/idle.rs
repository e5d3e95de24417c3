//! Work for when no job waits, nearest the user first: the span where the
//! user last asked or arrived, then the spans around it (the fill grows
//! outward), each kept among the recent prompts, and finally the user's own
//! span brought back into the cache. Every fill goes in background chunks,
//! so a request waits at most for the chunk in flight; one that finds its
//! place in a neighbouring span restores that span's state instead of
//! decoding it (ARCHITECTURE.md invariant 20).

use std::collections::VecDeque;
use std::time::Duration;

use super::{CHUNK, Engine, Filled};
use crate::SpanText;

#[derive(Default)]
pub(super) struct IdleFill {
    /// The span to fill (or bring back) first.
    span: Option<SpanText>,
    /// The documents of the spans around it, nearest first.
    neighbours: VecDeque<SpanText>,
    /// Where the user is, brought back once the neighbours are filled.
    home: Option<SpanText>,
    /// A neighbour's fill has taken the cache from the user's span.
    away: bool,
    /// Work was given since the fill last ran out of it.
    given: bool,
    /// A request moved the fill: it waits for the user to pause.
    after_pause: bool,
}

/// How long the user is quiet before a fill a request moved goes on. Between
/// keystrokes it would get a chunk or two in and take from the cache the
/// window the next keystroke reuses, so that every keystroke paid a cold cut
/// (BENCHMARKS.md); the language server too keeps a document resident after
/// an edit only after a second of quiet.
const PAUSE_BEFORE_MOVED_FILL: Duration = Duration::from_secs(1);

impl IdleFill {
    /// The user is at `span` (a revealed cursor, an edit once idle): fill it,
    /// then grow outward into `neighbours`.
    pub(super) fn arrive(&mut self, span: SpanText, neighbours: Vec<SpanText>) {
        *self = IdleFill {
            span: None,
            neighbours: neighbours.into(),
            home: Some(span),
            away: false,
            given: true,
            after_pause: false,
        };
    }

    /// The user asked at `span`, outside what the cache holds: the fill
    /// moves there, and the spans around the old place are left.
    pub(super) fn move_to(&mut self, span: SpanText) {
        *self = IdleFill {
            span: Some(span),
            given: true,
            after_pause: true,
            ..IdleFill::default()
        };
    }

    /// A request was answered from its span's window: the user is there, so
    /// a span still waiting to be filled or brought back (another document,
    /// or the one the user has just left) is moot. The spans around the
    /// user's stay: the request leaves them where they were.
    pub(super) fn served_in_span(&mut self) {
        self.span = None;
    }

    /// Whether a request moved the fill and the user has not paused since:
    /// they are typing at a place the cache held no window for.
    pub(super) fn awaits_pause(&self) -> bool {
        self.after_pause && self.span.is_some()
    }

    /// A fill of `span` was stopped by a newer job: it goes on later.
    pub(super) fn resume(&mut self, span: SpanText) {
        self.span = Some(span);
        self.given = true;
    }
}

impl Engine<'_> {
    /// Does one piece of idle work; `false` when there is none.
    pub(super) fn fill_idle(&mut self) -> bool {
        if self.idle.awaits_pause() {
            if !self.jobs.quiet_for(PAUSE_BEFORE_MOVED_FILL) {
                // Typing goes on: the next request decides where the fill goes.
                return false;
            }
            self.idle.after_pause = false;
        }
        if let Some(span) = self.idle.span.take() {
            self.fill_span(span);
            return true;
        }
        let Some(neighbour) = self.idle.neighbours.pop_front() else {
            if std::mem::take(&mut self.idle.given) {
                tracing::debug!("idle fill done");
            }
            return false;
        };
        match self.fill_neighbour(&neighbour) {
            Filled::Preempted => self.idle.neighbours.push_front(neighbour),
            Filled::Done | Filled::Failed => {}
        }
        if self.idle.neighbours.is_empty() && std::mem::take(&mut self.idle.away) {
            self.idle.span = self.idle.home.take();
        }
        true
    }

    /// Decodes a neighbouring span's document, unless a saved state already
    /// holds it, or the store of saved states has no room for it beside the
    /// user's own span (then no further neighbour is filled either).
    fn fill_neighbour(&mut self, neighbour: &SpanText) -> Filled {
        let Some(document) = self.document_prompt(&neighbour.window, &neighbour.document) else {
            return Filled::Done;
        };
        if self.cost(&document) <= CHUNK {
            return Filled::Done;
        }
        if !self.recent.has_room_for(document.tokens.len()) {
            tracing::debug!(
                held = self.recent.len(),
                bytes = self.recent.bytes(),
                "no room for more neighbouring spans"
            );
            self.idle.neighbours.clear();
            return Filled::Done;
        }
        self.idle.away = true;
        self.fill_in_background(&document, "neighbouring span")
    }
}
