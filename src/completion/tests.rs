use super::*;
use std::path::PathBuf;
use std::sync::Mutex;

/// An engine that never answers: the deadline is all that ends a request.
#[derive(Default)]
struct StalledEngine {
    jobs: Mutex<Vec<CancelFlag>>,
}

impl FimEngine for StalledEngine {
    fn complete(&self, job: CompletionJob) -> BoxFuture<'static, Result<Generation, EngineError>> {
        self.jobs.lock().unwrap().push(job.cancel.clone());
        Box::pin(futures::future::pending())
    }
    fn prewarm(&self, _: FimText) {}
    fn model(&self) -> Result<ModelInfo, EngineError> {
        Ok(ModelInfo {
            name: "stalled".into(),
            path: PathBuf::new(),
            load_ms: 0,
            prompt_tokens_per_s: 1000.0,
            input_budget: 2000,
            context_tokens: 2304,
        })
    }
}

fn service_with(engine: Arc<StalledEngine>) -> CompletionService {
    let service = CompletionService::new(AutocompleteConfig::default());
    service.set_engine(Some(engine));
    service
}

fn request(doc: &str, text: &str, deadline: Instant) -> CompletionRequest {
    let rope = Rope::from_str(text);
    let cursor = rope.len_chars();
    CompletionRequest {
        doc: doc.into(),
        rope,
        cursor,
        deadline,
        cancel: CancelFlag::default(),
        kept_local: false,
    }
}

#[tokio::test(start_paused = true)]
async fn a_stalled_engine_is_answered_empty_exactly_at_the_deadline_and_cancelled() {
    let engine = Arc::new(StalledEngine::default());
    let service = service_with(engine.clone());
    let started = Instant::now();
    let outcome = service
        .complete(request(
            "a.rs",
            "fn main() {\n    let x = ",
            started + Duration::from_millis(1000),
        ))
        .await;
    assert_eq!(outcome.result.unwrap_err(), NoSuggestion::DeadlineMissed);
    assert_eq!(started.elapsed(), Duration::from_millis(1000));
    assert!(
        engine.jobs.lock().unwrap()[0].is_cancelled(),
        "engine work is cancelled"
    );
}

#[tokio::test(start_paused = true)]
async fn a_newer_request_for_the_same_document_cancels_the_older() {
    let engine = Arc::new(StalledEngine::default());
    let service = Arc::new(service_with(engine.clone()));
    let deadline = Instant::now() + Duration::from_millis(1000);
    let first = tokio::spawn({
        let service = service.clone();
        async move {
            service
                .complete(request("a.rs", "let x = ", deadline))
                .await
        }
    });
    tokio::task::yield_now().await;
    let second = service.complete(request("a.rs", "let x = 1", deadline));
    let other_doc = service.complete(request("b.rs", "let y = ", deadline));
    let _ = tokio::join!(second, other_doc);
    first.await.unwrap();
    let jobs = engine.jobs.lock().unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(
        jobs[0].is_cancelled(),
        "superseded by the newer a.rs request"
    );
}

#[tokio::test(start_paused = true)]
async fn no_engine_answers_at_once() {
    let service = CompletionService::new(AutocompleteConfig::default());
    let started = Instant::now();
    let outcome = service
        .complete(request(
            "a.rs",
            "let x = ",
            started + Duration::from_secs(1),
        ))
        .await;
    assert!(matches!(outcome.result, Err(NoSuggestion::NotReady(_))));
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn mid_word_is_skipped_without_asking_the_engine() {
    let engine = Arc::new(StalledEngine::default());
    let service = service_with(engine.clone());
    let rope = Rope::from_str("let value = 1;");
    let req = CompletionRequest {
        doc: "a.rs".into(),
        rope,
        cursor: 7,
        deadline: Instant::now() + Duration::from_secs(1),
        cancel: CancelFlag::default(),
        kept_local: false,
    };
    assert!(matches!(
        service.complete(req).await.result,
        Err(NoSuggestion::Skipped(_))
    ));
    assert!(engine.jobs.lock().unwrap().is_empty());
}
