//! Behaviour of [`FileState`]: records, expiry and leases (on tokio's paused
//! clock), permissions, corrupt records, key names, buckets and exact counting
//! across tasks, threads and separately opened states on one directory.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::advance;

use super::FileState;
use crate::{BucketOp, BucketSpec, Json, SharedState};
use switchyard_base::clock::Clock;

/// The clock's resolution: how close to a TTL expiry is checked.
const MS: Duration = Duration::from_millis(1);

fn temp_state() -> (tempfile::TempDir, FileState) {
    let dir = tempfile::tempdir().unwrap();
    let state = FileState::open(dir.path().join("shared")).unwrap();
    (dir, state)
}

/// A state whose records expire on tokio's clock: in a `start_paused` test
/// time passes only when the test advances it.
fn state_on_tokio_clock() -> (tempfile::TempDir, FileState) {
    let dir = tempfile::tempdir().unwrap();
    let state = FileState::open_with_clock(dir.path().join("shared"), Clock::tokio()).unwrap();
    (dir, state)
}

async fn increment(state: &FileState, key: &str) {
    state
        .update(
            key,
            None,
            Box::new(|n, _| Some((n.and_then(|n| n.as_u64()).unwrap_or(0) + 1).into())),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn update_get_and_remove() {
    let (_dir, state) = temp_state();
    let stored = state
        .update(
            "breaker/openai:gpt",
            None,
            Box::new(|old, _| {
                assert_eq!(old, None);
                Some(serde_json::json!({"open": true}))
            }),
        )
        .await
        .unwrap();
    assert_eq!(stored, Some(serde_json::json!({"open": true})));
    assert_eq!(state.get("breaker/openai:gpt").await.unwrap(), stored);
    state
        .update("breaker/openai:gpt", None, Box::new(|_, _| None))
        .await
        .unwrap();
    assert_eq!(state.get("breaker/openai:gpt").await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn records_expire_after_their_ttl() {
    let (_dir, state) = state_on_tokio_clock();
    let ttl = Duration::from_secs(5);
    state
        .update("k", Some(ttl), Box::new(|_, _| Some(1.into())))
        .await
        .unwrap();
    advance(ttl - MS).await;
    assert_eq!(
        state.get("k").await.unwrap(),
        Some(1.into()),
        "live until then"
    );
    advance(MS).await;
    assert_eq!(state.get("k").await.unwrap(), None);
    assert!(state.scan("").await.unwrap().is_empty());
}

#[cfg(unix)]
#[tokio::test]
async fn directory_is_0700_and_files_are_0600() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, state) = temp_state();
    state
        .update("a/b:c", None, Box::new(|_, _| Some(1.into())))
        .await
        .unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("shared")), 0o700);
    let files: Vec<_> = fs::read_dir(dir.path().join("shared"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(files.len(), 2, "one record and one lock file: {files:?}");
    for file in files {
        assert_eq!(mode(&file.path()), 0o600, "{:?}", file.path());
    }
}

#[tokio::test]
async fn a_corrupt_record_reads_as_absent_and_is_replaced() {
    let (_dir, state) = temp_state();
    state
        .update("k", None, Box::new(|_, _| Some(1.into())))
        .await
        .unwrap();
    fs::write(state.record_path("k"), b"{\"key\":\"k\",\"val").unwrap();
    assert_eq!(state.get("k").await.unwrap(), None);
    assert!(state.scan("").await.unwrap().is_empty());
    increment(&state, "k").await;
    assert_eq!(state.get("k").await.unwrap(), Some(1.into()));
}

/// Judged by the set that decides the warning, not by capturing the log:
/// tracing caches callsite interest process-wide, so a log capture in one
/// test races with the other tests' threads.
#[tokio::test]
async fn a_corrupt_record_is_reported_once_until_replaced() {
    let (_dir, state) = temp_state();
    let path = state.record_path("k");
    let reported = |state: &FileState| state.reported.lock().unwrap().contains(&path);
    fs::write(&path, b"not json").unwrap();
    assert_eq!(state.get("k").await.unwrap(), None);
    assert!(reported(&state), "reported the first time");
    // `insert` answers false for a path already reported: no second warning.
    assert!(!state.reported.lock().unwrap().insert(path.clone()));
    increment(&state, "k").await;
    assert!(!reported(&state), "a replaced record is forgotten");
    fs::write(&path, b"broken again").unwrap();
    assert_eq!(state.get("k").await.unwrap(), None);
    assert!(reported(&state), "and reported again when it breaks");
}

#[tokio::test]
async fn an_unreadable_record_reads_as_absent_and_is_replaced() {
    let (_dir, state) = temp_state();
    // A directory where the record should be cannot be read as a file.
    fs::create_dir(state.record_path("k")).unwrap();
    assert_eq!(state.get("k").await.unwrap(), None);
    let err = state
        .update("k", None, Box::new(|_, _| Some(1.into())))
        .await
        .unwrap_err();
    assert!(err.reason.contains("cannot write"), "{err}");
    fs::remove_dir(state.record_path("k")).unwrap();
    increment(&state, "k").await;
    assert_eq!(state.get("k").await.unwrap(), Some(1.into()));
}

#[tokio::test]
async fn keys_with_any_characters_and_lengths_round_trip_through_scan() {
    let (_dir, state) = temp_state();
    let long = format!("bucket/{}", "x/".repeat(200));
    let keys = [
        "bucket/a:b",
        "bucket/%2F",
        "bucket/é ~*",
        long.as_str(),
        "breaker/a",
    ];
    for key in keys {
        state
            .update(key, None, Box::new(move |_, _| Some(key.into())))
            .await
            .unwrap();
    }
    let found = state.scan("bucket/").await.unwrap();
    let mut expected: Vec<_> = keys[..4]
        .iter()
        .map(|k| (k.to_string(), Json::from(*k)))
        .collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(found, expected);
    assert_eq!(state.get(&long).await.unwrap(), Some(long.clone().into()));
}

#[tokio::test(start_paused = true)]
async fn leases_have_one_holder_until_release_or_expiry() {
    let (_dir, state) = state_on_tokio_clock();
    let ttl = Duration::from_secs(10);
    assert!(state.try_lease("lease", "a", ttl).await.unwrap());
    assert!(!state.try_lease("lease", "b", ttl).await.unwrap());
    state.release_lease("lease", "b").await.unwrap();
    assert!(
        !state.try_lease("lease", "b", ttl).await.unwrap(),
        "only the holder releases"
    );
    state.release_lease("lease", "a").await.unwrap();
    assert!(state.try_lease("lease", "b", ttl).await.unwrap());
    advance(ttl - MS).await;
    assert!(
        !state.try_lease("lease", "c", ttl).await.unwrap(),
        "held until its ttl"
    );
    advance(MS).await;
    assert!(
        state.try_lease("lease", "c", ttl).await.unwrap(),
        "a crashed holder's lease expires"
    );
}

#[tokio::test(start_paused = true)]
async fn a_renewed_lease_outlives_its_first_ttl_and_a_lapsed_one_stays_lapsed() {
    let (_dir, state) = state_on_tokio_clock();
    let ttl = Duration::from_secs(10);
    let second = Duration::from_secs(1);
    assert!(state.try_lease("lease", "a", ttl).await.unwrap());
    advance(ttl - second).await;
    assert!(state.renew_lease("lease", "a", ttl).await.unwrap());
    assert!(
        !state.renew_lease("lease", "b", ttl).await.unwrap(),
        "only the holder renews"
    );
    advance(ttl - second).await;
    assert!(
        !state.try_lease("lease", "b", ttl).await.unwrap(),
        "held a whole ttl after the renewal"
    );
    advance(second).await;
    assert!(
        !state.renew_lease("lease", "a", ttl).await.unwrap(),
        "a lapsed lease is not renewed"
    );
    assert!(state.try_lease("lease", "b", ttl).await.unwrap());
}

#[tokio::test]
async fn buckets_go_through_update() {
    let (_dir, state) = temp_state();
    let spec = BucketSpec {
        capacity: 100.0,
        refill_per_sec: 0.0,
    };
    let take = BucketOp::Take {
        amount: 60.0,
        floor: 0.0,
    };
    assert!(state.bucket("b", spec, take).await.unwrap().granted);
    assert!(!state.bucket("b", spec, take).await.unwrap().granted);
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_tasks_on_one_thread_count_exactly() {
    let (_dir, state) = temp_state();
    let state = Arc::new(state);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let state = state.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    increment(&state, "count").await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(state.get("count").await.unwrap(), Some(200.into()));
}

#[test]
fn threads_with_their_own_state_on_one_dir_count_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let path = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let state = FileState::open(path).unwrap();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    for _ in 0..50 {
                        increment(&state, "count").await;
                    }
                });
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let state = FileState::open(dir.path().to_path_buf()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(
        runtime.block_on(state.get("count")).unwrap(),
        Some(400.into())
    );
}
