//! Ghost text while an explain runs on the local model, with no API keys,
//! through the binary: the same places asked alone, then again while an
//! explain answers (a new one starts whenever the last ends), and the
//! explains' own time and length; then one explain through the gateway's
//! streaming endpoint.
//!
//! Run: `cargo bench --bench explain_beside_ghost_text` (after
//! `models/fetch-test-model.sh`, with `../shared/bench` beside the
//! repository). Settings (environment):
//! - `EXPLAIN_TASKS=20` single-line HumanEval infilling tasks (seed 0).
//! - `EXPLAIN_IDLE_MS=300`: the pause after the cursor is revealed.
//! - `EXPLAIN_HOG=1`: one spinning thread beside the servers.
//! - `EXPLAIN_OUT`: a directory for the servers' logs.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use support::cpu_hog::CpuHog;
use support::env_or;
use support::gateway::GatewayProcess;
use support::infilling::{self, Arrival, Attempt, Task};
use support::lsp_client::{LspClient, ServerOptions};

const EXPLAINED: &str = "file:///bench/explained.rs";

fn tasks() -> Vec<Task> {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/bench/humaneval-infilling/HumanEval-SingleLineInfilling.jsonl.gz");
    let count = env_or("EXPLAIN_TASKS", "20")
        .parse()
        .expect("EXPLAIN_TASKS");
    infilling::sample(infilling::load(&data), count, 0)
}

/// The server as a user without keys gets it: the embedded defaults, the
/// model already downloaded.
async fn server() -> LspClient {
    let mut client = LspClient::spawn(ServerOptions::default()).await;
    let options = json!({"local": {"auto_pull": false}});
    let capabilities = json!({"textDocument": {"inlineCompletion": {}}});
    client.initialize(capabilities, options).await;
    client.wait_for_model().await;
    let doc =
        json!({"uri": EXPLAINED, "languageId": "rust", "version": 1, "text": support::SAMPLE_RUST});
    client
        .notify("textDocument/didOpen", json!({"textDocument": doc}))
        .await;
    client
}

/// An explain of the sample's first 25 lines (what the local model's input
/// budget for an explain takes on a slow machine).
async fn start_explain(client: &mut LspClient) -> (i64, Instant) {
    let range = json!({"start": {"line": 0, "character": 0}, "end": {"line": 25, "character": 0}});
    let arguments = json!([EXPLAINED, range]);
    let params = json!({"command": "switchyard.explain", "arguments": arguments});
    let id = client
        .send_request("workspace/executeCommand", params)
        .await;
    (id, Instant::now())
}

/// One explain's row: provider, seconds, answer length in tokens (as the
/// model's tokenizer counts them, from the server's log) and characters.
fn explain_row(response: &Value, took: Duration, tokens: Option<usize>) -> String {
    let result = &response["result"];
    format!(
        "| | {} | {:.1} | {} | {} | {} |",
        result["provider"].as_str().unwrap_or("(failed)"),
        took.as_secs_f64(),
        tokens.map_or("?".to_owned(), |t| t.to_string()),
        result["text"].as_str().unwrap_or_default().len(),
        response["error"]["message"].as_str().unwrap_or(""),
    )
}

fn row(what: &str, attempts: &[Attempt]) {
    let score = infilling::score(attempts);
    println!(
        "| {what} | {} | {:.1} | {:.1} | {} / {} |",
        score.tasks,
        score.empty * 100.0,
        score.exact * 100.0,
        score.p50.as_millis(),
        score.p95.as_millis()
    );
}

/// The tokens the last local chat generated, from the engine's log line.
fn chat_tokens(log: &str) -> Option<usize> {
    let line = log.lines().rev().find(|l| l.contains("local chat done"))?;
    let (_, after) = line.split_once(" generated=")?;
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

async fn through_the_language_server(tasks: &[Task], idle: Duration) {
    let mut client = server().await;
    let mut alone = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        alone.push(infilling::attempt(&mut client, task, i, Arrival::Revealed, idle).await);
    }
    let mut beside = Vec::new();
    let mut explains = Vec::new();
    let (mut explain, mut since) = start_explain(&mut client).await;
    client.wait_for_log("local chat answering").await;
    for (i, task) in tasks.iter().enumerate() {
        if client.answered(explain) {
            let response = client.response(explain).await;
            let tokens = chat_tokens(&client.log());
            explains.push(explain_row(&response, since.elapsed(), tokens));
            (explain, since) = start_explain(&mut client).await;
        }
        beside.push(infilling::attempt(&mut client, task, i, Arrival::Revealed, idle).await);
    }
    let response = client.response(explain).await;
    let tokens = chat_tokens(&client.log());
    explains.push(explain_row(&response, since.elapsed(), tokens));
    keep_log("server.log", &client.log());
    client.shutdown().await;

    println!("| ghost text | places | empty % | exact % | p50 / p95 ms |");
    println!("|---|---|---|---|---|");
    row("alone", &alone);
    row("while a local explain runs", &beside);
    println!("\n| explain (LSP) | provider | seconds | tokens | characters | error |");
    println!("|---|---|---|---|---|---|");
    for explain in explains {
        println!("{explain}");
    }
}

/// One streamed explain through the gateway, with no keys: the time to its
/// first piece and to its end, and its pieces.
async fn through_the_gateway() {
    let models = support::model_dir();
    let models = models.to_str().expect("a UTF-8 model directory");
    let gateway = GatewayProcess::start(
        "[local]\nauto_pull = false\n",
        &[("SWITCHYARD_MODEL_DIR", models)],
    )
    .await;
    let code: Vec<&str> = support::SAMPLE_RUST.lines().take(25).collect();
    let question = format!("Explain what this Rust code does:\n\n{}", code.join("\n"));
    let body = json!({"model": "switchyard/small", "stream": true,
        "messages": [{"role": "user", "content": question}]});
    let deadline = support::timing::Deadline::after(Duration::from_secs(120));
    let (response, asked) = loop {
        let asked = Instant::now();
        let response = gateway.post_chat(&body).await;
        // 503 while the gateway's model still loads.
        if response.status() != 503 || deadline.passed() {
            break (response, asked);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let status = response.status();
    if status != 200 {
        println!(
            "the gateway answered {status}: {}",
            response.text().await.unwrap_or_default()
        );
        keep_log("gateway.log", &gateway.log());
        return;
    }
    let (mut first, mut pieces, mut text) = (None, 0, String::new());
    let mut unread = String::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(bytes)) = stream.next().await {
        // An event may arrive split across reads: only whole lines are parsed.
        unread.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = unread.find('\n') {
            let line: String = unread.drain(..=end).collect();
            if let Some(delta) = streamed_text(&line) {
                first.get_or_insert_with(|| asked.elapsed());
                pieces += 1;
                text.push_str(&delta);
            }
        }
    }
    println!(
        "\n| explain (gateway, streamed) | status | first piece s | seconds | pieces | tokens | characters |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| | {status} | {:.1} | {:.1} | {pieces} | {} | {} |",
        first.unwrap_or_default().as_secs_f64(),
        asked.elapsed().as_secs_f64(),
        chat_tokens(&gateway.log()).map_or("?".to_owned(), |t| t.to_string()),
        text.len()
    );
    keep_log("gateway.log", &gateway.log());
}

/// The text an OpenAI-style stream's `data:` line adds, where it adds any.
fn streamed_text(line: &str) -> Option<String> {
    let event: Value = serde_json::from_str(line.trim().strip_prefix("data: ")?).ok()?;
    let delta = event["choices"][0]["delta"]["content"].as_str()?;
    (!delta.is_empty()).then(|| delta.to_owned())
}

fn keep_log(name: &str, log: &str) {
    if let Ok(dir) = std::env::var("EXPLAIN_OUT") {
        std::fs::create_dir_all(&dir).expect("EXPLAIN_OUT can be created");
        std::fs::write(PathBuf::from(dir).join(name), log).expect("EXPLAIN_OUT is writable");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let tasks = tasks();
    let idle = Duration::from_millis(env_or("EXPLAIN_IDLE_MS", "300").parse().expect("idle"));
    let hog = (env_or("EXPLAIN_HOG", "0") == "1").then(|| CpuHog::on_cores(1));
    println!(
        "explain beside ghost text: {} places, no API keys{}\n",
        tasks.len(),
        if hog.is_some() { ", one core busy" } else { "" }
    );
    through_the_language_server(&tasks, idle).await;
    through_the_gateway().await;
}
