//! HumanEval-Infilling through the language server, the way an editor drives
//! it: open a file with the task's hole as an empty line, let the cursor land
//! there (VS Code asks for the code actions of the cursor's range whenever it
//! moves), stay idle a moment, then ask for an inline completion at the cursor.
//! Scored by exact match and by running the task's tests with python3.
//!
//! The data (MIT, OpenAI) is read from a `.jsonl` or `.jsonl.gz` file with the
//! fields `task_id`, `prompt`, `suffix`, `canonical_solution`, `test` and
//! `entry_point`.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::lsp_client::{LspClient, ServerOptions};
use switchyard_completion::postprocess::Situation;

#[derive(Clone, Debug, Deserialize)]
pub struct Task {
    pub task_id: String,
    pub prompt: String,
    pub suffix: String,
    pub canonical_solution: String,
    pub test: String,
    pub entry_point: String,
    /// The file's name, for holes cut from real files (its extension gives
    /// the language); HumanEval's tasks are Python files without one.
    #[serde(default)]
    pub file: Option<String>,
    /// What the user has typed of the hole's line, up to the cursor (a
    /// place inside a line, mid-word or not); empty for an empty line.
    #[serde(default)]
    pub typed: String,
}

impl Task {
    /// The file the editor shows: the hole is a line between the prompt and
    /// the suffix, empty or as far as the user has typed it.
    pub fn document(&self) -> String {
        format!("{}{}\n{}", self.prompt, self.typed, self.suffix)
    }

    /// The cursor: the end of what is typed of the hole's line (line index,
    /// UTF-16 column).
    pub fn cursor(&self) -> (u32, u32) {
        let column = self.typed.encode_utf16().count() as u32;
        (self.prompt.matches('\n').count() as u32, column)
    }

    /// The program the tests run: the document with the completion typed in.
    pub fn program(&self, completion: &str) -> String {
        format!(
            "{}{}{}\n{}\n\n{}\ncheck({})\n",
            self.prompt, self.typed, completion, self.suffix, self.test, self.entry_point
        )
    }

    /// What the server's post-processing would show if the model wrote
    /// `answer` at the cursor and stopped.
    pub fn rules_keep(&self, answer: &str) -> Option<String> {
        let document = self.document();
        let after = &document[self.prompt.len() + self.typed.len()..];
        Situation::new(&self.typed, after).finish(answer, false)
    }

    /// The same text as the canonical solution, ignoring surrounding whitespace
    /// (the model may or may not type the indentation the line needs).
    pub fn exact(&self, completion: &str) -> bool {
        normal(completion) == normal(&self.canonical_solution)
    }
}

/// How much of `expected` the completion has right, from 0 to 1: the share
/// of characters the two have in common (2 x matched / both lengths), each
/// line trimmed as exact match trims it. It tells a line that is almost
/// right from one that is wrong, where exact match cannot. Only as many of
/// the completion's lines count as `expected` has: lines a longer answer
/// goes on with are the user's to take or not, as with exact match of a
/// masked line.
pub fn similarity(completion: &str, expected: &str) -> f64 {
    let theirs = normal(expected);
    let lines = theirs.lines().count().max(1);
    let ours: Vec<&str> = completion
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .take(lines)
        .collect();
    if ours.is_empty() {
        return 0.0;
    }
    f64::from(similar::TextDiff::from_chars(&ours.join("\n"), &theirs).ratio())
}

/// Each line trimmed: the model may or may not type the indentation a line
/// needs.
fn normal(text: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().map(str::trim).collect();
    lines.join("\n")
}

/// Reads every task of a `.jsonl` or gzip-compressed `.jsonl.gz` file.
pub fn load(path: &Path) -> Vec<Task> {
    let text = if path.extension().is_some_and(|e| e == "gz") {
        let output = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(path)
            .output()
            .unwrap_or_else(|e| panic!("gzip -dc {}: {e}", path.display()));
        assert!(output.status.success(), "gzip -dc {}", path.display());
        String::from_utf8(output.stdout).expect("UTF-8 tasks")
    } else {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a task per line"))
        .collect()
}

/// `n` tasks drawn without replacement, the same for the same seed.
pub fn sample(mut tasks: Vec<Task>, n: usize, seed: u64) -> Vec<Task> {
    let mut rng = fastrand::Rng::with_seed(seed);
    rng.shuffle(&mut tasks);
    tasks.truncate(n);
    tasks
}

/// A server with the model loaded, as the harnesses drive it: an editor with
/// inline completion, the cached test model, `autocomplete` settings as given.
pub async fn server(autocomplete: Value) -> LspClient {
    server_with(autocomplete, json!({})).await
}

/// [`server`] with `local` settings beside `auto_pull = false`.
pub async fn server_with(autocomplete: Value, mut local: Value) -> LspClient {
    local["auto_pull"] = false.into();
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    client
        .initialize(
            json!({"textDocument": {"inlineCompletion": {}}}),
            json!({"local": local, "autocomplete": autocomplete}),
        )
        .await;
    client.wait_for_model().await;
    client
}

/// How one task went.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub task_id: String,
    /// The inserted text (empty when nothing was shown).
    pub completion: String,
    pub latency: Duration,
    /// Why nothing was shown, from the server's log.
    pub empty_reason: Option<String>,
    pub exact: bool,
    /// `similarity` of the completion to the canonical solution.
    pub similarity: f64,
    pub passed: bool,
    pub work: Work,
}

/// What the engine did for one request, from the server's log.
#[derive(Clone, Copy, Debug, Default)]
pub struct Work {
    /// Prompt tokens the cache lacked when the request came (none where
    /// the answer was generated ahead).
    pub to_decode: Option<usize>,
    /// Answered from the answer generated ahead, decoding nothing.
    pub ahead: bool,
    /// Tokens generated for a shown suggestion, and its characters.
    pub generated: Option<usize>,
    pub chars: Option<usize>,
}

impl Work {
    /// From the log since byte `log_before`: the engine's `prompt synced` line
    /// and the handler's `completion` line (absent for an empty answer).
    pub fn from_log(log: &str, log_before: usize) -> Work {
        let lines: Vec<&str> = log.get(log_before..).unwrap_or_default().lines().collect();
        let field = |event: &str, key: &str| {
            lines
                .iter()
                .rev()
                .filter(|l| l.contains(event))
                .find_map(|l| logged_number(l, key))
        };
        let ahead = lines
            .iter()
            .any(|l| l.contains("answered from the answer ahead"));
        Work {
            to_decode: field("prompt synced", "to_decode").or(ahead.then_some(0)),
            ahead,
            generated: field(" generated=", "generated"),
            chars: field(" generated=", "chars"),
        }
    }
}

/// The number logged as `key=N` on `line`.
fn logged_number(line: &str, key: &str) -> Option<usize> {
    let (_, after) = line.split_once(&format!(" {key}="))?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// How the cursor reaches the task's place before the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The editor reveals the cursor (VS Code's code-action request).
    Revealed,
    /// Nothing tells the server where the cursor is before the request.
    Silent,
    /// The cursor is revealed and the file stays open until the engine has
    /// prepared the place: the span there resident and the answer there
    /// generated ahead (its log says so), or a minute passed.
    Resident,
}

/// The longest a [`Arrival::Resident`] arrival waits.
const RESIDENT_PATIENCE: Duration = Duration::from_secs(60);

/// Runs one task: open, arrive, idle, ask, close, score.
pub async fn attempt(
    client: &mut LspClient,
    task: &Task,
    index: usize,
    arrival: Arrival,
    idle: Duration,
) -> Attempt {
    let (uri, language) = match &task.file {
        Some(file) if file.ends_with(".rs") => {
            (format!("file:///bench/task_{index}/{file}"), "rust")
        }
        Some(file) => (format!("file:///bench/task_{index}/{file}"), "python"),
        None => (format!("file:///bench/task_{index}.py"), "python"),
    };
    let doc = json!({"uri": uri, "languageId": language, "version": 1, "text": task.document()});
    client
        .notify("textDocument/didOpen", json!({"textDocument": doc}))
        .await;
    let (line, character) = task.cursor();
    match arrival {
        Arrival::Revealed => client.reveal_cursor(&uri, line, character).await,
        Arrival::Resident => {
            client.reveal_cursor(&uri, line, character).await;
            let opened = client.log().len();
            let resident = |log: &str| {
                log.get(opened..).is_some_and(|l| {
                    l.contains("answer ahead done") || l.contains("answer ahead kept")
                })
            };
            let patience = super::timing::Deadline::after(RESIDENT_PATIENCE);
            while !resident(&client.log()) && !patience.passed() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Arrival::Silent => {}
    }
    tokio::time::sleep(idle).await;
    let log_before = client.log().len();
    let started = Instant::now();
    let response = client.inline_completion(&uri, line, character).await;
    let latency = started.elapsed();
    let completion = first_item(&response);
    settle(client, task, &uri, &response, &completion).await;
    client
        .notify(
            "textDocument/didClose",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    let empty_reason = completion
        .is_empty()
        .then(|| empty_reason(&client.log(), log_before));
    // Holes cut from real files have no tests to run.
    let passed = !completion.is_empty() && !task.test.is_empty() && passes(task, &completion).await;
    Attempt {
        task_id: task.task_id.clone(),
        exact: task.exact(&completion),
        similarity: similarity(&completion, &task.canonical_solution),
        completion,
        latency,
        empty_reason,
        passed,
        work: Work::from_log(&client.log(), log_before),
    }
}

/// What a user who wanted the canonical answer does with the suggestion: one
/// that is exactly it is taken with Tab (the item's command runs, as in VS
/// Code and Neovim); otherwise the user types the canonical answer, and the
/// server credits what of the suggestion it shares (a partial accept where
/// that ends a word, else ignored).
async fn settle(client: &mut LspClient, task: &Task, uri: &str, response: &Value, shown: &str) {
    let command = &response["result"]["items"][0]["command"];
    if !shown.is_empty() && task.exact(shown) && command.is_object() {
        let params = json!({"command": command["command"], "arguments": command["arguments"]});
        client.call("workspace/executeCommand", params).await;
        return;
    }
    let (line, character) = task.cursor();
    let at = json!({"line": line, "character": character});
    let change = json!({
        "textDocument": {"uri": uri, "version": 2},
        "contentChanges": [{"range": {"start": at, "end": at}, "text": task.canonical_solution}],
    });
    client.notify("textDocument/didChange", change).await;
}

/// Why the server answered nothing, from its log since byte `log_before`.
pub fn empty_reason(log: &str, log_before: usize) -> String {
    log.get(log_before..)
        .unwrap_or_default()
        .lines()
        .rev()
        .find_map(|l| {
            l.split_once("no completion: ")
                .map(|(_, why)| reason_of(why))
        })
        .unwrap_or("no reason logged")
        .to_owned()
}

/// A logged reason without the event's fields (` elapsed_ms=…` and the like)
/// and without the hint after a semicolon.
fn reason_of(logged: &str) -> &str {
    let reason = logged.split(" elapsed_ms=").next().unwrap_or(logged);
    reason.split(';').next().unwrap_or(reason).trim()
}

/// The first item's text (the server sends plain text, never a snippet).
pub fn first_item(response: &Value) -> String {
    response["result"]["items"][0]["insertText"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Whether the task's tests pass with `completion` typed in (python3, 10 s).
pub async fn passes(task: &Task, completion: &str) -> bool {
    let mut child = tokio::process::Command::new("python3")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs the tests");
    let mut stdin = child.stdin.take().expect("stdin");
    let program = task.program(completion);
    if stdin.write_all(program.as_bytes()).await.is_err() {
        return false;
    }
    drop(stdin);
    match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
        Ok(Ok(status)) => status.success(),
        _ => false,
    }
}

/// The figures of one configuration.
#[derive(Debug)]
pub struct Score {
    pub tasks: usize,
    pub exact: f64,
    /// The mean `Attempt::similarity`, empty answers counting 0.
    pub similarity: f64,
    pub pass_at_1: f64,
    pub empty: f64,
    /// (reason, count), most frequent first.
    pub empty_reasons: Vec<(String, usize)>,
    pub p50: Duration,
    pub p95: Duration,
    /// Prompt tokens the cache lacked at request time: median and p95.
    pub to_decode: (usize, usize),
    /// Answers generated ahead of their request.
    pub ahead: usize,
    /// Tokens generated per character shown, over the shown suggestions.
    pub tokens_per_char: f64,
}

pub fn score(attempts: &[Attempt]) -> Score {
    let n = attempts.len().max(1) as f64;
    let share = |f: &dyn Fn(&Attempt) -> bool| attempts.iter().filter(|a| f(a)).count() as f64 / n;
    let latencies: Vec<Duration> = attempts.iter().map(|a| a.latency).collect();
    let to_decode: Vec<usize> = attempts.iter().filter_map(|a| a.work.to_decode).collect();
    let shown = attempts
        .iter()
        .filter_map(|a| a.work.generated.zip(a.work.chars));
    let (generated, chars) = shown.fold((0, 0), |(g, c), (dg, dc)| (g + dg, c + dc));
    let mut reasons: Vec<(String, usize)> = Vec::new();
    for reason in attempts.iter().filter_map(|a| a.empty_reason.as_ref()) {
        match reasons.iter_mut().find(|(r, _)| r == reason) {
            Some((_, count)) => *count += 1,
            None => reasons.push((reason.clone(), 1)),
        }
    }
    reasons.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    Score {
        tasks: attempts.len(),
        exact: share(&|a| a.exact),
        similarity: attempts.iter().map(|a| a.similarity).sum::<f64>() / n,
        pass_at_1: share(&|a| a.passed),
        empty: share(&|a| a.completion.is_empty()),
        empty_reasons: reasons,
        p50: percentile(&latencies, 0.5),
        p95: percentile(&latencies, 0.95),
        to_decode: (percentile(&to_decode, 0.5), percentile(&to_decode, 0.95)),
        ahead: attempts.iter().filter(|a| a.work.ahead).count(),
        tokens_per_char: generated as f64 / chars.max(1) as f64,
    }
}

/// The value at quantile `p` (nearest rank), or the default for no values.
fn percentile<T: Copy + Ord + Default>(values: &[T], p: f64) -> T {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or_default()
}
