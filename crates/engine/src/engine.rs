//! The inference thread: sole owner of the llama.cpp model and context.
//!
//! Latency techniques live here: the open document stays resident in the KV
//! cache and only what changed is decoded (common token prefix, plus a RoPE
//! shift of an unchanged suffix); prompts are decoded in chunks with
//! the cancel flag and deadline checked between chunks and tokens; a prompt that
//! misses its deadline is answered empty and keeps filling in the background
//! until a newer job arrives.
//!
//! This file owns the thread's job loop, interruption and generation; loading and
//! sizing the model are in `load`, decoding prompts into the KV cache in
//! `prefill`, which window a job brings into it in `window`, the resident
//! document in `resident`, a chat's yielding to completions in `aside`.

mod ahead;
mod aside;
mod cache;
mod choice;
mod generate;
mod healing;
mod idle;
mod load;
mod machine_load;
mod prefill;
mod queue;
mod recent;
mod resident;
mod start;
mod thread_memo;
mod threads;
mod window;

use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use tokio::sync::{oneshot, watch};

use super::lookup;
use super::prompt::{FimPrompt, FimTokens, PromptBudget};
use super::{
    ChatJob, CompletionJob, EngineError, EngineStatus, FimText, Generation, Job, ModelInfo,
    Snippet, StopReason,
};
use crate::EditorWindow;
use aside::ChatTurn;
use cache::KvCache;
use idle::IdleFill;
use load::resized_input_budget;
use prefill::SyncError;
use queue::Queue;
use recent::RecentPrompts;
use resident::Residency;
use switchyard_base::cancel::CancelFlag;
use threads::Tuning;

pub(super) use start::run;

/// llama.cpp's backend, initialised once per process and shared with the
/// engine: what a benchmark of llama.cpp's own decode needs beside it.
pub use load::backend as llama_backend;
/// The engine's context parameters, for the same comparison.
pub use load::context_params as llama_context_params;

/// Tokens per decode call: the cancel flag and deadline are checked between chunks.
const CHUNK: usize = 32;
/// A greedy choice won by less than this logit margin is a near tie: llama.cpp's
/// CPU kernels round differently for other batch shapes (its tiled K-quant
/// path takes batches of eight rows and more, llamafile's sgemm and the
/// repacked weights other shapes), so a prompt decoded in other chunks, or a draft
/// verified in one batch, can flip it. Measured on the test model
/// (BENCHMARKS.md): one prompt decoded in chunks of 32 and of 5 gives margins
/// up to 0.31 apart and flips a choice won by 0.24; warm against cold, up to
/// 0.45 apart.
const NEAR_TIE: f32 = 0.6;
/// The KV sequence holding the prompt, the one a shifted suffix waits in, and
/// the one holding a resident document's tail while a FIM prompt borrows its start.
const MAIN: i32 = 0;
const PARKED: i32 = 1;
const LENT: i32 = 2;

/// When a decode loop has to stop early.
struct Interrupt<'a> {
    cancel: Option<&'a CancelFlag>,
    deadline: Option<Instant>,
    /// Background work yields to any newly arrived job.
    preemptible: bool,
    /// A chat answer yields to a completion that waits (see `aside`).
    yields: bool,
}

enum Stopped {
    Cancelled,
    Deadline,
    Preempted,
}

/// How a fill in the background ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Filled {
    Done,
    /// A newer job arrived.
    Preempted,
    Failed,
}

/// How a job's answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answered {
    /// Generated, cancelled, superseded or failed.
    Replied,
    /// The prompt was not in the cache by the deadline.
    PromptLate,
}

/// The inference thread's state, by concern: the model and its cache, how
/// prompts are shaped, what decoding costs, and the jobs.
struct Engine<'m> {
    model: &'m LlamaModel,
    backend: &'static LlamaBackend,
    /// The llama.cpp context and what its KV cache holds.
    cache: KvCache<'m>,
    context_tokens: u32,
    /// What the context keeps free for an answer.
    answer_room: usize,
    tuning: Tuning,
    fim: FimTokens,
    /// Every token's text, for token healing.
    pieces: healing::Pieces,
    /// The input budget follows the measured prompt speed, up to the configured one.
    budget: PromptBudget,
    configured_input: usize,
    reuse_cache: bool,
    /// Caches left for another prompt, to switch back to.
    recent: RecentPrompts,
    /// What to fill once no job waits, nearest the user first.
    idle: IdleFill,
    /// The last answer generated ahead, where the user arrived.
    ahead: Option<ahead::Ahead>,
    chat: ChatTurn,
    /// The last repository context block, its document path and its tokens.
    repository: Option<(Arc<[Snippet]>, String, Vec<i32>)>,
    costs: Costs,
    drafting: Drafting,
    jobs: Queue,
    /// The window the last completion request came from: where the user is,
    /// when windows share the engine (none asked yet: every window is).
    users_window: Option<EditorWindow>,
    /// A prewarm filling for the user's window: another window's prewarm
    /// waits for it instead of stopping it.
    sheltered: Option<EditorWindow>,
    /// What the completion service sizes its windows by; republished when the
    /// speed moves the input budget.
    info: ModelInfo,
    status: watch::Sender<EngineStatus>,
}

/// What decoding costs on this machine now: moving averages over real
/// decodes, so they follow the machine's load.
struct Costs {
    /// A full prompt chunk.
    chunk: Duration,
    /// One generated token.
    token: Duration,
    /// What each draft token adds to a generation step.
    draft_token: Duration,
}

/// Lookup drafts: at most `max_tokens` a step, and how often they stand.
struct Drafting {
    max_tokens: usize,
    acceptance: lookup::Acceptance,
}

impl Engine<'_> {
    fn serve(&mut self) {
        while let Some(job) = self.next_job() {
            self.follow_load();
            match job {
                // Stop before process exit: llama.cpp must not be mid-decode while
                // its static state is torn down.
                Job::Shutdown => break,
                Job::Complete(job, reply, window) => self.complete(job, reply, window),
                Job::Chat(job, reply) => self.chat(job, reply),
                Job::Prewarm(prewarm, done, window) => {
                    self.prewarm(&prewarm, window);
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                }
            }
        }
    }

    /// Decodes `prompt` into the cache until done or a newer job arrives.
    fn fill_in_background(&mut self, prompt: &FimPrompt, what: &str) -> Filled {
        if self.chat.waiting {
            tracing::debug!("{what} left: a chat waits");
            return Filled::Preempted;
        }
        if self.jobs.preempt(self.sheltered) {
            // Before the cache changes: it holds what the last job left.
            return Filled::Preempted;
        }
        let background = Interrupt {
            cancel: None,
            deadline: None,
            preemptible: true,
            yields: false,
        };
        match self.sync_prompt(prompt, &background) {
            Ok(prefill) => {
                tracing::debug!(
                    decoded = prefill.decoded,
                    prompt = prompt.tokens.len(),
                    "{what} done"
                );
                Filled::Done
            }
            Err(e) => {
                tracing::debug!("{what} stopped: {e}");
                match e {
                    SyncError::Stopped(Stopped::Preempted, _) => Filled::Preempted,
                    _ => Filled::Failed,
                }
            }
        }
    }

    /// The next job; idle work goes on until one comes.
    fn next_job(&mut self) -> Option<Job> {
        if let Some(job) = self.jobs.pending.pop_front() {
            return Some(job);
        }
        // Idle: the fill goes on where the user is, then outward.
        while !self.jobs.arrived() && self.fill_idle() {}
        if let Some(job) = self.jobs.pending.pop_front() {
            return Some(job);
        }
        self.wait_for_job()
    }

    /// Waits for a job. Meanwhile the thread count follows the machine's
    /// load, and the counts are measured again after a quiet spell where
    /// asked: a probe a request had to wait for would cost it its budget.
    fn wait_for_job(&mut self) -> Option<Job> {
        let quiet_since = Instant::now();
        loop {
            let wait = match (self.tuning.follows_load(), self.tuning.retune) {
                (true, _) => machine_load::SAMPLE_EVERY,
                (false, true) => threads::RETUNE_AFTER_QUIET,
                (false, false) => return self.jobs.rx.recv().ok(),
            };
            match self.jobs.rx.recv_timeout(wait) {
                Ok(job) => return Some(job),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.follow_load();
            if self.tuning.retune && quiet_since.elapsed() >= threads::RETUNE_AFTER_QUIET {
                self.retune_threads();
            }
        }
    }

    /// Whether to stop before a step expected to take `next_cost`: a step that
    /// would end past the deadline is not started, so answers arrive on time.
    fn check(&mut self, interrupt: &Interrupt, next_cost: Duration) -> Option<Stopped> {
        if interrupt.cancel.is_some_and(CancelFlag::is_cancelled) {
            Some(Stopped::Cancelled)
        } else if interrupt
            .deadline
            .is_some_and(|d| Instant::now() + next_cost >= d)
        {
            Some(Stopped::Deadline)
        } else if interrupt.preemptible && self.jobs.preempt(self.sheltered)
            || interrupt.yields && self.completion_waiting()
        {
            Some(Stopped::Preempted)
        } else {
            None
        }
    }

    /// Folds one prompt chunk's decode time into the chunk cost, and lets
    /// the input budget follow.
    fn note_prompt_chunk(&mut self, tokens: usize, took: Duration) {
        // Short chunks are mostly fixed overhead; they would overstate the cost.
        if tokens < CHUNK / 2 {
            return;
        }
        let full_chunk = took.mul_f64(CHUNK as f64 / tokens as f64);
        self.costs.chunk = (self.costs.chunk * 7 + full_chunk) / 8;
        if self.follow_speed() {
            self.tuning.speed_moved();
        }
    }

    /// Where the prompt speed the chunk cost implies moves the input budget
    /// by more than a third, resizes the budget and republishes it: a busy
    /// machine gets windows it can fill in time, an idle one gets its
    /// context back. Whether it moved.
    fn follow_speed(&mut self) -> bool {
        let speed = CHUNK as f64 / self.costs.chunk.as_secs_f64().max(1e-6);
        let Some(budget) = resized_input_budget(self.budget.input, self.configured_input, speed)
        else {
            return false;
        };
        tracing::info!(
            prompt_tokens_per_s = speed.round(),
            input_budget = budget,
            "prompt speed changed; input budget resized"
        );
        self.budget.input = budget;
        self.info.prompt_tokens_per_s = speed;
        self.info.input_budget = budget;
        self.status
            .send_replace(EngineStatus::Ready(self.info.clone()));
        true
    }

    fn chat(&mut self, job: ChatJob, reply: oneshot::Sender<Result<Generation, EngineError>>) {
        let prompt = match self.chat_prompt(&job) {
            Ok(prompt) => prompt,
            Err(reason) => {
                let _ = reply.send(Err(EngineError::Failed(reason)));
                return;
            }
        };
        tracing::debug!(prompt = prompt.tokens.len(), "local chat answering");
        self.chat.hold_from = job
            .first_token_by
            .map(|by| self.hold_from(by, prompt.tokens.len()));
        // The stop rule sees the text after each token: it streams what is new.
        let (pieces, mut sent) = (job.pieces, 0);
        let stream = move |text: &str| {
            if let Some(pieces) = &pieces
                && text.len() > sent
            {
                let _ = pieces.send(text[sent..].to_owned());
                sent = text.len();
            }
            false
        };
        let mut controls = CompletionJob {
            text: FimText::default(),
            span: None,
            max_tokens: job.max_tokens,
            stop: Box::new(stream),
            deadline: job.deadline,
            cancel: job.cancel,
        };
        self.answer(&prompt, &mut controls, reply, true);
    }

    /// The chat prompt in the model's own template, refused when it cannot fit.
    fn chat_prompt(&self, job: &ChatJob) -> Result<FimPrompt, String> {
        let template = self
            .model
            .chat_template(None)
            .map_err(|e| format!("the local model has no chat template: {e}"))?;
        let messages = job
            .messages
            .iter()
            .map(|(role, content)| LlamaChatMessage::new(role.clone(), content.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("invalid chat message: {e}"))?;
        let text = self
            .model
            .apply_chat_template(&template, &messages, true)
            .map_err(|e| format!("applying the chat template: {e}"))?;
        let tokens: Vec<i32> = self
            .model
            .vocab()
            .tokenize(text.as_bytes(), false, true)
            .into_iter()
            .map(|t| t.0)
            .collect();
        if tokens.len() + job.max_tokens > self.context_tokens as usize {
            return Err(format!(
                "the prompt ({} tokens) and answer ({} tokens) exceed the local model's context of {} tokens",
                tokens.len(),
                job.max_tokens,
                self.context_tokens
            ));
        }
        Ok(FimPrompt {
            tokens,
            suffix_span: None,
            document: false,
            prefix_trimmed: 0,
            suffix_trimmed: 0,
            healed: Vec::new(),
        })
    }

    /// Processes `prompt` and generates under `job`'s controls (its FIM text
    /// is unused here); a chat `yields` to the completions that arrive meanwhile.
    fn answer(
        &mut self,
        prompt: &FimPrompt,
        job: &mut CompletionJob,
        reply: oneshot::Sender<Result<Generation, EngineError>>,
        yields: bool,
    ) -> Answered {
        let mut answer = Generation::cancelled();
        answer.prompt_tokens = prompt.tokens.len();
        answer.prompt_digest = prompt.digest();
        let cancel = job.cancel.clone();
        let foreground = Interrupt {
            cancel: Some(&cancel),
            deadline: Some(job.deadline),
            preemptible: false,
            yields,
        };
        let synced = self.sync_noting(prompt, &foreground, &mut answer);
        if yields {
            // Its first piece is out next: a chat yields freely while it generates.
            self.chat.hold_from = None;
        }
        match synced {
            Ok(_) => {}
            Err(SyncError::Stopped(Stopped::Deadline, _)) => {
                answer.stop = StopReason::PromptDeadline;
                let _ = reply.send(Ok(answer));
                return Answered::PromptLate;
            }
            Err(SyncError::Stopped(..)) => {
                let _ = reply.send(Ok(answer));
                return Answered::Replied;
            }
            Err(SyncError::Decode(reason)) => {
                let _ = reply.send(Err(EngineError::Failed(reason)));
                return Answered::Replied;
            }
        }
        let generated = Instant::now();
        let result = self.generate_yielding(job, &mut answer, prompt.healed.clone(), &foreground);
        answer.generate_ms = generated.elapsed().as_secs_f64() * 1e3;
        if yields {
            tracing::debug!(
                generated = answer.tokens_generated,
                generate_ms = answer.generate_ms.round(),
                stop = ?answer.stop,
                "local chat done"
            );
        }
        let _ = reply.send(result.map(|()| answer));
        Answered::Replied
    }

    /// Syncs the cache with `prompt` and notes in `answer` what that cost.
    fn sync_noting(
        &mut self,
        prompt: &FimPrompt,
        interrupt: &Interrupt,
        answer: &mut Generation,
    ) -> Result<(), SyncError> {
        let started = Instant::now();
        let synced = self.sync_yielding(prompt, interrupt);
        answer.prompt_ms = started.elapsed().as_secs_f64() * 1e3;
        let prefill = match &synced {
            Ok(prefill) | Err(SyncError::Stopped(_, prefill)) => *prefill,
            Err(SyncError::Decode(_)) => Default::default(),
        };
        answer.tokens_to_decode = prefill.to_decode;
        answer.tokens_decoded = prefill.decoded;
        tracing::debug!(
            prompt = prompt.tokens.len(),
            to_decode = prefill.to_decode,
            decoded = prefill.decoded,
            prompt_ms = answer.prompt_ms.round(),
            "prompt synced"
        );
        synced.map(drop)
    }

    fn tokenize(&self, text: &str) -> Vec<i32> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), false, false)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// The repository context's tokens. The block stays the same while the
    /// user types: it is tokenized once.
    fn context_tokens(&mut self, text: &FimText) -> Vec<i32> {
        let cached = self
            .repository
            .as_ref()
            .filter(|(context, path, _)| Arc::ptr_eq(context, &text.context) && *path == text.path);
        if let Some((_, _, tokens)) = cached {
            return tokens.clone();
        }
        let tokens = self.repository_tokens(text);
        self.repository = Some((text.context.clone(), text.path.clone(), tokens.clone()));
        tokens
    }

    /// The repository context in the model's repository format: its name, then
    /// each snippet under its path, then the document's own path; models
    /// without those tokens get a plain-text header per snippet. The oldest
    /// snippets go when the tokens exceed the budget (the service sizes the
    /// context in chars, the tokenizer decides).
    fn repository_tokens(&self, text: &FimText) -> Vec<i32> {
        let to_ids = |s: &str| self.tokenize(s);
        let header = |path: &str| match self.fim.file_sep {
            Some(sep) => std::iter::once(sep)
                .chain(to_ids(&format!("{path}\n")))
                .collect(),
            None => to_ids(&format!("--- {path} ---\n")),
        };
        let snippets: Vec<Vec<i32>> = text
            .context
            .iter()
            .map(|s| [header(&s.path), to_ids(&s.text), to_ids("\n")].concat())
            .collect();
        let mut total: usize = snippets.iter().map(Vec::len).sum();
        let mut first = 0;
        while first < snippets.len() && total > self.budget.repository {
            total -= snippets[first].len();
            first += 1;
        }
        if first == snippets.len() {
            return Vec::new();
        }
        let mut tokens: Vec<i32> = match self.fim.repo {
            Some(repo) => std::iter::once(repo).chain(to_ids("workspace\n")).collect(),
            None => Vec::new(),
        };
        tokens.extend(snippets[first..].concat());
        tokens.extend(header(&text.path));
        tokens
    }
}
