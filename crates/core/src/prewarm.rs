//! When the engine's cache is prewarmed: where the user pauses, after an
//! edit or at a place the front end saw the user arrive. The document is
//! kept resident at once where the user arrived (opened it, moved the
//! cursor), and after an edit only once the user is idle: a prewarm between
//! two keystrokes refills the window at the cursor, which the next keystroke
//! reuses, not the whole document after it. The repository context changes
//! only while the user is idle everywhere. Where the user arrived at a
//! known cursor (a revealed one), the answer there is generated ahead of
//! the request they are about to make, and again if the context changes.
//!
//! One task waits per document, however fast the changes come: each pause
//! moves its deadline and wakes it, so a burst of changes that a busy
//! machine drains late does not leave a sleeping task per change.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use ropey::Rope;
use tokio::sync::Notify;
use tokio::time::Instant;

use switchyard_completion::{CompletionService, Warmth};

/// What the user did before a pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Opened the document or moved the cursor.
    Arrived,
    Edited,
}

/// A document as the front end has it when the user pauses there.
#[derive(Clone, Debug)]
pub struct Place {
    pub rope: Rope,
    /// Where the user probably is (a char index), if the front end knows.
    pub cursor: Option<usize>,
}

/// The documents with a prewarm to come, and activity in all documents, so
/// an idle refresh of the context can tell whether it is stale.
#[derive(Default)]
pub(super) struct Prewarming {
    waiting: Arc<DashMap<String, Waiting>>,
    any_activity: Arc<AtomicU64>,
}

/// What is to come in one document, and how to wake the task that waits
/// for it (its identity too: a reopened document gets a new one).
struct Waiting {
    /// The last pause, to prewarm once its debounce runs out; `None` where
    /// it was not one worth completing in, or it has been prewarmed.
    paused: Option<Paused>,
    /// The last prewarm, for a refresh of the context once the user has
    /// been idle everywhere until `Paused::due`.
    idle: Option<Paused>,
    wake: Arc<Notify>,
}

#[derive(Clone)]
struct Paused {
    place: Place,
    pause: Pause,
    due: Instant,
    /// Activity everywhere, counted at this pause.
    any: u64,
}

/// What the waiting task does next.
enum Next {
    Prewarm(Paused),
    RefreshContext(Paused),
    Sleep(Instant),
    Done,
}

impl Prewarming {
    /// Counts activity in `doc` and, where `place` is one worth completing
    /// in, prewarms it once the user has paused (`prewarm_debounce_ms`), then
    /// refreshes the repository context once they have been idle everywhere.
    pub(super) fn paused(
        &self,
        completion: &Arc<CompletionService>,
        doc: &str,
        place: Option<Place>,
        pause: Pause,
    ) {
        let any = self.any_activity.fetch_add(1, Ordering::Relaxed) + 1;
        let debounce = Duration::from_millis(completion.config().prewarm_debounce_ms);
        let paused = place.map(|place| Paused {
            place,
            pause,
            due: Instant::now() + debounce,
            any,
        });
        let wake = match self.waiting.entry(doc.to_owned()) {
            Entry::Occupied(mut entry) => {
                // Activity here also cancels the refresh after the last prewarm.
                let waiting = entry.get_mut();
                (waiting.paused, waiting.idle) = (paused, None);
                waiting.wake.notify_one();
                return;
            }
            Entry::Vacant(_) if paused.is_none() => return,
            Entry::Vacant(entry) => {
                let wake = Arc::new(Notify::new());
                entry.insert(Waiting {
                    paused,
                    idle: None,
                    wake: wake.clone(),
                });
                wake
            }
        };
        tokio::spawn(wait_in(
            self.waiting.clone(),
            doc.to_owned(),
            wake,
            self.any_activity.clone(),
            completion.clone(),
        ));
    }

    /// `doc` was closed: what waits for it stops, and closing is activity
    /// (a pending refresh of the context must not bring it back).
    pub(super) fn closed(&self, doc: &str) {
        if let Some((_, waiting)) = self.waiting.remove(doc) {
            waiting.wake.notify_one();
        }
        self.any_activity.fetch_add(1, Ordering::Relaxed);
    }
}

/// The task that waits for `doc`'s pauses (woken by `wake`) and prewarms
/// what each leaves, until nothing is to come there.
async fn wait_in(
    documents: Arc<DashMap<String, Waiting>>,
    doc: String,
    wake: Arc<Notify>,
    all: Arc<AtomicU64>,
    service: Arc<CompletionService>,
) {
    loop {
        match next(&documents, &doc, &wake, service.context_refresh_idle()) {
            Next::Prewarm(paused) => {
                let (place, cursor) = (&paused.place, cursor(&paused.place));
                service.prewarm(&doc, &place.rope, cursor, warmth(&paused));
            }
            Next::RefreshContext(paused) if all.load(Ordering::Relaxed) == paused.any => {
                let (place, cursor) = (&paused.place, cursor(&paused.place));
                let changed = service.refresh_context(&doc, &place.rope, cursor);
                if let Some(warmth) = once_idle(paused.pause, place.cursor.is_some(), changed) {
                    service.prewarm(&doc, &place.rope, cursor, warmth);
                }
            }
            Next::RefreshContext(_) => {}
            Next::Sleep(until) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = wake.notified() => {}
                }
            }
            Next::Done => return,
        }
    }
}

/// What the task waiting with `wake` in `doc` does next. Decided under the
/// entry's lock, which the entry leaves with when nothing is to come, so a
/// pause after that finds no task and starts one.
fn next(
    documents: &DashMap<String, Waiting>,
    doc: &str,
    wake: &Arc<Notify>,
    idle_for: Duration,
) -> Next {
    let mut next = Next::Done;
    documents.remove_if_mut(doc, |_, waiting| {
        if !Arc::ptr_eq(&waiting.wake, wake) {
            return false;
        }
        next = waiting.next(Instant::now(), idle_for);
        matches!(next, Next::Done)
    });
    next
}

impl Waiting {
    fn next(&mut self, now: Instant, idle_for: Duration) -> Next {
        if let Some(paused) = self.paused.take_if(|paused| paused.due <= now) {
            let due = now + idle_for;
            self.idle = Some(Paused {
                due,
                ..paused.clone()
            });
            return Next::Prewarm(paused);
        }
        if let Some(idle) = self.idle.take_if(|idle| idle.due <= now) {
            return Next::RefreshContext(idle);
        }
        let soonest = [&self.paused, &self.idle]
            .into_iter()
            .flatten()
            .map(|p| p.due)
            .min();
        soonest.map_or(Next::Done, Next::Sleep)
    }
}

/// Where to prewarm: the cursor, or where the document opens.
fn cursor(place: &Place) -> usize {
    place.cursor.unwrap_or_else(|| opening_cursor(&place.rope))
}

/// How much a pause prewarms: the answer ahead where the user arrived at a
/// known cursor, the document where they arrived, the window after an edit.
fn warmth(paused: &Paused) -> Warmth {
    match (paused.pause, paused.place.cursor) {
        (Pause::Arrived, Some(_)) => Warmth::Answered,
        (Pause::Arrived, None) => Warmth::Resident,
        (Pause::Edited, _) => Warmth::Window,
    }
}

/// What to prewarm once the user has been idle everywhere and the
/// repository context was refreshed (`changed`): the document resident where
/// it is not yet or its context changed; where the user arrived at a known
/// cursor and reads, also the answer there again, for the prompt the new
/// context makes (the one generated on arrival answers the old one).
fn once_idle(pause: Pause, cursor_known: bool, changed: bool) -> Option<Warmth> {
    match (pause, cursor_known, changed) {
        (Pause::Arrived, true, true) => Some(Warmth::Answered),
        (Pause::Edited, _, _) | (_, _, true) => Some(Warmth::Resident),
        (Pause::Arrived, _, false) => None,
    }
}

/// Where to prewarm a just-opened document: the end of its first window, so the
/// cache holds the top of the file, which a later window anchored at line 0 shares.
pub fn opening_cursor(rope: &Rope) -> usize {
    let chars = 1_500.min(rope.len_chars());
    rope.line_to_char(rope.char_to_line(chars))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Mutex;

    use futures::future::BoxFuture;

    use super::*;
    use switchyard_completion::FimEngine;
    use switchyard_config::AutocompleteConfig;
    use switchyard_engine::{CompletionJob, EngineError, Generation, ModelInfo, Prewarm};

    /// Records whether each prewarm kept its document resident, and
    /// whether it generated the answer ahead.
    #[derive(Default)]
    struct Recording {
        prewarms: Mutex<Vec<(bool, bool)>>,
        /// The end of each prewarm's prefix, to tell which place it had.
        prefixes: Mutex<Vec<String>>,
    }

    impl FimEngine for Recording {
        fn complete(
            &self,
            _: CompletionJob,
        ) -> BoxFuture<'static, Result<Generation, EngineError>> {
            Box::pin(futures::future::pending())
        }

        fn prewarm(&self, prewarm: Prewarm) {
            let answered = prewarm.answer.is_some();
            let prefix = prewarm.window.prefix.lines().last().unwrap_or_default();
            self.prefixes.lock().unwrap().push(prefix.trim().to_owned());
            self.prewarms
                .lock()
                .unwrap()
                .push((prewarm.resident, answered));
        }

        fn model(&self) -> Result<ModelInfo, EngineError> {
            Ok(ModelInfo {
                name: "recording".into(),
                path: PathBuf::new(),
                load_ms: 0,
                prompt_tokens_per_s: 1000.0,
                input_budget: 512,
                context_tokens: 2048,
                threads: 1,
            })
        }
    }

    fn service(engine: &Arc<Recording>) -> Arc<CompletionService> {
        let service = CompletionService::new(AutocompleteConfig::default());
        service.set_engine(Some(engine.clone()));
        Arc::new(service)
    }

    fn place() -> Option<Place> {
        place_after(1)
    }

    /// A place whose cursor ends a line `let x = {value};`.
    fn place_after(value: usize) -> Option<Place> {
        let rope = Rope::from(format!("fn main() {{\n    let x = {value};\n}}\n"));
        Some(Place {
            cursor: Some(rope.len_chars() - 2),
            rope,
        })
    }

    /// Long enough for a debounce and an idle refresh of the context.
    async fn settle() {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }

    #[test]
    fn once_idle_the_answer_ahead_follows_a_changed_context() {
        use Pause::*;
        // (pause, cursor known, context changed, what is prewarmed)
        let cases = [
            (Arrived, true, false, None),
            (Arrived, true, true, Some(Warmth::Answered)),
            (Arrived, false, true, Some(Warmth::Resident)),
            (Arrived, false, false, None),
            (Edited, true, false, Some(Warmth::Resident)),
            (Edited, true, true, Some(Warmth::Resident)),
        ];
        for (pause, cursor_known, changed, expected) in cases {
            assert_eq!(
                once_idle(pause, cursor_known, changed),
                expected,
                "{pause:?}, cursor known {cursor_known}, context changed {changed}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_last_of_quick_pauses_prewarms_and_the_document_fills_once_idle() {
        let engine = Arc::new(Recording::default());
        let (completion, prewarming) = (service(&engine), Prewarming::default());
        prewarming.paused(&completion, "file:///a.rs", place(), Pause::Arrived);
        tokio::time::sleep(Duration::from_millis(50)).await;
        prewarming.paused(&completion, "file:///a.rs", place(), Pause::Edited);
        settle().await;
        // The edit's window at once, then the whole document once idle;
        // no answer ahead after an edit (the edit's request asked there).
        assert_eq!(
            *engine.prewarms.lock().unwrap(),
            [(false, false), (true, false)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn arriving_at_a_known_cursor_generates_the_answer_there() {
        let engine = Arc::new(Recording::default());
        let (completion, prewarming) = (service(&engine), Prewarming::default());
        prewarming.paused(&completion, "file:///a.rs", place(), Pause::Arrived);
        settle().await;
        // On arrival, and again once the place joined the repository
        // context (the prompt changed).
        assert_eq!(
            *engine.prewarms.lock().unwrap(),
            [(true, true), (true, true)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn closing_a_document_or_a_pause_where_it_is_unsuitable_stops_its_prewarm() {
        let engine = Arc::new(Recording::default());
        let (completion, prewarming) = (service(&engine), Prewarming::default());
        prewarming.paused(&completion, "file:///a.rs", place(), Pause::Arrived);
        prewarming.closed("file:///a.rs");
        prewarming.paused(&completion, "file:///b.bin", place(), Pause::Arrived);
        prewarming.paused(&completion, "file:///b.bin", None, Pause::Edited);
        settle().await;
        assert!(engine.prewarms.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn activity_elsewhere_keeps_the_context_as_it_is() {
        let engine = Arc::new(Recording::default());
        let (completion, prewarming) = (service(&engine), Prewarming::default());
        prewarming.paused(&completion, "file:///a.rs", place(), Pause::Arrived);
        tokio::time::sleep(Duration::from_millis(300)).await;
        prewarming.paused(&completion, "file:///b.rs", None, Pause::Edited);
        settle().await;
        // a.rs prewarmed once, resident, its answer ahead (the cursor is
        // known); no refresh after b.rs was active.
        assert_eq!(*engine.prewarms.lock().unwrap(), [(true, true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_keeps_one_task_and_prewarms_its_last_place_once() {
        let engine = Arc::new(Recording::default());
        let (completion, prewarming) = (service(&engine), Prewarming::default());
        let debounce = Duration::from_millis(completion.config().prewarm_debounce_ms);
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        // A thousand changes a second for a second, as a backlog drains.
        for value in 1..=1_000 {
            prewarming.paused(
                &completion,
                "file:///a.rs",
                place_after(value),
                Pause::Edited,
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(
                tasks() <= before + 1,
                "{} tasks after change {value}",
                tasks() - before
            );
        }
        tokio::time::sleep(debounce - Duration::from_millis(2)).await;
        assert!(
            engine.prewarms.lock().unwrap().is_empty(),
            "prewarmed before the debounce"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(*engine.prefixes.lock().unwrap(), ["let x = 1000;"]);
        settle().await;
        // The window once, then the whole document once idle; then nothing waits.
        assert_eq!(
            *engine.prewarms.lock().unwrap(),
            [(false, false), (true, false)]
        );
        assert_eq!(tasks(), before);
    }
}
