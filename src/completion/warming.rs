//! Filling the engine's cache ahead of requests: the prewarm where the user
//! pauses (deferred while the model loads), and the one-shot warm-ups of the
//! CLI, probes, benchmarks and tests.

use ropey::Rope;
use tokio::time::Instant;

use super::{CompletionService, DeferredPrewarm, NoSuggestion, Trigger, WARM_LIMIT};
use crate::cancel::CancelFlag;
use crate::providers::local::{CompletionJob, Generation, Prewarm};

impl CompletionService {
    /// Fills the engine's cache for a likely next request (after an edit, debounced),
    /// first keeping the document `resident` when asked (see `Prewarm`).
    /// While the model loads, the latest such request waits for [`Self::model_ready`].
    pub fn prewarm(&self, doc: &str, rope: &Rope, cursor: usize, resident: bool) {
        let config = self.config();
        if !config.enabled {
            return;
        }
        match self.engine() {
            Ok((engine, info)) => {
                let placed = self.place(doc, rope, cursor, &info, Trigger::Automatic);
                let neighbours = match resident {
                    true => self.spans_around(doc, rope, cursor, &info),
                    false => Vec::new(),
                };
                engine.prewarm(Prewarm {
                    window: self.fim_text(doc, placed),
                    span: self.span(doc, rope, cursor, &info, Trigger::Automatic),
                    resident,
                    neighbours,
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

    /// Runs the prewarm deferred while the model was loading.
    pub fn model_ready(&self) {
        let deferred = self
            .deferred_prewarm
            .lock()
            .expect("deferred prewarm lock")
            .take();
        if let Some(DeferredPrewarm { doc, rope, cursor }) = deferred {
            self.prewarm(&doc, &rope, cursor, true);
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
