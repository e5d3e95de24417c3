//! The machine's limit and what the completion path gets of it, in one run.
//!
//! Raw: llama.cpp's own decode through llama-cpp-2 on the test model. First
//! as llama-bench measures it: a prompt of 32, 128 and 512 tokens decoded in
//! one batch on an empty context (pp32, pp128, pp512) and 32 tokens decoded
//! one at a time on an empty context (tg32), with llama-bench's defaults.
//! Then in the engine's shape (its own context parameters): the
//! window's depth decoded in batches of 32 (the engine checks its cancel flag
//! and deadline between batches), and 32 tokens generated one at a time after
//! that depth; and the same with llama.cpp's default flash attention, which
//! the engine turns off on the CPU (the ratio is that choice's speed-up).
//!
//! The completion path: switchyard's engine (`LocalEngine`, the settings a
//! server runs with, recent prompts off) answering completion jobs whose
//! prompts share nothing with the one before (each cuts a different file), so
//! the whole window is decoded. Prompt speed is the tokens decoded over the
//! prompt time, at the depth the engine sized the window to; generation speed
//! is the tokens generated over the generation time (up to 32 tokens, no stop
//! rule), with speculative drafts off (one token per step, as tg32) and on (as
//! served). Each is set against the engine-shaped raw figure.
//!
//! Run: `cargo bench --bench engine_speed` (fetch the model first with
//! `models/fetch-test-model.sh`). `ENGINE_SPEED_REPS` (default 5) runs of each
//! figure; the median and the range are printed. `ENGINE_SPEED_HOG=1`: busy
//! loops on every core while measuring (a build beside the editor).
//! `ENGINE_SPEED_THREADS=N`: the engine's `local.threads` (default: the
//! machine's cores), for both the engine and the raw decode; pinned, so the
//! engine does not choose its own count here.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_AUTO;
use switchyard_base::cancel::CancelFlag;
use switchyard_config::Config;
use switchyard_engine::{
    CompletionJob, FimText, Generation, LocalEngine, ModelInfo, llama_backend, llama_context_params,
};

#[path = "../tests/support/cpu_hog.rs"]
mod cpu_hog;
#[path = "../tests/support/spread.rs"]
mod spread;

use spread::summary;

/// Source files to cut prompts from: each job's prompt shares nothing with
/// the one before.
const FILES: [&str; 6] = [
    include_str!("../tests/support/sample.rs"),
    include_str!("../tests/support/infilling.rs"),
    include_str!("../tests/support/lsp_client.rs"),
    include_str!("../tests/support/browser.rs"),
    include_str!("../tests/support/fake_provider.rs"),
    include_str!("../tests/support/scenario.rs"),
];
const GENERATED: usize = 32;

fn reps() -> usize {
    std::env::var("ENGINE_SPEED_REPS").map_or(5, |r| r.parse().expect("ENGINE_SPEED_REPS"))
}

fn row(what: &str, values: Vec<f64>, limit: Option<f64>) -> f64 {
    let (median, min, max) = summary(values);
    let ratio = limit.map_or(String::new(), |l| format!("{:.2}", median / l));
    println!("| {what} | {median:.1} | {min:.1}–{max:.1} | {ratio} |");
    median
}

/// A context decoding `batch` tokens per call, in `shape`.
fn context(model: &LlamaModel, shape: Shape, batch: usize) -> LlamaContext<'_> {
    let params = match shape.kind {
        // llama-bench's defaults (flash attention auto, as the engine ran before).
        Kind::LlamaBench => LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(1024))
            .with_n_threads(shape.threads as i32)
            .with_n_threads_batch(shape.threads as i32),
        Kind::Engine => llama_context_params(shape.n_ctx, shape.threads),
        Kind::EngineWithFlashAttention => llama_context_params(shape.n_ctx, shape.threads)
            .with_flash_attention_policy(LLAMA_FLASH_ATTN_TYPE_AUTO),
    };
    let backend = llama_backend().expect("llama.cpp backend");
    model
        .new_context(
            backend,
            params
                .with_n_batch(batch as u32)
                .with_n_ubatch(batch as u32),
        )
        .expect("a llama.cpp context")
}

#[derive(Clone, Copy)]
struct Shape {
    kind: Kind,
    n_ctx: u32,
    threads: usize,
}

#[derive(Clone, Copy)]
enum Kind {
    LlamaBench,
    /// The engine's own context parameters.
    Engine,
    /// The engine's, with llama.cpp's default flash attention (auto: on for
    /// the CPU), as the engine ran before turning it off.
    EngineWithFlashAttention,
}

fn tokens(model: &LlamaModel, n: usize) -> Vec<LlamaToken> {
    let text = FILES.concat();
    let tokens = model.vocab().tokenize(text.as_bytes(), false, false);
    assert!(tokens.len() >= n, "{} tokens of text", tokens.len());
    tokens[..n].to_vec()
}

/// Decodes `tokens` from position 0 of an empty cache in batches of `batch`;
/// tokens per second.
fn prompt_speed(ctx: &mut LlamaContext<'_>, tokens: &[LlamaToken], batch: usize) -> f64 {
    ctx.clear_kv_cache();
    let started = Instant::now();
    decode(ctx, tokens, batch);
    tokens.len() as f64 / started.elapsed().as_secs_f64()
}

fn decode(ctx: &mut LlamaContext<'_>, tokens: &[LlamaToken], batch: usize) {
    let mut chunk = LlamaBatch::new(batch, 1);
    for (i, part) in tokens.chunks(batch).enumerate() {
        chunk.clear();
        for (j, &token) in part.iter().enumerate() {
            let last = i * batch + j + 1 == tokens.len();
            chunk
                .add(token, (i * batch + j) as i32, &[0], last)
                .expect("batch room");
        }
        ctx.decode(&mut chunk).expect("decode");
    }
}

/// Decodes [`GENERATED`] tokens one at a time after `depth` (the tokens
/// already in the cache, decoded first and not timed); tokens per second.
fn generation_speed(ctx: &mut LlamaContext<'_>, depth: &[LlamaToken]) -> f64 {
    ctx.clear_kv_cache();
    decode(ctx, depth, 32);
    let token = depth.first().copied().unwrap_or(LlamaToken(0));
    let mut one = LlamaBatch::new(1, 1);
    let started = Instant::now();
    for position in depth.len()..depth.len() + GENERATED {
        one.clear();
        one.add(token, position as i32, &[0], true)
            .expect("batch room");
        ctx.decode(&mut one).expect("decode");
    }
    GENERATED as f64 / started.elapsed().as_secs_f64()
}

fn repeated(reps: usize, mut measure: impl FnMut() -> f64) -> Vec<f64> {
    measure(); // warm-up: allocations, caches
    (0..reps).map(|_| measure()).collect()
}

/// The limits the completion path is held to: llama-bench's figures, and the
/// same decode in the engine's own shape at the depth it works at.
struct Limits {
    prompt: f64,
    generation: f64,
}

fn raw(model: &LlamaModel, engine: Shape, depth: usize, reps: usize) -> Limits {
    let bench = Shape {
        kind: Kind::LlamaBench,
        ..engine
    };
    for n in [32, 128, 512] {
        let mut ctx = context(model, bench, n);
        let prompt = tokens(model, n);
        let speeds = repeated(reps, || prompt_speed(&mut ctx, &prompt, n));
        row(
            &format!("llama-bench shape: pp{n} (one batch)"),
            speeds,
            None,
        );
    }
    let mut ctx = context(model, bench, 32);
    row(
        "llama-bench shape: tg32",
        repeated(reps, || generation_speed(&mut ctx, &[])),
        None,
    );
    let prompt = tokens(model, depth);
    let at_depth = |shape: Shape, name: &str| {
        let mut ctx = context(model, shape, 32);
        Limits {
            prompt: row(
                &format!("{name}: {depth} tokens in batches of 32"),
                repeated(reps, || prompt_speed(&mut ctx, &prompt, 32)),
                None,
            ),
            generation: row(
                &format!("{name}: tg32 after {depth} tokens"),
                repeated(reps, || generation_speed(&mut ctx, &prompt)),
                None,
            ),
        }
    };
    let flash = Shape {
        kind: Kind::EngineWithFlashAttention,
        ..engine
    };
    at_depth(
        flash,
        "engine shape, flash attention on (llama.cpp's default)",
    );
    at_depth(engine, "engine shape")
}

/// A completion job cut from the middle of file `i` (mod the files).
fn job(i: usize) -> CompletionJob {
    let file = FILES[i % FILES.len()];
    let mut cut = file.len() * (2 + i % 3) / 5;
    while !file.is_char_boundary(cut) {
        cut += 1;
    }
    CompletionJob {
        text: FimText {
            prefix: file[..cut].to_owned(),
            suffix: file[cut..].to_owned(),
            context: Arc::new([]),
            path: format!("bench/file{}.rs", i % FILES.len()),
            spanned: false,
        },
        span: None,
        max_tokens: GENERATED,
        stop: Box::new(|_| false),
        deadline: Instant::now() + Duration::from_secs(60),
        cancel: CancelFlag::default(),
    }
}

/// What one engine did with the jobs, and how it ran.
struct PathRun {
    generations: Vec<Generation>,
    info: ModelInfo,
    path: PathBuf,
    threads: usize,
}

async fn completion_path(config: &Config, drafts: bool, reps: usize) -> PathRun {
    let model = switchyard_config::local_setup::resolve(config).expect("model resolves");
    let path = switchyard_config::local_setup::ensure_present(
        &model,
        false,
        &switchyard_models::NoProgress,
    )
    .await
    .expect("test model present: run models/fetch-test-model.sh");
    let mut options = switchyard_config::local_setup::engine_options(&model, &path, config);
    options.recent_prompts = 0;
    if !drafts {
        options.draft_tokens = 0;
    }
    let threads = options.threads_in_use();
    let engine = LocalEngine::spawn(options);
    let info = engine.wait_ready().await.expect("model loads");
    engine.complete(job(reps)).await.expect("warm-up job"); // allocations, caches
    let mut generations = Vec::new();
    for i in 0..reps {
        generations.push(engine.complete(job(i)).await.expect("completion job"));
    }
    engine.shutdown();
    PathRun {
        generations,
        info,
        path,
        threads,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let reps = reps();
    let mut config = Config::default();
    config.local.threads = match std::env::var("ENGINE_SPEED_THREADS") {
        Ok(threads) => threads.parse().expect("ENGINE_SPEED_THREADS"),
        Err(_) => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    let hog =
        (std::env::var("ENGINE_SPEED_HOG").as_deref() == Ok("1")).then(cpu_hog::CpuHog::start);
    let plain = completion_path(&config, false, reps).await;
    let drafted = completion_path(&config, true, reps).await;
    let info = &plain.info;
    println!(
        "engine speed: {} threads, {reps} runs each{}; the engine sized its window to {} \
         tokens (load-time probe {:.0} prompt tokens/s), context {} tokens\n",
        plain.threads,
        if hog.is_some() {
            ", under a CPU hog"
        } else {
            ""
        },
        info.input_budget,
        info.prompt_tokens_per_s,
        info.context_tokens,
    );
    println!("| what | tokens/s (median) | range | of the same shape's raw decode |");
    println!("|---|---|---|---|");
    let depth = summary(
        plain
            .generations
            .iter()
            .map(|g| g.prompt_tokens as f64)
            .collect(),
    )
    .0;
    let limits = {
        let backend = llama_backend().expect("llama.cpp backend");
        let model = LlamaModel::load_from_file(backend, &plain.path, &LlamaModelParams::default())
            .expect("the test model loads");
        let engine = Shape {
            kind: Kind::Engine,
            n_ctx: info.context_tokens,
            threads: plain.threads,
        };
        raw(&model, engine, depth as usize, reps)
    };
    let prompt: Vec<f64> = plain
        .generations
        .iter()
        .map(|g| g.tokens_decoded as f64 / (g.prompt_ms / 1e3))
        .collect();
    row(
        &format!("completion path: prompt ({depth:.0} tokens, cold)"),
        prompt,
        Some(limits.prompt),
    );
    let generation = |gs: &[Generation]| -> Vec<f64> {
        gs.iter()
            .map(|g| g.tokens_generated as f64 / (g.generate_ms / 1e3))
            .collect()
    };
    row(
        "completion path: generation, no drafts",
        generation(&plain.generations),
        Some(limits.generation),
    );
    row(
        "completion path: generation, with drafts (as served)",
        generation(&drafted.generations),
        Some(limits.generation),
    );
}
