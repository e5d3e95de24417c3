//! When the engine's cache is prewarmed: where the user pauses, after an
//! edit or at a place the front end saw the user arrive. The document is
//! kept resident at once where the user arrived (opened it, moved the
//! cursor), and after an edit only once the user is idle: a prewarm between
//! two keystrokes refills the window at the cursor, which the next keystroke
//! reuses, not the whole document after it. The repository context changes
//! only while the user is idle everywhere. Where the user arrived at a
//! known cursor (a revealed one), the answer there is generated ahead of
//! the request they are about to make, and again if the context changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use ropey::Rope;

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

/// Activity per document, so a debounced prewarm can tell whether it is
/// stale, and in all documents, so an idle refresh of the context can.
#[derive(Default)]
pub(super) struct Prewarming {
    activity: Arc<DashMap<String, u64>>,
    any_activity: Arc<AtomicU64>,
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
        let count = {
            let mut entry = self.activity.entry(doc.to_owned()).or_insert(0);
            *entry += 1;
            *entry
        };
        let any = self.any_activity.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(place) = place else {
            return;
        };
        let debounce = Duration::from_millis(completion.config().prewarm_debounce_ms);
        let (counts, all, service) = (
            self.activity.clone(),
            self.any_activity.clone(),
            completion.clone(),
        );
        let doc = doc.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(debounce).await;
            if counts.get(&doc).is_none_or(|c| *c != count) {
                return;
            }
            let cursor = place.cursor.unwrap_or_else(|| opening_cursor(&place.rope));
            let warmth = match (pause, place.cursor) {
                (Pause::Arrived, Some(_)) => Warmth::Answered,
                (Pause::Arrived, None) => Warmth::Resident,
                (Pause::Edited, _) => Warmth::Window,
            };
            service.prewarm(&doc, &place.rope, cursor, warmth);
            tokio::time::sleep(service.context_refresh_idle()).await;
            if all.load(Ordering::Relaxed) == any {
                let changed = service.refresh_context(&doc, &place.rope, cursor);
                if let Some(warmth) = once_idle(pause, place.cursor.is_some(), changed) {
                    service.prewarm(&doc, &place.rope, cursor, warmth);
                }
            }
        });
    }

    /// `doc` was closed: what waits for it stops, and closing is activity
    /// (a pending refresh of the context must not bring it back).
    pub(super) fn closed(&self, doc: &str) {
        self.activity.remove(doc);
        self.any_activity.fetch_add(1, Ordering::Relaxed);
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
        let rope = Rope::from_str("fn main() {\n    let x = 1;\n}\n");
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
}
