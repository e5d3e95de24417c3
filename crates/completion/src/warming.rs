//! Filling the engine's cache ahead of requests: the prewarm where the user
//! pauses (deferred while the model loads), and the one-shot warm-ups of the
//! CLI, probes, benchmarks and tests.

use ropey::Rope;
use tokio::time::Instant;

use super::{CompletionService, DeferredPrewarm, NoSuggestion, Trigger, WARM_LIMIT, situation_at};
use switchyard_base::cancel::CancelFlag;
use switchyard_base::entry::ChainEntry;
use switchyard_engine::{AnswerAhead, CompletionJob, Generation, Prewarm};

/// How much a prewarm prepares where the user pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmth {
    /// The window at the cursor (between keystrokes).
    Window,
    /// The document resident, then the spans around it (the user is idle).
    Resident,
    /// Resident, and the answer at the cursor generated ahead: the user
    /// arrived there (a revealed cursor) and reads before typing.
    Answered,
}

/// Lines a multi-line answer is generated ahead to: a request whose stop
/// rule wants more gets these, as if cut by a token limit (a live answer in
/// a 1 s budget has fewer). Each line costs decode steps in the background.
const LINES_AHEAD: usize = 8;

impl CompletionService {
    /// Fills the engine's cache for a likely next request at `cursor` (see
    /// [`Warmth`]). While the model loads, the latest such request waits
    /// for [`Self::model_ready`].
    pub fn prewarm(&self, doc: &str, rope: &Rope, cursor: usize, warmth: Warmth) {
        let config = self.config();
        if !config.enabled {
            return;
        }
        match self.engine() {
            Ok((engine, info)) => {
                let placed = self.place(doc, rope, cursor, &info, Trigger::Automatic);
                let resident = warmth != Warmth::Window;
                let neighbours = match resident {
                    true => self.spans_around(doc, rope, cursor, &info),
                    false => Vec::new(),
                };
                engine.prewarm(Prewarm {
                    window: self.fim_text(doc, placed),
                    span: self.span(doc, rope, cursor, &info, Trigger::Automatic),
                    resident,
                    neighbours,
                    answer: match warmth {
                        Warmth::Answered => self.answer_ahead(rope, cursor),
                        _ => None,
                    },
                });
            }
            Err(_) => {
                tracing::debug!("prewarm deferred until the model is ready");
                *self.deferred_prewarm.lock().expect("deferred prewarm lock") =
                    Some(DeferredPrewarm {
                        doc: doc.to_owned(),
                        rope: rope.clone(),
                        cursor,
                    });
            }
        }
    }

    /// How far to generate the answer at `cursor` ahead of its request, where
    /// the local model would be asked there: a line where the request would
    /// want one, else the first lines.
    fn answer_ahead(&self, rope: &Rope, cursor: usize) -> Option<AnswerAhead> {
        let config = self.config();
        let (_, _, situation) = situation_at(rope, cursor);
        let local_first = config.chain.first().is_none_or(ChainEntry::is_local);
        if !local_first || situation.skip_reason().is_some() {
            return None;
        }
        Some(AnswerAhead {
            max_tokens: config.output_tokens,
            lines: match situation.single_line {
                true => 1,
                false => LINES_AHEAD,
            },
        })
    }

    /// Runs the prewarm deferred while the model was loading.
    pub fn model_ready(&self) {
        let deferred = self
            .deferred_prewarm
            .lock()
            .expect("deferred prewarm lock")
            .take();
        if let Some(DeferredPrewarm { doc, rope, cursor }) = deferred {
            self.prewarm(&doc, &rope, cursor, Warmth::Resident);
        }
        self.publish_status();
    }

    /// Fills the engine's cache for this position and waits until it is done: what an
    /// editor's prewarm after opening a file achieves, for one-shot callers.
    /// The span's window is filled where there is one, so the request that
    /// follows starts where the span does.
    pub async fn warm(
        &self,
        doc: &str,
        rope: &Rope,
        cursor: usize,
    ) -> Result<Generation, NoSuggestion> {
        let (engine, info) = self.engine()?;
        let text = match self.span(doc, rope, cursor, &info, Trigger::Automatic) {
            Some(span) => span.window,
            None => {
                let placed = self.place(doc, rope, cursor, &info, Trigger::Automatic);
                self.fim_text(doc, placed)
            }
        };
        let job = CompletionJob {
            text,
            span: None,
            max_tokens: 0,
            stop: Box::new(|_| true),
            deadline: (Instant::now() + WARM_LIMIT).into_std(),
            cancel: CancelFlag::default(),
        };
        engine
            .complete(job)
            .await
            .map_err(|e| NoSuggestion::EngineFailed(e.to_string()))
    }
}
