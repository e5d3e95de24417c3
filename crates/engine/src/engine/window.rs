//! Which window a job brings into the cache: the span's where what the
//! cache holds makes it no dearer, else the window a cold prompt affords,
//! cut to what decodes before the deadline; and the span's fill, which moves
//! to where the user last asked and goes on once the engine is idle
//! (ARCHITECTURE.md invariant 20).

use std::time::Instant;

use tokio::sync::oneshot;

use super::choice::{self, Affordable, CutWindow, Window};
use super::{Answered, CHUNK, Engine, Filled};
use crate::prompt::{self, FimPrompt, PromptBudget};
use crate::reuse;
use crate::{CompletionJob, EditorWindow, EngineError, FimText, Generation, Prewarm, SpanText};

/// What a request leaves of its time for the answer: this many generated
/// tokens (a line of code). A window the cache lacks more of than decodes in
/// the rest is cut to it.
const ANSWER_TOKENS_RESERVED: u32 = 12;
/// Where even the shortest cut leaves less than a line, it is still taken
/// while it leaves this many tokens (the start of a line, which the user can
/// accept, or type on from): an empty answer helps no one. Two, not more: on
/// a busy host a generated token can cost a tenth of the budget, and a
/// reserve of four left the shortest cold cut (31 tokens) unaffordable in a
/// quarter of first requests, which were then answered empty.
const ANSWER_TOKENS_AT_LEAST: u32 = 2;
/// A window cut to the time left keeps at least this many tokens.
const MIN_COLD_INPUT_TOKENS: usize = 32;

impl Engine<'_> {
    /// Makes the span's document resident and fills the span's window from
    /// it when the user is idle, then the spans around it (`idle`); between
    /// keystrokes, fills whichever window the cache makes cheaper. A newer
    /// job makes the rest of a prewarm moot. Another window than the user's
    /// (invariant 24) gets its span filled, but neither grows outward nor
    /// takes the idle fill from the user's.
    pub(super) fn prewarm(&mut self, prewarm: &Prewarm, window: EditorWindow) {
        let users = self.users_window.is_none_or(|users| users == window);
        self.sheltered = users.then_some(window);
        self.prewarm_for(prewarm, users);
        self.sheltered = None;
    }

    fn prewarm_for(&mut self, prewarm: &Prewarm, users: bool) {
        match &prewarm.span {
            Some(span) if prewarm.resident && !users => {
                let _ = self.fill_span_once(span);
            }
            Some(span) if prewarm.resident => {
                self.idle.arrive(span.clone(), prewarm.neighbours.clone());
                let filled = self.fill_span(span.clone());
                if let (Filled::Done, Some(limits)) = (filled, prewarm.answer) {
                    self.answer_ahead(&span.window, limits);
                }
                // Outward, while no job comes (then once the engine is idle).
                while !self.jobs.arrived() && self.fill_idle() {}
            }
            Some(span) => {
                // Typing at a cold place: the next keystroke reuses the
                // window the cache holds; the cold one waits for a pause.
                let held = match self.idle.awaits_pause() {
                    true => self.window_held(&prewarm.window),
                    false => None,
                };
                let prompt = match held {
                    Some(held) => held,
                    None => {
                        let affordable = self.build_prompt(&prewarm.window);
                        let spanned = self.build_prompt(&span.window);
                        self.choose_window(affordable, spanned, None).0
                    }
                };
                self.fill_in_background(&prompt, "prewarm");
            }
            None => {
                let prompt = self.build_prompt(&prewarm.window);
                self.fill_in_background(&prompt, "prewarm");
            }
        }
    }

    /// Makes `span`'s document resident, then fills its window from it. A
    /// newer job stops it; it goes on once the engine is idle again, unless a
    /// request elsewhere has moved the fill there by then.
    pub(super) fn fill_span(&mut self, span: SpanText) -> Filled {
        let filled = self.fill_span_once(&span);
        if filled == Filled::Preempted {
            self.idle.resume(span);
        }
        filled
    }

    /// Makes `span`'s document resident and fills its window, once.
    fn fill_span_once(&mut self, span: &SpanText) -> Filled {
        let document = self.document_prompt(&span.window, &span.document);
        let filled = match document {
            Some(prompt) => self.fill_in_background(&prompt, "resident document"),
            None => Filled::Done,
        };
        match filled {
            Filled::Done => {
                let prompt = self.build_prompt(&span.window);
                self.fill_in_background(&prompt, "span window")
            }
            stopped => stopped,
        }
    }

    /// The window to bring into the cache: the span's (`spanned`) where the
    /// cache holds enough of it that it costs no more than the `affordable`
    /// one, or, for a request, still decodes before its `deadline`. Returns
    /// the prompt and whether it is the span's.
    fn choose_window(
        &mut self,
        affordable: FimPrompt,
        spanned: FimPrompt,
        deadline: Option<Instant>,
    ) -> (FimPrompt, bool) {
        let span_cost = self.cost(&spanned);
        let decodable = deadline.map(|d| self.decodable_before(d));
        match choice::takes_span(span_cost, self.cost(&affordable), decodable) {
            true => (spanned, true),
            false => (affordable, false),
        }
    }

    /// Prompt tokens that decode before `deadline` at the measured speed and
    /// leave time for a line of answer.
    fn decodable_before(&self, deadline: Instant) -> usize {
        self.decodable_leaving(deadline, ANSWER_TOKENS_RESERVED)
    }

    /// Prompt tokens that decode before `deadline` and leave time for
    /// `answer_tokens` generated ones.
    fn decodable_leaving(&self, deadline: Instant, answer_tokens: u32) -> usize {
        let answer = self.costs.token * answer_tokens;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(answer);
        (left.as_secs_f64() / self.costs.chunk.as_secs_f64().max(1e-6) * CHUNK as f64) as usize
    }

    /// Prompt tokens that decode in the time of one generated token.
    fn prompt_tokens_per_answer_token(&self) -> usize {
        let prompt_token = self.costs.chunk.as_secs_f64() / CHUNK as f64;
        (self.costs.token.as_secs_f64() / prompt_token.max(1e-9)) as usize
    }

    /// Answers `window`'s request, which makes it the user's window.
    pub(super) fn complete(
        &mut self,
        mut job: CompletionJob,
        reply: oneshot::Sender<Result<Generation, EngineError>>,
        window: EditorWindow,
    ) {
        self.users_window = Some(window);
        if job.cancel.is_cancelled() {
            let _ = reply.send(Ok(Generation::cancelled()));
            return;
        }
        let span = job.span.take();
        let spanned = span.as_ref().map(|span| self.build_prompt(&span.window));
        if let Some(answer) = spanned
            .as_ref()
            .and_then(|spanned| self.answered_ahead(spanned, &mut job))
        {
            tracing::debug!(
                tokens = answer.tokens_ahead,
                "answered from the answer ahead"
            );
            let _ = reply.send(Ok(answer));
            self.idle.served_in_span();
            return;
        }
        let affordable = self.build_prompt(&job.text);
        let (wanted, spanned) = match spanned {
            Some(spanned) => self.choose_window(affordable, spanned, Some(job.deadline)),
            None => (affordable, false),
        };
        let asked = self.in_time(&job.text, &wanted, job.deadline);
        let late = self.answer(&asked, &mut job, reply, false) == Answered::PromptLate;
        let cut = asked != wanted;
        if spanned && !cut {
            // Served where the user is: a fill waiting for elsewhere is stale.
            self.idle.served_in_span();
        }
        match span {
            // Answered from another window: the fill moves to where the user
            // asked, once they pause (see `idle`).
            Some(span) if !spanned || cut => self.idle.move_to(span),
            _ if late || cut => {
                // Keep filling so the next keystroke finds a warm cache.
                self.fill_in_background(&wanted, "fill after a missed deadline");
            }
            _ => {}
        }
    }

    /// `wanted`, unless the cache lacks more of it than decodes before
    /// `deadline` with a line of answer left: the place is cold, and the
    /// affordable window `text` is cut to what does decode with a line left,
    /// or at the shortest the start of one (see [`takes_cut`]: only where
    /// the cut buys the answer time). The cut starts where the window the
    /// cache holds starts, where that is at least half as long and leaves
    /// the start of a line: typing on at a cold place then decodes only what
    /// was typed. Where not even the shortest cut decodes in time, `wanted`
    /// it stays: answered empty, its fill goes on.
    fn in_time(&mut self, text: &FimText, wanted: &FimPrompt, deadline: Instant) -> FimPrompt {
        let affordable = Affordable {
            line: self.decodable_before(deadline),
            line_start: self.decodable_leaving(deadline, ANSWER_TOKENS_AT_LEAST),
            per_answer_token: self.prompt_tokens_per_answer_token(),
        };
        let wanted_cost = self.cost(wanted);
        if wanted_cost <= affordable.line {
            return wanted.clone();
        }
        let fresh = self.build_prompt_within(text, affordable.line);
        let held = self.window_held(text);
        let measured = |prompt: &FimPrompt| CutWindow {
            len: prompt.tokens.len(),
            cost: self.cost(prompt),
        };
        let (held_cut, fresh_cut) = (held.as_ref().map(measured), measured(&fresh));
        let window = choice::cut_for(wanted_cost, held_cut, fresh_cut, affordable);
        let cut = held_cut
            .filter(|_| window == Window::Held)
            .unwrap_or(fresh_cut);
        tracing::debug!(
            taken = window != Window::Wanted,
            wanted = wanted_cost,
            cut = cut.cost,
            cut_window = cut.len,
            decodable = affordable.line,
            decodable_at_least = affordable.line_start,
            left_ms = deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
            "cold window"
        );
        match (window, held) {
            (Window::Held, Some(held)) => held,
            (Window::Fresh, _) => fresh,
            _ => wanted.clone(),
        }
    }

    /// `text`'s prompt with its window starting where the FIM prompt in the
    /// cache starts its prefix, within the input budget.
    fn window_held(&mut self, text: &FimText) -> Option<FimPrompt> {
        let held = prompt::prefix_section(&self.fim, self.cache.tokens(), self.cache.suffix())?;
        let (prefix, healed) = self.healed_prefix(&text.prefix);
        let start = prompt::start_of(held, &prefix)?;
        let context = self.context_tokens(text);
        let suffix = self.tokenize(&text.suffix);
        let prompt =
            prompt::assemble_from(&self.fim, &context, &prefix, &suffix, start, self.budget)?;
        Some(FimPrompt { healed, ..prompt })
    }

    /// Prompt tokens the cache lacks for `prompt`: what it holds (the
    /// resident document with its tail back, where a prompt borrows it),
    /// or a recent prompt kept in memory, whichever shares more.
    pub(super) fn cost(&self, prompt: &FimPrompt) -> usize {
        let len = prompt.tokens.len();
        let plan = |cached: &[i32], suffix| {
            reuse::plan(cached, suffix, &prompt.tokens, prompt.suffix_span).tokens_to_decode(len)
        };
        let mut cost = plan(self.cache.tokens(), self.cache.suffix());
        if let Some(document) = self.cache.lent_document() {
            cost = cost.min(plan(&document, None));
        }
        if let Some(common) = self.recent.longest_common(&prompt.tokens) {
            cost = cost.min(len - common.min(len.saturating_sub(1)));
        }
        cost
    }

    pub(super) fn build_prompt(&mut self, text: &FimText) -> FimPrompt {
        let budget = match text.spanned {
            true => self.span_budget(),
            false => self.budget,
        };
        self.assemble(text, budget)
    }

    /// `text`'s prompt with at most `input` tokens of window (never fewer
    /// than a cold window's floor), cut from the prefix's start.
    fn build_prompt_within(&mut self, text: &FimText, input: usize) -> FimPrompt {
        let input = input.clamp(
            MIN_COLD_INPUT_TOKENS,
            self.budget.input.max(MIN_COLD_INPUT_TOKENS),
        );
        let budget = PromptBudget {
            input,
            ..self.budget
        };
        self.assemble(text, budget)
    }

    fn assemble(&mut self, text: &FimText, budget: PromptBudget) -> FimPrompt {
        let context = self.context_tokens(text);
        let (prefix, healed) = self.healed_prefix(&text.prefix);
        let suffix = self.tokenize(&text.suffix);
        let prompt = prompt::assemble(&self.fim, &context, &prefix, &suffix, budget);
        FimPrompt { healed, ..prompt }
    }

    /// `prefix`'s tokens, less the last where it ends inside a word, and
    /// that token's text (see `healing`).
    fn healed_prefix(&self, prefix: &str) -> (Vec<i32>, Vec<u8>) {
        let mut tokens = self.tokenize(prefix);
        match self.pieces.take_back(prefix, &tokens) {
            Some((kept, healed)) => {
                tokens.truncate(kept);
                (tokens, healed)
            }
            None => (tokens, Vec::new()),
        }
    }

    /// A span's document and windows fill the configured input whatever the
    /// speed: what the cache holds is free, so the slower machine is not the
    /// one that keeps less of it.
    fn span_budget(&self) -> PromptBudget {
        PromptBudget {
            input: self.configured_input,
            ..self.budget
        }
    }

    /// The resident document's prompt: `document` after `window`'s context.
    pub(super) fn document_prompt(
        &mut self,
        window: &FimText,
        document: &str,
    ) -> Option<FimPrompt> {
        let context = self.context_tokens(window);
        let budget = self.span_budget();
        prompt::document(&self.fim, &context, &self.tokenize(document), budget)
    }
}
