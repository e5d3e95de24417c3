//! Where a request's windows start: the window a cold prompt affords, with
//! its anchor kept while the user types (`switchyard_context::fim`), and the span at
//! the cursor, from a stable start, that the engine keeps resident
//! (`switchyard_context::span`, ARCHITECTURE.md invariant 20). The engine, which knows
//! what its cache holds, chooses between them.

use std::ops::Range;

use ropey::Rope;

use super::{CompletionService, Trigger};
use switchyard_config::AutocompleteConfig;
use switchyard_context::fim::{self, CHARS_PER_TOKEN, WindowBudget};
use switchyard_context::repository;
use switchyard_context::span;
use switchyard_engine::{FimText, ModelInfo, SpanText};

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
        let lines = window.anchor_line..window.anchor_line + lines_in(&window.text);
        self.with_context(doc, lines, window.text)
    }

    /// `text`, showing `lines` of `doc`, with the repository context in
    /// front: less the snippets of those lines, which it shows as they are.
    fn with_context(&self, doc: &str, lines: Range<usize>, text: FimText) -> FimText {
        FimText {
            context: self.repository.block_beside(doc, lines),
            path: repository::display_path(doc),
            ..text
        }
    }

    /// The span at `cursor` (see `switchyard_context::span`), sized to the configured
    /// input whatever the measured speed, so its start stays put; its suffix
    /// is what a request of `trigger` affords, rounded down to a power of
    /// two (see [`span_suffix`]).
    pub(super) fn span(
        &self,
        doc: &str,
        rope: &Rope,
        cursor: usize,
        info: &ModelInfo,
        trigger: Trigger,
    ) -> Option<SpanText> {
        let (budget, block_chars) = self.span_sizes(info, trigger);
        let span = span::at(rope, cursor, budget, block_chars)?;
        Some(self.span_text(doc, span))
    }

    /// The spans of the blocks around `cursor`'s, nearest first (see
    /// `span::around`): the engine fills them once the cursor's own span is
    /// resident, as far as memory allows.
    pub(super) fn spans_around(
        &self,
        doc: &str,
        rope: &Rope,
        cursor: usize,
        info: &ModelInfo,
    ) -> Vec<SpanText> {
        let (budget, block_chars) = self.span_sizes(info, Trigger::Automatic);
        span::around(rope, cursor, budget, block_chars, NEIGHBOUR_SPANS)
            .into_iter()
            .map(|span| self.span_text(doc, span))
            .collect()
    }

    /// A span's window budget, and its blocks' size: from the configured
    /// sizes alone (half the largest prefix), so the starts stay put.
    fn span_sizes(&self, info: &ModelInfo, trigger: Trigger) -> (WindowBudget, usize) {
        let config = self.config();
        let affordable = self.suffix_tokens(&config, info, trigger);
        let suffix = span_suffix(config.suffix_tokens, affordable);
        let budget = WindowBudget::for_input(config.input_tokens, suffix);
        let block_chars = WindowBudget::for_input(config.input_tokens, config.suffix_tokens)
            .prefix_tokens
            * CHARS_PER_TOKEN
            / 2;
        (budget, block_chars)
    }

    /// A span's text; its window's context leaves out what the span's
    /// document shows, the same for every place in the span.
    fn span_text(&self, doc: &str, span: span::Span) -> SpanText {
        let lines = span.start_line..span.start_line + span.document.matches('\n').count() + 1;
        SpanText {
            window: self.with_context(doc, lines, span.window),
            document: span.document,
        }
    }
}

/// How many lines a window's text spans (its scope heads counted too: an
/// overcount, which leaves out a snippet more rather than one fewer).
fn lines_in(text: &FimText) -> usize {
    text.prefix.matches('\n').count() + text.suffix.matches('\n').count() + 1
}

/// A span's suffix tokens: the `configured` ones where the speed affords
/// them, else the `affordable` ones rounded down to a power of two. The
/// suffix is decoded afresh at each new place, so it follows the measured
/// speed, but in steps: the span's window stays the same prompt while
/// readings wander (idle ones spread 148-283 tokens/s here), so what was
/// filled or answered ahead for it still serves.
fn span_suffix(configured: usize, affordable: usize) -> usize {
    match affordable {
        n if n >= configured => configured,
        0 => 0,
        n => 1 << n.ilog2(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_spans_suffix_follows_the_speed_in_steps() {
        // (configured, affordable at the measured speed, the span's)
        let cases = [
            (128, 128, 128),
            (100, 128, 100),
            (128, 91, 64),
            (128, 70, 64),
            (128, 52, 32),
            (128, 16, 16),
            (0, 0, 0),
        ];
        for (configured, affordable, expected) in cases {
            assert_eq!(
                super::span_suffix(configured, affordable),
                expected,
                "{configured} configured, {affordable} affordable"
            );
        }
    }
}
