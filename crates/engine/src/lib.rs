//! The local engine: a quantized coder model run in-process through llama.cpp.
//!
//! [`LocalEngine`] is a cheap handle; the model and its context live on one
//! inference thread (`engine.rs`) that receives jobs over a channel (ARCHITECTURE.md invariant 4).
//! That thread alone measures with `std::time::Instant`; everything else
//! keeps time through `tokio::time` (invariant 9). The engine is a crate of
//! its own below `providers`, whose `local::chat` makes a chat provider of it.

mod engine;
pub mod lookup;
pub mod prompt;
pub mod reuse;
#[cfg(unix)]
mod shared;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, watch};

pub use engine::{llama_backend, llama_context_params};
pub use prompt::PromptBudget;
#[cfg(unix)]
pub use shared::engines_hosted_in;

/// Where windows cannot meet at a socket, none hosts an engine for others.
#[cfg(not(unix))]
pub fn engines_hosted_in(_dir: &std::path::Path) -> usize {
    0
}

/// What the engine computes on: Metal on Apple silicon, else the CPU.
pub const BACKEND: &str = if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
    "Metal"
} else {
    "CPU"
};
use switchyard_base::cancel::CancelFlag;

/// How to run the engine.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub model_name: String,
    pub model_path: PathBuf,
    /// Inference threads; 0 starts with every core or one, whichever
    /// measures faster, then follows the cores other processes leave free.
    pub threads: usize,
    pub budget: PromptBudget,
    pub max_output_tokens: usize,
    /// Keep the KV cache between requests. `false` builds a fresh context per
    /// request, the naive baseline the latency benchmark compares against.
    pub reuse_cache: bool,
    /// Most tokens drafted by n-gram lookup and verified in one batch per
    /// generation step; 0 turns speculative decoding off.
    pub draft_tokens: usize,
    /// Caches of this many recently left prompts are kept in memory, so a
    /// switch back to their document is warm; 0 keeps none.
    pub recent_prompts: usize,
    /// Where the thread choice is remembered across starts (a file in the
    /// state directory); `None` measures at every start.
    pub thread_memo: Option<PathBuf>,
}

impl EngineOptions {
    /// The most threads the engine runs with: `threads`, or every available core.
    pub fn threads_in_use(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        }
    }

    /// The thread counts the engine chooses from by measuring them: the
    /// configured count alone, or every core and one.
    pub fn thread_candidates(&self) -> Vec<usize> {
        let all = self.threads_in_use();
        match self.threads {
            0 if all > 1 => vec![all, 1],
            _ => vec![all],
        }
    }
}

/// What the engine is doing, published to the editor's status and `$/progress`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum EngineStatus {
    Loading,
    Ready(ModelInfo),
    Failed(String),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModelInfo {
    pub name: String,
    pub path: PathBuf,
    pub load_ms: u64,
    /// Prompt processing speed measured at load.
    pub prompt_tokens_per_s: f64,
    /// Input budget after sizing the context to the measured speed.
    pub input_budget: usize,
    pub context_tokens: u32,
    /// Threads decoding now: they follow the cores other processes leave.
    pub threads: usize,
}

/// Prefix and suffix text around the cursor, and the repository context in
/// front of them; the engine tokenizes and trims them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FimText {
    pub prefix: String,
    pub suffix: String,
    /// Snippets of other places, oldest first (see `context::repository`).
    /// Empty: a plain FIM prompt.
    pub context: Arc<[Snippet]>,
    /// The document's path as the model sees it after the context.
    pub path: String,
    /// The window starts where a span of the document does (see
    /// `context::span`): the engine fits it to the configured input, as it
    /// does the span's resident document, not to the budget the measured
    /// speed affords a cold prompt. Tokens the cache holds cost nothing.
    pub spanned: bool,
}

/// The span of the document at the cursor: the window from its start, and
/// the document the engine keeps resident for every place in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanText {
    /// A spanned window (`FimText::spanned`), with the repository context.
    pub window: FimText,
    /// The document in file order from the span's start; `window`'s prefix
    /// begins the same.
    pub document: String,
}

/// What a prewarm fills the cache with while the user pauses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prewarm {
    /// The window at the cursor that a cold prompt can afford.
    pub window: FimText,
    /// The span at the cursor; its window is filled instead where the cache
    /// already holds more of it.
    pub span: Option<SpanText>,
    /// Make the span's document resident first (the user is idle), so a
    /// request anywhere in it decodes only what is new at its cursor.
    pub resident: bool,
    /// With `resident`: the spans around this one, nearest first, whose
    /// documents are filled next while memory allows, and kept among the
    /// recent prompts (the fill grows outward from where the user is).
    pub neighbours: Vec<SpanText>,
    /// With `resident`: the user has arrived at the cursor, so the answer
    /// there is generated once the span is filled, and a request with the
    /// same prompt is answered from it (invariant 23: the same tokens).
    #[serde(default)]
    pub answer: Option<AnswerAhead>,
}

/// How far an answer generated ahead goes: the request's stop rule is not
/// known yet, so it stops at the end of the text, after `max_tokens`, or once
/// `lines` lines are complete; a request whose rule wants more gets these,
/// ended as by a token limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerAhead {
    pub max_tokens: usize,
    pub lines: usize,
}

/// A piece of a file the user has been looking at, shown to the model with
/// its path in front of the FIM prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snippet {
    pub path: String,
    pub text: String,
}

/// Decides, from the text generated so far, that the completion is finished
/// (end of line in single-line situations, end of the indentation scope, ...).
pub type StopRule = Box<dyn FnMut(&str) -> bool + Send>;

pub struct CompletionJob {
    /// The window a cold prompt can afford.
    pub text: FimText,
    /// The span at the cursor: the engine answers from its window where the
    /// cache makes that no dearer, and otherwise fills it after answering.
    pub span: Option<SpanText>,
    pub max_tokens: usize,
    pub stop: StopRule,
    /// Generation stops here and returns what is complete.
    pub deadline: Instant,
    pub cancel: CancelFlag,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// The model ended the text (end-of-generation or a FIM/control token).
    EndOfText,
    /// The stop rule said the completion is finished.
    Rule,
    MaxTokens,
    /// The deadline came during generation; the text is what was complete.
    Deadline,
    /// The deadline came before the prompt was processed; the cache keeps filling.
    PromptDeadline,
    Cancelled,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Generation {
    pub text: String,
    pub stop: StopReason,
    pub tokens_generated: usize,
    /// Draft tokens verified, and how many of them greedy sampling kept.
    pub tokens_drafted: usize,
    pub tokens_accepted: usize,
    /// Byte offset in `text` of the first token greedy sampling chose by a
    /// near tie (see the engine): from there, another batch shape may differ.
    pub near_tie_at: Option<usize>,
    /// Prompt tokens the KV cache lacked when the request came (the rest it
    /// held), and how many of them were decoded before the answer.
    pub tokens_to_decode: usize,
    pub tokens_decoded: usize,
    pub prompt_tokens: usize,
    /// A digest of the prompt's tokens: two answers with the same digest
    /// answered the same prompt, whatever their caches held.
    pub prompt_digest: u64,
    pub prompt_ms: f64,
    pub generate_ms: f64,
    /// Tokens of the answer generated ahead, while the user paused at the
    /// place (see `Prewarm::answer`), rather than when the request came.
    #[serde(default)]
    pub tokens_ahead: usize,
    /// The prompt's KV held a suffix moved by a RoPE shift (the one
    /// approximation a warm cache makes, for typing): this answer may differ
    /// from an empty cache's.
    #[serde(default)]
    pub moved_suffix: bool,
}

#[derive(Debug, thiserror::Error, Serialize, Deserialize)]
pub enum EngineError {
    #[error("the local model is still loading")]
    Loading,
    #[error("the local engine failed: {0}")]
    Failed(String),
    #[error("the inference thread has stopped")]
    Stopped,
}

/// Most tokens a local chat answer may have; the context keeps room for them.
pub const CHAT_OUTPUT_TOKENS: usize = 800;

/// A chat answer from the local model (explain downshifted to the local engine).
pub struct ChatJob {
    /// (role, content) pairs: `system`, `user`, `assistant`.
    pub messages: Vec<(String, String)>,
    pub max_tokens: usize,
    pub deadline: Instant,
    /// When the first piece of the answer is due: the chat yields its prompt
    /// to completions only while it can still keep this.
    pub first_token_by: Option<Instant>,
    pub cancel: CancelFlag,
    /// Where the answer's text goes as it is generated, piece by piece (the
    /// whole text also comes with the final `Generation`).
    pub pieces: Option<tokio::sync::mpsc::UnboundedSender<String>>,
}

impl Generation {
    pub(crate) fn cancelled() -> Generation {
        Generation {
            text: String::new(),
            stop: StopReason::Cancelled,
            tokens_generated: 0,
            tokens_drafted: 0,
            tokens_accepted: 0,
            near_tie_at: None,
            tokens_to_decode: 0,
            tokens_decoded: 0,
            prompt_tokens: 0,
            prompt_digest: 0,
            prompt_ms: 0.0,
            generate_ms: 0.0,
            tokens_ahead: 0,
            moved_suffix: false,
        }
    }
}

pub(crate) enum Job {
    Complete(
        CompletionJob,
        oneshot::Sender<Result<Generation, EngineError>>,
        EditorWindow,
    ),
    Chat(ChatJob, oneshot::Sender<Result<Generation, EngineError>>),
    /// Fill the cache without generating, while the user pauses; told when
    /// done (or stopped by a newer job) where someone waits for it.
    Prewarm(Prewarm, Option<oneshot::Sender<()>>, EditorWindow),
    Shutdown,
}

/// The editor window a job comes from, where windows share the engine
/// (`shared`): the process's own is [`EditorWindow::OWN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EditorWindow(pub(crate) u64);

impl EditorWindow {
    pub(crate) const OWN: EditorWindow = EditorWindow(0);
}

/// Handle to the inference thread. Cloning shares the thread.
#[derive(Clone, Debug)]
pub struct LocalEngine {
    jobs: mpsc::Sender<Job>,
    status: watch::Receiver<EngineStatus>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl LocalEngine {
    /// Starts the inference thread, which loads the model and then serves jobs.
    pub fn spawn(options: EngineOptions) -> LocalEngine {
        LocalEngine::on_thread(move |sender, rx, status| {
            // The thread must not hold its own queue open: the last handle
            // dropped without a shutdown ends it (before the process exits).
            drop(sender);
            engine::run(options, rx, status)
        })
    }

    /// A handle to a thread running `serve` on the handle's jobs (a sender
    /// of them too, for what it serves beside the handle) and its status.
    pub(crate) fn on_thread(
        serve: impl FnOnce(mpsc::Sender<Job>, mpsc::Receiver<Job>, watch::Sender<EngineStatus>)
        + Send
        + 'static,
    ) -> LocalEngine {
        let (jobs, rx) = mpsc::channel();
        let (status_tx, status) = watch::channel(EngineStatus::Loading);
        let sender = jobs.clone();
        let thread = std::thread::Builder::new()
            .name("switchyard-inference".into())
            .spawn(move || serve(sender, rx, status_tx))
            .expect("spawning the inference thread");
        LocalEngine {
            jobs,
            status,
            thread: Arc::new(Mutex::new(Some(thread))),
        }
    }

    /// Where windows cannot meet at a socket, each runs its own engine.
    #[cfg(not(unix))]
    pub fn shared(options: EngineOptions, _dir: &std::path::Path) -> LocalEngine {
        LocalEngine::spawn(options)
    }

    /// Stops the inference thread after its current step and waits for it, so the
    /// process can exit without llama.cpp running. Queued jobs are answered `Stopped`.
    pub fn shutdown(&self) {
        let _ = self.jobs.send(Job::Shutdown);
        let thread = self.thread.lock().expect("thread lock").take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    pub fn status(&self) -> EngineStatus {
        self.status.borrow().clone()
    }

    /// A receiver that sees every status change.
    pub fn watch_status(&self) -> watch::Receiver<EngineStatus> {
        self.status.clone()
    }

    /// Waits until the model is loaded (or failed to load).
    pub async fn wait_ready(&self) -> Result<ModelInfo, EngineError> {
        let mut status = self.status.clone();
        let settled = status
            .wait_for(|s| !matches!(s, EngineStatus::Loading))
            .await
            .map_err(|_| EngineError::Stopped)?;
        match &*settled {
            EngineStatus::Ready(info) => Ok(info.clone()),
            EngineStatus::Failed(reason) => Err(EngineError::Failed(reason.clone())),
            EngineStatus::Loading => unreachable!("wait_for returned a loading status"),
        }
    }

    /// Runs one completion. Answers at once while the model is not ready.
    pub async fn complete(&self, job: CompletionJob) -> Result<Generation, EngineError> {
        self.submit(|reply| Job::Complete(job, reply, EditorWindow::OWN))
            .await
    }

    /// Answers a chat in the model's own template.
    pub async fn chat(&self, job: ChatJob) -> Result<Generation, EngineError> {
        self.submit(|reply| Job::Chat(job, reply)).await
    }

    async fn submit(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<Generation, EngineError>>) -> Job,
    ) -> Result<Generation, EngineError> {
        match self.status() {
            EngineStatus::Loading => return Err(EngineError::Loading),
            EngineStatus::Failed(reason) => return Err(EngineError::Failed(reason)),
            EngineStatus::Ready(_) => {}
        }
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(job(reply))
            .map_err(|_| EngineError::Stopped)?;
        answer.await.map_err(|_| EngineError::Stopped)?
    }

    /// Fills the cache for a prompt the user is likely to ask for next. Best effort.
    pub fn prewarm(&self, prewarm: Prewarm) {
        if matches!(self.status(), EngineStatus::Ready(_)) {
            let _ = self
                .jobs
                .send(Job::Prewarm(prewarm, None, EditorWindow::OWN));
        }
    }

    /// Fills the cache as [`Self::prewarm`] does and waits until that is done
    /// or a newer job stopped it: for one-shot callers and tests, which would
    /// otherwise stop the prewarm with their next job.
    pub async fn prewarm_and_wait(&self, prewarm: Prewarm) -> Result<(), EngineError> {
        if let EngineStatus::Failed(reason) = self.status() {
            return Err(EngineError::Failed(reason));
        }
        let (done, wait) = oneshot::channel();
        self.jobs
            .send(Job::Prewarm(prewarm, Some(done), EditorWindow::OWN))
            .map_err(|_| EngineError::Stopped)?;
        wait.await.map_err(|_| EngineError::Stopped)
    }
}
