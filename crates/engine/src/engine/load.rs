//! Loading the model and sizing its context: llama.cpp's process-wide backend,
//! the GGUF check, the model's fill-in-the-middle tokens, context parameters and
//! the prompt speed measured at load that caps the input budget.

use std::fs::File;
use std::io::Read;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;

use super::CHUNK;
use crate::prompt::{FimOrder, FimTokens};

/// A cold prompt should fill in the background within this long; the input budget
/// shrinks on machines too slow for that.
const COLD_FILL_SECONDS: f64 = 4.0;
const MIN_INPUT_BUDGET: usize = 256;

/// llama.cpp's backend may be initialised once per process.
pub fn backend() -> Result<&'static LlamaBackend, String> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

pub(super) fn load_model(backend: &LlamaBackend, path: &Path) -> Result<LlamaModel, String> {
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(|e| format!("cannot read model file {}: {e}", path.display()))?;
    if &magic != b"GGUF" {
        return Err(format!(
            "{} is not a GGUF model file (it starts with {:?}); run `switchyard models verify`",
            path.display(),
            String::from_utf8_lossy(&magic)
        ));
    }
    LlamaModel::load_from_file(backend, path, &LlamaModelParams::default()).map_err(|e| {
        format!("llama.cpp could not load {} ({e}); the file may be corrupt: run `switchyard models verify`", path.display())
    })
}

pub(super) fn fim_tokens(model: &LlamaModel) -> Result<FimTokens, String> {
    let vocab = model.vocab();
    let (prefix, suffix, middle) = (vocab.fim_pre().0, vocab.fim_suf().0, vocab.fim_mid().0);
    if prefix < 0 || suffix < 0 || middle < 0 {
        return Err(
            "the model has no fill-in-the-middle tokens; choose a coder model with FIM support"
                .into(),
        );
    }
    let prefix_text =
        String::from_utf8_lossy(&vocab.token_to_piece(LlamaToken(prefix), true, None)).into_owned();
    Ok(FimTokens {
        prefix,
        suffix,
        middle,
        bos: vocab.should_add_bos().then(|| vocab.bos().0),
        order: FimOrder::from_prefix_token_text(&prefix_text),
        repo: Some(vocab.fim_rep().0).filter(|&t| t >= 0),
        file_sep: Some(vocab.fim_sep().0).filter(|&t| t >= 0),
    })
}

/// The engine's llama.cpp context: `n_ctx` tokens, prompts decoded in
/// chunks of [`CHUNK`].
///
/// Flash attention is off on the CPU: llama.cpp's default (auto) turns it on,
/// and its CPU kernel is slow for the engine's small batches at depth. Measured
/// with `engine_speed` (BENCHMARKS.md): batches of 32 after 400–700 cached
/// tokens decode at 1.5–1.7x the speed without it, single tokens at 1.2x;
/// batches of 64 and more are about the same either way. Where llama.cpp runs the model on a GPU
/// (Metal), its kernels there are left to choose.
pub fn context_params(n_ctx: u32, threads: usize) -> LlamaContextParams {
    let flash_attention = if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_AUTO
    } else {
        llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED
    };
    LlamaContextParams::default()
        .with_flash_attention_policy(flash_attention)
        .with_n_ctx(NonZeroU32::new(n_ctx))
        .with_n_batch(CHUNK as u32)
        .with_n_ubatch(CHUNK as u32)
        .with_n_threads(threads as i32)
        .with_n_threads_batch(threads as i32)
        // A second sequence parks a shifted suffix while the gap before it is
        // decoded; a third holds a resident document's tail while a FIM prompt
        // borrows its start.
        .with_n_seq_max(3)
        .with_kv_unified(true)
}

/// What a scratch context measured with some number of threads.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct Probe {
    pub threads: usize,
    pub prompt_tokens_per_s: f64,
    /// One generated token's decode.
    pub token_seconds: f64,
}

/// Prompt tokens and generated tokens of the request the thread count is
/// chosen for: a completion at a new place decodes a chunk or so and
/// generates a line.
const PROBE_PROMPT_TOKENS: f64 = CHUNK as f64;
const PROBE_GENERATED_TOKENS: f64 = 16.0;
const PROBE_STEPS: usize = 4;

impl Probe {
    /// Seconds such a request takes at these speeds.
    pub(super) fn request_seconds(&self) -> f64 {
        PROBE_PROMPT_TOKENS / self.prompt_tokens_per_s.max(1e-6)
            + PROBE_GENERATED_TOKENS * self.token_seconds
    }
}

/// Decodes a few prompt chunks and then single tokens in a scratch context
/// with `threads` threads, and times them; `None` when `interrupted` said
/// stop between two decodes (a newer job arrived).
pub(super) fn probe(
    backend: &LlamaBackend,
    model: &LlamaModel,
    threads: usize,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Option<Probe>, String> {
    let mut ctx = model
        .new_context(backend, context_params(4 * CHUNK as u32, threads))
        .map_err(|e| format!("creating a llama.cpp context: {e}"))?;
    let sample = "fn main() {\n    let values: Vec<u32> = (0..10).map(|x| x * 2).collect();\n    println!(\"{values:?}\");\n}\n".repeat(8);
    let tokens = model.vocab().tokenize(sample.as_bytes(), false, false);
    let tokens = &tokens[..tokens.len().min(3 * CHUNK)];
    let mut batch = LlamaBatch::new(CHUNK, 1);
    let mut decode = |batch: &mut LlamaBatch, tokens: &[LlamaToken], at: usize| {
        batch.clear();
        for (j, &t) in tokens.iter().enumerate() {
            batch
                .add(t, (at + j) as i32, &[0], j + 1 == tokens.len())
                .map_err(|e| e.to_string())?;
        }
        ctx.decode(batch)
            .map_err(|e| format!("llama.cpp decode failed: {e}"))
    };
    // The first chunk warms caches and allocations; time the rest.
    let mut prompt_seconds = 0.0;
    for (i, chunk) in tokens.chunks(CHUNK).enumerate() {
        if interrupted() {
            return Ok(None);
        }
        let started = Instant::now();
        decode(&mut batch, chunk, i * CHUNK)?;
        if i > 0 {
            prompt_seconds += started.elapsed().as_secs_f64();
        }
    }
    let mut token_seconds = f64::MAX;
    for step in 0..PROBE_STEPS {
        if interrupted() {
            return Ok(None);
        }
        let started = Instant::now();
        decode(&mut batch, &tokens[step..=step], tokens.len() + step)?;
        // The fastest step: what the threads can do, without the hiccups.
        token_seconds = token_seconds.min(started.elapsed().as_secs_f64());
    }
    let timed = tokens.len() - CHUNK.min(tokens.len());
    Ok(Some(Probe {
        threads,
        prompt_tokens_per_s: timed as f64 / prompt_seconds.max(1e-6),
        token_seconds,
    }))
}

pub(super) fn sized_input_budget(configured: usize, tokens_per_s: f64) -> usize {
    let affordable = (tokens_per_s * COLD_FILL_SECONDS) as usize;
    configured.min(affordable.max(MIN_INPUT_BUDGET))
}

/// The input budget for `tokens_per_s`, when it is more than a third away from
/// `current`: a resized budget moves the next window, which then starts cold, so
/// the wobble of an idle machine (±20 %, and later chunks of a long prompt are
/// slower) leaves it alone while a busy machine (half the speed) does not.
pub(super) fn resized_input_budget(
    current: usize,
    configured: usize,
    tokens_per_s: f64,
) -> Option<usize> {
    let budget = sized_input_budget(configured, tokens_per_s);
    (budget.abs_diff(current) * 3 > current).then_some(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_follows_large_speed_changes_only() {
        // 400 tokens at 100 tokens/s; the machine gets busy, then idle again.
        assert_eq!(resized_input_budget(400, 2000, 70.0), None);
        assert_eq!(resized_input_budget(400, 2000, 50.0), Some(256));
        assert_eq!(resized_input_budget(256, 2000, 30.0), None, "at the floor");
        assert_eq!(resized_input_budget(256, 2000, 100.0), Some(400));
        assert_eq!(
            resized_input_budget(400, 200, 100.0),
            Some(200),
            "never above the configured budget"
        );
    }

    #[test]
    fn slow_machines_get_a_smaller_input_budget() {
        assert_eq!(sized_input_budget(2000, 1000.0), 2000);
        assert_eq!(sized_input_budget(2000, 100.0), 400);
        assert_eq!(sized_input_budget(2000, 1.0), MIN_INPUT_BUDGET);
    }
}
