//! Inline completion: one path from a document and cursor to a suggestion, shared
//! by the LSP handlers and `switchyard complete`.
//!
//! It decides whether to complete, answers from the type-through cache when it can,
//! supersedes the document's previous request, and holds the hard deadline: when
//! the engine has not answered by then, the request is answered empty and the
//! engine's work is cancelled. Every request gets exactly one answer, a
//! superseded one too (ARCHITECTURE.md invariant 2).

pub mod acceptance;
pub mod controls;
mod placement;
pub mod postprocess;
pub mod stats;
pub mod status;
pub mod suitability;
pub mod tracking;
pub mod typethrough;
mod warming;

pub use warming::Warmth;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use dashmap::DashMap;
use futures::future::BoxFuture;
use ropey::Rope;
use tokio::time::Instant;

use controls::Snooze;
use postprocess::Situation;
use status::{CompletionStatus, Recent};
use switchyard_base::cancel::CancelFlag;
use switchyard_base::entry::{ChainEntry, ModelRef};
use switchyard_config::AutocompleteConfig;
use switchyard_context::fim::{self, CHARS_PER_TOKEN, WindowBudget};
use switchyard_context::repository::{OpenDocuments, RepositoryContext};
use switchyard_engine::{
    CompletionJob, EngineError, EngineStatus, FimText, Generation, LocalEngine, ModelInfo, Prewarm,
    SpanText, StopReason,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use typethrough::{Spot, TypeThrough};

/// What the completion path needs from an engine. The local engine is the real
/// one; unit tests of deadline behaviour substitute engines that stall.
pub trait FimEngine: Send + Sync {
    fn complete(&self, job: CompletionJob) -> BoxFuture<'static, Result<Generation, EngineError>>;
    fn prewarm(&self, prewarm: Prewarm);
    fn model(&self) -> Result<ModelInfo, EngineError>;
}

impl FimEngine for LocalEngine {
    fn complete(&self, job: CompletionJob) -> BoxFuture<'static, Result<Generation, EngineError>> {
        let engine = self.clone();
        Box::pin(async move { engine.complete(job).await })
    }

    fn prewarm(&self, prewarm: Prewarm) {
        LocalEngine::prewarm(self, prewarm);
    }

    fn model(&self) -> Result<ModelInfo, EngineError> {
        match self.status() {
            EngineStatus::Ready(info) => Ok(info),
            EngineStatus::Loading => Err(EngineError::Loading),
            EngineStatus::Failed(reason) => Err(EngineError::Failed(reason)),
        }
    }
}

/// The engine stops generating this long before the request's deadline, so its
/// partial answer arrives in time.
const ENGINE_MARGIN: Duration = Duration::from_millis(100);
/// Of the budget, this share is kept for the local engine when a remote entry
/// completes first (a warm local answer takes a few hundred ms on a laptop CPU).
const LOCAL_SHARE: f64 = 0.4;
/// The shortest pause after which the repository context may change
/// (llama.vim refreshes its ring buffer after a second too).
const MIN_CONTEXT_REFRESH_IDLE: Duration = Duration::from_secs(1);
/// Longest a warm-up may take.
const WARM_LIMIT: Duration = Duration::from_secs(120);

pub struct CompletionRequest {
    /// The document's identity (its URI) for per-document caches and superseding.
    pub doc: String,
    pub rope: Rope,
    /// Char index of the cursor.
    pub cursor: usize,
    pub deadline: Instant,
    pub cancel: CancelFlag,
    /// The document's path, which the rules in force are judged by (the
    /// router judges, at every remote attempt).
    pub document: Option<std::path::PathBuf>,
    pub trigger: Trigger,
    /// The document's language id, for `autocomplete.languages` (`None`:
    /// no language rule applies).
    pub language: Option<String>,
}

/// Who asked for a suggestion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Trigger {
    /// The editor, as the user types or moves.
    #[default]
    Automatic,
    /// The user (the editor's "trigger suggestion" key): never suppressed by
    /// the rules meant for automatic requests, and given a longer budget.
    Invoked,
}

#[derive(Clone, Debug)]
pub enum Origin {
    Model(Generation),
    /// A remote entry of `autocomplete.chain` answered within its share of the budget.
    Remote {
        provider: String,
        model: String,
    },
    TypeThrough,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoSuggestion {
    #[error("autocomplete is disabled in the configuration")]
    Disabled,
    #[error("not completing here: {0}")]
    Skipped(&'static str),
    #[error("completions are snoozed")]
    Snoozed { until_ms: u64 },
    #[error("completions are off for {0} (autocomplete.languages)")]
    LanguageOff(String),
    #[error("no local model: {0}")]
    NotReady(String),
    #[error("cancelled or superseded by a newer request")]
    Cancelled,
    #[error("the engine did not answer within the budget")]
    DeadlineMissed,
    #[error("the prompt did not fit in the budget; the cache keeps filling for the next request")]
    PromptStillFilling,
    #[error("the model suggested nothing useful")]
    Empty,
    /// The deadline cut the generation before it had a usable start (see
    /// `postprocess::usable_start`): late, not empty.
    #[error("the deadline cut the answer after {written_chars} characters, before a usable start")]
    Cut { written_chars: usize },
    #[error("the local engine failed: {0}")]
    EngineFailed(String),
}

#[derive(Clone, Debug)]
pub struct Suggestion {
    pub text: String,
    pub origin: Origin,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub result: Result<Suggestion, NoSuggestion>,
    pub model: Option<String>,
    pub elapsed: Duration,
}

/// Remote fill-in-the-middle for the entries `autocomplete.chain` puts before
/// `local`. The routing core implements it; completion knows only this.
pub trait RemoteFim: Send + Sync {
    /// A raw answer and the entry that gave it, if one the plan cleared for
    /// `ask` (its path rule included) answered by its deadline.
    fn complete<'a>(
        &'a self,
        ask: RemoteAsk<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Option<(String, ModelRef)>>;
}

/// What a remote completion asks for.
#[derive(Clone, Copy, Debug)]
pub struct RemoteAsk<'a> {
    /// The text around the cursor.
    pub text: &'a FimText,
    pub doc: &'a str,
    /// The document's path, which the rules in force are judged by.
    pub document: Option<&'a std::path::Path>,
    pub deadline: Instant,
}

pub struct CompletionService {
    engine: RwLock<Option<Arc<dyn FimEngine>>>,
    /// For remote entries in `autocomplete.chain`.
    remote: Option<Arc<dyn RemoteFim>>,
    /// The settings in force at each call (the core's, followed; or fixed).
    settings: Arc<dyn Fn() -> AutocompleteConfig + Send + Sync>,
    type_through: TypeThrough,
    /// The line each document's prefix window starts at (see `switchyard_context::fim`).
    anchors: DashMap<String, usize>,
    /// The running request per document; a newer one cancels it.
    inflight: DashMap<String, CancelFlag>,
    /// Snippets of other places in front of the window.
    repository: RepositoryContext,
    /// The editor's open documents, where definitions are looked up.
    open_documents: Option<Arc<dyn Fn() -> OpenDocuments + Send + Sync>>,
    /// The latest prewarm asked for while the model was loading, run once it is
    /// ready, so the first suggestion in a document opened meanwhile is warm.
    deferred_prewarm: Mutex<Option<DeferredPrewarm>>,
    snooze: Arc<Snooze>,
    /// How recent automatic requests went, for the "late" state.
    recent: Mutex<Recent>,
    /// Why completions were off for the document last asked about.
    off_here: Mutex<Option<String>>,
    /// Why there is no model, when getting one failed.
    model_failure: Mutex<Option<String>>,
    status: watch::Sender<CompletionStatus>,
}

struct DeferredPrewarm {
    doc: String,
    rope: Rope,
    cursor: usize,
}

impl CompletionService {
    /// A service with fixed settings (the CLI, probes, benchmarks).
    pub fn new(autocomplete: AutocompleteConfig) -> CompletionService {
        CompletionService::following(move || autocomplete.clone())
    }

    /// A service that reads the settings `settings` gives at each request.
    pub fn following(
        settings: impl Fn() -> AutocompleteConfig + Send + Sync + 'static,
    ) -> CompletionService {
        CompletionService {
            engine: RwLock::new(None),
            remote: None,
            settings: Arc::new(settings),
            type_through: TypeThrough::default(),
            anchors: DashMap::new(),
            inflight: DashMap::new(),
            repository: RepositoryContext::default(),
            open_documents: None,
            deferred_prewarm: Mutex::new(None),
            snooze: Arc::new(Snooze::in_memory()),
            recent: Mutex::default(),
            off_here: Mutex::default(),
            model_failure: Mutex::default(),
            status: watch::channel(CompletionStatus::default()).0,
        }
    }

    pub fn set_engine(&self, engine: Option<Arc<dyn FimEngine>>) {
        *self.engine.write().expect("engine lock") = engine;
        *self.model_failure.lock().expect("failure lock") = None;
        self.publish_status();
    }

    /// The service with its snooze kept in `snooze` (the state directory,
    /// for the editors) instead of in memory.
    pub fn with_snooze(self, snooze: Arc<Snooze>) -> CompletionService {
        let service = CompletionService { snooze, ..self };
        service.publish_status();
        service
    }

    pub fn snooze(&self) -> Arc<Snooze> {
        self.snooze.clone()
    }

    /// How long a request may take: the budget, or for a request the user
    /// asked for the invoked budget (never less than the automatic one: the
    /// user is waiting for it).
    pub fn budget(&self, trigger: Trigger) -> Duration {
        let autocomplete = self.config();
        Duration::from_millis(match trigger {
            Trigger::Automatic => autocomplete.budget_ms,
            Trigger::Invoked => autocomplete.invoked_budget_ms.max(autocomplete.budget_ms),
        })
    }

    /// The service with `remote` serving the remote entries of the chain.
    pub fn with_remote(self, remote: Arc<dyn RemoteFim>) -> CompletionService {
        CompletionService {
            remote: Some(remote),
            ..self
        }
    }

    /// The service with the repository context looking up definitions in
    /// what `documents` lists.
    pub fn with_open_documents(
        self,
        documents: Arc<dyn Fn() -> OpenDocuments + Send + Sync>,
    ) -> CompletionService {
        CompletionService {
            open_documents: Some(documents),
            ..self
        }
    }

    pub fn config(&self) -> AutocompleteConfig {
        (self.settings)()
    }

    fn engine(&self) -> Result<(Arc<dyn FimEngine>, ModelInfo), NoSuggestion> {
        let engine = self.engine.read().expect("engine lock").clone();
        let engine = engine
            .ok_or_else(|| NoSuggestion::NotReady("no model is configured or downloaded".into()))?;
        let info = engine
            .model()
            .map_err(|e| NoSuggestion::NotReady(e.to_string()))?;
        Ok((engine, info))
    }

    /// Repository context tokens: as configured, but at most twice the input
    /// budget, so its size follows the machine's speed like the window's.
    fn repository_budget(config: &AutocompleteConfig, info: &ModelInfo) -> usize {
        config.repository_tokens.min(2 * info.input_budget)
    }

    /// How long the user must have been idle before the repository context
    /// may change: a second, or as long as refilling what a change costs (the
    /// snippets one pause may add, and the window after them) takes at the
    /// measured prompt speed. A pause that long is reading, not typing, so
    /// the refill is usually done before the next keystroke.
    pub fn context_refresh_idle(&self) -> Duration {
        let Ok((_, info)) = self.engine() else {
            return MIN_CONTEXT_REFRESH_IDLE;
        };
        let refill = info.input_budget + Self::repository_budget(&self.config(), &info) / 2;
        let speed = info.prompt_tokens_per_s.max(1.0);
        MIN_CONTEXT_REFRESH_IDLE.max(Duration::from_secs_f64(refill as f64 / speed))
    }

    /// The user has paused at `cursor` (see [`Self::context_refresh_idle`]):
    /// the repository context takes in the place and definitions from open
    /// documents. Returns whether that changed it (the cache then wants a
    /// prewarm).
    pub fn refresh_context(&self, doc: &str, rope: &Rope, cursor: usize) -> bool {
        let config = self.config();
        let Ok((_, info)) = self.engine() else {
            return false;
        };
        let tokens = Self::repository_budget(&config, &info);
        let open = self
            .open_documents
            .as_ref()
            .map(|list| list())
            .unwrap_or_default();
        let line = rope.char_to_line(cursor.min(rope.len_chars()));
        let changed = self
            .repository
            .refresh(doc, rope, line, &open, tokens * CHARS_PER_TOKEN);
        tracing::debug!(doc, line, changed, "repository context refresh");
        changed
    }

    /// Drops what is cached for a closed document.
    pub fn forget(&self, doc: &str) {
        self.anchors.remove(doc);
        self.repository.forget(doc);
        self.deferred_prewarm
            .lock()
            .expect("deferred prewarm lock")
            .take_if(|deferred| deferred.doc == doc);
        self.type_through.forget(doc);
        if let Some((_, flag)) = self.inflight.remove(doc) {
            flag.cancel();
        }
    }

    pub async fn complete(&self, request: CompletionRequest) -> Outcome {
        let started = Instant::now();
        let (result, model) = self.suggest(&request).await;
        self.noted(&request, &result);
        Outcome {
            result,
            model,
            elapsed: started.elapsed(),
        }
    }

    /// A suggestion from a remote entry ahead of `local` in the chain, if one
    /// answers within its share of the budget. Whether the document may leave
    /// is the plan's to judge: the request's path rule goes with it.
    async fn remote(&self, asked: Asked<'_>) -> Option<Suggestion> {
        let Asked {
            request, config, ..
        } = asked;
        if config.chain.first().is_none_or(ChainEntry::is_local) {
            return None;
        }
        let remote = self.remote.clone()?;
        let budget = WindowBudget::for_input(config.input_tokens, config.suffix_tokens);
        let text = fim::window(&request.rope, request.cursor, budget, None).text;
        let left = request.deadline.saturating_duration_since(Instant::now());
        let deadline = request.deadline - left.mul_f64(LOCAL_SHARE);
        let cancel = CancellationToken::new();
        let _cancel_when_done = cancel.clone().drop_guard();
        let asking = RemoteAsk {
            text: &text,
            doc: &request.doc,
            document: request.document.as_deref(),
            deadline,
        };
        let (raw, entry) = remote.complete(asking, &cancel).await?;
        let text = asked
            .situation
            .finish(&switchyard_context::chat::code_block(&raw), false)?;
        self.type_through.remember(&request.doc, asked.spot, &text);
        Some(Suggestion {
            text,
            origin: Origin::Remote {
                provider: entry.provider,
                model: entry.model,
            },
        })
    }

    async fn suggest(
        &self,
        request: &CompletionRequest,
    ) -> (Result<Suggestion, NoSuggestion>, Option<String>) {
        let config = self.config();
        if let Err(off) = self.turned_on(request, &config) {
            return (Err(off), None);
        }
        if let Some(reason) = suitability::unsuitable(&request.rope) {
            return (Err(NoSuggestion::Skipped(reason)), None);
        }
        let (line, line_before, situation) = situation_at(&request.rope, request.cursor);
        if let Some(reason) = situation.skip_reason()
            && request.trigger == Trigger::Automatic
        {
            return (Err(NoSuggestion::Skipped(reason)), None);
        }
        let spot = Spot {
            line,
            line_count: request.rope.len_lines(),
            line_before: &line_before,
            line_after: &situation.line_after,
        };
        if let Some(rest) = self.type_through.lookup(&request.doc, spot) {
            return (
                Ok(Suggestion {
                    text: rest,
                    origin: Origin::TypeThrough,
                }),
                None,
            );
        }
        let asked = Asked {
            request,
            config: &config,
            situation: &situation,
            spot,
        };
        if let Some(suggestion) = self.remote(asked).await {
            return (Ok(suggestion), None);
        }
        let (engine, info) = match self.engine() {
            Ok(ready) => ready,
            Err(e) => return (Err(e), None),
        };
        let model = Some(info.name.clone());
        (self.local(asked, engine, &info).await, model)
    }

    /// A suggestion from the local model, by the request's deadline.
    async fn local(
        &self,
        asked: Asked<'_>,
        engine: Arc<dyn FimEngine>,
        info: &ModelInfo,
    ) -> Result<Suggestion, NoSuggestion> {
        let Asked {
            request, config, ..
        } = asked;
        let (rope, doc) = (&request.rope, &request.doc);
        let cursor = request.cursor.min(rope.len_chars());
        let placed = self.place(doc, rope, cursor, info, request.trigger);
        let text = self.fim_text(doc, placed);
        let span = self.span(doc, rope, cursor, info, request.trigger);
        let rule = asked.situation.clone();
        let job = CompletionJob {
            text: text.clone(),
            span: span.clone(),
            max_tokens: config.output_tokens,
            stop: Box::new(move |generated| rule.boundary(generated).is_some()),
            deadline: request
                .deadline
                .checked_sub(ENGINE_MARGIN)
                .unwrap_or(request.deadline)
                .into_std(),
            cancel: request.cancel.clone(),
        };
        let generation = self.generated(request, engine.as_ref(), job).await?;
        let truncated = match generation.stop {
            StopReason::Cancelled => return Err(NoSuggestion::Cancelled),
            StopReason::PromptDeadline => return Err(NoSuggestion::PromptStillFilling),
            StopReason::Deadline | StopReason::MaxTokens => true,
            StopReason::EndOfText | StopReason::Rule => false,
        };
        let Some(suggestion) = asked.situation.finish(&generation.text, truncated) else {
            tracing::debug!(raw = ?generation.text, stop = ?generation.stop, "nothing useful in the generation");
            return Err(match generation.stop {
                StopReason::Deadline => NoSuggestion::Cut {
                    written_chars: generation.text.chars().count(),
                },
                _ => NoSuggestion::Empty,
            });
        };
        self.type_through.remember(doc, asked.spot, &suggestion);
        if config.precompute_next {
            engine.prewarm(accepted(text, span, &suggestion));
        }
        Ok(Suggestion {
            text: suggestion,
            origin: Origin::Model(generation),
        })
    }

    /// The engine's generation for `job`, the only one in flight for its
    /// document (a newer request cancels an older one).
    async fn generated(
        &self,
        request: &CompletionRequest,
        engine: &dyn FimEngine,
        job: CompletionJob,
    ) -> Result<Generation, NoSuggestion> {
        if let Some(previous) = self
            .inflight
            .insert(request.doc.clone(), request.cancel.clone())
        {
            previous.cancel();
        }
        let answer = tokio::time::timeout_at(request.deadline, engine.complete(job)).await;
        self.inflight
            .remove_if(&request.doc, |_, flag| flag.is_same(&request.cancel));
        match answer {
            Err(_elapsed) => {
                request.cancel.cancel();
                Err(NoSuggestion::DeadlineMissed)
            }
            Ok(Err(EngineError::Loading)) => Err(NoSuggestion::NotReady(
                "the local model is still loading".into(),
            )),
            Ok(Err(e)) => Err(NoSuggestion::EngineFailed(e.to_string())),
            Ok(Ok(generation)) => Ok(generation),
        }
    }
}

/// What a request asks, read once: its situation at the cursor and the
/// configuration in force.
#[derive(Clone, Copy)]
struct Asked<'a> {
    request: &'a CompletionRequest,
    config: &'a AutocompleteConfig,
    situation: &'a Situation,
    spot: Spot<'a>,
}

/// The cursor's line, the text before it on that line, and its situation.
fn situation_at(rope: &Rope, cursor: usize) -> (usize, String, Situation) {
    let cursor = cursor.min(rope.len_chars());
    let line = rope.char_to_line(cursor);
    let line_before = rope.slice(rope.line_to_char(line)..cursor).to_string();
    let lookahead = rope
        .slice(cursor..(cursor + 2_000).min(rope.len_chars()))
        .to_string();
    let situation = Situation::new(&line_before, &lookahead);
    (line, line_before, situation)
}

/// The prewarm of the window as it will be once `suggestion` is accepted.
fn accepted(text: FimText, span: Option<SpanText>, suggestion: &str) -> Prewarm {
    let accepted = |text: FimText| FimText {
        prefix: format!("{}{suggestion}", text.prefix),
        ..text
    };
    Prewarm {
        window: accepted(text),
        span: span.map(|span| SpanText {
            window: accepted(span.window),
            ..span
        }),
        resident: false,
        neighbours: Vec::new(),
        answer: None,
    }
}

#[cfg(test)]
mod tests;
