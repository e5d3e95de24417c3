//! A cache changes speed, never answers (ARCHITECTURE.md invariant 23): on
//! the real model, at over a hundred places in real files, a request
//! answered from a warm cache gives the tokens the same prompt gives from
//! an empty one. The warm engine meets every road a cache takes: a revealed
//! cursor (the span's document made resident, its tail lent to the FIM
//! prompt, the answer there generated ahead), the spans around it filled in
//! idle time and restored, a recent prompt restored on coming back to a
//! file, and typing (the suffix moved by a RoPE shift). The cold engine
//! builds a fresh context for every request. A binary of its own: the two
//! engines take a core each.
//!
//! Two things are not the cache's doing and are told apart. A moved suffix
//! is the one approximation the warm engine makes, for typing
//! (`Generation::moved_suffix`): its answers are counted, not held to the
//! rule, and what came after it must be exact again. And llama.cpp's CPU
//! kernels round differently for other batch shapes: a choice won by less
//! than that noise (a near tie) may go either way.

mod support;

use std::time::{Duration, Instant};

use ropey::Rope;
use support::engine_options as options;
use switchyard_base::cancel::CancelFlag;
use switchyard_context::{fim, span};
use switchyard_engine::*;

const INPUT: usize = 192;
const SUFFIX: usize = 48;
/// Spans visited in each file, spread through it.
const SPANS_PER_FILE: usize = 9;
/// What is typed at each span's first place, a character at a time.
const TYPED: &str = "s";
/// The answer at a revealed cursor is generated ahead to the request's
/// limits (`job`'s): one line, this many tokens.
const AHEAD: AnswerAhead = AnswerAhead {
    max_tokens: MAX_TOKENS,
    lines: 1,
};
const MAX_TOKENS: usize = 12;

/// Real files: this repository's own sources, which every checkout has,
/// and a dependency's from the cargo registry where it is unpacked.
fn files() -> Vec<(String, String)> {
    let own = [
        "crates/engine/src/engine/cache.rs",
        "crates/router/src/run.rs",
        "crates/context/src/fim.rs",
    ];
    let mut files: Vec<(String, String)> = own
        .iter()
        .map(|path| (path.to_string(), std::fs::read_to_string(path).unwrap()))
        .collect();
    let registry = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")))
        .map(|home| home.join("registry/src"));
    let dependency = registry
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .into_iter()
        .flatten()
        .flatten()
        .map(|index| index.path().join("similar-3.2.1/src/text/mod.rs"))
        .find(|path| path.is_file());
    match dependency {
        Some(path) => files.push((
            "similar/text/mod.rs".into(),
            std::fs::read_to_string(path).unwrap(),
        )),
        None => files.push((
            "crates/router/src/pipeline.rs".into(),
            std::fs::read_to_string("crates/router/src/pipeline.rs").unwrap(),
        )),
    }
    files
}

/// Where windows come from: the budgets the language server would use.
struct Windows {
    budget: fim::WindowBudget,
    block_chars: usize,
}

impl Windows {
    fn new() -> Windows {
        let budget = fim::WindowBudget::for_input(INPUT, SUFFIX);
        Windows {
            budget,
            block_chars: budget.prefix_tokens * fim::CHARS_PER_TOKEN / 2,
        }
    }

    /// The cold window and the span at `cursor`.
    fn at(&self, rope: &Rope, cursor: usize) -> (FimText, SpanText) {
        let span = span::at(rope, cursor, self.budget, self.block_chars).unwrap();
        let affordable = fim::window(rope, cursor, self.budget, None).text;
        (
            affordable,
            SpanText {
                window: span.window,
                document: span.document,
            },
        )
    }

    /// The spans around `cursor`'s, nearest first.
    fn around(&self, rope: &Rope, cursor: usize) -> Vec<SpanText> {
        span::around(rope, cursor, self.budget, self.block_chars, 2)
            .into_iter()
            .map(|span| SpanText {
                window: span.window,
                document: span.document,
            })
            .collect()
    }
}

/// The middle of `line`'s code.
fn middle_of(rope: &Rope, line: usize) -> usize {
    let text = rope.line(line).to_string();
    let indent = text.len() - text.trim_start().len();
    let code = text.trim();
    rope.line_to_char(line) + indent.min(text.trim_end().len()) + code.chars().count() / 2
}

/// The next line at or after `line` with code on it.
fn code_line(rope: &Rope, line: usize) -> usize {
    (line..rope.len_lines())
        .find(|&l| rope.line(l).to_string().trim().len() > 4)
        .unwrap_or(line)
}

fn job(text: FimText, span: SpanText) -> CompletionJob {
    CompletionJob {
        text,
        span: Some(span),
        max_tokens: MAX_TOKENS,
        stop: Box::new(|s: &str| s.contains('\n')),
        // Both engines answer from the span's window: it decodes in time.
        deadline: Instant::now() + Duration::from_secs(1200),
        cancel: CancelFlag::default(),
    }
}

/// One place: what the warm engine answered, and the cold engine's answer
/// to the same request, still coming.
struct Compared {
    place: String,
    warm: Generation,
    cold: tokio::task::JoinHandle<Generation>,
}

struct Engines {
    warm: LocalEngine,
    cold: LocalEngine,
    compared: Vec<Compared>,
}

impl Engines {
    /// Asks both engines at one place: the warm one now, the cold one in
    /// the background.
    async fn ask(&mut self, place: String, (text, span): (FimText, SpanText)) {
        let cold = self.cold.clone();
        let cold_job = job(text.clone(), span.clone());
        let cold = tokio::spawn(async move { cold.complete(cold_job).await.unwrap() });
        let warm = self.warm.complete(job(text, span)).await.unwrap();
        self.compared.push(Compared { place, warm, cold });
    }
}

/// A revealed cursor in one span, the places around it, typing there.
async fn visit(engines: &mut Engines, windows: &Windows, name: &str, rope: &Rope, line: usize) {
    let line = code_line(rope, line);
    let cursor = middle_of(rope, line);
    let (affordable, span) = windows.at(rope, cursor);
    engines
        .warm
        .prewarm_and_wait(Prewarm {
            window: affordable,
            span: Some(span),
            resident: true,
            neighbours: windows.around(rope, cursor),
            answer: Some(AHEAD),
        })
        .await
        .unwrap();
    let start = span::at(rope, cursor, windows.budget, windows.block_chars)
        .unwrap()
        .start_line;
    // Places sharing the span (the resident document, its tail lent), then
    // one in the block below (a neighbour's state restored).
    let mut places = vec![cursor];
    for next in [line + 2, line + 5] {
        let at = middle_of(rope, code_line(rope, next));
        let shared = span::at(rope, at, windows.budget, windows.block_chars)
            .is_some_and(|s| s.start_line == start);
        if shared && !places.contains(&at) {
            places.push(at);
        }
    }
    if let Some(below) = span::around(rope, cursor, windows.budget, windows.block_chars, 1).first()
    {
        places.push(middle_of(rope, code_line(rope, below.start_line + 3)));
    }
    for at in places {
        let place = format!("{name}:{}", rope.char_to_line(at) + 1);
        engines.ask(place, windows.at(rope, at)).await;
    }
    // Typing at the first place: each keystroke moves the suffix.
    let mut typed = rope.clone();
    for (i, c) in TYPED.chars().enumerate() {
        typed.insert_char(cursor + i, c);
        let so_far: String = TYPED.chars().take(i + 1).collect();
        let place = format!("{name}:{} after {so_far:?}", line + 1);
        engines.ask(place, windows.at(&typed, cursor + i + 1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_cache_answers_as_an_empty_one_at_a_hundred_places_in_real_files() {
    let options = EngineOptions {
        budget: PromptBudget {
            input: INPUT,
            suffix: SUFFIX,
            repository: 0,
        },
        ..options()
    };
    let warm = LocalEngine::spawn(options.clone());
    let cold = LocalEngine::spawn(EngineOptions {
        reuse_cache: false,
        ..options
    });
    warm.wait_ready().await.unwrap();
    cold.wait_ready().await.unwrap();
    let mut engines = Engines {
        warm,
        cold,
        compared: Vec::new(),
    };
    let windows = Windows::new();
    let files = files();
    // Each file's spans, then back to the first file (its states restored).
    for (name, text) in files.iter().chain(files.first()) {
        let rope = Rope::from_str(text);
        let lines = rope.len_lines();
        for k in 0..SPANS_PER_FILE {
            let line = 20 + k * (lines - 40) / SPANS_PER_FILE;
            visit(&mut engines, &windows, name, &rope, line).await;
        }
    }

    let (mut identical, mut differing) = (0, Vec::new());
    let (mut moved, mut moved_differing) = (0, 0);
    let (mut warm_decoded, mut ahead) = (0, 0);
    let count = engines.compared.len();
    for Compared { place, warm, cold } in engines.compared {
        let cold = cold.await.unwrap();
        assert_eq!(
            warm.prompt_digest, cold.prompt_digest,
            "{place}: both engines answer the same prompt"
        );
        assert!(!cold.moved_suffix, "{place}: an empty cache moves nothing");
        warm_decoded += warm.tokens_to_decode;
        ahead += usize::from(warm.tokens_ahead > 0);
        if warm.moved_suffix {
            moved += 1;
            moved_differing += usize::from(warm.text != cold.text);
            continue;
        }
        // The same up to the first near tie either met.
        let sure = [warm.near_tie_at, cold.near_tie_at]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(usize::MAX);
        let agree = |text: &str| text.get(..sure.min(text.len())).map(str::to_owned);
        if warm.text == cold.text {
            identical += 1;
        } else {
            differing.push(format!(
                "{place}: warm {:?} cold {:?} (sure up to byte {sure})",
                warm.text, cold.text
            ));
            assert_eq!(
                agree(&warm.text),
                agree(&cold.text),
                "{place}: warm {:?} against cold {:?}",
                warm.text,
                cold.text
            );
        }
    }
    println!(
        "{count} places, {moved} from a moved suffix ({moved_differing} of them differing); of the rest {identical} identical, {} the same up to a near tie; warm decoded {warm_decoded} prompt tokens, {ahead} answered ahead",
        differing.len()
    );
    for line in &differing {
        println!("  {line}");
    }
    assert!(
        identical >= 100,
        "{identical} places token-identical without a moved suffix"
    );
    // Typing moves the suffix: the road is taken.
    assert!(moved > 0, "no request took a moved suffix");
    // Each revealed cursor's request: all but those whose answer is empty.
    let revealed = (files.len() + 1) * SPANS_PER_FILE;
    assert!(
        ahead >= revealed * 3 / 4,
        "{ahead} of {revealed} revealed cursors answered ahead"
    );
}
