//! Where a request's windows start: the window a cold prompt affords, with
//! its anchor kept while the user types (`context::fim`), and the span at
//! the cursor, from a stable start, that the engine keeps resident
//! (`context::span`, ARCHITECTURE.md invariant 20). The engine, which knows
//! what its cache holds, chooses between them.

use ropey::Rope;

use super::{CompletionService, Trigger};
use crate::config::AutocompleteConfig;
use crate::context::fim::{self, CHARS_PER_TOKEN, WindowBudget};
use crate::context::repository;
use crate::context::span;
use crate::providers::local::{FimText, ModelInfo, SpanText};

/// Spans around the cursor's offered for the fill to grow into; the engine
/// fills as many as its store of saved states has room for.
const NEIGHBOUR_SPANS: usize = 4;

impl CompletionService {
    /// The window at `cursor` sized to what a cold prompt fills in the
    /// background at the measured speed, for a request of `trigger`, and its
    /// budget (the engine prefers the span's window where its cache makes
    /// that no dearer, see [`Self::span`], and cuts this one to what decodes
    /// before the deadline where it is cold).
    pub(super) fn place(
        &self,
        doc: &str,
        rope: &Rope,
        cursor: usize,
        info: &ModelInfo,
        trigger: Trigger,
    ) -> (fim::Window, WindowBudget) {
        let config = self.config();
        let input = config.input_tokens.min(info.input_budget);
        let budget = WindowBudget::for_input(input, self.suffix_tokens(&config, info, trigger));
        let anchor = self.anchors.get(doc).map(|a| *a);
        let window = fim::window(rope, cursor, budget, anchor);
        self.anchors.insert(doc.to_owned(), window.anchor_line);
        (window, budget)
    }

    /// Suffix tokens a window for a request of `trigger` affords at the
    /// measured speed.
    pub(super) fn suffix_tokens(
        &self,
        config: &AutocompleteConfig,
        info: &ModelInfo,
        trigger: Trigger,
    ) -> usize {
        fim::affordable_suffix(
            config.suffix_tokens,
            info.prompt_tokens_per_s,
            self.budget(trigger),
        )
    }

    /// A placed window's text, with the repository context in front.
    pub(super) fn fim_text(&self, doc: &str, (window, _): (fim::Window, WindowBudget)) -> FimText {
        self.with_context(doc, window.text)
    }

    pub(super) fn with_context(&self, doc: &str, text: FimText) -> FimText {
        FimText {
            context: self.repository.block(),
            path: repository::display_path(doc),
            ..text
        }
    }

    /// The span at `cursor` (see `context::span`), sized to the configured
    /// input and suffix whatever the measured speed: its start stays put,
    /// and its window is the same prompt from one reading of the speed to
    /// the next, so what was filled or answered ahead for it still serves.
    /// Its suffix costs nothing once the document is resident (the tail is
    /// lent); where the span is cold, the request takes the affordable
    /// window instead (the engine's choice).
    pub(super) fn span(&self, doc: &str, rope: &Rope, cursor: usize) -> Option<SpanText> {
        let (budget, block_chars) = self.span_sizes();
        let span = span::at(rope, cursor, budget, block_chars)?;
        Some(self.span_text(doc, span))
    }

    /// The spans of the blocks around `cursor`'s, nearest first (see
    /// `span::around`): the engine fills them once the cursor's own span is
    /// resident, as far as memory allows.
    pub(super) fn spans_around(&self, doc: &str, rope: &Rope, cursor: usize) -> Vec<SpanText> {
        let (budget, block_chars) = self.span_sizes();
        span::around(rope, cursor, budget, block_chars, NEIGHBOUR_SPANS)
            .into_iter()
            .map(|span| self.span_text(doc, span))
            .collect()
    }

    /// A span's window budget, and its blocks' size (half its prefix): from
    /// the configured sizes alone.
    fn span_sizes(&self) -> (WindowBudget, usize) {
        let config = self.config();
        let budget = WindowBudget::for_input(config.input_tokens, config.suffix_tokens);
        (budget, budget.prefix_tokens * CHARS_PER_TOKEN / 2)
    }

    fn span_text(&self, doc: &str, span: span::Span) -> SpanText {
        SpanText {
            window: self.with_context(doc, span.window),
            document: span.document,
        }
    }
}
