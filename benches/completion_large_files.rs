//! Completion in large real files, through the language server: holes at
//! random code lines of files from projects not written here (crates from
//! the cargo registry this build locks, and Python's standard library), the
//! first request at each hole with no edit there.
//!
//! Each hole is the whole code of one line, cut out and left as an empty
//! line; the cursor is at its start, and exact match compares the answer
//! with the line, surrounding whitespace aside; similarity says how much of
//! the line the answer has right (random real lines are rarely exact for a
//! small model, even unbounded). Each hole is a new document.
//!
//! Run: `cargo bench --bench completion_large_files` (after
//! `models/fetch-test-model.sh` and `cargo fetch`). Settings (environment):
//! - `LARGE_ARRIVALS=resident,silent`: `resident` reveals the cursor and
//!   keeps the file open until the engine has prepared the place (the span
//!   there resident and the answer there generated ahead; or 60 s);
//!   `silent` says nothing of the cursor and waits `LARGE_COLD_MS`;
//!   `revealed` reveals the cursor (as VS Code does where it lands), then
//!   waits `LARGE_COLD_MS`. The
//!   "decoded at request" column counts the answers generated ahead.
//! - `LARGE_COLD_MS=3000`: how long a silent arrival's file is open first.
//! - `LARGE_BUDGETS_MS=1000,10000`: the autocomplete budgets (10 s: the
//!   unbounded run the 1 s one is compared with).
//! - `LARGE_HOLES=6` per file, `LARGE_SEED=0`.
//! - `LARGE_PLACES=line`: the hole is the whole line (an empty line);
//!   `midword`: the cursor inside a word of the line, the rest of the line
//!   cut out (exact match compares the rest); `boundary`: the same at the
//!   start of a word.
//! - `LARGE_HOG=1`: one spinning thread beside the server from before it
//!   starts (a build on one core); `after`: started once the model is ready
//!   (a build started while editing); `cycle`: started once the model is
//!   ready, then stopped and started again every `LARGE_HOG_HOLES` holes
//!   (default 8), so the load comes and goes during the run.
//! - `LARGE_WINDOWS=2`: a second editor window beside the measured one,
//!   on the same state directory, opening another of the files every
//!   `LARGE_WINDOW_EVERY_MS` (8000) and showing its cursor there, so its
//!   engine fills while the first window is asked; `LARGE_SHARE=false`
//!   gives each window its own engine (`local.share_engine`). Each window's
//!   memory (proportional set size) is printed at the end.
//! - `LARGE_OUT`: a directory for each attempt (JSON lines) and server logs.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use support::cpu_hog::CpuHog;
use support::env_or;
use support::infilling::{self, Arrival, Attempt, Task};
use support::lsp_client::{LspClient, ServerOptions};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The files, by where they are found: a crate in the cargo registry
/// (at the version Cargo.lock pins) or a module of Python's standard library.
const CRATE_FILES: [&str; 4] = [
    "serde_json-1.0.154/src/de.rs",
    "dashmap-6.2.1/src/lib.rs",
    "similar-3.2.1/src/merge.rs",
    "toml_edit-0.25.20+spec-1.1.0/src/table.rs",
];
const PYTHON_FILES: [&str; 4] = ["argparse.py", "difflib.py", "shutil.py", "textwrap.py"];

/// The first directory matching `parent/*/` that holds `relative`.
fn find_under(parent: &Path, relative: &str) -> Option<PathBuf> {
    std::fs::read_dir(parent)
        .ok()?
        .flatten()
        .map(|entry| entry.path().join(relative))
        .find(|path| path.is_file())
}

fn sources() -> Vec<(String, String)> {
    let cargo_home = std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"),
        PathBuf::from,
    );
    let registry = cargo_home.join("registry/src");
    let crates = CRATE_FILES.iter().map(|file| {
        find_under(&registry, file)
            .unwrap_or_else(|| panic!("{file} is not in {}: run `cargo fetch`", registry.display()))
    });
    let python = PYTHON_FILES.iter().map(|file| {
        find_under(Path::new("/usr/lib"), file)
            .filter(|path| path.to_string_lossy().contains("python3"))
            .unwrap_or_else(|| panic!("{file}: Python 3's standard library is not in /usr/lib"))
    });
    crates
        .chain(python)
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a UTF-8 source file");
            let lines = text.lines().count();
            assert!(
                (400..=3000).contains(&lines),
                "{}: {lines} lines",
                path.display()
            );
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                text,
            )
        })
        .collect()
}

/// A line worth completing: code, not a comment, a docstring or a bracket.
fn is_code(line: &str) -> bool {
    let code = line.trim();
    const NOT_CODE: [&str; 6] = ["//", "#", "/*", "*", "\"\"\"", "'''"];
    code.len() >= 8 && code.len() <= 100 && !NOT_CODE.iter().any(|p| code.starts_with(p))
}

/// Where in its line a hole's cursor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Places {
    /// The whole line cut out: the cursor on an empty line.
    Line,
    /// Inside a word of the line, the rest of the line cut out
    /// (`def _|_init__`): where a user is at most keystrokes.
    MidWord,
    /// After a word, space or bracket, before the next word starts, the
    /// rest of the line cut out (`raise |NotImplementedError`).
    Boundary,
}

impl Places {
    fn from_env() -> Places {
        match env_or("LARGE_PLACES", "line").as_str() {
            "midword" => Places::MidWord,
            "boundary" => Places::Boundary,
            _ => Places::Line,
        }
    }

    /// The byte offsets in `code` (a line without its end) where a cursor
    /// of this kind may be, past the indentation.
    fn cursors(self, code: &str) -> Vec<usize> {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let indent = code.len() - code.trim_start().len();
        let chars: Vec<(usize, char)> = code.char_indices().collect();
        let at = |i: usize| chars.get(i).map(|&(_, c)| c);
        (1..chars.len())
            .filter(|&i| chars[i].0 > indent)
            .filter(|&i| match self {
                Places::Line => false,
                Places::MidWord => at(i - 1).is_some_and(word) && at(i).is_some_and(word),
                Places::Boundary => !at(i - 1).is_some_and(word) && at(i).is_some_and(word),
            })
            .map(|i| chars[i].0)
            .collect()
    }
}

/// `per_file` holes at random code lines of each file, each with its cursor
/// where `places` says.
fn holes(files: &[(String, String)], per_file: usize, seed: u64, places: Places) -> Vec<Task> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut tasks = Vec::new();
    for (name, text) in files {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut code: Vec<usize> = (0..lines.len()).filter(|&i| is_code(lines[i])).collect();
        rng.shuffle(&mut code);
        let mut taken = 0;
        for &hole in &code {
            if taken == per_file {
                break;
            }
            let line = lines[hole].trim_end();
            let cursor = match places {
                Places::Line => 0,
                _ => match places.cursors(line).as_slice() {
                    [] => continue,
                    cursors => cursors[rng.usize(..cursors.len())],
                },
            };
            taken += 1;
            tasks.push(Task {
                task_id: format!("{name}:{}", hole + 1),
                // `Task::document` puts the hole's line between them.
                prompt: lines[..hole].concat(),
                suffix: lines[hole + 1..].concat(),
                typed: line[..cursor].to_owned(),
                canonical_solution: line[cursor..].to_owned(),
                test: String::new(),
                entry_point: String::new(),
                file: Some(name.clone()),
            });
        }
    }
    tasks
}

/// When the spinning thread beside the server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hog {
    Never,
    /// From before the server starts.
    FromStart,
    /// From the model being ready.
    AfterReady,
    /// From the model being ready, on and off every so many holes.
    Cycle(usize),
}

impl Hog {
    fn from_env() -> Hog {
        match env_or("LARGE_HOG", "0").as_str() {
            "1" => Hog::FromStart,
            "after" => Hog::AfterReady,
            "cycle" => Hog::Cycle(
                env_or("LARGE_HOG_HOLES", "8")
                    .parse()
                    .expect("LARGE_HOG_HOLES"),
            ),
            _ => Hog::Never,
        }
    }

    /// Whether it spins during hole `index` (the server is ready by then).
    fn on_at(self, index: usize) -> bool {
        match self {
            Hog::Never => false,
            Hog::FromStart | Hog::AfterReady => true,
            Hog::Cycle(holes) => (index / holes.max(1)) % 2 == 0,
        }
    }
}

/// The second window: how it is run, from the environment.
#[derive(Clone, Copy, Debug)]
struct SecondWindow {
    every: Duration,
    shares: bool,
}

impl SecondWindow {
    fn from_env() -> Option<SecondWindow> {
        (env_or("LARGE_WINDOWS", "1") == "2").then(|| SecondWindow {
            every: Duration::from_millis(
                env_or("LARGE_WINDOW_EVERY_MS", "8000")
                    .parse()
                    .expect("LARGE_WINDOW_EVERY_MS"),
            ),
            shares: env_or("LARGE_SHARE", "true") == "true",
        })
    }

    /// Starts the window beside `first`; it opens files until told to stop,
    /// then hands itself back.
    async fn open_beside(
        self,
        first: &LspClient,
        tasks: Vec<Task>,
    ) -> (oneshot::Sender<()>, JoinHandle<LspClient>) {
        let state = (
            "SWITCHYARD_STATE_DIR".to_owned(),
            first.state_dir().display().to_string(),
        );
        let mut window = LspClient::spawn(ServerOptions {
            env: vec![state],
            ..ServerOptions::default()
        })
        .await;
        let local = json!({"auto_pull": false, "share_engine": self.shares});
        window
            .initialize(
                json!({"textDocument": {"inlineCompletion": {}}}),
                json!({"local": local}),
            )
            .await;
        window.wait_for_model().await;
        let (stop, mut stopped) = oneshot::channel();
        let opens = tokio::spawn(async move {
            for (i, task) in tasks.iter().enumerate().cycle() {
                let uri = format!(
                    "file:///window-b/{i}/{}",
                    task.file.as_deref().unwrap_or("task.py")
                );
                window.open(&uri, &task.document()).await;
                let (line, character) = task.cursor();
                window.reveal_cursor(&uri, line, character).await;
                if tokio::time::timeout(self.every, &mut stopped).await.is_ok() {
                    break;
                }
            }
            window
        });
        (stop, opens)
    }
}

/// A process's proportional set size: its share of every page it maps.
fn pss_mib(client: &LspClient) -> f64 {
    let pid = client.pid().expect("the server runs");
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let kib: f64 = rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN);
    kib / 1024.0
}

async fn run(
    tasks: &[Task],
    budget_ms: u64,
    (arrival, idle): (Arrival, Duration),
    hog: Hog,
) -> Vec<Attempt> {
    let mut spinning = (hog == Hog::FromStart).then(|| CpuHog::on_cores(1));
    let mut client = infilling::server(json!({"budget_ms": budget_ms})).await;
    let second = match SecondWindow::from_env() {
        // Other files than the first window's at the same time: from halfway.
        Some(second) => {
            let mut theirs = tasks.to_vec();
            theirs.rotate_left(tasks.len() / 2);
            Some(second.open_beside(&client, theirs).await)
        }
        None => None,
    };
    let mut attempts = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        match (hog.on_at(i), spinning.is_some()) {
            (true, false) => spinning = Some(CpuHog::on_cores(1)),
            (false, true) => spinning = None,
            _ => {}
        }
        let mut attempt = infilling::attempt(&mut client, task, i, arrival, idle).await;
        if spinning.is_some() && hog != Hog::FromStart {
            attempt.task_id.push_str(" (busy)");
        }
        attempts.push(attempt);
    }
    if let Ok(dir) = std::env::var("LARGE_OUT") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("LARGE_OUT can be created");
        let path = dir.join(format!("server-{budget_ms}-{arrival:?}.log"));
        std::fs::write(path, client.log()).expect("LARGE_OUT is writable");
    }
    let first_mib = pss_mib(&client);
    if let Some((stop, opens)) = second {
        let _ = stop.send(());
        let window = opens.await.expect("the second window's task");
        let second_mib = pss_mib(&window);
        println!(
            "memory (proportional set size): first window {first_mib:.0} MiB, second {second_mib:.0} MiB ({:.0} % of the first)",
            second_mib / first_mib * 100.0
        );
        window.shutdown().await;
    } else {
        println!("memory (proportional set size): {first_mib:.0} MiB");
    }
    client.shutdown().await;
    attempts
}

/// One line of the table: `label` (budget and arrival), then the scores.
fn print_row(label: &str, attempts: &[Attempt]) {
    let score = infilling::score(attempts);
    let reasons: Vec<String> = score
        .empty_reasons
        .iter()
        .map(|(r, n)| format!("{n}× {r}"))
        .collect();
    println!(
        "| {label} | {} | {:.1} | {:.1} | {:.1} | {} / {} | {} / {}, {} ahead | {} |",
        score.tasks,
        score.exact * 100.0,
        score.similarity * 100.0,
        score.empty * 100.0,
        score.p50.as_millis(),
        score.p95.as_millis(),
        score.to_decode.0,
        score.to_decode.1,
        score.ahead,
        reasons.join("; ")
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let files = sources();
    let per_file: usize = env_or("LARGE_HOLES", "6").parse().expect("LARGE_HOLES");
    let seed: u64 = env_or("LARGE_SEED", "0").parse().expect("LARGE_SEED");
    let places = Places::from_env();
    let tasks = holes(&files, per_file, seed, places);
    let budgets: Vec<u64> = env_or("LARGE_BUDGETS_MS", "1000,10000")
        .split(',')
        .map(|b| b.trim().parse().expect("LARGE_BUDGETS_MS"))
        .collect();
    let cold = Duration::from_millis(env_or("LARGE_COLD_MS", "3000").parse().expect("cold"));
    let arrivals: Vec<(Arrival, Duration)> = env_or("LARGE_ARRIVALS", "resident,silent")
        .split(',')
        .map(|a| match a.trim() {
            "silent" => (Arrival::Silent, cold),
            "revealed" => (Arrival::Revealed, cold),
            _ => (Arrival::Resident, Duration::ZERO),
        })
        .collect();
    let hog = Hog::from_env();
    println!(
        "large files: {} holes ({places:?}) in {} files (seed {seed}), one spinning core: {hog:?}",
        tasks.len(),
        files.len(),
    );
    println!(
        "| budget ms | arrival | holes | exact % | similarity % | empty % | p50 / p95 ms | decoded at request p50 / p95 | empty reasons |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &budget in &budgets {
        for &(arrival, idle) in &arrivals {
            let attempts = run(&tasks, budget, (arrival, idle), hog).await;
            print_row(&format!("{budget} | {arrival:?}"), &attempts);
            if let Hog::Cycle(_) = hog {
                // The holes asked while the core spun, and while it did not.
                for (part, busy) in [("busy", true), ("quiet", false)] {
                    let holes: Vec<Attempt> = attempts
                        .iter()
                        .filter(|a| a.task_id.ends_with(" (busy)") == busy)
                        .cloned()
                        .collect();
                    print_row(&format!("{budget} | {arrival:?}, {part}"), &holes);
                }
            }
            if let Ok(dir) = std::env::var("LARGE_OUT") {
                let path = PathBuf::from(dir).join(format!("holes-{budget}-{arrival:?}.jsonl"));
                let lines: Vec<String> = attempts
                    .iter()
                    .map(|a| {
                        json!({"hole": a.task_id, "completion": a.completion, "latency_ms": a.latency.as_millis(), "empty_reason": a.empty_reason, "exact": a.exact, "similarity": a.similarity, "to_decode": a.work.to_decode}).to_string()
                    })
                    .collect();
                std::fs::write(&path, lines.join("\n")).expect("LARGE_OUT is writable");
            }
        }
    }
}
