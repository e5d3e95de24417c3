//! Which provider and tier serve a task now.
//!
//! For each request the router walks the task's tier chain and takes the first
//! (provider, model) whose beacon is healthy under the task's ceilings. A failure
//! or a ceiling breach mid-request is recorded and the next entry serves the same
//! request; when a tier has nothing healthy the task downshifts one tier; when
//! nothing is healthy the error says what was tried. Every attempt is recorded in
//! its beacon (invariant 5).

pub mod beacon;
pub mod status;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::context::chat::{self, OverBudget, PromptParts};
use crate::providers::local::FimText;
use crate::providers::local::chat::{EngineSlot, LOCAL, LocalProvider};
use crate::providers::{
    ChatMessage, ChatRequest, FinishReason, Provider, ProviderError, Role, StreamEvent, Timeouts,
    Usage,
};
use crate::task::{TaskKind, TaskProfile, Tier};
use beacon::{Beacons, Degradation, Outcome, Sample};
use status::{Route, StatusReport};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const FIM_SYSTEM: &str = "You are a code completion engine. Reply with only the code that belongs at the empty selection: no explanation, no code fences.";
const FIM_INSTRUCTION: &str =
    "Write the code that goes at the empty selection, continuing the code before it.";
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A remote-grade task as the editor asked it.
#[derive(Clone, Debug)]
pub struct TaskRequest {
    pub kind: TaskKind,
    pub system: String,
    pub parts: PromptParts,
}

/// One entry of a chain that was tried or skipped, and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub provider: String,
    pub model: String,
    pub tier: Tier,
    pub outcome: String,
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} ({}): {}",
            self.provider, self.model, self.tier, self.outcome
        )
    }
}

#[derive(Clone, Debug)]
pub struct Answer {
    pub text: String,
    pub route: Route,
    pub usage: Usage,
    pub attempts: Vec<Attempt>,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    #[error(
        "local-only mode is on and {0} needs a remote model; turn it off with the switchyard.toggleLocalOnly command"
    )]
    LocalOnly(&'static str),
    #[error("no healthy model could serve {kind}; tried: {}", list(.tried))]
    NothingHealthy {
        kind: &'static str,
        tried: Vec<Attempt>,
    },
    #[error("cancelled")]
    Cancelled,
}

fn list(tried: &[Attempt]) -> String {
    if tried.is_empty() {
        return "nothing (no chain entries are configured)".into();
    }
    tried
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the router is doing, for `$/progress`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    Trying {
        provider: String,
        model: String,
        tier: Tier,
    },
    Received {
        chars: usize,
    },
}

pub struct Router {
    providers: HashMap<String, Arc<dyn Provider>>,
    /// Providers left out because their key variable is unset: name -> variable.
    missing_keys: HashMap<String, String>,
    config: Config,
    beacons: Arc<Beacons>,
    local_only: AtomicBool,
    local: EngineSlot,
    active: Mutex<HashMap<TaskKind, Route>>,
    last: Mutex<Option<Route>>,
    status: watch::Sender<StatusReport>,
}

enum Failure {
    Cancelled,
    OverBudget(OverBudget),
    Failed(String, Outcome),
}

impl Router {
    /// Builds the configured providers; the API keys come from the environment.
    /// `status` outlives routers rebuilt on configuration changes.
    pub fn new(
        config: &Config,
        local: EngineSlot,
        beacons: Arc<Beacons>,
        status: watch::Sender<StatusReport>,
    ) -> Router {
        let mut providers: HashMap<String, Arc<dyn Provider>> = HashMap::new();
        let mut missing_keys = HashMap::new();
        for (name, provider) in config.all_providers() {
            let key = provider
                .api_key_env
                .as_ref()
                .and_then(|var| std::env::var(var).ok())
                .filter(|k| !k.is_empty());
            match (&provider.api_key_env, key) {
                (Some(var), None) => {
                    missing_keys.insert(name, var.clone());
                }
                (_, key) => {
                    let headers = provider
                        .headers
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    providers.insert(
                        name.clone(),
                        crate::providers::build(
                            &name,
                            provider.kind,
                            &provider.base_url,
                            key.map(Into::into),
                            headers,
                        ),
                    );
                }
            }
        }
        providers.insert(LOCAL.into(), Arc::new(LocalProvider::new(local.clone())));
        Router::with_providers(config, providers, missing_keys, local, beacons, status)
    }

    /// A router over given providers (tests substitute scripted ones).
    pub fn with_providers(
        config: &Config,
        providers: HashMap<String, Arc<dyn Provider>>,
        missing_keys: HashMap<String, String>,
        local: EngineSlot,
        beacons: Arc<Beacons>,
        status: watch::Sender<StatusReport>,
    ) -> Router {
        let router = Router {
            providers,
            missing_keys,
            config: config.clone(),
            beacons,
            local_only: AtomicBool::new(config.local_only),
            local,
            active: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
            status,
        };
        router.publish();
        router
    }

    pub fn local_only(&self) -> bool {
        self.local_only.load(Ordering::Acquire)
    }

    pub fn set_local_only(&self, on: bool) {
        self.local_only.store(on, Ordering::Release);
        self.publish();
    }

    pub fn subscribe(&self) -> watch::Receiver<StatusReport> {
        self.status.subscribe()
    }

    pub fn status(&self) -> StatusReport {
        status::report(self)
    }

    /// Recomputes the status; subscribers hear of it only when it changed.
    pub fn publish(&self) {
        let report = self.status();
        self.status.send_if_modified(|current| {
            let changed = !current.same_state(&report);
            *current = report;
            changed
        });
    }

    fn profile(&self, kind: TaskKind) -> TaskProfile {
        self.config.tasks.get(kind)
    }

    /// The chain entries of `tier` that may serve `kind` now, as (provider, model).
    fn entries(&self, tier: Tier, kind: TaskKind) -> Vec<(String, String)> {
        self.config
            .tiers
            .get(tier)
            .iter()
            .map(|entry| match entry.split_once('/') {
                Some((provider, model)) => (provider.to_owned(), model.to_owned()),
                None => (
                    entry.clone(),
                    self.local
                        .model()
                        .map_or_else(|| LOCAL.to_owned(), |m| m.name),
                ),
            })
            // The local engine serves completion-grade tasks; a refactor needs a real model.
            .filter(|(provider, _)| provider != LOCAL || kind != TaskKind::Refactor)
            .collect()
    }

    pub async fn run(
        &self,
        request: TaskRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Answer, RouteError> {
        let kind = request.kind;
        let profile = self.profile(kind);
        if self.local_only() && kind == TaskKind::Refactor {
            return Err(RouteError::LocalOnly(kind.as_str()));
        }
        let deadline = Instant::now() + profile.total_ceiling();
        let mut tried = Vec::new();
        let mut downshift: Option<String> = None;
        let mut tier = Some(profile.tier);
        while let Some(current) = tier {
            let mut entries = self.entries(current, kind);
            if self.local_only() {
                entries.retain(|(provider, _)| provider == LOCAL);
            }
            let mut trouble = Vec::new();
            for (provider, model) in entries {
                let attempt = |outcome: String| Attempt {
                    provider: provider.clone(),
                    model: model.clone(),
                    tier: current,
                    outcome,
                };
                if let Some(var) = self.missing_keys.get(&provider) {
                    tried.push(attempt(format!("skipped: no API key in ${var}")));
                    continue;
                }
                if let Some(reason) = self
                    .beacons
                    .summary(&provider, &model)
                    .unhealthy_reason(&profile)
                {
                    trouble.push(format!("{provider}/{model}: {reason}"));
                    tried.push(attempt(format!("skipped: {reason}")));
                    continue;
                }
                progress(Progress::Trying {
                    provider: provider.clone(),
                    model: model.clone(),
                    tier: current,
                });
                match self
                    .attempt(
                        &provider, &model, &request, &profile, deadline, &cancel, progress,
                    )
                    .await
                {
                    Ok((text, usage)) => {
                        let route = Route {
                            provider,
                            model,
                            tier: current,
                            downshifted_from: (current != profile.tier).then_some(profile.tier),
                            reason: downshift.clone(),
                        };
                        tracing::info!(
                            task = kind.as_str(),
                            "served by {}/{} ({} tier), {} input + {} output tokens",
                            route.provider,
                            route.model,
                            route.tier,
                            usage.input_tokens,
                            usage.output_tokens
                        );
                        self.active
                            .lock()
                            .expect("active lock")
                            .insert(kind, route.clone());
                        *self.last.lock().expect("last lock") = Some(route.clone());
                        self.publish();
                        return Ok(Answer {
                            text,
                            route,
                            usage,
                            attempts: tried,
                        });
                    }
                    Err(Failure::Cancelled) => return Err(RouteError::Cancelled),
                    Err(Failure::OverBudget(e)) => tried.push(attempt(format!("skipped: {e}"))),
                    Err(Failure::Failed(reason, _)) => {
                        tracing::warn!(
                            task = kind.as_str(),
                            "{provider}/{model} ({current} tier) failed: {reason}"
                        );
                        trouble.push(format!("{provider}/{model}: {reason}"));
                        tried.push(attempt(reason));
                    }
                }
            }
            self.publish();
            if !trouble.is_empty() || downshift.is_none() {
                downshift = Some(format!(
                    "{current} tier unavailable: {}",
                    if trouble.is_empty() {
                        "no usable entries".into()
                    } else {
                        trouble.join("; ")
                    }
                ));
            }
            tier = current.smaller();
        }
        Err(RouteError::NothingHealthy {
            kind: kind.as_str(),
            tried,
        })
    }

    /// One call to one entry, recorded in its beacon whatever the outcome.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        provider_name: &str,
        model: &str,
        request: &TaskRequest,
        profile: &TaskProfile,
        deadline: Instant,
        cancel: &CancellationToken,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<(String, Usage), Failure> {
        let Some(provider) = self.providers.get(provider_name).cloned() else {
            return Err(Failure::Failed(
                format!("provider `{provider_name}` is not configured"),
                Outcome::Failed,
            ));
        };
        let (input_budget, max_tokens) = self.limits(provider_name, profile);
        let user = chat::render(
            &request.parts,
            input_budget.saturating_sub(chat::estimate_tokens(&request.system)),
        )
        .map_err(Failure::OverBudget)?;
        let chat_request = ChatRequest {
            model: model.to_owned(),
            system: Some(request.system.clone()),
            messages: vec![ChatMessage {
                role: Role::User,
                content: user,
            }],
            max_tokens: max_tokens as u32,
            temperature: Some(0.2),
        };
        let started = Instant::now();
        let first_token_deadline = (started + profile.first_token_ceiling()).min(deadline);
        let timeouts = Timeouts {
            connect: CONNECT_TIMEOUT.min(profile.first_token_ceiling()),
            first_byte: profile.first_token_ceiling(),
            first_token: profile.first_token_ceiling(),
            idle: IDLE_TIMEOUT,
        };
        let mut first_token = None;
        let call = consume(
            provider.as_ref(),
            chat_request,
            timeouts,
            started,
            first_token_deadline,
            &mut first_token,
            progress,
        );
        let result = tokio::select! {
            _ = cancel.cancelled() => Err(Failure::Cancelled),
            timed = tokio::time::timeout_at(deadline, call) => timed.unwrap_or_else(|_| Err(Failure::Failed(
                format!("no complete answer within the {:.0} s ceiling", profile.total_ceiling().as_secs_f64()), Outcome::Failed))),
        };
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(Failure::Failed(_, outcome)) => *outcome,
            Err(Failure::Cancelled | Failure::OverBudget(_)) => return result,
        };
        let sample = Sample {
            at: Instant::now(),
            first_token,
            total: started.elapsed(),
            outcome,
        };
        self.beacons.record(provider_name, model, sample);
        result
    }

    /// Autocomplete from the remote entries that `autocomplete.chain` puts before
    /// `local`, each healthy one tried until `deadline`. `None` when none answered:
    /// the local engine then serves this request, and the next ones while the
    /// remote's beacon stays over the budget.
    pub async fn autocomplete_remote(
        &self,
        text: &FimText,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Option<(String, Route)> {
        if self.local_only() {
            return None;
        }
        let share = deadline.saturating_duration_since(Instant::now());
        let autocomplete = &self.config.autocomplete;
        let profile = TaskProfile {
            tier: Tier::Small,
            input_tokens: autocomplete.input_tokens,
            output_tokens: autocomplete.output_tokens,
            first_token_ms: share.as_millis() as u64,
            total_ms: share.as_millis() as u64,
        };
        let request = TaskRequest {
            kind: TaskKind::Autocomplete,
            system: FIM_SYSTEM.into(),
            parts: PromptParts {
                language: String::new(),
                file_name: String::new(),
                before: text.prefix.clone(),
                selection: String::new(),
                after: text.suffix.clone(),
                instruction: FIM_INSTRUCTION.into(),
            },
        };
        for entry in autocomplete.chain.iter().take_while(|e| *e != LOCAL) {
            let Some((provider, model)) = entry.split_once('/') else {
                continue;
            };
            if self.missing_keys.contains_key(provider)
                || self
                    .beacons
                    .summary(provider, model)
                    .unhealthy_reason(&profile)
                    .is_some()
            {
                continue;
            }
            match self
                .attempt(
                    provider,
                    model,
                    &request,
                    &profile,
                    deadline,
                    cancel,
                    &|_| {},
                )
                .await
            {
                Ok((text, _)) => {
                    let route = Route {
                        provider: provider.into(),
                        model: model.into(),
                        tier: Tier::Small,
                        downshifted_from: None,
                        reason: None,
                    };
                    return Some((text, route));
                }
                Err(Failure::Failed(reason, _)) => {
                    tracing::debug!("autocomplete by {entry} missed: {reason}")
                }
                Err(_) => return None,
            }
        }
        None
    }

    /// Input and output token limits for an entry: the task's, or what the local model holds.
    fn limits(&self, provider: &str, profile: &TaskProfile) -> (usize, usize) {
        match (provider == LOCAL).then(|| self.local.model()).flatten() {
            Some(info) => (
                profile.input_tokens.min(info.input_budget),
                profile
                    .output_tokens
                    .min(crate::providers::local::CHAT_OUTPUT_TOKENS),
            ),
            None => (profile.input_tokens, profile.output_tokens),
        }
    }

    pub(crate) fn beacons(&self) -> &Beacons {
        &self.beacons
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn missing_keys(&self) -> &HashMap<String, String> {
        &self.missing_keys
    }

    pub(crate) fn active_routes(&self) -> HashMap<TaskKind, Route> {
        self.active.lock().expect("active lock").clone()
    }

    pub(crate) fn last_route(&self) -> Option<Route> {
        self.last.lock().expect("last lock").clone()
    }

    pub(crate) fn chain(&self, tier: Tier, kind: TaskKind) -> Vec<(String, String)> {
        self.entries(tier, kind)
    }
}

/// Streams one answer, holding the first-token ceiling; classifies the outcome.
async fn consume(
    provider: &dyn Provider,
    request: ChatRequest,
    timeouts: Timeouts,
    started: Instant,
    first_token_deadline: Instant,
    first_token: &mut Option<Duration>,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<(String, Usage), Failure> {
    let failed = |e: ProviderError| Failure::Failed(describe(&e), Outcome::Failed);
    let ceiling_breach = || {
        Failure::Failed(
            format!(
                "no first token within {:.1} s",
                first_token_deadline.duration_since(started).as_secs_f64()
            ),
            Outcome::Failed,
        )
    };
    let mut stream =
        tokio::time::timeout_at(first_token_deadline, provider.stream(request, timeouts))
            .await
            .map_err(|_| ceiling_breach())?
            .map_err(failed)?
            .events;
    let mut text = String::new();
    loop {
        let next = match first_token {
            None => tokio::time::timeout_at(first_token_deadline, stream.next())
                .await
                .map_err(|_| ceiling_breach())?,
            Some(_) => stream.next().await,
        };
        match next {
            Some(Ok(StreamEvent::Delta(delta))) => {
                first_token.get_or_insert_with(|| started.elapsed());
                text.push_str(&delta);
                progress(Progress::Received { chars: text.len() });
            }
            Some(Ok(StreamEvent::End(finish))) => {
                let degraded =
                    |d: Degradation, why: String| Err(Failure::Failed(why, Outcome::Degraded(d)));
                return match finish.reason {
                    FinishReason::MaxTokens => degraded(
                        Degradation::Truncated,
                        "answer truncated at max_tokens".into(),
                    ),
                    FinishReason::Refusal => {
                        degraded(Degradation::Refused, "the model refused".into())
                    }
                    _ if text.trim().is_empty() => {
                        degraded(Degradation::Empty, "empty answer".into())
                    }
                    _ => Ok((text, finish.usage)),
                };
            }
            Some(Err(e)) => return Err(failed(e)),
            None => {
                return Err(Failure::Failed(
                    "the stream ended without its terminal event".into(),
                    Outcome::Failed,
                ));
            }
        }
    }
}

fn describe(e: &ProviderError) -> String {
    let mut text = match e.status {
        Some(status) => format!("HTTP {status}"),
        None => format!("{:?}", e.kind).to_lowercase(),
    };
    if let Some(kind) = e.error_type.as_deref().or(e.code.as_deref()) {
        text.push_str(&format!(" {kind}"));
    }
    if !e.message.is_empty() {
        text.push_str(&format!(": {}", e.message));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicUsize;

    use futures::future::BoxFuture;
    use futures::stream;

    use super::*;
    use crate::config::TierChains;
    use crate::providers::{FailureKind, Finish, RateLimits, ResponseStream};

    /// Below the HTTP line: a provider that answers from a script on the paused clock.
    #[derive(Clone)]
    enum Behaviour {
        Answer {
            first_token: Duration,
            reason: FinishReason,
        },
        Fail(u16),
    }

    struct Scripted {
        name: String,
        script: Mutex<VecDeque<Behaviour>>,
        otherwise: Behaviour,
        calls: AtomicUsize,
    }

    impl Scripted {
        fn new(name: &str, script: Vec<Behaviour>, otherwise: Behaviour) -> Arc<Scripted> {
            Arc::new(Scripted {
                name: name.into(),
                script: Mutex::new(script.into()),
                otherwise,
                calls: AtomicUsize::new(0),
            })
        }
        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    fn ok() -> Behaviour {
        Behaviour::Answer {
            first_token: Duration::from_millis(200),
            reason: FinishReason::EndTurn,
        }
    }

    /// Slow first token and truncated answers, all with status 200.
    fn silently_degraded() -> Behaviour {
        Behaviour::Answer {
            first_token: Duration::from_secs(30),
            reason: FinishReason::MaxTokens,
        }
    }

    impl Provider for Scripted {
        fn name(&self) -> &str {
            &self.name
        }
        fn supports_prefill(&self) -> bool {
            false
        }
        fn stream(
            &self,
            _: ChatRequest,
            _: Timeouts,
        ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let behaviour = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| self.otherwise.clone());
            let name = self.name.clone();
            Box::pin(async move {
                match behaviour {
                    Behaviour::Fail(status) => Err(ProviderError {
                        status: Some(status),
                        error_type: Some("overloaded_error".into()),
                        ..ProviderError::new(name, FailureKind::Status, "overloaded")
                    }),
                    Behaviour::Answer {
                        first_token,
                        reason,
                    } => {
                        let events = stream::once(async move {
                            tokio::time::sleep(first_token).await;
                            Ok(StreamEvent::Delta(format!("answer from {name}")))
                        })
                        .chain(stream::iter([Ok(StreamEvent::End(Finish {
                            reason,
                            usage: Usage {
                                input_tokens: 10,
                                output_tokens: 5,
                            },
                        }))]));
                        Ok(ResponseStream {
                            events: Box::pin(events),
                            rate_limits: RateLimits::default(),
                        })
                    }
                }
            })
        }
    }

    fn router(config: Config, providers: &[&Arc<Scripted>]) -> Router {
        let map = providers
            .iter()
            .map(|p| (p.name.clone(), (*p).clone() as Arc<dyn Provider>))
            .collect();
        Router::with_providers(
            &config,
            map,
            HashMap::new(),
            EngineSlot::default(),
            Arc::default(),
            watch::channel(StatusReport::default()).0,
        )
    }

    fn chains(large: &[&str], medium: &[&str]) -> Config {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        Config {
            tiers: TierChains {
                large: list(large),
                medium: list(medium),
                small: vec![],
            },
            ..Config::default()
        }
    }

    fn explain() -> TaskRequest {
        request(TaskKind::Explain)
    }

    fn request(kind: TaskKind) -> TaskRequest {
        let parts = PromptParts {
            language: "rust".into(),
            file_name: "a.rs".into(),
            before: String::new(),
            selection: "fn a() {}\n".into(),
            after: String::new(),
            instruction: "Explain.".into(),
        };
        TaskRequest {
            kind,
            system: "system".into(),
            parts,
        }
    }

    async fn run(router: &Router, request: TaskRequest) -> Result<Answer, RouteError> {
        router.run(request, CancellationToken::new(), &|_| {}).await
    }

    #[tokio::test(start_paused = true)]
    async fn silent_degradation_moves_the_next_request_to_the_secondary() {
        let primary = Scripted::new("primary", vec![], silently_degraded());
        let secondary = Scripted::new("secondary", vec![], ok());
        let router = router(
            chains(&[], &["primary/m", "secondary/m"]),
            &[&primary, &secondary],
        );

        // Each request breaches the first-token ceiling on the primary and is served by the secondary.
        for _ in 0..3 {
            let answer = run(&router, explain()).await.unwrap();
            assert_eq!(answer.route.provider, "secondary");
        }
        assert_eq!(primary.calls(), 3);
        // Now the primary's beacon is unhealthy: the next request goes straight to the secondary.
        let answer = run(&router, explain()).await.unwrap();
        assert_eq!(answer.route.provider, "secondary");
        assert_eq!(primary.calls(), 3);
        assert!(
            answer.attempts[0].outcome.contains("skipped"),
            "{:?}",
            answer.attempts
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_tier_with_nothing_healthy_downshifts_and_says_why() {
        let big = Scripted::new("big", vec![], Behaviour::Fail(529));
        let mid = Scripted::new("mid", vec![], ok());
        let router = router(chains(&["big/l"], &["mid/m"]), &[&big, &mid]);
        let answer = run(&router, request(TaskKind::Refactor)).await.unwrap();
        assert_eq!(
            (answer.route.provider.as_str(), answer.route.tier),
            ("mid", Tier::Medium)
        );
        assert_eq!(answer.route.downshifted_from, Some(Tier::Large));
        assert!(
            answer.route.reason.as_deref().unwrap().contains("HTTP 529"),
            "{:?}",
            answer.route.reason
        );
        let status = router.status();
        assert_eq!(status.downshifted_from, Some(Tier::Large));
    }

    #[tokio::test(start_paused = true)]
    async fn when_nothing_is_healthy_the_error_lists_what_was_tried() {
        let a = Scripted::new("a", vec![], Behaviour::Fail(503));
        let b = Scripted::new(
            "b",
            vec![],
            Behaviour::Answer {
                first_token: Duration::from_millis(10),
                reason: FinishReason::MaxTokens,
            },
        );
        let router = router(chains(&["a/x"], &["b/y"]), &[&a, &b]);
        let err = run(&router, request(TaskKind::Refactor))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("a/x (large): HTTP 503"), "{err}");
        assert!(err.contains("b/y (medium): answer truncated"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_primary_serves_again_once_its_bad_samples_age_out() {
        let primary = Scripted::new(
            "primary",
            vec![
                Behaviour::Fail(500),
                Behaviour::Fail(500),
                Behaviour::Fail(500),
            ],
            ok(),
        );
        let secondary = Scripted::new("secondary", vec![], ok());
        let router = router(
            chains(&[], &["primary/m", "secondary/m"]),
            &[&primary, &secondary],
        );
        for _ in 0..4 {
            run(&router, explain()).await.unwrap();
        }
        assert_eq!(router.status().provider.as_deref(), Some("secondary"));
        tokio::time::advance(beacon::WINDOW + Duration::from_secs(1)).await;
        let answer = run(&router, explain()).await.unwrap();
        assert_eq!(answer.route.provider, "primary");
        assert_eq!(router.status().provider.as_deref(), Some("primary"));
    }

    #[tokio::test(start_paused = true)]
    async fn local_only_refuses_refactors_with_a_clear_message() {
        let a = Scripted::new("a", vec![], ok());
        let router = router(chains(&["a/x"], &[]), &[&a]);
        router.set_local_only(true);
        let err = run(&router, request(TaskKind::Refactor)).await.unwrap_err();
        assert!(matches!(err, RouteError::LocalOnly(_)));
        assert!(err.to_string().contains("switchyard.toggleLocalOnly"));
        assert_eq!(a.calls(), 0);
        assert!(router.status().local_only);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_task_stops_without_trying_further_entries() {
        let slow = Scripted::new("slow", vec![], ok());
        let router = router(chains(&[], &["slow/m"]), &[&slow]);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = router.run(explain(), cancel, &|_| {}).await.unwrap_err();
        assert!(matches!(err, RouteError::Cancelled));
    }
}
