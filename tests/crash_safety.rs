//! `kill -9` at the worst moment loses nothing and corrupts nothing:
//! - during shared-state writes (child processes hammering `FileState`, and
//!   real `switchyard` language servers doing explains that write breaker and
//!   quota state): every record still parses, no acknowledged update is lost,
//!   and the next update works;
//! - during a model download: nothing is ever at the model path until it is
//!   whole and verified, and the next run resumes where the killed one stopped.
//!
//! A parked refactor killed with -9 is covered in tests/resilience.rs
//! (`a_parked_refactor_survives_kill_9_and_resumes_when_the_breaker_closes`).
//!
//! Child processes that must die mid-work are this test binary itself, re-run
//! on one `#[ignore]`d test (`child_*`) that does the work when its
//! environment variable is set.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::fake_provider::{Behaviour, FakeProvider};
use support::lsp_client::{LspClient, ServerOptions};
use switchyard_models::{Manifest, ModelEntry, NoProgress};
use switchyard_state::SharedState;
use switchyard_state::file::FileState;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

/// Generous: these waits catch hangs, they do not measure speed.
const WAIT: Duration = Duration::from_secs(120);

const STATE_CHILD_ENV: &str = "CRASH_SAFETY_STATE_DIR";
const PULL_CHILD_ENV: &str = "CRASH_SAFETY_MANIFEST";

/// This test binary, re-run on one child test.
fn child(test: &str, env: (&str, &str)) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(env.0, env.1)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// SIGKILL (tokio's `kill` is SIGKILL on Unix) and reap.
async fn kill_9(child: &mut Child) {
    child.kill().await.unwrap();
}

// ---------------------------------------------------------------------------
// Shared state.
// ---------------------------------------------------------------------------

const WRITERS: usize = 4;

/// Counter keys, and one big record so a write spans many syscalls.
fn counter_key(writer: usize) -> String {
    format!("crash/counter:{writer}")
}
const BIG_KEY: &str = "crash/big";

/// Child: increments counters forever, printing `ack KEY VALUE` after each
/// update has returned (the point from which it must never be lost).
#[test]
#[ignore = "run by the crash tests as a child process"]
fn child_state_writer() {
    let Some(dir) = std::env::var_os(STATE_CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let state = Arc::new(FileState::open(PathBuf::from(dir)).unwrap());
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let state = state.clone();
            tasks.push(tokio::spawn(async move {
                let key = if writer == 0 {
                    BIG_KEY.to_owned()
                } else {
                    counter_key(writer)
                };
                loop {
                    let stored = state
                        .update(
                            &key,
                            None,
                            Box::new(|old, _| {
                                let n = old.as_ref().and_then(|v| v["n"].as_u64()).unwrap_or(0);
                                // ~256 KiB for the big record: a write that takes a while.
                                let pad = if writer == 0 { 256 * 1024 } else { 16 };
                                Some(json!({"n": n + 1, "pad": "x".repeat(pad)}))
                            }),
                        )
                        .await
                        .unwrap();
                    let n = stored.unwrap()["n"].as_u64().unwrap();
                    println!("ack {key} {n}");
                }
            }));
        }
        // The writers loop until the parent kills this process.
        futures::future::join_all(tasks).await;
    });
}

/// Every record file in `dir` is a whole record; returns how many there are.
fn assert_records_whole(dir: &Path) -> usize {
    let mut records = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        let bytes = std::fs::read(entry.path()).unwrap();
        let record: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{name} is corrupt ({e}): {} bytes", bytes.len()));
        assert!(
            record["key"].is_string() && record.get("value").is_some(),
            "{name}: {record}"
        );
        records += 1;
    }
    records
}

#[tokio::test]
async fn kill_9_mid_write_loses_no_acknowledged_update_and_corrupts_no_record() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("shared");
    let acked: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    for round in 0..8u64 {
        // Two processes at once, contending for the same keys' locks.
        let mut children: Vec<Child> = (0..2)
            .map(|_| {
                child(
                    "child_state_writer",
                    (STATE_CHILD_ENV, dir.to_str().unwrap()),
                )
            })
            .collect();
        let mut readers = Vec::new();
        for c in &mut children {
            let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
            let acked = acked.clone();
            let (seen_tx, seen_rx) = tokio::sync::watch::channel(0u64);
            readers.push((
                tokio::spawn(async move {
                    let mut seen = 0;
                    while let Ok(Some(line)) = lines.next_line().await {
                        let Some(rest) = line.strip_prefix("ack ") else {
                            continue;
                        };
                        let (key, n) = rest.rsplit_once(' ').unwrap();
                        let n: u64 = n.parse().unwrap();
                        let mut acked = acked.lock().unwrap();
                        let best = acked.entry(key.to_owned()).or_default();
                        *best = (*best).max(n);
                        seen += 1;
                        let _ = seen_tx.send(seen);
                    }
                }),
                seen_rx,
            ));
        }
        // Kill each at a different point: after some acknowledged writes, so
        // writes are in flight, varying round to round.
        let wanted = 20 + round * 13;
        for ((_, seen), c) in readers.iter_mut().zip(&mut children) {
            tokio::time::timeout(WAIT, seen.wait_for(|n| *n >= wanted))
                .await
                .expect("the writer made no progress")
                .unwrap();
            kill_9(c).await;
        }
        for (reader, _) in readers {
            reader.await.unwrap();
        }

        assert_records_whole(&dir);
        let state = FileState::open(dir.clone()).unwrap();
        let acknowledged = acked.lock().unwrap().clone();
        for (key, best) in acknowledged {
            let stored = state.get(&key).await.unwrap();
            let n = stored
                .as_ref()
                .and_then(|v| v["n"].as_u64())
                .unwrap_or_else(|| panic!("round {round}: {key} lost: {stored:?}"));
            assert!(
                n >= best,
                "round {round}: {key} is {n}, {best} was acknowledged"
            );
        }
    }

    // The next update works on whatever the kills left.
    let state = FileState::open(dir.clone()).unwrap();
    for key in [BIG_KEY.to_owned(), counter_key(1)] {
        let before = state.get(&key).await.unwrap().unwrap()["n"]
            .as_u64()
            .unwrap();
        let after = state
            .update(
                &key,
                None,
                Box::new(|old, _| Some(json!({"n": old.unwrap()["n"].as_u64().unwrap() + 1}))),
            )
            .await
            .unwrap();
        assert_eq!(after.unwrap()["n"].as_u64(), Some(before + 1));
    }
    assert!(assert_records_whole(&dir) >= WRITERS);
}

const URI: &str = "file:///work/store.rs";
const DOC: &str = "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n";

/// Real language servers sharing one state directory, killed with -9 while
/// explains (and their breaker and quota writes) are in flight.
#[tokio::test]
async fn kill_9_of_a_working_language_server_leaves_state_the_next_one_uses() {
    let state = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start().await;
    // Rate-limit headers on every answer (learned quota state); failures so breakers are written too.
    provider.set_quota(600);
    provider.set_default(Behaviour::ok("an answer").after_latency(Duration::from_millis(30)));
    let init = json!({
        "local": {"auto_pull": false},
        "providers": {
            "primary": {"kind": "anthropic", "base_url": provider.anthropic_url(), "api_key_env": "SY_KEY"}
        },
        "tiers": {"large": ["primary/big"], "medium": ["primary/mid"], "small": []},
        "tasks": {"explain": {"first_token_ms": 5000, "total_ms": 20000, "wait_ms": 0}},
        "resilience": {"backoff": {"rate_limit_ms": 10, "overloaded_ms": 10, "transient_ms": 10, "cap_ms": 50},
                       "breaker": {"failures": 100}}
    });
    let spawn = || async {
        let mut client = LspClient::spawn(ServerOptions {
            model_dir: state.path().join("models"),
            env: vec![
                ("SY_KEY".into(), "sk-test-crash".into()),
                (
                    "SWITCHYARD_STATE_DIR".into(),
                    state.path().to_str().unwrap().into(),
                ),
            ],
            ..Default::default()
        })
        .await;
        client.initialize(json!({}), init.clone()).await;
        client.open(URI, DOC).await;
        client
    };
    let range = json!({"start": {"line": 0, "character": 0}, "end": {"line": 2, "character": 0}});
    let explain = json!({"command": "switchyard.explain", "arguments": [URI, range]});
    for round in 0..5u32 {
        if round % 2 == 1 {
            provider.push(Behaviour::ServerError);
            provider.push(Behaviour::Unavailable);
        }
        let mut client = spawn().await;
        // Wait until this server has written state once, then kill it with more in flight.
        client
            .request("workspace/executeCommand", explain.clone())
            .await;
        for _ in 0..6 {
            client
                .send_request("workspace/executeCommand", explain.clone())
                .await;
        }
        tokio::time::sleep(Duration::from_millis(20 * u64::from(round))).await;
        drop(client); // kill_on_drop: SIGKILL, no shutdown
    }

    let shared = state.path().join("shared");
    assert!(assert_records_whole(&shared) > 0, "no state was written");
    let file_state = FileState::open(shared.clone()).unwrap();
    let records = file_state.scan("").await.unwrap();
    assert!(!records.is_empty());
    file_state
        .update("crash/after", None, Box::new(|_, _| Some(json!(1))))
        .await
        .unwrap();

    // And a new server serves from that state.
    let mut client = spawn().await;
    let answer = client
        .call("workspace/executeCommand", explain.clone())
        .await;
    assert_eq!(answer["provider"], "primary", "{answer}");
    client.shutdown().await;
    assert_records_whole(&shared);
}

// ---------------------------------------------------------------------------
// Model download.
// ---------------------------------------------------------------------------

/// Child: pulls the one model of the manifest at `$CRASH_SAFETY_MANIFEST`
/// into the directory beside it.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn child_model_pull() {
    let Some(manifest) = std::env::var_os(PULL_CHILD_ENV) else {
        return;
    };
    let manifest = PathBuf::from(manifest);
    let entry = parse_entry(&std::fs::read_to_string(&manifest).unwrap());
    let dir = manifest.parent().unwrap().join("models");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let path = runtime
        .block_on(switchyard_models::pull(&entry, &dir, &NoProgress))
        .unwrap();
    println!("pulled {}", path.display());
}

fn parse_entry(text: &str) -> ModelEntry {
    Manifest::parse(text).unwrap().models.remove(0)
}

/// Serves `body` at any path, honouring `Range: bytes=N-`, slowly (so a
/// download can be killed part-way); records the ranges asked for.
async fn slow_file_server(body: Arc<Vec<u8>>) -> (String, Arc<Mutex<Vec<Option<u64>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/tiny.gguf", listener.local_addr().unwrap());
    let ranges: Arc<Mutex<Vec<Option<u64>>>> = Arc::default();
    let seen = ranges.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let from = head
                    .lines()
                    .find_map(|l| l.strip_prefix("range: bytes="))
                    .and_then(|r| r.trim().trim_end_matches('-').parse::<u64>().ok());
                seen.lock().unwrap().push(from);
                let start = from.unwrap_or(0) as usize;
                let total = body.len();
                let status = if from.is_some() {
                    format!(
                        "206 Partial Content\r\ncontent-range: bytes {start}-{}/{total}",
                        total - 1
                    )
                } else {
                    "200 OK".to_owned()
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    total - start
                );
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for piece in body[start..].chunks(64 * 1024) {
                    if socket.write_all(piece).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            });
        }
    });
    (url, ranges)
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

#[tokio::test]
async fn kill_9_mid_download_leaves_nothing_at_the_model_path_and_the_next_run_resumes() {
    // 8 MiB of data that is not all the same byte, so a misplaced resume shows.
    let body: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let sha = hex::encode(Sha256::digest(&body));
    let total = body.len() as u64;
    let (url, ranges) = slow_file_server(Arc::new(body)).await;
    let home = tempfile::tempdir().unwrap();
    let manifest = home.path().join("manifest.toml");
    let text = format!(
        "[[models]]\nname = \"tiny\"\nfile = \"tiny.gguf\"\nsize = {total}\nsha256 = \"{sha}\"\n\
         description = \"crash test\"\nsource = {{ kind = \"url\", url = \"{url}\" }}\n"
    );
    std::fs::write(&manifest, &text).unwrap();
    let entry = parse_entry(&text);
    let models = home.path().join("models");
    let target = entry.path_in(&models);
    let partial = models.join("tiny.gguf.partial");

    // Two downloads killed part-way, each after the file has grown past the last.
    let mut kept = 0;
    for kill in 0..2 {
        let mut pull = child(
            "child_model_pull",
            (PULL_CHILD_ENV, manifest.to_str().unwrap()),
        );
        let grew = support::poll::eventually(WAIT, async || {
            assert!(
                pull.try_wait().unwrap().is_none(),
                "kill {kill}: the pull ended early"
            );
            if len(&partial) > kept {
                Ok(())
            } else {
                Err(())
            }
        })
        .await;
        assert!(grew.is_ok(), "kill {kill}: no progress");
        kill_9(&mut pull).await;
        assert!(!target.exists(), "kill {kill}: a file at the model path");
        let partial_len = len(&partial);
        assert!(
            partial_len > kept && partial_len < total,
            "kill {kill}: partial {partial_len} of {total}"
        );
        kept = partial_len;
    }

    // The third run finishes, continuing from what the second one kept.
    let mut pull = child(
        "child_model_pull",
        (PULL_CHILD_ENV, manifest.to_str().unwrap()),
    );
    let status = tokio::time::timeout(WAIT, pull.wait())
        .await
        .expect("the last pull finished")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        ranges.lock().unwrap().contains(&Some(kept)),
        "the last run did not resume at {kept}: {:?}",
        ranges.lock().unwrap()
    );
    assert_eq!(len(&target), total);
    switchyard_models::verify(&entry, &target).expect("the model verifies");
    assert!(!partial.exists(), "the partial file was left behind");
}
