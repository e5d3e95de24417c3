//! Completion latency on the test model: a scripted typing session over a
//! ~1,000-token Rust file, for switchyard's engine and for a naive engine that
//! builds a fresh context per request, in one run. Also cold first completion,
//! model load time, and the idle RSS of a server without a model.
//!
//! Run: `cargo bench --bench completion_latency` (fetch the model first with
//! `models/fetch-test-model.sh`). `NAIVE_EVERY=N` samples every Nth request for
//! the naive engine (default 5), whose requests take seconds each.
//!
//! A request after switching to another file and back is timed with and
//! without the recent prompts kept (`local.recent_prompts = 0`).
//! The script also runs with speculative decoding off (`local.draft_tokens = 0`)
//! and, unless `LATENCY_HOG=0`, again on a fresh engine while busy loops hold
//! every core (a build beside the editor). `LATENCY_LOG=FILE` writes the
//! engine's debug log there (what each request decoded, and why).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cpu_hog::CpuHog;
use ropey::Rope;
use switchyard_base::cancel::CancelFlag;
use switchyard_completion::{CompletionRequest, CompletionService, NoSuggestion, Origin, Warmth};
use switchyard_config::Config;
use switchyard_engine::{LocalEngine, ModelInfo};

#[path = "../tests/support/cpu_hog.rs"]
mod cpu_hog;

const SAMPLE: &str = include_str!("../tests/support/sample.rs");
const DOC: &str = "file:///bench/store.rs";
/// Another file of the same project, for a switch away and back.
const OTHER_FILE: &str = include_str!("../tests/support/infilling.rs");

/// One step of the typing script.
enum Step {
    /// Move the cursor to the start of this line's text, deleting the rest of the line.
    ClearLineFrom { line_text: &'static str },
    /// Type these characters one at a time, asking for a completion after each.
    Type(&'static str),
    /// The user pauses: the editor's debounced prewarm runs.
    Pause,
}

/// Retypes lines at the end (keystrokes at the end of a line), opens new lines,
/// and edits in the middle of the file.
fn script() -> Vec<Step> {
    use Step::*;
    vec![
        ClearLineFrom {
            line_text: "        self.hits as f64 / total as f64",
        },
        Type("self.hits as f64"),
        Pause,
        Type(" / total as f64"),
        Pause,
        ClearLineFrom {
            line_text: "        before - self.entries.len()",
        },
        Type("before - self"),
        Pause,
        Type(".entries.len()\n"),
        Pause,
        Type("    }\n\n    pub fn clear(&mut self) {\n        self.entries"),
        Pause,
        ClearLineFrom {
            line_text: "        validate_key(key)?;",
        },
        Type("validate_key(key)?;"),
        Pause,
        ClearLineFrom {
            line_text: "            Some(deadline) => now >= deadline,",
        },
        Type("Some(deadline) => now"),
        Pause,
    ]
}

struct Sample {
    latency_ms: f64,
    /// Draft tokens verified and accepted (speculative decoding).
    drafts: Option<(usize, usize)>,
    decoded: Option<usize>,
    prompt: Option<usize>,
    shown: bool,
    from_type_through: bool,
    missed: bool,
}

struct Session {
    rope: Rope,
    cursor: usize,
}

impl Session {
    fn new() -> Session {
        Session {
            rope: Rope::from_str(SAMPLE),
            cursor: 0,
        }
    }

    fn clear_line_from(&mut self, line_text: &str) {
        let text = self.rope.to_string();
        let at = text.find(line_text).expect("script line in sample");
        let indent = line_text.len() - line_text.trim_start().len();
        let start_byte = at + indent;
        let end_byte = at + line_text.len();
        let (start, end) = (
            self.rope.byte_to_char(start_byte),
            self.rope.byte_to_char(end_byte),
        );
        self.rope.remove(start..end);
        self.cursor = start;
    }

    fn type_char(&mut self, c: char) {
        self.rope.insert_char(self.cursor, c);
        self.cursor += 1;
    }
}

async fn run_script(service: &CompletionService, budget: Duration, every: usize) -> Vec<Sample> {
    let mut session = Session::new();
    service
        .warm(DOC, &session.rope, session.rope.len_chars() / 2)
        .await
        .ok();
    let mut samples = Vec::new();
    let mut keystroke = 0usize;
    for step in script() {
        match step {
            Step::ClearLineFrom { line_text } => session.clear_line_from(line_text),
            Step::Pause => {
                service.prewarm(DOC, &session.rope, session.cursor, Warmth::Window);
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            Step::Type(text) => {
                for c in text.chars() {
                    session.type_char(c);
                    keystroke += 1;
                    if !keystroke.is_multiple_of(every) {
                        continue;
                    }
                    let request = CompletionRequest {
                        doc: DOC.into(),
                        rope: session.rope.clone(),
                        cursor: session.cursor,
                        deadline: tokio::time::Instant::now() + budget,
                        cancel: CancelFlag::default(),
                        document: None,
                        trigger: Default::default(),
                        language: None,
                    };
                    let outcome = service.complete(request).await;
                    let generation = match &outcome.result {
                        Ok(s) => match &s.origin {
                            Origin::Model(g) => Some(g.clone()),
                            Origin::TypeThrough | Origin::Remote { .. } => None,
                        },
                        Err(_) => None,
                    };
                    if std::env::var_os("BENCH_VERBOSE").is_some() {
                        let line = session
                            .rope
                            .line(session.rope.char_to_line(session.cursor))
                            .to_string();
                        eprintln!(
                            "{:>6.0} ms decoded {:>4?} generated {:>4?} of {:>4?} {:?} | {}",
                            outcome.elapsed.as_secs_f64() * 1e3,
                            generation.as_ref().map(|g| g.tokens_decoded),
                            generation.as_ref().map(|g| (
                                g.tokens_generated,
                                g.prompt_ms as u64,
                                g.generate_ms as u64
                            )),
                            generation.as_ref().map(|g| g.prompt_tokens),
                            outcome.result.as_ref().map(|s| s
                                .text
                                .chars()
                                .take(30)
                                .collect::<String>()),
                            line.trim_end()
                        );
                    }
                    samples.push(Sample {
                        latency_ms: outcome.elapsed.as_secs_f64() * 1e3,
                        drafts: generation.as_ref().map(|g| (g.tokens_drafted, g.tokens_accepted)),
                        decoded: generation.as_ref().map(|g| g.tokens_decoded),
                        prompt: generation.as_ref().map(|g| g.prompt_tokens),
                        shown: outcome.result.is_ok(),
                        from_type_through: matches!(&outcome.result, Ok(s) if matches!(s.origin, Origin::TypeThrough)),
                        missed: matches!(outcome.result, Err(NoSuggestion::DeadlineMissed | NoSuggestion::PromptStillFilling)),
                    });
                    // Typing speed: a keystroke every 60 ms after the answer.
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
            }
        }
    }
    samples
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

struct Summary {
    n: usize,
    p50: f64,
    p95: f64,
    min: f64,
    max: f64,
    decoded_p50: f64,
    prompt_p50: f64,
    shown: usize,
    type_through: usize,
    missed: usize,
    drafted: usize,
    accepted: usize,
}

fn summarize(samples: &[&Sample]) -> Summary {
    let mut latencies: Vec<f64> = samples.iter().map(|s| s.latency_ms).collect();
    latencies.sort_by(f64::total_cmp);
    let mut decoded: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.decoded.map(|d| d as f64))
        .collect();
    decoded.sort_by(f64::total_cmp);
    let mut prompt: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.prompt.map(|d| d as f64))
        .collect();
    prompt.sort_by(f64::total_cmp);
    Summary {
        n: samples.len(),
        p50: percentile(&latencies, 50.0),
        p95: percentile(&latencies, 95.0),
        min: latencies.first().copied().unwrap_or(f64::NAN),
        max: latencies.last().copied().unwrap_or(f64::NAN),
        decoded_p50: percentile(&decoded, 50.0),
        prompt_p50: percentile(&prompt, 50.0),
        shown: samples.iter().filter(|s| s.shown).count(),
        type_through: samples.iter().filter(|s| s.from_type_through).count(),
        missed: samples.iter().filter(|s| s.missed).count(),
        drafted: samples.iter().filter_map(|s| s.drafts).map(|d| d.0).sum(),
        accepted: samples.iter().filter_map(|s| s.drafts).map(|d| d.1).sum(),
    }
}

async fn engine_service(
    config: &Config,
    reuse_cache: bool,
) -> (CompletionService, ModelInfo, Duration) {
    let model = switchyard_config::local_setup::resolve(config).expect("model resolves");
    let path = switchyard_config::local_setup::ensure_present(
        &model,
        false,
        &switchyard_models::NoProgress,
    )
    .await
    .expect("test model present: run models/fetch-test-model.sh");
    let mut options = switchyard_config::local_setup::engine_options(&model, &path, config);
    options.reuse_cache = reuse_cache;
    let started = Instant::now();
    let engine = LocalEngine::spawn(options);
    let info = engine.wait_ready().await.expect("model loads");
    let load = started.elapsed();
    let service = CompletionService::new(config.autocomplete.clone());
    service.set_engine(Some(Arc::new(engine)));
    (service, info, load)
}

/// First completion on a freshly loaded engine and a just-opened document, no prewarm.
async fn cold_first_completion(service: &CompletionService) -> f64 {
    let rope = Rope::from_str(SAMPLE);
    let marker = "        let total = self.hits + self.misses;\n";
    let cursor = rope.byte_to_char(SAMPLE.find(marker).unwrap() + marker.len());
    let started = Instant::now();
    loop {
        let request = CompletionRequest {
            doc: "file:///bench/cold.rs".into(),
            rope: rope.clone(),
            cursor,
            deadline: tokio::time::Instant::now() + Duration::from_secs(1),
            cancel: CancelFlag::default(),
            document: None,
            trigger: Default::default(),
            language: None,
        };
        let outcome = service.complete(request).await;
        if outcome.result.is_ok()
            || matches!(
                outcome.result,
                Err(NoSuggestion::Empty | NoSuggestion::Cut { .. })
            )
        {
            return started.elapsed().as_secs_f64() * 1e3;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A request back in a document after warming another one: what a file
/// switch and a switch back cost. The budget is long, so a cold prompt shows
/// its whole cost instead of an empty answer; the line says how much of it
/// was the prompt and how much the answer, whose length follows the window.
async fn switch_back(service: &CompletionService) -> String {
    let here = Rope::from_str(SAMPLE);
    let marker = "        let total = self.hits + self.misses;\n";
    let cursor = here.byte_to_char(SAMPLE.find(marker).unwrap() + marker.len());
    let there = Rope::from_str(OTHER_FILE);
    service.warm(DOC, &here, cursor).await.ok();
    service
        .warm("file:///bench/other.rs", &there, there.len_chars() / 2)
        .await
        .ok();
    let request = CompletionRequest {
        doc: DOC.into(),
        rope: here,
        cursor,
        deadline: tokio::time::Instant::now() + Duration::from_secs(30),
        cancel: CancelFlag::default(),
        document: None,
        trigger: Default::default(),
        language: None,
    };
    let outcome = service.complete(request).await;
    let ms = outcome.elapsed.as_secs_f64() * 1e3;
    match outcome.result.as_ref().map(|s| &s.origin) {
        Ok(Origin::Model(g)) => format!(
            "{ms:.0} ms (prompt {:.0} ms, {} of {} tokens decoded; answer {:.0} ms, {} tokens)",
            g.prompt_ms, g.tokens_decoded, g.prompt_tokens, g.generate_ms, g.tokens_generated
        ),
        // An answer the post-processing drops (a line the file already has)
        // is timed all the same; say so, since it generated less.
        Err(reason) => format!("{ms:.0} ms (no suggestion: {reason})"),
        Ok(_) => format!("{ms:.0} ms"),
    }
}

/// RSS of `switchyard serve` after initialize, with no model to load.
fn idle_server_rss_kib() -> Option<u64> {
    let empty = tempfile::tempdir().ok()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["--log-file", empty.path().join("log").to_str()?])
        .env("SWITCHYARD_MODEL_DIR", empty.path())
        .env("SWITCHYARD_CONFIG", empty.path().join("none.toml"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{},"initializationOptions":{"local":{"auto_pull":false}}}}"#;
    let init = format!("Content-Length: {}\r\n\r\n{body}", body.len());
    let note = r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#;
    let initialized = format!("Content-Length: {}\r\n\r\n{note}", note.len());
    use std::io::Write;
    let stdin = child.stdin.as_mut()?;
    stdin.write_all(init.as_bytes()).ok()?;
    stdin.write_all(initialized.as_bytes()).ok()?;
    stdin.flush().ok()?;
    std::thread::sleep(Duration::from_secs(2));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).ok()?;
    let _ = child.kill();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Requests that reached the engine: not answered from type-through or skipped.
fn model_calls(samples: &[Sample]) -> Vec<&Sample> {
    samples
        .iter()
        .filter(|s| !s.from_type_through && (s.decoded.is_some() || s.missed))
        .collect()
}

fn row(name: &str, s: &Summary) -> String {
    format!(
        "| {name} | {} | {:.0} | {:.0} | {:.0}–{:.0} | {:.0} of {:.0} | {} ({} type-through) | {} | {} of {} |",
        s.n,
        s.p50,
        s.p95,
        s.min,
        s.max,
        s.decoded_p50,
        s.prompt_p50,
        s.shown,
        s.type_through,
        s.missed,
        s.accepted,
        s.drafted
    )
}

fn main() {
    // `LATENCY_LOG=FILE`: the engine's debug log, to see why a request decoded what it did.
    if let Some(path) = std::env::var_os("LATENCY_LOG") {
        let file = std::fs::File::create(path).expect("LATENCY_LOG is writable");
        tracing_subscriber::fmt()
            .with_env_filter("switchyard=debug")
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .init();
    }
    // As the server does: the bound matters under the hog below.
    switchyard_base::openmp::bound_spinning();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(measure());
}

async fn measure() {
    let every: usize = std::env::var("NAIVE_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let config = Config::default();
    let budget = Duration::from_millis(config.autocomplete.budget_ms);

    let (service, info, load) = engine_service(&config, true).await;
    let cold_ms = cold_first_completion(&service).await;
    let ours_samples = run_script(&service, budget, 1).await;
    let ours_all = summarize(&ours_samples.iter().collect::<Vec<_>>());
    let ours = summarize(&model_calls(&ours_samples));
    let back_kept = switch_back(&service).await;
    drop(service);

    // Switching back without the recent prompts kept in memory.
    let mut forgetful_config = config.clone();
    forgetful_config.local.recent_prompts = 0;
    let (forgetful, _, _) = engine_service(&forgetful_config, true).await;
    let back_forgotten = switch_back(&forgetful).await;
    drop(forgetful);

    // The same engine without speculative decoding, the same script and budget.
    let mut plain_config = config.clone();
    plain_config.local.draft_tokens = 0;
    let (plain_service, _, _) = engine_service(&plain_config, true).await;
    let plain = summarize(&model_calls(&run_script(&plain_service, budget, 1).await));
    drop(plain_service);

    // The script again while busy loops hold every core (a build beside the editor).
    let hogged = if std::env::var("LATENCY_HOG").as_deref() != Ok("0") {
        let _hog = CpuHog::start();
        let (hog_service, _, _) = engine_service(&config, true).await;
        let hogged = summarize(&model_calls(&run_script(&hog_service, budget, 1).await));
        drop(hog_service);
        Some(hogged)
    } else {
        None
    };

    if std::env::var_os("BENCH_ONLY_SWITCHYARD").is_some() {
        println!(
            "{}\n{}\n{}",
            row("switchyard, every keystroke", &ours_all),
            row("switchyard, model calls", &ours),
            row("switchyard without drafting, model calls", &plain)
        );
        if let Some(hogged) = &hogged {
            println!("{}", row("switchyard under a CPU hog, model calls", hogged));
        }
        return;
    }
    // The naive engine gets all the time it needs: its latency, not the budget, is measured.
    let mut naive_config = config.clone();
    naive_config.autocomplete.precompute_next = false;
    naive_config.local.draft_tokens = 0;
    let (naive_service, _, _) = engine_service(&naive_config, false).await;
    let naive_samples = run_script(&naive_service, Duration::from_secs(120), every).await;
    let naive = summarize(&model_calls(&naive_samples));
    drop(naive_service);

    let rss = idle_server_rss_kib();
    println!(
        "model: {} ({}), load {:.0} ms, prompt processing {:.0} tokens/s, input budget {} tokens",
        info.name,
        info.path.display(),
        load.as_secs_f64() * 1e3,
        info.prompt_tokens_per_s,
        info.input_budget
    );
    println!("cold first completion (just-opened document, no prewarm): {cold_ms:.0} ms");
    println!(
        "switch to another file and back: {back_kept} with recent prompts kept, {back_forgotten} without"
    );
    println!(
        "idle RSS of `switchyard serve` without a model: {} KiB",
        rss.map_or("n/a".into(), |r| r.to_string())
    );
    println!();
    println!(
        "| requests | count | p50 ms | p95 ms | min–max ms | tokens decoded p50 (of prompt) | suggestions | missed budget | drafts accepted |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "{}",
        row(
            "switchyard, every keystroke (type-through included)",
            &ours_all
        )
    );
    println!(
        "{}",
        row("switchyard, model calls only (KV reuse, 1 s budget)", &ours)
    );
    println!("{}", row("the same without speculative decoding", &plain));
    if let Some(hogged) = &hogged {
        println!(
            "{}",
            row(
                "switchyard under a CPU hog on every core, model calls",
                hogged
            )
        );
    }
    println!(
        "{}",
        row(
            &format!(
                "naive, model calls only (fresh context, every {every}th keystroke, no budget)"
            ),
            &naive
        )
    );
    println!();
    println!(
        "model-call p50 ratio naive/switchyard: {:.1}x; without/with drafting: {:.2}x",
        naive.p50 / ours.p50,
        plain.p50 / ours.p50
    );
    if let Some(hogged) = &hogged {
        println!(
            "under the hog: {} of {} model calls answered within the budget ({:.0} %)",
            hogged.n - hogged.missed,
            hogged.n,
            100.0 * (hogged.n - hogged.missed) as f64 / hogged.n.max(1) as f64
        );
    }
}
