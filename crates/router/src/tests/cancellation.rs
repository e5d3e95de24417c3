//! A request dropped at any await gives back all it holds: for every N, a
//! `Router::run` is polled N times and dropped, and then no probe lease is
//! held and every quota bucket has back all but what was used. The shared
//! state yields before and after each operation, so every await on it is a
//! place the drop can land (on a real backend each is a network round trip).

use std::task::Poll;

use super::yielding::Yielding;
use super::*;
use switchyard_config::ProviderConfig;
use switchyard_resilience::governor::Quota;
use switchyard_state::SharedState;
use switchyard_state::memory::MemoryState;

const PRIMARY: &str = "primary";

/// A half-open breaker's settings, and (with `quota`) a quota of several
/// meters, so a reservation is taken in steps.
fn config(quota: bool) -> Config {
    let mut config = chains(&[], &["primary/m"]);
    config.resilience.breaker.failures = 1;
    config.resilience.breaker.cooldown_ms = 40;
    // The retry that probes comes soon (the Redis run is on a real clock).
    config.resilience.backoff.overloaded_ms = 20;
    config.providers.insert(
        PRIMARY.into(),
        ProviderConfig {
            kind: switchyard_providers::ProviderKind::Anthropic,
            base_url: "http://127.0.0.1:9".into(),
            api_key_env: None,
            headers: Default::default(),
            account: None,
            quota: match quota {
                true => Quota {
                    requests_per_minute: Some(60_000),
                    tokens_per_minute: None,
                    input_tokens_per_minute: Some(6_000_000),
                    output_tokens_per_minute: Some(6_000_000),
                },
                false => Quota::default(),
            },
        },
    );
    config
}

/// A router over `state` whose primary's breaker is half-open: the next
/// request is its probe and holds the lease.
async fn half_open(
    state: Arc<dyn SharedState>,
    quota: bool,
    paused: bool,
) -> (Router, Arc<Scripted>) {
    let config = config(quota);
    let resilience = Arc::new(Resilience::new(state, &config.resilience));
    // Failing until the breaker is open: its retry finds it open, or (on a
    // real clock, a busy machine, past the 40 ms cooldown) probes, fails
    // and opens it again. Either way it ends open, then answers.
    let primary = Scripted::new(PRIMARY, vec![], Behaviour::Fail(503));
    let router = sharing(config, &[&primary], resilience);
    assert!(run(&router, explain()).await.is_err(), "the breaker trips");
    primary.set_otherwise(Behaviour::Answer {
        first_token: Duration::from_millis(30),
        reason: FinishReason::EndTurn,
    });
    step(paused, Duration::from_millis(60)).await;
    (router, primary)
}

/// Moves time on a little: the paused clock by hand, a real one by waiting.
async fn step(paused: bool, by: Duration) {
    match paused {
        true => tokio::time::advance(by).await,
        false => tokio::time::sleep(by).await,
    }
}

/// Polls one explain `polls` times, moving the clock on between polls, and
/// drops it; whether it finished first.
async fn drop_after(router: &Router, polls: usize, paused: bool) -> bool {
    let run = router.run(explain(), CancellationToken::new(), &|_| {});
    tokio::pin!(run);
    for _ in 0..polls {
        if let Poll::Ready(result) = futures::poll!(&mut run) {
            assert!(result.is_ok(), "the probe is served: {result:?}");
            return true;
        }
        step(paused, Duration::from_millis(1)).await;
    }
    false
}

/// Lets the guards' background releases run.
async fn settle_down(paused: bool) {
    for _ in 0..3 {
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
        step(paused, Duration::from_millis(5)).await;
    }
}

/// Whether a meter kept no more than the request used (one request; 10
/// input and 5 output tokens when it finished, none when it did not) and no
/// less than nothing, give or take one give-back in flight when it was
/// dropped: an answer lost on its way back may be given back twice (the
/// bucket caps at its capacity), a token is never lost.
fn kept_as_used(key: &str, kept: f64) -> bool {
    let (used, in_flight) = match key.rsplit('/').next().unwrap_or_default() {
        "requests" => (1.0, 1.0),
        "input_tokens" => (10.0, 100.0),
        "output_tokens" => (5.0, 800.0),
        _ => (0.0, 0.0),
    };
    (-in_flight - 1e-6..=used + 1e-6).contains(&kept)
}

/// Runs the harness over a fresh `state` for each N (on a paused clock or
/// a real one), with or without a quota; the N that broke a promise, with why.
async fn harness(
    state: impl AsyncFn() -> Arc<dyn SharedState>,
    quota: bool,
    paused: bool,
) -> Vec<String> {
    let mut broken = Vec::new();
    for polls in 1..2_000 {
        let yielding = Yielding::over(state().await);
        let (router, _primary) = half_open(yielding.clone(), quota, paused).await;
        let before = yielding.ledger();
        let finished = drop_after(&router, polls, paused).await;
        settle_down(paused).await;
        let leases = yielding.inner.scan("lease/").await.unwrap();
        if !leases.is_empty() {
            broken.push(format!(
                "N={polls}: a probe lease is still held: {leases:?}"
            ));
        }
        for (key, total) in yielding.ledger() {
            let kept = total - before.get(&key).copied().unwrap_or(0.0);
            if !kept_as_used(&key, kept) {
                broken.push(format!("N={polls}: {key} kept {kept} tokens"));
            }
        }
        if finished {
            assert!(polls > 20, "it finished at once: the harness tests nothing");
            return broken;
        }
    }
    panic!("the request never finished");
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_at_any_await_gives_back_its_lease_and_its_quota() {
    let memory = async || Arc::new(MemoryState::new()) as Arc<dyn SharedState>;
    let broken = harness(memory, true, true).await;
    assert!(broken.is_empty(), "{broken:#?}");
}

/// A throwaway `redis-server` (installed by scripts/test-setup), killed on drop.
struct Redis(std::process::Child, u16);

impl Redis {
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test-setup installs it)");
        let redis = Redis(child, port);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while redis.command("PING") != "+PONG" {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    /// One inline command's first reply line ("" when it cannot be reached).
    fn command(&self, command: &str) -> String {
        use std::io::{BufRead, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.1)) else {
            return String::new();
        };
        let _ = stream.write_all(format!("{command}\r\n").as_bytes());
        let mut line = String::new();
        let _ = std::io::BufReader::new(stream).read_line(&mut line);
        line.trim_end().to_owned()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lease on Redis, on a real clock (a quota's cold buckets would take
/// seconds to fill there for every N; the paused run above checks quota).
#[tokio::test(flavor = "current_thread")]
async fn a_request_dropped_at_any_await_gives_back_its_lease_on_redis() {
    let redis = Redis::start();
    let url = format!("redis://127.0.0.1:{}", redis.1);
    let fresh = async || {
        assert_eq!(redis.command("FLUSHALL"), "+OK");
        switchyard_state::open(&url).unwrap()
    };
    let broken = harness(fresh, false, false).await;
    assert!(broken.is_empty(), "{broken:#?}");
}
