//! Following each suggestion an editor shows until it is settled, and
//! writing what happened to the stats file: the front end tells it what was
//! answered, what the user edited, and what the client reported accepted.

use std::sync::{Mutex, RwLock};

use super::acceptance::{Edit, Settled, Shown, Watch};
use super::stats::{Asked, StatsLog, StatsRecord};
use super::{NoSuggestion, Origin, Outcome};
use switchyard_base::clock::now_ms;

/// What the front end knows of a request besides its outcome.
pub struct Request<'a> {
    pub doc: &'a str,
    /// Char offset of the cursor.
    pub cursor: usize,
    /// The line up to the cursor.
    pub line_before: &'a str,
    pub language: &'a str,
    pub invoked: bool,
}

pub struct Tracking {
    log: StatsLog,
    watch: Mutex<Watch>,
    /// The client's name, once it said.
    editor: RwLock<String>,
}

impl Tracking {
    pub fn new(log: StatsLog) -> Tracking {
        Tracking {
            log,
            watch: Mutex::default(),
            editor: RwLock::new("unknown".into()),
        }
    }

    pub fn set_editor(&self, name: &str) {
        *self.editor.write().expect("editor lock") = name.to_owned();
    }

    /// Records how a request was answered; a suggestion shown gets an id
    /// (for the client's accept command) and is followed until settled.
    pub fn answered(&self, request: &Request<'_>, outcome: &Outcome) -> Option<u64> {
        let settled = self.watch().requested(request.doc, request.cursor);
        self.settle(settled);
        let asked = Asked {
            editor: self.editor.read().expect("editor lock").clone(),
            language: request.language.to_owned(),
            model: outcome.model.clone().unwrap_or_default(),
            latency_ms: outcome.elapsed.as_millis() as u64,
            invoked: request.invoked,
        };
        let at_ms = now_ms();
        let suggestion = match &outcome.result {
            Ok(suggestion) => suggestion,
            Err(reason) => {
                if let Some(reason) = empty_reason(reason) {
                    let reason = reason.to_owned();
                    self.log.record(&StatsRecord::Empty {
                        at_ms,
                        asked,
                        reason,
                    });
                }
                return None;
            }
        };
        let (origin, model, decoded, cached) = match &suggestion.origin {
            // The same suggestion, typed through: still the one on screen.
            Origin::TypeThrough => return None,
            Origin::Model(g) => (
                "local",
                asked.model.clone(),
                Some(g.tokens_decoded),
                Some(g.prompt_tokens.saturating_sub(g.tokens_decoded)),
            ),
            Origin::Remote { provider, model } => {
                ("remote", format!("{provider}/{model}"), None, None)
            }
        };
        let id = self.log.next_id();
        self.log.record(&StatsRecord::Shown {
            at_ms,
            id,
            asked: Asked { model, ..asked },
            origin: origin.into(),
            chars: suggestion.text.chars().count(),
            decoded_tokens: decoded,
            cached_tokens: cached,
        });
        let shown = Shown {
            id,
            at: request.cursor,
            text: suggestion.text.clone(),
            before: request.line_before.to_owned(),
        };
        let settled = self.watch().shown(request.doc, shown);
        self.settle(settled);
        Some(id)
    }

    /// The user edited `doc`.
    pub fn edited(&self, doc: &str, edit: &Edit<'_>) {
        let settled = self.watch().edited(doc, edit);
        self.settle(settled);
    }

    /// `doc` was closed, or replaced whole.
    pub fn left(&self, doc: &str) {
        let settled = self.watch().left(doc);
        self.settle(settled);
    }

    /// The client ran the accept command of suggestion `id`.
    pub fn accepted(&self, id: u64) {
        let settled = self.watch().accepted(id);
        self.settle(settled);
    }

    fn watch(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().expect("watch lock")
    }

    fn settle(&self, settled: Option<Settled>) {
        if let Some((id, outcome)) = settled {
            self.log.record(&StatsRecord::Settled {
                at_ms: now_ms(),
                id,
                outcome: outcome.as_str().into(),
                chars: outcome.chars(),
            });
        }
    }
}

/// Why a request came back empty, as the stats name it; `None` for answers
/// that were no attempt at a suggestion (skipped, snoozed, off, superseded,
/// no model).
fn empty_reason(reason: &NoSuggestion) -> Option<&'static str> {
    match reason {
        NoSuggestion::DeadlineMissed => Some("late"),
        NoSuggestion::Cut { .. } => Some("cut"),
        NoSuggestion::PromptStillFilling => Some("prompt"),
        NoSuggestion::Empty => Some("nothing"),
        _ => None,
    }
}
