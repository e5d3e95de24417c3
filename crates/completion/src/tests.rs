use super::*;
use status::CompletionState;
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
    fn prewarm(&self, _: Prewarm) {}

    fn model(&self) -> Result<ModelInfo, EngineError> {
        Ok(ModelInfo {
            name: "stalled".into(),
            path: PathBuf::new(),
            load_ms: 0,
            prompt_tokens_per_s: 1000.0,
            input_budget: 2000,
            context_tokens: 2304,
            threads: 1,
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
        document: None,
        trigger: Default::default(),
        language: None,
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
        document: None,
        trigger: Default::default(),
        language: None,
    };
    assert!(matches!(
        service.complete(req).await.result,
        Err(NoSuggestion::Skipped(_))
    ));
    assert!(engine.jobs.lock().unwrap().is_empty());
}

/// An engine that answers `text` after `takes`, unless the job's deadline
/// comes first (then it answers what a real engine would: nothing in time).
struct SlowEngine {
    takes: Duration,
    text: &'static str,
}

impl SlowEngine {
    /// Its answer, ended by the model.
    fn complete_now(&self) -> Generation {
        Generation {
            text: self.text.into(),
            stop: StopReason::EndOfText,
            tokens_generated: 3,
            tokens_drafted: 0,
            tokens_accepted: 0,
            near_tie_at: None,
            tokens_to_decode: 10,
            tokens_decoded: 10,
            prompt_tokens: 10,
            prompt_digest: 0,
            moved_suffix: false,
            prompt_ms: 0.0,
            generate_ms: 0.0,
            tokens_ahead: 0,
        }
    }
}

impl FimEngine for SlowEngine {
    fn complete(&self, job: CompletionJob) -> BoxFuture<'static, Result<Generation, EngineError>> {
        let (takes, answered) = (self.takes, self.complete_now());
        Box::pin(async move {
            let deadline = Instant::from_std(job.deadline);
            if Instant::now() + takes > deadline {
                tokio::time::sleep_until(deadline).await;
                return Ok(Generation {
                    text: String::new(),
                    stop: StopReason::PromptDeadline,
                    ..answered
                });
            }
            tokio::time::sleep(takes).await;
            Ok(answered)
        })
    }
    fn prewarm(&self, _: Prewarm) {}

    fn model(&self) -> Result<ModelInfo, EngineError> {
        StalledEngine::default().model()
    }
}

fn slow_service(takes: Duration) -> CompletionService {
    let service = CompletionService::new(AutocompleteConfig {
        languages: [("markdown".to_owned(), false)].into(),
        ..AutocompleteConfig::default()
    });
    service.set_engine(Some(Arc::new(SlowEngine { takes, text: "42;" })));
    service
}

/// The state is `state`, and its reason mentions `why`.
fn says(status: &watch::Receiver<CompletionStatus>, state: CompletionState, why: &str) {
    let status = status.borrow();
    assert_eq!(status.state, state);
    assert!(
        status.reason.as_deref().unwrap().contains(why),
        "{status:?}"
    );
}

/// A request as an editor makes it: its budget from the trigger.
fn asked(
    service: &CompletionService,
    text: &str,
    trigger: Trigger,
    language: &str,
) -> CompletionRequest {
    CompletionRequest {
        trigger,
        language: Some(language.into()),
        ..request("a.rs", text, Instant::now() + service.budget(trigger))
    }
}

#[tokio::test(start_paused = true)]
async fn an_invoked_request_gets_the_longer_budget_where_the_automatic_one_was_empty() {
    let service = slow_service(Duration::from_millis(2_000));
    let text = "fn main() {\n    let x = ";
    let automatic = service
        .complete(asked(&service, text, Trigger::Automatic, "rust"))
        .await;
    assert_eq!(
        automatic.result.unwrap_err(),
        NoSuggestion::PromptStillFilling
    );
    let started = Instant::now();
    let invoked = service
        .complete(asked(&service, text, Trigger::Invoked, "rust"))
        .await;
    assert_eq!(invoked.result.unwrap().text, "42;");
    assert_eq!(started.elapsed(), Duration::from_millis(2_000));
    assert_eq!(service.budget(Trigger::Invoked), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn an_invoked_request_is_not_suppressed_by_the_rules_for_automatic_ones() {
    let service = slow_service(Duration::from_millis(10));
    // Mid-word: an automatic request is skipped without asking the engine.
    let mid_word = |trigger| CompletionRequest {
        cursor: 7,
        ..asked(&service, "let value = 1;", trigger, "rust")
    };
    let automatic = service.complete(mid_word(Trigger::Automatic)).await;
    assert!(matches!(automatic.result, Err(NoSuggestion::Skipped(_))));
    let invoked = service.complete(mid_word(Trigger::Invoked)).await;
    assert!(
        !matches!(invoked.result, Err(NoSuggestion::Skipped(_))),
        "{:?}",
        invoked.result
    );
}

#[tokio::test(start_paused = true)]
async fn a_language_turned_off_and_a_snooze_show_in_the_completion_state() {
    let service = slow_service(Duration::from_millis(10));
    let status = service.subscribe_status();
    let markdown = service
        .complete(asked(&service, "# Title\n", Trigger::Automatic, "markdown"))
        .await;
    assert_eq!(
        markdown.result.unwrap_err(),
        NoSuggestion::LanguageOff("markdown".into())
    );
    says(&status, CompletionState::Off, "markdown");
    // Back in a language that is on: ready again.
    let rust = service
        .complete(asked(&service, "let x = ", Trigger::Automatic, "rust"))
        .await;
    assert_eq!(rust.result.unwrap().text, "42;");
    assert_eq!(status.borrow().state, CompletionState::Ready);

    let until = service.snooze().snooze(Duration::from_secs(1800)).unwrap();
    service.publish_status();
    assert_eq!(status.borrow().state, CompletionState::Snoozed);
    assert_eq!(status.borrow().until_ms, Some(until));
    let snoozed = service
        .complete(asked(&service, "let x = ", Trigger::Invoked, "rust"))
        .await;
    assert_eq!(
        snoozed.result.unwrap_err(),
        NoSuggestion::Snoozed { until_ms: until }
    );
    service.snooze().resume().unwrap();
    service.publish_status();
    assert_eq!(status.borrow().state, CompletionState::Ready);
}

#[tokio::test(start_paused = true)]
async fn most_automatic_requests_missing_the_budget_make_the_state_late_until_they_are_in_time() {
    let service = slow_service(Duration::from_millis(1_500));
    let status = service.subscribe_status();
    for _ in 0..5 {
        let _ = service
            .complete(asked(&service, "let x = ", Trigger::Automatic, "rust"))
            .await;
    }
    says(&status, CompletionState::Late, "5 of the last 5");
    // Invoked requests say nothing about the automatic budget.
    let _ = service
        .complete(asked(&service, "let x = ", Trigger::Invoked, "rust"))
        .await;
    assert_eq!(status.borrow().state, CompletionState::Late);
}

/// A remote entry that never answers: it holds each request until the
/// deadline it was given, as the router's attempts do.
#[derive(Default)]
struct SilentRemote {
    deadlines: Mutex<Vec<Instant>>,
}

impl RemoteFim for SilentRemote {
    fn complete<'a>(
        &'a self,
        ask: RemoteAsk<'a>,
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, Option<(String, ModelRef)>> {
        let deadline = ask.deadline;
        self.deadlines.lock().unwrap().push(deadline);
        Box::pin(async move {
            tokio::time::sleep_until(deadline).await;
            None
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_remote_that_misses_its_share_leaves_the_local_engine_the_rest_of_the_budget() {
    let remote = Arc::new(SilentRemote::default());
    let service = CompletionService::new(AutocompleteConfig {
        chain: vec![
            ChainEntry::Remote(ModelRef::new("remote", "fim")),
            ChainEntry::Local,
        ],
        ..AutocompleteConfig::default()
    })
    .with_remote(remote.clone());
    let local = SlowEngine {
        takes: Duration::from_millis(200),
        text: "42;",
    };
    service.set_engine(Some(Arc::new(local)));
    let started = Instant::now();
    let outcome = service
        .complete(asked(&service, "let x = ", Trigger::Automatic, "rust"))
        .await;
    let suggestion = outcome.result.unwrap();
    assert_eq!(suggestion.text, "42;");
    assert!(matches!(suggestion.origin, Origin::Model(_)));
    // Of the 1 s budget the remote had 60 %; the local engine answered in the rest.
    assert_eq!(
        *remote.deadlines.lock().unwrap(),
        [started + Duration::from_millis(600)]
    );
    assert_eq!(started.elapsed(), Duration::from_millis(800));
}

/// An engine whose generation the deadline cut after `written`.
struct CutEngine {
    written: &'static str,
}

impl FimEngine for CutEngine {
    fn complete(&self, _: CompletionJob) -> BoxFuture<'static, Result<Generation, EngineError>> {
        let answered = SlowEngine {
            takes: Duration::ZERO,
            text: self.written,
        }
        .complete_now();
        Box::pin(async move {
            Ok(Generation {
                stop: StopReason::Deadline,
                ..answered
            })
        })
    }
    fn prewarm(&self, _: Prewarm) {}

    fn model(&self) -> Result<ModelInfo, EngineError> {
        StalledEngine::default().model()
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_answer_shows_what_of_it_is_sure_and_one_cut_before_that_is_late() {
    let line = "def area(self):\n    ";
    // (what the model had written at the deadline, what the user gets)
    let cases = [
        (
            "raise NotImplementedError(\"NotImpl",
            Ok("raise NotImplementedError(\""),
        ),
        (
            "return area(self.width, self.hei",
            Ok("return area(self.width, self"),
        ),
        ("return", Ok("return")),
        ("    (", Err(NoSuggestion::Cut { written_chars: 5 })),
        ("", Err(NoSuggestion::Cut { written_chars: 0 })),
    ];
    for (written, expected) in cases {
        let service = CompletionService::new(AutocompleteConfig::default());
        service.set_engine(Some(Arc::new(CutEngine { written })));
        let outcome = service
            .complete(asked(&service, line, Trigger::Automatic, "python"))
            .await;
        let shown = outcome.result.map(|suggestion| suggestion.text);
        assert_eq!(
            shown.as_deref().map_err(Clone::clone),
            expected,
            "{written:?}"
        );
    }
}
