//! Completion handlers: `textDocument/inlineCompletion` (ghost text) and
//! `textDocument/completion` (for editors without inline completion, e.g. Helix).
//!
//! Both answer every request exactly once: a superseded, cancelled, late or
//! impossible completion is an empty result, never a dropped request.

use ropey::Rope;
use tower_lsp_server::jsonrpc::{Error, Result};
use tower_lsp_server::ls_types::*;

use super::actions::ACCEPTED;
use super::backend::Backend;
use super::position;
use super::progress;
use switchyard_base::cancel::CancelFlag;
use switchyard_completion::{CompletionRequest, Origin, Outcome, Suggestion, Trigger, tracking};

/// Completion item labels show at most this much of the suggestion's first line.
const LABEL_CHARS: usize = 60;

/// Run by the client when the user accepts the suggestion: the stats learn
/// it from the client, not only from the edit that follows.
fn accepted_command(id: u64) -> Command {
    Command {
        title: "accepted".into(),
        command: ACCEPTED.into(),
        arguments: Some(vec![id.into()]),
    }
}

fn invalid_params(e: impl std::fmt::Display) -> Error {
    Error::invalid_params(e.to_string())
}

impl Backend {
    /// The suggestion at a position, with the document snapshot and cursor it was
    /// made for, and its id in the stats (for the item's accept command).
    /// Errors are bad input (unknown document, position past the end);
    /// anything else is `None`.
    async fn suggest(
        &self,
        uri: &Uri,
        at: Position,
        trigger: Trigger,
    ) -> Result<Option<(Suggestion, Rope, usize, Option<u64>)>> {
        let doc = self.documents.get(uri).map_err(invalid_params)?;
        let cursor = position::to_char(&doc.rope, at, self.encoding()).map_err(invalid_params)?;
        let snapshot = doc.rope.clone();
        let cancel = CancelFlag::default();
        // Dropped by `$/cancelRequest`: the engine stops working on it.
        let _cancel_on_drop = cancel.cancel_on_drop();
        let line_start = doc.rope.line_to_char(doc.rope.char_to_line(cursor));
        let line_before = doc.rope.slice(line_start..cursor).to_string();
        let language = doc.language_id.clone();
        let request = CompletionRequest {
            doc: uri.as_str().to_owned(),
            rope: doc.rope,
            cursor,
            deadline: tokio::time::Instant::now() + self.completion().budget(trigger),
            cancel,
            document: uri.to_file_path().map(|path| path.into_owned()),
            trigger,
            language: Some(doc.language_id),
        };
        let outcome = self.completed(request, trigger).await;
        log_outcome(&outcome);
        let asked = tracking::Request {
            doc: uri.as_str(),
            cursor,
            line_before: &line_before,
            language: &language,
            invoked: trigger == Trigger::Invoked,
        };
        let id = self.tracking.answered(&asked, &outcome);
        Ok(outcome
            .result
            .ok()
            .map(|suggestion| (suggestion, snapshot, cursor, id)))
    }

    /// The outcome of `request`. The progress starts beside the completion,
    /// and the answer never waits for the client to take it.
    async fn completed(&self, request: CompletionRequest, trigger: Trigger) -> Outcome {
        let complete = self.completion().complete(request);
        let begin = self.completing(trigger);
        tokio::pin!(complete, begin);
        let (mut progress, mut asked_for_progress) = (None, false);
        let outcome = loop {
            tokio::select! {
                outcome = &mut complete => break outcome,
                begun = &mut begin, if !asked_for_progress => {
                    asked_for_progress = true;
                    progress = begun;
                }
            }
        };
        if let Some(progress) = progress {
            let message = match &outcome.result {
                Ok(_) => "done".to_owned(),
                Err(reason) => reason.to_string(),
            };
            progress.finish_with_message(message).await;
        }
        outcome
    }

    /// The progress a request the user asked for shows while it runs (the
    /// editor's own spinner covers automatic ones).
    async fn completing(&self, trigger: Trigger) -> Option<progress::Progress> {
        if trigger != Trigger::Invoked || !self.supports_progress() {
            return None;
        }
        let token = progress::numbered_token("complete");
        progress::begin(&self.client, token, "switchyard: completing".into()).await
    }

    pub async fn inline_completion(
        &self,
        params: InlineCompletionParams,
    ) -> Result<Option<InlineCompletionResponse>> {
        let at = params.text_document_position.position;
        let trigger = match params.context.trigger_kind {
            InlineCompletionTriggerKind::INVOKED => Trigger::Invoked,
            _ => Trigger::Automatic,
        };
        let uri = &params.text_document_position.text_document.uri;
        let suggestion = self.suggest(uri, at, trigger).await?;
        // An empty range at the cursor: clients that replace the range and clients
        // that insert at the cursor end up with the same text.
        let items = suggestion
            .map(|(s, _, _, id)| InlineCompletionItem {
                insert_text: s.text,
                filter_text: None,
                range: Some(Range::new(at, at)),
                command: id.map(accepted_command),
                insert_text_format: Some(InsertTextFormat::PLAIN_TEXT),
            })
            .into_iter()
            .collect();
        Ok(Some(InlineCompletionResponse::List(InlineCompletionList {
            items,
        })))
    }

    pub(super) async fn completion_items(
        &self,
        params: CompletionParams,
    ) -> Result<Option<CompletionResponse>> {
        let uri = params.text_document_position.text_document.uri;
        let at = params.text_document_position.position;
        // Helix sends "invoked" for its automatic requests too, so a classic
        // completion request cannot tell that the user asked: automatic.
        let Some((suggestion, rope, cursor, id)) =
            self.suggest(&uri, at, Trigger::Automatic).await?
        else {
            return Ok(Some(CompletionResponse::List(CompletionList {
                is_incomplete: true,
                items: vec![],
            })));
        };
        // The edit starts at the word being typed so the client's filter matches it.
        let word = word_before(&rope, cursor);
        let start = position::from_char(&rope, cursor - word.chars().count(), self.encoding());
        let new_text = format!("{word}{}", suggestion.text);
        let first_line = new_text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        let label: String = first_line.chars().take(LABEL_CHARS).collect();
        let item = CompletionItem {
            label,
            // Not SNIPPET: Helix parses snippet-kind items as snippet syntax
            // whatever their format says, re-indenting every further line
            // and eating `$` and `\`.
            kind: Some(CompletionItemKind::TEXT),
            detail: Some(match &suggestion.origin {
                Origin::Remote { provider, model } => format!("switchyard ({provider}/{model})"),
                Origin::Model(_) | Origin::TypeThrough => "switchyard (local model)".into(),
            }),
            documentation: Some(Documentation::MarkupContent(MarkupContent {
                kind: MarkupKind::Markdown,
                value: format!("```\n{new_text}\n```"),
            })),
            command: id.map(accepted_command),
            filter_text: Some(new_text.clone()),
            sort_text: Some("0".into()),
            insert_text_format: Some(InsertTextFormat::PLAIN_TEXT),
            text_edit: Some(CompletionTextEdit::Edit(TextEdit {
                range: Range::new(start, at),
                new_text,
            })),
            ..Default::default()
        };
        // Incomplete: the client asks again as the user types, reaching type-through.
        Ok(Some(CompletionResponse::List(CompletionList {
            is_incomplete: true,
            items: vec![item],
        })))
    }
}

/// The word being typed before `cursor`.
fn word_before(rope: &Rope, cursor: usize) -> String {
    let line_start = rope.line_to_char(rope.char_to_line(cursor));
    let before: Vec<char> = rope.slice(line_start..cursor).chars().collect();
    let word_len = before
        .iter()
        .rev()
        .take_while(|c| c.is_alphanumeric() || **c == '_')
        .count();
    before[before.len() - word_len..].iter().collect()
}

/// What the log says about a completion's outcome.
fn log_outcome(outcome: &Outcome) {
    let elapsed_ms = outcome.elapsed.as_secs_f64() * 1e3;
    match &outcome.result {
        Ok(Suggestion {
            origin: Origin::Model(g),
            text,
        }) => tracing::debug!(
            elapsed_ms, prompt = g.prompt_tokens, decoded = g.tokens_decoded, generated = g.tokens_generated,
            stop = ?g.stop, chars = text.len(), "completion"
        ),
        Ok(Suggestion {
            origin: Origin::TypeThrough,
            ..
        }) => tracing::debug!(elapsed_ms, "completion from type-through"),
        Ok(Suggestion {
            origin: Origin::Remote { provider, model },
            ..
        }) => tracing::debug!(elapsed_ms, "completion from {provider}/{model}"),
        Err(reason) => tracing::debug!(elapsed_ms, "no completion: {reason}"),
    }
}
