//! One contract, three backends: what `SharedState` promises must hold for the
//! in-memory, file and Redis backends alike. The Redis tests start a real
//! `redis-server` (Debian package `redis-server`, installed by scripts/test-setup) on
//! a free local port, and fail rather than skip when it is missing.
//!
//! The contract waits on tokio's clock. The memory backend, and the file
//! backend opened on tokio's clock, keep it on a paused clock: time passes only
//! when the contract waits, at no cost. The Redis server's clock cannot be
//! paused, so its TTLs are long enough that only the order of events matters.

mod support;

use std::net::TcpListener;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::json;
use support::free_port;
use support::redis_server::RedisServer;
use support::timing;
use switchyard_base::clock::Clock;
use switchyard_state::bucket::{self, Record};
use switchyard_state::file::FileState;
use switchyard_state::memory::MemoryState;
use switchyard_state::redis::RedisState;
use switchyard_state::{BucketOp, BucketSpec, Json, SharedState};

/// A TTL the contract waits out: long enough that a record read back right
/// after its write is still there on a loaded machine's real clock.
const SHORT_TTL: Duration = Duration::from_secs(2);
/// How often the contract looks whether a record with [`SHORT_TTL`] is gone.
const EXPIRY_POLL: Duration = Duration::from_millis(50);
/// How soon a call to a Redis that is down or silent fails: the backend's
/// one-second timeout, and slack.
const FAILS_WITHIN: Duration = Duration::from_millis(1500);

// ---------------------------------------------------------------- the contract

async fn contract(state: &dyn SharedState) {
    records_update_and_read_back(state).await;
    scan_lists_live_records_under_a_prefix_in_key_order(state).await;
    records_expire_after_their_ttl(state).await;
    leases_have_one_holder_until_release_or_expiry(state).await;
    buckets_take_refill_and_observe(state).await;
    bucket_operations_match_bucket_apply_on_the_backend_clock(state).await;
}

async fn records_update_and_read_back(state: &dyn SharedState) {
    assert_eq!(state.get("breaker/openai:gpt-4.1").await.unwrap(), None);
    let mut first_now = 0;
    let stored = state
        .update(
            "breaker/openai:gpt-4.1",
            None,
            Box::new(|old, now| {
                assert_eq!(old, None);
                first_now = now;
                Some(json!({"failures": 1, "open": false}))
            }),
        )
        .await
        .unwrap();
    assert_eq!(stored, Some(json!({"failures": 1, "open": false})));
    let stored = state
        .update(
            "breaker/openai:gpt-4.1",
            None,
            Box::new(|old, now| {
                timing::assert_in_order("the backend clock does not go back", first_now, now);
                let failures = old
                    .as_ref()
                    .and_then(|o| o["failures"].as_u64())
                    .unwrap_or(0);
                Some(json!({"failures": failures + 1, "open": true}))
            }),
        )
        .await
        .unwrap();
    assert_eq!(stored, Some(json!({"failures": 2, "open": true})));
    assert_eq!(state.get("breaker/openai:gpt-4.1").await.unwrap(), stored);

    let removed = state
        .update("breaker/openai:gpt-4.1", None, Box::new(|_, _| None))
        .await
        .unwrap();
    assert_eq!(removed, None);
    assert_eq!(state.get("breaker/openai:gpt-4.1").await.unwrap(), None);
}

async fn scan_lists_live_records_under_a_prefix_in_key_order(state: &dyn SharedState) {
    let keys = [
        "scan/b",
        "scan/a:1",
        "scan/*[x]?",
        "scanner/c",
        "other/scan/d",
    ];
    for key in keys {
        state
            .update(key, None, Box::new(move |_, _| Some(Json::from(key))))
            .await
            .unwrap();
    }
    let found = state.scan("scan/").await.unwrap();
    let expected: Vec<(String, Json)> = ["scan/*[x]?", "scan/a:1", "scan/b"]
        .into_iter()
        .map(|k| (k.to_owned(), Json::from(k)))
        .collect();
    assert_eq!(found, expected);
    assert_eq!(
        state.scan("scan/*").await.unwrap().len(),
        1,
        "glob characters are literal"
    );
    assert!(state.scan("nothing/").await.unwrap().is_empty());
}

/// What `write` stores with [`SHORT_TTL`] is there right after the write and
/// gone once the TTL has passed, never before. `gone` changes nothing while
/// it is there.
async fn expires_after_short_ttl(
    what: &str,
    write: impl AsyncFnOnce(),
    mut gone: impl AsyncFnMut() -> bool,
) {
    let written = tokio::time::Instant::now();
    write().await;
    assert!(!gone().await, "{what}: gone right after the write");
    let gone_after = tokio::time::timeout(timing::scaled(SHORT_TTL * 3), async {
        while !gone().await {
            tokio::time::sleep(EXPIRY_POLL).await;
        }
        written.elapsed()
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: still there long after its ttl"));
    timing::assert_at_least(&format!("{what}: gone"), gone_after, SHORT_TTL);
}

async fn records_expire_after_their_ttl(state: &dyn SharedState) {
    state
        .update(
            "ttl/long",
            Some(Duration::from_secs(600)),
            Box::new(|_, _| Some(json!(2))),
        )
        .await
        .unwrap();
    expires_after_short_ttl(
        "a record",
        async || {
            state
                .update(
                    "ttl/short",
                    Some(SHORT_TTL),
                    Box::new(|_, _| Some(json!(1))),
                )
                .await
                .unwrap();
        },
        async || state.get("ttl/short").await.unwrap().is_none(),
    )
    .await;
    assert_eq!(state.get("ttl/long").await.unwrap(), Some(json!(2)));
    let keys: Vec<String> = state
        .scan("ttl/")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["ttl/long"]);
    state
        .update(
            "ttl/short",
            None,
            Box::new(|old, _| {
                assert_eq!(old, None, "an update sees an expired record as absent");
                Some(json!(3))
            }),
        )
        .await
        .unwrap();
}

async fn leases_have_one_holder_until_release_or_expiry(state: &dyn SharedState) {
    let ttl = Duration::from_secs(30);
    assert!(state.try_lease("lease/probe", "a", ttl).await.unwrap());
    assert!(!state.try_lease("lease/probe", "b", ttl).await.unwrap());
    assert!(
        !state.try_lease("lease/probe", "a", ttl).await.unwrap(),
        "a lease is not re-entrant"
    );
    assert_eq!(state.get("lease/probe").await.unwrap(), Some(json!("a")));
    state.release_lease("lease/probe", "b").await.unwrap();
    assert!(
        !state.try_lease("lease/probe", "b", ttl).await.unwrap(),
        "only the holder releases"
    );
    state.release_lease("lease/probe", "a").await.unwrap();
    assert!(state.try_lease("lease/probe", "b", ttl).await.unwrap());

    expires_after_short_ttl(
        "a crashed holder's lease",
        async || {
            assert!(
                state
                    .try_lease("lease/crashed", "a", SHORT_TTL)
                    .await
                    .unwrap()
            );
        },
        async || state.try_lease("lease/crashed", "c", ttl).await.unwrap(),
    )
    .await;
}

async fn buckets_take_refill_and_observe(state: &dyn SharedState) {
    // No refill: every level is exact.
    let still = BucketSpec {
        capacity: 1000.0,
        refill_per_sec: 0.0,
    };
    let first = state
        .bucket(
            "bucket/still",
            still,
            BucketOp::Take {
                amount: 100.0,
                floor: 0.0,
            },
        )
        .await
        .unwrap();
    assert!(first.granted);
    assert_eq!(first.level, 900.0);
    let second = state
        .bucket(
            "bucket/still",
            still,
            BucketOp::Take {
                amount: 300.0,
                floor: 0.0,
            },
        )
        .await
        .unwrap();
    assert_eq!((second.level, second.ticket), (600.0, 400.0));
    let refused = state
        .bucket(
            "bucket/still",
            still,
            BucketOp::Take {
                amount: 600.0,
                floor: 100.0,
            },
        )
        .await
        .unwrap();
    assert!(!refused.granted);
    assert_eq!(
        refused.wait,
        Duration::from_secs(86_400),
        "no refill: wait the maximum"
    );
    // The provider saw only the first request and reports 850 left.
    let observed = state
        .bucket(
            "bucket/still",
            still,
            BucketOp::Observe {
                remaining: 850.0,
                ticket: first.ticket,
            },
        )
        .await
        .unwrap();
    assert_eq!(observed.level, 550.0);
    let adjusted = state
        .bucket("bucket/still", still, BucketOp::Adjust { delta: 25.5 })
        .await
        .unwrap();
    assert_eq!(adjusted.level, 575.5);
    let peeked = state
        .bucket("bucket/still", still, BucketOp::Peek)
        .await
        .unwrap();
    assert_eq!(peeked.level, 575.5);
    let record: Record =
        serde_json::from_value(state.get("bucket/still").await.unwrap().unwrap()).unwrap();
    assert_eq!(
        (record.level, record.reserved),
        (575.5, 400.0),
        "get reads the bucket record"
    );

    // 1000 per second: emptied, refused, refilled after a pause.
    let fast = BucketSpec {
        capacity: 100.0,
        refill_per_sec: 1000.0,
    };
    let take_all = BucketOp::Take {
        amount: 100.0,
        floor: 0.0,
    };
    assert!(
        state
            .bucket("bucket/fast", fast, take_all)
            .await
            .unwrap()
            .granted
    );
    let refused = state.bucket("bucket/fast", fast, take_all).await.unwrap();
    if !refused.granted {
        assert!(refused.wait <= Duration::from_millis(100), "{refused:?}");
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        state
            .bucket("bucket/fast", fast, take_all)
            .await
            .unwrap()
            .granted,
        "refilled"
    );
}

/// Reads each stored record before and after an operation; the record's `at`
/// is the backend's now, so [`bucket::apply`] must reproduce the reply and the
/// stored record exactly. For Redis this checks the Lua script against Rust.
async fn bucket_operations_match_bucket_apply_on_the_backend_clock(state: &dyn SharedState) {
    let spec = BucketSpec {
        capacity: 1000.0,
        refill_per_sec: 7.3,
    };
    let key = "bucket/mirror";
    // Start from a record that was left idle two minutes ago, half spent.
    state
        .update(
            key,
            Some(bucket::TTL),
            Box::new(|_, now| {
                let ago = now.saturating_sub(120_000);
                let record = Record {
                    level: 400.25,
                    at: ago,
                    reserved: 600.0,
                    last_take: ago,
                };
                Some(serde_json::to_value(record).unwrap())
            }),
        )
        .await
        .unwrap();
    let ops = [
        BucketOp::Take {
            amount: 333.3,
            floor: 0.0,
        },
        BucketOp::Take {
            amount: 150.0,
            floor: 50.0,
        },
        BucketOp::Take {
            amount: 10_000.0,
            floor: 0.0,
        },
        BucketOp::Adjust { delta: 123.456 },
        BucketOp::Observe {
            remaining: 777.7,
            ticket: 700.0,
        },
        BucketOp::Adjust { delta: -2_000.0 },
        BucketOp::Peek,
        BucketOp::Take {
            amount: 0.1,
            floor: -5_000.0,
        },
    ];
    for op in ops {
        let before = state.get(key).await.unwrap();
        let reply = state.bucket(key, spec, op).await.unwrap();
        let after = state.get(key).await.unwrap().expect("the bucket is stored");
        let now = serde_json::from_value::<Record>(after.clone()).unwrap().at;
        let (expected_record, expected_reply) = bucket::apply(before, &spec, &op, now);
        // A backend that keeps JSON reads its floats back to within a unit
        // in the last place (serde_json's default parsing), seen once as
        // -1455.6781 against -1455.6780999999999, and once in a reply as
        // 167.7147 against 167.71470000000002.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
        assert!(
            reply.granted == expected_reply.granted
                && close(reply.level, expected_reply.level)
                && close(reply.ticket, expected_reply.ticket)
                && close(reply.wait.as_secs_f64(), expected_reply.wait.as_secs_f64()),
            "{op:?}: {reply:?} against {expected_reply:?}"
        );
        let (got, want) = (
            serde_json::from_value::<Record>(after).unwrap(),
            serde_json::from_value::<Record>(expected_record).unwrap(),
        );
        assert!(
            close(got.level, want.level)
                && close(got.reserved, want.reserved)
                && (got.at, got.last_take) == (want.at, want.last_take),
            "{op:?}: {got:?} against {want:?}"
        );
    }
}

// ---------------------------------------------------------------- backends

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn memory_backend_keeps_the_contract() {
    contract(&MemoryState::new()).await;
}

#[tokio::test(start_paused = true)]
async fn file_backend_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    contract(&FileState::open_with_clock(dir.path().join("shared"), Clock::tokio()).unwrap()).await;
}

#[tokio::test]
async fn redis_backend_keeps_the_contract() {
    let server = RedisServer::start();
    contract(&RedisState::open(&server.url()).unwrap()).await;
}

#[tokio::test]
async fn open_picks_the_backend_from_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let file = switchyard_state::open(&format!("file://{}", dir.path().display())).unwrap();
    assert!(file.describe().starts_with("file "), "{}", file.describe());
    assert_eq!(
        switchyard_state::open("memory").unwrap().describe(),
        "memory"
    );
    let redis = switchyard_state::open("redis://:hunter2@127.0.0.1:6399/0").unwrap();
    assert_eq!(redis.describe(), "redis://***@127.0.0.1:6399/0");
    assert!(switchyard_state::open("ftp://x").is_err());
}

// ---------------------------------------------------------------- processes racing

/// `count` separately opened instances (as separate processes would have), each
/// on its own thread and runtime, start together and run `work`.
fn race<S, T>(
    count: usize,
    open: impl Fn() -> S,
    work: impl Fn(S, usize) -> T + Send + Sync + 'static,
) -> Vec<T>
where
    S: Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(count));
    let work = Arc::new(work);
    let threads: Vec<_> = (0..count)
        .map(|i| {
            let state = open();
            let barrier = barrier.clone();
            let work = work.clone();
            std::thread::spawn(move || {
                barrier.wait();
                work(state, i)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn exactly_one_takes_the_lease<S: SharedState + 'static>(open: impl Fn() -> S) {
    let winners = race(8, open, |state, i| {
        runtime()
            .block_on(state.try_lease(
                "breaker/probe",
                &format!("holder-{i}"),
                Duration::from_secs(30),
            ))
            .unwrap()
    });
    assert_eq!(winners.iter().filter(|won| **won).count(), 1, "{winners:?}");
}

fn increments_are_never_lost<S: SharedState + 'static>(open: impl Fn() -> S) {
    race(8, &open, |state, _| {
        runtime().block_on(async {
            for _ in 0..50 {
                state
                    .update(
                        "count",
                        None,
                        Box::new(|n, _| Some(json!(n.and_then(|n| n.as_u64()).unwrap_or(0) + 1))),
                    )
                    .await
                    .unwrap();
            }
        })
    });
    assert_eq!(
        runtime().block_on(open().get("count")).unwrap(),
        Some(json!(400))
    );
}

#[test]
fn file_instances_on_one_dir_share_leases_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let open = || FileState::open(dir.path().to_path_buf()).unwrap();
    exactly_one_takes_the_lease(open);
    increments_are_never_lost(open);
}

#[test]
fn redis_instances_on_one_server_share_leases_and_counts() {
    let server = RedisServer::start();
    let open = || RedisState::open(&server.url()).unwrap();
    exactly_one_takes_the_lease(open);
    increments_are_never_lost(open);
}

// ---------------------------------------------------------------- Redis down

#[tokio::test]
async fn an_unreachable_redis_fails_fast_without_revealing_the_password() {
    let closed_port = free_port();
    let state =
        switchyard_state::open(&format!("redis://:hunter2@127.0.0.1:{closed_port}")).unwrap();
    let started = std::time::Instant::now();
    let err = state
        .update("k", None, Box::new(|_, _| Some(json!(1))))
        .await
        .unwrap_err();
    timing::assert_within(&format!("failing ({err})"), started.elapsed(), FAILS_WITHIN);
    let text = format!("{err} {err:?}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(err.backend.starts_with("redis://***@127.0.0.1:"), "{text}");
}

#[tokio::test]
async fn a_redis_that_never_answers_fails_within_a_second() {
    // Accepts connections, never replies.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://:hunter2@{}", silent.local_addr().unwrap());
    let _accepting = std::thread::spawn(move || {
        let held: Vec<_> = silent.incoming().take(16).collect();
        std::thread::sleep(Duration::from_secs(5));
        drop(held);
    });
    let state = RedisState::open(&url).unwrap();
    for _ in 0..2 {
        let started = std::time::Instant::now();
        let err = state.get("k").await.unwrap_err();
        timing::assert_within(&format!("failing ({err})"), started.elapsed(), FAILS_WITHIN);
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

#[tokio::test]
async fn the_redis_backend_recovers_when_the_server_comes_back() {
    let server = RedisServer::start();
    let port = server.port;
    let state = RedisState::open(&server.url()).unwrap();
    state
        .update("k", None, Box::new(|_, _| Some(json!(1))))
        .await
        .unwrap();
    drop(server);
    let started = std::time::Instant::now();
    assert!(state.get("k").await.is_err(), "the server is gone");
    timing::assert_within("failing without a server", started.elapsed(), FAILS_WITHIN);

    let _server = RedisServer::start_on(port);
    let mut last_error = None;
    let reconnected = tokio::time::timeout(timing::scaled(Duration::from_secs(10)), async {
        loop {
            match state.get("k").await {
                Ok(value) => break value,
                Err(err) => last_error = Some(err),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never reconnected: {last_error:?}"));
    // A fresh server without persistence: the record is gone, the connection is back.
    assert_eq!(reconnected, None);
}
