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

/// The next piece of idle work, as `IdleFill::next` decides it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// A request moved the fill, and the user has not paused since.
    WaitForPause,
    /// Fill this span (or bring the user's back).
    Span(SpanText),
    /// Fill this neighbouring span's document.
    Neighbour(SpanText),
    /// Nothing left; `first` the first time since work was given.
    Done { first: bool },
}

impl IdleFill {
    /// What to do next, from the fill's state alone; `paused` says whether
    /// the user has been quiet for `PAUSE_BEFORE_MOVED_FILL` (asked only
    /// where a request moved the fill).
    pub(super) fn next(&mut self, paused: impl FnOnce() -> bool) -> Next {
        if self.awaits_pause() {
            if !paused() {
                // Typing goes on: the next request decides where the fill goes.
                return Next::WaitForPause;
            }
            self.after_pause = false;
        }
        if let Some(span) = self.span.take() {
            return Next::Span(span);
        }
        match self.neighbours.pop_front() {
            Some(neighbour) => Next::Neighbour(neighbour),
            None => Next::Done {
                first: std::mem::take(&mut self.given),
            },
        }
    }

    /// A neighbour's fill is taking the cache from the user's span.
    fn left_home(&mut self) {
        self.away = true;
    }

    /// There is no room for more neighbours: none is filled.
    fn no_room(&mut self) {
        self.neighbours.clear();
    }

    /// `neighbour`'s fill ended as `filled`: one stopped by a job is tried
    /// again first; once none is left, the user's span comes back if a
    /// neighbour took the cache.
    fn neighbour_ended(&mut self, neighbour: SpanText, filled: Filled) {
        if filled == Filled::Preempted {
            self.neighbours.push_front(neighbour);
        }
        if self.neighbours.is_empty() && std::mem::take(&mut self.away) {
            self.span = self.home.take();
        }
    }
}

impl Engine<'_> {
    /// Does one piece of idle work; `false` when there is none.
    pub(super) fn fill_idle(&mut self) -> bool {
        let jobs = &mut self.jobs;
        match self.idle.next(|| jobs.quiet_for(PAUSE_BEFORE_MOVED_FILL)) {
            Next::WaitForPause => false,
            Next::Span(span) => {
                self.fill_span(span);
                true
            }
            Next::Neighbour(neighbour) => {
                let filled = self.fill_neighbour(&neighbour);
                self.idle.neighbour_ended(neighbour, filled);
                true
            }
            Next::Done { first } => {
                if first {
                    tracing::debug!("idle fill done");
                }
                false
            }
        }
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
            self.idle.no_room();
            return Filled::Done;
        }
        self.idle.left_home();
        self.fill_in_background(&document, "neighbouring span")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(name: &str) -> SpanText {
        SpanText {
            document: name.to_owned(),
            ..SpanText::default()
        }
    }

    /// Runs the fill as the engine would, each neighbour's fill ending as
    /// `ends` says in turn (a real fill takes the cache from home), and
    /// returns every step until it is done.
    fn steps(fill: &mut IdleFill, paused: bool, ends: &[Filled]) -> Vec<Next> {
        let mut ends = ends.iter().copied();
        let mut seen = Vec::new();
        for _ in 0..12 {
            let next = fill.next(|| paused);
            let stop = matches!(next, Next::Done { .. } | Next::WaitForPause);
            if let Next::Neighbour(neighbour) = &next {
                let filled = ends.next().unwrap_or(Filled::Done);
                fill.left_home();
                fill.neighbour_ended(neighbour.clone(), filled);
            }
            seen.push(next);
            if stop {
                break;
            }
        }
        seen
    }

    #[test]
    fn the_fill_grows_outward_from_where_the_user_arrived_then_brings_it_back() {
        let mut fill = IdleFill::default();
        fill.arrive(span("home"), vec![span("below"), span("above")]);
        assert_eq!(
            steps(&mut fill, true, &[]),
            [
                Next::Neighbour(span("below")),
                Next::Neighbour(span("above")),
                Next::Span(span("home")),
                Next::Done { first: true },
            ]
        );
        assert_eq!(fill.next(|| true), Next::Done { first: false });
    }

    #[test]
    fn a_neighbour_stopped_by_a_job_is_filled_again_first() {
        let mut fill = IdleFill::default();
        fill.arrive(span("home"), vec![span("below"), span("above")]);
        let preempted = [Filled::Preempted, Filled::Done, Filled::Done];
        assert_eq!(
            steps(&mut fill, true, &preempted),
            [
                Next::Neighbour(span("below")),
                Next::Neighbour(span("below")),
                Next::Neighbour(span("above")),
                Next::Span(span("home")),
                Next::Done { first: true },
            ]
        );
    }

    #[test]
    fn a_fill_a_request_moved_waits_for_the_user_to_pause() {
        let mut fill = IdleFill::default();
        fill.arrive(span("home"), vec![span("below")]);
        fill.move_to(span("there"));
        assert_eq!(steps(&mut fill, false, &[]), [Next::WaitForPause]);
        assert_eq!(
            steps(&mut fill, true, &[]),
            [Next::Span(span("there")), Next::Done { first: true }],
            "the spans around the old place are left"
        );
    }

    #[test]
    fn with_no_room_for_a_neighbour_the_fill_ends_and_home_comes_back_if_it_left() {
        // The first neighbour took the cache; the second finds no room.
        let mut fill = IdleFill::default();
        fill.arrive(span("home"), vec![span("below"), span("above")]);
        assert_eq!(fill.next(|| true), Next::Neighbour(span("below")));
        fill.left_home();
        fill.neighbour_ended(span("below"), Filled::Done);
        assert_eq!(fill.next(|| true), Next::Neighbour(span("above")));
        fill.no_room();
        fill.neighbour_ended(span("above"), Filled::Done);
        assert_eq!(fill.next(|| true), Next::Span(span("home")));
        // No room for the first: the cache never left the user's span.
        let mut fill = IdleFill::default();
        fill.arrive(span("home"), vec![span("below"), span("above")]);
        assert_eq!(fill.next(|| true), Next::Neighbour(span("below")));
        fill.no_room();
        fill.neighbour_ended(span("below"), Filled::Done);
        assert_eq!(fill.next(|| true), Next::Done { first: true });
    }
}
