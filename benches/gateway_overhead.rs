//! Gateway overhead: latency the gateway adds to a chat completion, versus
//! calling the same loopback fake provider directly, at fixed request rates
//! (open loop: requests start on schedule whether or not earlier ones are done).
//! The gateway is the real `switchyard gateway` process (release build) with
//! its default shared state (files); its resident memory is read from /proc.
//!
//! Run: `cargo bench --bench gateway_overhead`
//! (`GATEWAY_RATES=100,500,1000`, `GATEWAY_SECONDS=5` per rate and path,
//! `GATEWAY_STATE=memory` to leave out the shared-state files,
//! `GATEWAY_UPSTREAM=close` for a fake that closes every connection after its
//! reply instead of keeping it for the next request as the real APIs do,
//! `GATEWAY_BASELINE_BIN=/path/to/other/switchyard` to measure a second gateway
//! binary, "gw (baseline)", at each rate right after this one, with its own
//! state directory, and print the ratio of the two added p99s).

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
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

/// A running `switchyard gateway` process; killed when dropped.
struct Gateway {
    _process: tokio::process::Child,
    pid: u32,
    url: String,
}

impl Gateway {
    /// Starts `bin` as a gateway on a free loopback port with the config in
    /// `home`, its own state directory and log file named after `name`.
    async fn start(bin: &Path, home: &Path, name: &str) -> Self {
        let mut process = tokio::process::Command::new(bin)
            .args(["gateway", "--listen", "127.0.0.1:0"])
            .env("SWITCHYARD_CONFIG", home.join("config.toml"))
            .env("SWITCHYARD_STATE_DIR", home.join(format!("{name}-state")))
            .env("SWITCHYARD_MODEL_DIR", home.join("models"))
            .arg("--log-file")
            .arg(home.join(format!("{name}.log")))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start the gateway {}: {e}", bin.display()));
        let pid = process.id().unwrap();
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let first = lines
            .next_line()
            .await
            .unwrap()
            .expect("gateway prints its address");
        let url = format!("{}/v1/chat/completions", first.rsplit(' ').next().unwrap());
        Self {
            _process: process,
            pid,
            url,
        }
    }
}

/// One path's latencies at one rate (sorted) and its failed requests.
struct Measured {
    latencies: Vec<Duration>,
    failures: usize,
}

impl Measured {
    async fn run(
        client: &reqwest::Client,
        url: &str,
        body: &serde_json::Value,
        rate: u64,
        seconds: u64,
    ) -> Self {
        let (latencies, failures) = load(client, url, body, rate, seconds).await;
        Self {
            latencies,
            failures,
        }
    }

    fn p50(&self) -> Duration {
        percentile(&self.latencies, 50.0)
    }

    fn p99(&self) -> Duration {
        percentile(&self.latencies, 99.0)
    }
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
    let baseline_bin = std::env::var_os("GATEWAY_BASELINE_BIN");

    let fake = FakeProvider::start().await;
    // Real providers keep connections open; the tests' fake closes each one
    // unless told otherwise, which costs both paths a connect per request.
    let upstream = std::env::var("GATEWAY_UPSTREAM").unwrap_or_else(|_| "keep-alive".into());
    if upstream != "close" {
        fake.keep_connections();
    }
    let home = tempfile::tempdir().unwrap();
    // `GATEWAY_STATE=memory` isolates the gateway from its shared-state backend.
    let state = std::env::var("GATEWAY_STATE").unwrap_or_else(|_| "file".into());
    let config = format!(
        "[local]\nauto_pull = false\n\n[resilience]\nstate = \"{state}\"\n\n[providers.fake]\nkind = \"openai\"\nbase_url = \"{}\"\n\n[tiers]\nlarge = []\nmedium = [\"fake/bench\"]\nsmall = []\n",
        fake.openai_url()
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mut gateways = vec![
        Gateway::start(
            Path::new(env!("CARGO_BIN_EXE_switchyard")),
            home.path(),
            "gateway",
        )
        .await,
    ];
    if let Some(bin) = &baseline_bin {
        gateways.push(Gateway::start(Path::new(bin), home.path(), "baseline").await);
    }
    let direct_url = format!("{}/chat/completions", fake.openai_url());
    let client = reqwest::Client::new();
    let messages = json!([{"role": "user", "content": "What does HashMap::entry do?"}]);
    let direct_body = json!({"model": "bench", "stream": true, "messages": messages});
    let gateway_body = json!({"model": "fake/bench", "stream": false, "messages": messages});

    // Warm every path (connections, each gateway's first route).
    load(&client, &direct_url, &direct_body, 50, 1).await;
    for gateway in &gateways {
        load(&client, &gateway.url, &gateway_body, 50, 1).await;
    }
    let pids: Vec<String> = gateways.iter().map(|g| g.pid.to_string()).collect();
    println!(
        "gateway overhead ({seconds} s per rate and path, open loop, state {state}, upstream {upstream}; gateway pid {})",
        pids.join(", baseline pid ")
    );
    if let Some(bin) = &baseline_bin {
        println!("baseline: {}", Path::new(bin).display());
    }
    // Column names per gateway: this build's, then the baseline's ("b.").
    let columns: [[&str; 4]; 2] = [
        ["gw p50", "gw p99", "added50", "added99"],
        ["b.gw p50", "b.gw p99", "b.add50", "b.add99"],
    ];
    let mut header = format!("{:>6} | {:>9} {:>9} |", "req/s", "direct50", "direct99");
    for names in &columns[..gateways.len()] {
        header += &format!(
            " {:>9} {:>9} | {:>9} {:>9} |",
            names[0], names[1], names[2], names[3]
        );
    }
    header += &format!(" {:>8} |", "failures");
    for name in &["gw RSS", "b.gw RSS"][..gateways.len()] {
        header += &format!(" {name:>9}");
    }
    if gateways.len() > 1 {
        header += &format!(" | {:>9}", "p99 ratio");
    }
    println!("{header}");
    for rate in rates {
        // Interleaved: direct, this gateway, the baseline, at the same rate.
        let direct = Measured::run(&client, &direct_url, &direct_body, rate, seconds).await;
        let mut routed = Vec::new();
        for gateway in &gateways {
            routed.push(Measured::run(&client, &gateway.url, &gateway_body, rate, seconds).await);
        }
        if std::iter::once(&direct)
            .chain(&routed)
            .any(|m| m.latencies.is_empty())
        {
            let names = ["gateway", "baseline"];
            let failed: Vec<String> = routed
                .iter()
                .zip(names)
                .map(|(m, name)| format!("{name} failed {}", m.failures))
                .collect();
            println!(
                "{rate:>6} | no successful requests (direct failed {}, {})",
                direct.failures,
                failed.join(", ")
            );
            continue;
        }
        let mut row = format!(
            "{rate:>6} | {:>9} {:>9} |",
            ms(direct.p50()),
            ms(direct.p99())
        );
        let mut added99 = Vec::new();
        for gw in &routed {
            let added = (
                gw.p50().saturating_sub(direct.p50()),
                gw.p99().saturating_sub(direct.p99()),
            );
            row += &format!(
                " {:>9} {:>9} | {:>9} {:>9} |",
                ms(gw.p50()),
                ms(gw.p99()),
                ms(added.0),
                ms(added.1)
            );
            added99.push(added.1);
        }
        let failures = direct.failures + routed.iter().map(|m| m.failures).sum::<usize>();
        row += &format!(" {failures:>8} |");
        for gateway in &gateways {
            row += &format!(" {:>6} MiB", rss_kib(gateway.pid).map_or(0, |k| k / 1024));
        }
        if let [new, baseline] = added99[..] {
            let ratio = if baseline.is_zero() {
                "n/a".to_owned()
            } else {
                format!("{:.2}", new.as_secs_f64() / baseline.as_secs_f64())
            };
            row += &format!(" | {ratio:>9}");
        }
        println!("{row}");
    }
}
