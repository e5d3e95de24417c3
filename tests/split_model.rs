//! A split GGUF pulls and loads: the test model, split in two the way
//! llama.cpp's `gguf-split` does, is served over loopback HTTP, pulled
//! through a manifest entry with a further part, and loaded from its first
//! part; it answers as the whole file does.

mod support;

use std::time::Duration;

use support::files::{serve, sha256_of};
use switchyard_base::cancel::CancelFlag;
use switchyard_engine::{CompletionJob, EngineOptions, FimText, Generation, LocalEngine};
use switchyard_models::{Manifest, NoProgress};

async fn answer(options: EngineOptions) -> Generation {
    let engine = LocalEngine::spawn(options);
    engine.wait_ready().await.expect("the model loads");
    let at = support::SAMPLE_RUST.find("let total = ").unwrap() + "let total = ".len();
    let job = CompletionJob {
        text: FimText {
            prefix: support::SAMPLE_RUST[at - 500..at].to_owned(),
            suffix: support::SAMPLE_RUST[at..].to_owned(),
            ..FimText::default()
        },
        span: None,
        max_tokens: 16,
        stop: Box::new(|text: &str| text.contains('\n')),
        deadline: std::time::Instant::now() + Duration::from_secs(120),
        cancel: CancelFlag::default(),
    };
    engine.complete(job).await.expect("the model answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_model_pulls_and_loads_from_its_first_part() {
    let whole = support::engine_options();
    let published = tempfile::tempdir().unwrap();
    let parts = support::gguf_split::split(&whole.model_path, published.path(), "tiny", 2);
    let base = serve(published.path()).await;
    let [first, second] = [&parts[0], &parts[1]].map(|part| {
        let name = part.file_name().unwrap().to_str().unwrap().to_owned();
        let size = std::fs::metadata(part).unwrap().len();
        (name, size, sha256_of(part))
    });
    let manifest = Manifest::parse(&format!(
        r#"
        [[models]]
        name = "tiny-split"
        file = "{}"
        size = {}
        sha256 = "{}"
        description = "the test model in two parts"
        source = {{ kind = "url", url = "{base}/{}" }}

        [[models.more_parts]]
        file = "{}"
        size = {}
        sha256 = "{}"
        source = {{ kind = "url", url = "{base}/{}" }}
        "#,
        first.0, first.1, first.2, first.0, second.0, second.1, second.2, second.0
    ))
    .expect("the split entry parses");
    let entry = manifest.get("tiny-split").unwrap();
    let cache = tempfile::tempdir().unwrap();

    let path = switchyard_models::pull(entry, cache.path(), &NoProgress)
        .await
        .expect("both parts pull");
    assert_eq!(
        path,
        cache.path().join(&first.0),
        "the first part is loaded"
    );
    assert!(cache.path().join(&second.0).is_file());
    assert!(switchyard_models::is_present(entry, cache.path()));
    std::fs::remove_file(cache.path().join(&second.0)).unwrap();
    assert!(
        !switchyard_models::is_present(entry, cache.path()),
        "a missing part is a missing model"
    );
    switchyard_models::pull(entry, cache.path(), &NoProgress)
        .await
        .expect("the missing part pulls again");

    let split_options = EngineOptions {
        model_path: path,
        ..support::engine_options()
    };
    let split = answer(split_options.clone()).await;
    let whole = answer(whole).await;
    assert!(!split.text.is_empty(), "{split:?}");
    assert_eq!(split.text, whole.text, "the split model is the same model");

    std::fs::remove_file(cache.path().join(&second.0)).unwrap();
    let half = LocalEngine::spawn(split_options);
    let error = half
        .wait_ready()
        .await
        .expect_err("half a model does not load");
    assert!(error.to_string().contains(&first.0), "{error}");
}
