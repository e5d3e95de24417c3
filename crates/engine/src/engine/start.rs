//! Starting the engine: load the model, choose its threads, size its context,
//! then serve jobs until shutdown. A start that fails answers every job with
//! why, so no request waits forever.

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use tokio::sync::watch;

use super::aside::ChatTurn;
use super::cache::KvCache;
use super::idle::IdleFill;
use super::load::Probe;
use super::load::{backend, context_params, fim_tokens, load_model, sized_input_budget};
use super::queue::Queue;
use super::recent::RecentPrompts;
use super::threads;
use super::{CHUNK, Costs, Drafting, Engine};
use crate::lookup;
use crate::prompt::{FimTokens, PromptBudget};
use crate::{CHAT_OUTPUT_TOKENS, EngineError, EngineOptions, EngineStatus, Job, ModelInfo};

pub(crate) fn run(options: EngineOptions, rx: Receiver<Job>, status: watch::Sender<EngineStatus>) {
    let started = Instant::now();
    let (backend, model, fim) = match loaded(&options) {
        Ok(loaded) => loaded,
        Err(reason) => return fail(&status, rx, reason),
    };
    let (best, tuning) = match threads::starting_choice(backend, &model, &options) {
        Ok(start) => start,
        Err(reason) => return fail(&status, rx, reason),
    };
    let sizes = Sizes::of(&options);
    let params = context_params(sizes.context_tokens, tuning.threads);
    let ctx = match model.new_context(backend, params) {
        Ok(ctx) => ctx,
        Err(e) => return fail(&status, rx, format!("creating a llama.cpp context: {e}")),
    };
    let info = sizes.info(&options, started, &best);
    tracing::info!(?info, ?fim, threads = tuning.threads, "local model ready");
    let mut engine = Engine {
        model: &model,
        backend,
        cache: KvCache::new(ctx),
        context_tokens: sizes.context_tokens,
        answer_room: sizes.answer_room,
        tuning,
        fim,
        pieces: super::healing::Pieces::of(&model),
        budget: PromptBudget {
            input: info.input_budget,
            ..options.budget
        },
        configured_input: options.budget.input,
        reuse_cache: options.reuse_cache,
        recent: RecentPrompts::new(options.recent_prompts),
        idle: IdleFill::default(),
        ahead: None,
        chat: ChatTurn::default(),
        users_window: None,
        sheltered: None,
        repository: None,
        costs: Costs::measured(&best),
        drafting: Drafting {
            max_tokens: options.draft_tokens.min(CHUNK - 1),
            acceptance: lookup::Acceptance::default(),
        },
        jobs: Queue::new(rx),
        info,
        status,
    };
    engine
        .status
        .send_replace(EngineStatus::Ready(engine.info.clone()));
    engine.serve();
}

/// The model and its FIM tokens, or why it cannot complete code.
fn loaded(
    options: &EngineOptions,
) -> Result<(&'static LlamaBackend, LlamaModel, FimTokens), String> {
    let backend = backend()?;
    let model = load_model(backend, &options.model_path)?;
    let fim = fim_tokens(&model)?;
    Ok((backend, model, fim))
}

/// How large the context is, and what of it an answer keeps.
struct Sizes {
    context_tokens: u32,
    answer_room: usize,
}

impl Sizes {
    /// Room for the configured input (a span's document fills it; the sized
    /// budget follows the measured speed up to it), a FIM prompt's suffix
    /// section beside the document it borrows from, and a completion or a
    /// chat answer (explain downshifted to local).
    fn of(options: &EngineOptions) -> Sizes {
        let answer_room = options.max_output_tokens.max(CHAT_OUTPUT_TOKENS) + CHUNK;
        let suffix_section = options.budget.suffix + CHUNK;
        let budget = &options.budget;
        let context_tokens =
            (budget.input + budget.repository + suffix_section + answer_room) as u32;
        Sizes {
            context_tokens,
            answer_room,
        }
    }

    /// What the engine tells its users about itself once ready.
    fn info(&self, options: &EngineOptions, started: Instant, best: &Probe) -> ModelInfo {
        let speed = best.prompt_tokens_per_s;
        ModelInfo {
            name: options.model_name.clone(),
            path: options.model_path.clone(),
            load_ms: started.elapsed().as_millis() as u64,
            prompt_tokens_per_s: speed,
            input_budget: sized_input_budget(options.budget.input, speed),
            context_tokens: self.context_tokens,
            threads: best.threads,
        }
    }
}

impl Costs {
    /// The costs the chosen thread count measured, before any real decode.
    pub(super) fn measured(best: &Probe) -> Costs {
        let speed = best.prompt_tokens_per_s;
        Costs {
            chunk: Duration::from_secs_f64(CHUNK as f64 / speed),
            token: Duration::from_secs_f64(best.token_seconds),
            draft_token: Duration::from_secs_f64(1.0 / speed),
        }
    }
}

/// Publishes the failure and answers every later job with it, so no request waits forever.
fn fail(status: &watch::Sender<EngineStatus>, rx: Receiver<Job>, reason: String) {
    tracing::error!(%reason, "local engine unavailable");
    let _ = status.send(EngineStatus::Failed(reason.clone()));
    for job in rx {
        match job {
            Job::Complete(_, reply, _) | Job::Chat(_, reply) => {
                let _ = reply.send(Err(EngineError::Failed(reason.clone())));
            }
            Job::Prewarm(..) => {}
            Job::Shutdown => break,
        }
    }
}
