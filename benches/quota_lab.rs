//! The quota lab (issue #4): a fleet of workers sharing one account's token
//! quota with a bystander, on a simulated clock. The switchyard fleet runs the
//! real [`Governor`] over the in-memory shared state; the greedy fleet fires
//! at once and backs off on 429s; a third fleet runs the governor without
//! reading headers (the published fixed 90 % share). All meet the same
//! simulated provider.
//!
//! Run: `cargo bench --bench quota_lab` (`QUOTA_LAB_SEEDS=N`, default 5;
//! `QUOTA_LAB_VERBOSE=1` prints every run). Tokio's clock is paused, so the
//! ~400 simulated seconds take a fraction of a second and the figures do not
//! depend on the machine.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use switchyard_base::task::TaskKind;
use switchyard_providers::{RateLimits, Usage};
use switchyard_resilience::governor::{Governor, GovernorConfig, Quota};
use switchyard_state::WhenUnavailable;
use switchyard_state::memory::MemoryState;
use tokio::time::{Instant, sleep, sleep_until};

#[path = "../tests/support/spread.rs"]
mod spread;

use spread::summary;

const UNITS: usize = 300;
const WORKERS: usize = 40;
const UNIT_TOKENS: std::ops::RangeInclusive<u64> = 2_500..=5_500;
const QUOTA_PER_MINUTE: f64 = 200_000.0;
const RATE: f64 = QUOTA_PER_MINUTE / 60.0;
const BYSTANDER_TOKENS: u64 = 2_000;
const BYSTANDER_EVERY: Duration = Duration::from_secs(10);
const BYSTANDER_RATE: f64 = BYSTANDER_TOKENS as f64 / BYSTANDER_EVERY.as_secs_f64();
/// Time to answer a served request (seeded, uniform, ms), one table each: a
/// few seconds for an answer of a few hundred tokens, and short answers. The
/// last answer's latency adds to any fleet's finish, on top of the quota.
const LATENCIES_MS: [std::ops::Range<u64>; 2] = [2_000..6_000, 500..1_500];
/// A 429 is answered at once, before any model work (ms).
const REFUSAL_MS: std::ops::Range<u64> = 50..250;
const KEY: &str = "team/lab/model";

// ---------------------------------------------------------------- the provider

/// The provider's side of the account: one token bucket for every client of
/// it, charged at arrival, refilling continuously like Anthropic's and
/// OpenAI's token-per-minute limits.
struct Provider {
    level: Cell<f64>,
    at: Cell<Instant>,
    latency_ms: std::ops::Range<u64>,
    rng: RefCell<fastrand::Rng>,
}

/// What a client reads back: the status, the rate-limit headers (on every
/// response, 429s included) and, on a 429, retry-after.
struct Response {
    served: bool,
    limits: RateLimits,
    retry_after: Option<Duration>,
}

impl Provider {
    /// Starts EMPTY: the lab's window opens just after the account spent its
    /// quota, so nothing can be served before it refills and the quota bound
    /// (total tokens / rate) is a true lower bound for any client.
    fn new(seed: u64, latency_ms: std::ops::Range<u64>) -> Provider {
        Provider {
            level: Cell::new(0.0),
            at: Cell::new(Instant::now()),
            latency_ms,
            rng: RefCell::new(fastrand::Rng::with_seed(seed ^ 0x9e37_79b9)),
        }
    }

    /// Admits or refuses `tokens` now; the answer arrives after the latency.
    fn arrive(&self, tokens: u64) -> (Response, Instant) {
        let now = Instant::now();
        let elapsed = now.duration_since(self.at.get()).as_secs_f64();
        let level = (self.level.get() + elapsed * RATE).min(QUOTA_PER_MINUTE);
        self.at.set(now);
        let served = level >= tokens as f64;
        let level = if served { level - tokens as f64 } else { level };
        self.level.set(level);
        let full_at = now + Duration::from_secs_f64((QUOTA_PER_MINUTE - level) / RATE);
        let retry_after = (!served).then(|| {
            // Whole seconds, as the header carries them.
            Duration::from_secs(((tokens as f64 - level) / RATE).ceil() as u64)
        });
        let latency = if served {
            self.latency_ms.clone()
        } else {
            REFUSAL_MS
        };
        let answer_at = now + Duration::from_millis(self.rng.borrow_mut().u64(latency));
        let limits = RateLimits {
            tokens_limit: Some(QUOTA_PER_MINUTE as u64),
            // As of this request's admission, like the real headers.
            tokens_remaining: Some(level.floor() as u64),
            // Relative to when the client reads it (Anthropic sends an instant,
            // which the client turns into "time from now").
            tokens_reset: Some(full_at.saturating_duration_since(answer_at)),
            ..RateLimits::default()
        };
        let response = Response {
            served,
            limits,
            retry_after,
        };
        (response, answer_at)
    }

    async fn send(&self, tokens: u64) -> Response {
        let (response, answer_at) = self.arrive(tokens);
        sleep_until(answer_at).await;
        response
    }
}

// ---------------------------------------------------------------- the bystander

#[derive(Default)]
struct BystanderTally {
    sent: u32,
    served: u32,
}

/// Another user of the account: 2,000 tokens every 10 s straight to the
/// provider, no governor. Its first request goes at 10 s (at 0 s the window is
/// empty for everyone). Counts what it sent while the fleet was at work.
async fn bystander(provider: &Provider, done: &Cell<bool>) -> BystanderTally {
    let mut tally = BystanderTally::default();
    let mut next = Instant::now() + BYSTANDER_EVERY;
    loop {
        sleep_until(next).await;
        if done.get() {
            return tally;
        }
        tally.sent += 1;
        // Served or refused is decided at arrival; it need not wait for the answer.
        if provider.arrive(BYSTANDER_TOKENS).0.served {
            tally.served += 1;
        }
        next += BYSTANDER_EVERY;
    }
}

// ---------------------------------------------------------------- the fleets

#[derive(Clone, Copy)]
struct Unit {
    input: u64,
    output: u64,
}

impl Unit {
    fn tokens(&self) -> u64 {
        self.input + self.output
    }
}

/// 300 work units of 2,500-5,500 tokens, about a third of it output.
fn work(seed: u64) -> Vec<Unit> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..UNITS)
        .map(|_| {
            let tokens = rng.u64(UNIT_TOKENS);
            let output = tokens / 3;
            Unit {
                input: tokens - output,
                output,
            }
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Fleet {
    /// Fire at once; on a 429, exponential backoff with full jitter (base 1 s,
    /// cap 60 s), retry-after ignored, as a plain HTTP client with retries does.
    Greedy,
    /// The governor without headers: refills at its 90 % share forever (the
    /// published "fixed governor"; a calibration row, not switchyard).
    FixedShare,
    /// The governor as the router drives it: admit, send, observe, settle.
    Switchyard,
}

impl Fleet {
    fn name(self) -> &'static str {
        match self {
            Fleet::Greedy => "greedy (backoff on 429)",
            Fleet::FixedShare => "governor, 90 % share, headers ignored",
            Fleet::Switchyard => "switchyard (governor + headers)",
        }
    }
}

#[derive(Default)]
struct Tally {
    attempts: Cell<u32>,
    refused: Cell<u32>,
    /// When the last served request reached the provider: the finish less the
    /// last answer's latency, which no client can avoid.
    last_served: Cell<Option<Instant>>,
}

impl Tally {
    /// Sends one attempt and counts it.
    async fn send(&self, provider: &Provider, tokens: u64) -> Response {
        self.attempts.set(self.attempts.get() + 1);
        let sent = Instant::now();
        let response = provider.send(tokens).await;
        if response.served {
            self.last_served.set(self.last_served.get().max(Some(sent)));
        } else {
            self.refused.set(self.refused.get() + 1);
        }
        response
    }
}

async fn greedy_worker(
    provider: &Provider,
    queue: &RefCell<Vec<Unit>>,
    tally: &Tally,
    rng: &RefCell<fastrand::Rng>,
) {
    loop {
        let Some(unit) = queue.borrow_mut().pop() else {
            return;
        };
        let mut retry = 0;
        loop {
            if tally.send(provider, unit.tokens()).await.served {
                break;
            }
            let cap = (1u64 << retry.min(6)).min(60) as f64;
            let wait = rng.borrow_mut().f64() * cap;
            sleep(Duration::from_secs_f64(wait)).await;
            retry += 1;
        }
    }
}

async fn governed_worker(
    provider: &Provider,
    governor: &Governor,
    queue: &RefCell<Vec<Unit>>,
    tally: &Tally,
    read_headers: bool,
) {
    // The operator configured the account's quota; headers refine it.
    let quota = Quota {
        tokens_per_minute: Some(QUOTA_PER_MINUTE as u64),
        ..Quota::default()
    };
    // Batch work is the refactor class: the lowest priority, stopping furthest
    // above the headroom, so interactive users of the account go first. Its
    // deadline is far: a batch waits rather than fails.
    let deadline = Instant::now() + Duration::from_secs(3_600);
    loop {
        let Some(unit) = queue.borrow_mut().pop() else {
            return;
        };
        loop {
            let reservation = governor
                .admit(
                    KEY,
                    TaskKind::Refactor,
                    quota,
                    unit.input,
                    unit.output,
                    deadline,
                )
                .await
                .expect("a batch deadline an hour away is not reached");
            let response = tally.send(provider, unit.tokens()).await;
            if read_headers {
                governor.observe(&reservation, &response.limits).await;
            }
            if response.served {
                let usage = Usage {
                    input_tokens: unit.input,
                    output_tokens: unit.output,
                };
                governor.settle(reservation, Some(usage)).await;
                break;
            }
            // As the router does: charge the input, share the pause, retry.
            governor.settle(reservation, None).await;
            let pause = response.retry_after.unwrap_or(Duration::from_secs(1));
            governor.pause(KEY, pause).await;
        }
    }
}

// ---------------------------------------------------------------- one run

struct Run {
    total_tokens: u64,
    attempts: u32,
    refused: u32,
    seconds: f64,
    last_served: f64,
    bystander: BystanderTally,
}

impl Run {
    /// Total tokens / rate: no client finishes sooner (the window starts empty).
    fn bound(&self) -> f64 {
        self.total_tokens as f64 / RATE
    }

    /// The best finish that leaves the bystander its 2,000 tokens every 10 s.
    fn best(&self) -> f64 {
        self.total_tokens as f64 / (RATE - BYSTANDER_RATE)
    }

    fn share_served(&self) -> f64 {
        100.0 * f64::from(self.bystander.served) / f64::from(self.bystander.sent.max(1))
    }
}

fn run(fleet: Fleet, seed: u64, latency_ms: std::ops::Range<u64>) -> Run {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // The governor's wait jitter draws from this thread's generator.
        fastrand::seed(seed);
        let started = Instant::now();
        let units = work(seed);
        let total_tokens = units.iter().map(Unit::tokens).sum();
        let queue = RefCell::new(units);
        let provider = Provider::new(seed, latency_ms);
        let governor = Governor::new(
            Arc::new(MemoryState::new()),
            GovernorConfig::default(),
            WhenUnavailable::Closed,
        );
        let tally = Tally::default();
        let rng = RefCell::new(fastrand::Rng::with_seed(seed ^ 0x5eed));
        let done = Cell::new(false);
        let workers = join_all((0..WORKERS).map(|_| async {
            match fleet {
                Fleet::Greedy => greedy_worker(&provider, &queue, &tally, &rng).await,
                Fleet::FixedShare => {
                    governed_worker(&provider, &governor, &queue, &tally, false).await
                }
                Fleet::Switchyard => {
                    governed_worker(&provider, &governor, &queue, &tally, true).await
                }
            }
        }));
        let fleet_done = async {
            workers.await;
            done.set(true);
            started.elapsed()
        };
        let (elapsed, bystander) = futures::join!(fleet_done, bystander(&provider, &done));
        Run {
            total_tokens,
            attempts: tally.attempts.get(),
            refused: tally.refused.get(),
            seconds: elapsed.as_secs_f64(),
            last_served: tally
                .last_served
                .get()
                .map_or(0.0, |at| at.duration_since(started).as_secs_f64()),
            bystander,
        }
    })
}

// ---------------------------------------------------------------- the report

fn cell(values: Vec<f64>, decimals: usize) -> String {
    let (median, min, max) = summary(values);
    if (max - min).abs() < f64::EPSILON {
        format!("{median:.decimals$}")
    } else {
        format!("{median:.decimals$} ({min:.decimals$}–{max:.decimals$})")
    }
}

/// One table: every fleet over every seed at one answer latency.
fn table(seeds: u64, latency_ms: std::ops::Range<u64>, details: &mut Vec<String>) {
    println!(
        "Answers in {:.1}-{:.1} s; median (min–max) over seeds 1..={seeds}:",
        latency_ms.start as f64 / 1000.0,
        latency_ms.end as f64 / 1000.0
    );
    println!();
    println!(
        "| fleet | attempts | 429s | completion s | last request in s | bound s | best with bystander s | over best % | bystander served % |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for fleet in [Fleet::Greedy, Fleet::FixedShare, Fleet::Switchyard] {
        let runs: Vec<Run> = (1..=seeds)
            .map(|seed| run(fleet, seed, latency_ms.clone()))
            .collect();
        let column = |f: &dyn Fn(&Run) -> f64| runs.iter().map(f).collect::<Vec<_>>();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fleet.name(),
            cell(column(&|r| f64::from(r.attempts)), 0),
            cell(column(&|r| f64::from(r.refused)), 0),
            cell(column(&|r| r.seconds), 1),
            cell(column(&|r| r.last_served), 1),
            cell(column(&Run::bound), 1),
            cell(column(&Run::best), 1),
            cell(column(&|r| 100.0 * (r.seconds / r.best() - 1.0)), 2),
            cell(column(&Run::share_served), 0),
        );
        for (seed, r) in (1..=seeds).zip(&runs) {
            details.push(format!(
                "{latency_ms:?} ms, {}, seed {seed}: {} attempts, {} 429s, {:.1} s \
                 (last request in {:.1}; bound {:.1}, best {:.1}), bystander {}/{}",
                fleet.name(),
                r.attempts,
                r.refused,
                r.seconds,
                r.last_served,
                r.bound(),
                r.best(),
                r.bystander.served,
                r.bystander.sent
            ));
        }
    }
    println!();
}

fn main() {
    let seeds: u64 = std::env::var("QUOTA_LAB_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let verbose = std::env::var_os("QUOTA_LAB_VERBOSE").is_some();
    let wall = std::time::Instant::now();
    println!(
        "quota lab: {UNITS} units of {}-{} tokens, {WORKERS} workers, quota {QUOTA_PER_MINUTE} tokens/min \
         (provider bucket starts empty), bystander {BYSTANDER_TOKENS} tokens every {} s",
        UNIT_TOKENS.start(),
        UNIT_TOKENS.end(),
        BYSTANDER_EVERY.as_secs(),
    );
    println!();
    let mut details = Vec::new();
    for latency_ms in LATENCIES_MS {
        table(seeds, latency_ms, &mut details);
    }
    if verbose {
        for line in details {
            println!("{line}");
        }
        println!();
    }
    println!(
        "Published reference: greedy 800 attempts / 500 429s / 383 s / bystander 69 %; \
         governor at 90 %: 300 / 0 / 405 s / 100 %; bound 364 s."
    );
    println!(
        "Wall time {:.2} s (simulated clock).",
        wall.elapsed().as_secs_f64()
    );
}
