//! Gateway overhead: latency the gateway adds to a chat completion, versus
//! calling the same loopback fake provider directly, at fixed request rates
//! (open loop: requests start on schedule whether or not earlier ones are done).
//! The gateway is the real `switchyard gateway` process (release build) with
//! its default shared state (files); its resident memory is read from /proc.
//!
//! Run: `cargo bench --bench gateway_overhead`
//! (`GATEWAY_RATES=100,500,1000`, `GATEWAY_SECONDS=5` per rate and path,
//! `GATEWAY_STATE=memory` to leave out the shared-state files).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::fake_provider::FakeProvider;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Mutex;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// Sends `rate` requests per second for `seconds`; returns each latency.
async fn load(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
    rate: u64,
    seconds: u64,
) -> (Vec<Duration>, usize) {
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(0usize));
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..rate * seconds {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let (client, url, body) = (client.clone(), url.to_owned(), body.clone());
        let (latencies, failures) = (latencies.clone(), failures.clone());
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let ok = match client.post(&url).json(&body).send().await {
                Ok(response) if response.status().is_success() => response.bytes().await.is_ok(),
                _ => false,
            };
            if ok {
                latencies.lock().await.push(started.elapsed());
            } else {
                *failures.lock().await += 1;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let mut latencies = latencies.lock().await.clone();
    latencies.sort();
    let failures = *failures.lock().await;
    (latencies, failures)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rates: Vec<u64> = std::env::var("GATEWAY_RATES")
        .unwrap_or_else(|_| "100,500,1000".into())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect();
    let seconds: u64 = std::env::var("GATEWAY_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);

    let fake = FakeProvider::start().await;
    let home = tempfile::tempdir().unwrap();
    // `GATEWAY_STATE=memory` isolates the gateway from its shared-state backend.
    let state = std::env::var("GATEWAY_STATE").unwrap_or_else(|_| "file".into());
    let config = format!(
        "[local]\nauto_pull = false\n\n[resilience]\nstate = \"{state}\"\n\n[providers.fake]\nkind = \"openai\"\nbase_url = \"{}\"\n\n[tiers]\nlarge = []\nmedium = [\"fake/bench\"]\nsmall = []\n",
        fake.openai_url()
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mut gateway = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["gateway", "--listen", "127.0.0.1:0"])
        .env("SWITCHYARD_CONFIG", home.path().join("config.toml"))
        .env("SWITCHYARD_STATE_DIR", home.path().join("state"))
        .env("SWITCHYARD_MODEL_DIR", home.path().join("models"))
        .args([
            "--log-file",
            home.path().join("gateway.log").to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the gateway");
    let pid = gateway.id().unwrap();
    let mut lines = BufReader::new(gateway.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let gateway_url = format!("{}/v1/chat/completions", first.rsplit(' ').next().unwrap());
    let direct_url = format!("{}/chat/completions", fake.openai_url());
    let client = reqwest::Client::new();
    let messages = json!([{"role": "user", "content": "What does HashMap::entry do?"}]);
    let direct_body = json!({"model": "bench", "stream": true, "messages": messages});
    let gateway_body = json!({"model": "fake/bench", "stream": false, "messages": messages});

    // Warm both paths (connections, the gateway's first route).
    load(&client, &direct_url, &direct_body, 50, 1).await;
    load(&client, &gateway_url, &gateway_body, 50, 1).await;
    println!(
        "gateway overhead ({seconds} s per rate and path, open loop, state {state}; gateway pid {pid})"
    );
    println!(
        "{:>6} | {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>9} | {:>8} | {:>9}",
        "req/s",
        "direct50",
        "direct99",
        "gw p50",
        "gw p99",
        "added50",
        "added99",
        "failures",
        "gw RSS"
    );
    for rate in rates {
        let (direct, direct_failed) = load(&client, &direct_url, &direct_body, rate, seconds).await;
        let (routed, routed_failed) =
            load(&client, &gateway_url, &gateway_body, rate, seconds).await;
        if direct.is_empty() || routed.is_empty() {
            println!(
                "{rate:>6} | no successful requests (direct failed {direct_failed}, gateway failed {routed_failed})"
            );
            continue;
        }
        let (d50, d99) = (percentile(&direct, 50.0), percentile(&direct, 99.0));
        let (g50, g99) = (percentile(&routed, 50.0), percentile(&routed, 99.0));
        println!(
            "{rate:>6} | {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>9} | {:>8} | {:>6} MiB",
            ms(d50),
            ms(d99),
            ms(g50),
            ms(g99),
            ms(g50.saturating_sub(d50)),
            ms(g99.saturating_sub(d99)),
            direct_failed + routed_failed,
            rss_kib(pid).map_or(0, |k| k / 1024)
        );
    }
}
