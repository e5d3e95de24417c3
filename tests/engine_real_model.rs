use std::time::{Duration, Instant};
use switchyard::cancel::CancelFlag;
use switchyard::providers::local::*;

fn model_path() -> std::path::PathBuf {
    std::env::var_os("SWITCHYARD_TEST_MODEL").map(Into::into).unwrap_or_else(|| {
        dirs_home().join(".cache/switchyard/models/qwen2.5-coder-0.5b-instruct-q8_0.gguf")
    })
}
fn dirs_home() -> std::path::PathBuf { std::env::var_os("HOME").unwrap().into() }

#[tokio::test(flavor = "multi_thread")]
async fn smoke() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_writer(std::io::stderr).try_init();
    let engine = LocalEngine::spawn(EngineOptions {
        model_name: "qwen".into(),
        model_path: model_path(),
        threads: 0,
        budget: PromptBudget { input: 2000, suffix: 128 },
        max_output_tokens: 200,
        reuse_cache: true,
    });
    let info = engine.wait_ready().await.unwrap();
    eprintln!("{info:?}");
    let src = std::fs::read_to_string("src/providers/local/engine.rs").unwrap();
    let cut = src.find("fn sized_input_budget").unwrap() + 60;
    for extra in ["", "l", "le", "let"] {
        let text = FimText { prefix: format!("{}{}", &src[..cut], extra), suffix: src[cut..].to_string() };
        let t = Instant::now();
        let g = engine.complete(CompletionJob {
            text, max_tokens: 64, stop: Box::new(|s: &str| s.contains('\n')),
            deadline: Instant::now() + Duration::from_secs(20), cancel: CancelFlag::default(),
        }).await.unwrap();
        eprintln!("{:?} {:?} in {:?}", g.text, (g.stop, g.tokens_generated, g.tokens_decoded, g.prompt_tokens, g.prompt_ms, g.generate_ms), t.elapsed());
    }
}
