//! Which provider and tier serve a task now.
//!
//! For each request the router walks the task's tier chain and takes the first
//! (provider, model) whose beacon is healthy under the task's ceilings. A failure
//! or a ceiling breach mid-request is recorded and the next entry serves the same
//! request; when a tier has nothing healthy the task downshifts one tier; when
//! nothing is healthy the error says what was tried. Every attempt is recorded in
//! its beacon (invariant 5).

pub mod beacon;
pub mod canary;
mod hedge;
pub mod history;
pub mod local_first;
pub mod runbook;
pub mod status;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ProviderConfig};
use crate::context::chat::{self, OverBudget, PromptParts};
use crate::providers::local::FimText;
use crate::providers::local::chat::{EngineSlot, LOCAL, LocalProvider};
use crate::providers::{
    ChatMessage, ChatRequest, FailureKind, FinishReason, Provider, ProviderError, RateLimits, Role,
    StreamEvent, Timeouts, Usage,
};
use crate::resilience::Resilience;
use crate::resilience::backoff::WaitBudget;
use crate::resilience::breaker::BreakerView;
use crate::resilience::breaker::{self, Admission};
use crate::resilience::classify::{ErrorClass, Fatal, classify};
use crate::resilience::governor::MeterView;
use crate::resilience::governor::{self, Quota};
use crate::state::WhenUnavailable;
use crate::task::{TaskKind, TaskProfile, Tier};
use beacon::{Beacons, Degradation, Outcome, Sample};
use status::{ParkedStatus, Route, StatusReport};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Prompts are trimmed to at most this share of the budget for a model that
/// keeps saying they are too long.
const MIN_INPUT_SCALE: f64 = 0.125;
const FIM_SYSTEM: &str = "You are a code completion engine. Reply with only the code that belongs at the empty selection: no explanation, no code fences.";
const FIM_INSTRUCTION: &str =
    "Write the code that goes at the empty selection, continuing the code before it.";

/// A remote-grade task as a front end asked it.
#[derive(Clone, Debug)]
pub struct TaskRequest {
    pub kind: TaskKind,
    pub system: String,
    pub parts: PromptParts,
    /// An answer already begun (a resumed checkpoint): continued, not restarted.
    pub continuation: String,
    /// A conversation as the caller wrote it (the gateway): sent as it is,
    /// within the input budget, instead of a prompt rendered from `parts`.
    pub messages: Option<Vec<ChatMessage>>,
    /// Serve from this tier or entry rather than the task's own tier.
    pub pin: Option<Pin>,
    /// The caller's output limit, within the task's.
    pub max_tokens: Option<u32>,
}

impl TaskRequest {
    pub fn new(kind: TaskKind, system: impl Into<String>, parts: PromptParts) -> TaskRequest {
        TaskRequest {
            kind,
            system: system.into(),
            parts,
            continuation: String::new(),
            messages: None,
            pin: None,
            max_tokens: None,
        }
    }
}

/// Where a request asked to be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pin {
    /// This tier first, downshifting below it as usual.
    Tier(Tier),
    /// Only this `provider/model`: no failover, no downshift.
    Entry { provider: String, model: String },
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
        /// Only temporary obstacles (open breakers, empty quota, spent wait
        /// budget): the task can be parked and resumed.
        retry_later: bool,
        /// Output streamed before the last failure.
        partial: String,
    },
    #[error("{by} refused: {reason}")]
    Refused { by: String, reason: String },
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
    /// Text as it streams in (front ends that forward it).
    Delta(String),
    /// The next attempt starts the answer over: text already forwarded is not
    /// part of it (its provider cannot continue a partial answer).
    Restarted,
}

pub struct Router {
    providers: HashMap<String, Arc<dyn Provider>>,
    /// Providers left out because their key variable is unset: name -> variable.
    missing_keys: HashMap<String, String>,
    config: Config,
    /// `config.all_providers()`, resolved once: read on every attempt.
    provider_configs: BTreeMap<String, ProviderConfig>,
    beacons: Arc<Beacons>,
    local_only: AtomicBool,
    local: EngineSlot,
    active: Mutex<HashMap<TaskKind, Route>>,
    last: Mutex<Option<Route>>,
    status: watch::Sender<StatusReport>,
    resilience: Arc<Resilience>,
    /// The shared breakers and quota as last read, for status.
    shared: Mutex<SharedViews>,
    /// Parked tasks, kept by the front end that parked them.
    parked: Arc<Mutex<Vec<ParkedStatus>>>,
    /// The latest canary results, newest last.
    canaries: Mutex<Vec<canary::CanaryResult>>,
}

/// What the shared state says, read asynchronously and shown synchronously.
#[derive(Clone, Debug, Default)]
pub(crate) struct SharedViews {
    pub breakers: Vec<BreakerView>,
    pub quota: Vec<MeterView>,
}

enum Failure {
    Cancelled,
    OverBudget(OverBudget),
    Failed(Failed),
}

/// An attempt that ended without an answer.
#[derive(Clone, Debug)]
struct Failed {
    reason: String,
    outcome: Outcome,
    /// `None` for answers that came back degraded with status 200: no retry on
    /// the same model helps, but nothing is wrong with the provider either.
    class: Option<ErrorClass>,
    retry_after: Option<Duration>,
    /// Text streamed before the failure, for a continuation.
    partial: String,
    /// A ceiling or stall timeout: the entry is slow now, so the next entry is
    /// a better bet than another wait on this one.
    slow: bool,
}

impl Failed {
    fn new(reason: String, outcome: Outcome, class: Option<ErrorClass>) -> Failed {
        Failed {
            reason,
            outcome,
            class,
            retry_after: None,
            partial: String::new(),
            slow: false,
        }
    }
}

impl Failure {
    fn failed(reason: String, outcome: Outcome, class: Option<ErrorClass>) -> Failure {
        Failure::Failed(Failed::new(reason, outcome, class))
    }

    fn too_slow(reason: String) -> Failure {
        Failure::Failed(Failed {
            slow: true,
            ..Failed::new(reason, Outcome::Failed, Some(ErrorClass::Transient))
        })
    }

    fn from_provider(e: ProviderError) -> Failure {
        let class = classify(&e);
        let slow = matches!(
            e.kind,
            FailureKind::TimeoutFirstByte | FailureKind::TimeoutFirstToken | FailureKind::Stalled
        );
        Failure::Failed(Failed {
            retry_after: e.retry_after,
            partial: e.partial.clone(),
            slow,
            ..Failed::new(describe(&e), Outcome::Failed, Some(class))
        })
    }
}

struct AttemptResult {
    result: Result<(String, Usage), Failure>,
    rate_limits: RateLimits,
}

/// One chain entry being served.
struct Entry<'a> {
    provider: &'a str,
    model: &'a str,
    tier: Tier,
}

/// What one task has left as it walks the chains.
struct RunState {
    deadline: Instant,
    waits: WaitBudget,
    /// The longest answer streamed so far, continued by the next attempt.
    partial: String,
    /// Something temporary (an open breaker, an empty quota, a spent wait
    /// budget) stood in the way: the task can be parked and resumed.
    retry_later: bool,
    /// This run's side of a hedged race, while one is on.
    racer: Option<hedge::Racer>,
    /// Share of the input budget prompts are rendered to; halved when a
    /// model says the prompt is too long.
    input_scale: f64,
}

impl RunState {
    /// The hedge's own state: same deadline and wait budget left.
    fn fork(&self, racer: hedge::Racer) -> RunState {
        RunState {
            deadline: self.deadline,
            waits: self.waits,
            partial: self.partial.clone(),
            retry_later: false,
            racer: Some(racer),
            input_scale: self.input_scale,
        }
    }

    /// Takes in what the hedge learned.
    fn absorb(&mut self, hedge: RunState) {
        self.retry_later |= hedge.retry_later;
        if hedge.partial.len() > self.partial.len() {
            self.partial = hedge.partial;
        }
    }
}

/// A request ready to send, and the prefill its answer continues.
struct Prompt {
    request: ChatRequest,
    prefill: String,
}

impl Prompt {
    /// Everything the provider reads, for the quota estimate.
    fn text(&self) -> String {
        let system = self.request.system.as_deref().unwrap_or_default();
        self.request
            .messages
            .iter()
            .fold(system.to_owned(), |all, m| all + &m.content)
    }
}

fn join_reasons(earlier: Option<String>, now: String) -> String {
    match earlier {
        Some(earlier) => format!("{earlier}; then {now}"),
        None => now,
    }
}

impl Router {
    /// Builds the configured providers; the API keys come from the environment.
    /// `status` outlives routers rebuilt on configuration changes.
    pub fn new(
        config: &Config,
        local: EngineSlot,
        beacons: Arc<Beacons>,
        status: watch::Sender<StatusReport>,
        resilience: Arc<Resilience>,
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
        Router::with_providers(
            config,
            providers,
            missing_keys,
            local,
            beacons,
            status,
            resilience,
        )
    }

    /// A router over given providers (tests substitute scripted ones).
    pub fn with_providers(
        config: &Config,
        providers: HashMap<String, Arc<dyn Provider>>,
        missing_keys: HashMap<String, String>,
        local: EngineSlot,
        beacons: Arc<Beacons>,
        status: watch::Sender<StatusReport>,
        resilience: Arc<Resilience>,
    ) -> Router {
        let router = Router {
            providers,
            missing_keys,
            config: config.clone(),
            provider_configs: config.all_providers(),
            beacons,
            local_only: AtomicBool::new(config.local_only),
            local,
            active: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
            status,
            resilience,
            shared: Mutex::new(SharedViews::default()),
            parked: Arc::default(),
            canaries: Mutex::new(Vec::new()),
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
        let mut run = RunState {
            deadline: Instant::now() + profile.total_ceiling() + profile.wait_budget(),
            waits: WaitBudget::new(profile.wait_budget()),
            partial: request.continuation.clone(),
            retry_later: false,
            racer: None,
            input_scale: 1.0,
        };
        let mut tried = Vec::new();
        let mut downshift: Option<String> = None;
        let first_tier = match &request.pin {
            Some(Pin::Tier(tier)) => *tier,
            Some(Pin::Entry { provider, model }) => {
                self.tier_of(provider, model).unwrap_or(profile.tier)
            }
            None => profile.tier,
        };
        // Entries that said the prompt is too long get it again, trimmed (less
        // of the code around the selection, never the selection itself), once
        // no larger-context entry could serve: half the budget each pass, down
        // to an eighth. A conversation from the gateway is never trimmed.
        let mut only: Option<Vec<(String, String)>> = None;
        loop {
            let mut too_long = Vec::new();
            let mut tier = Some(first_tier);
            while let Some(current) = tier {
                let mut entries = match &request.pin {
                    Some(Pin::Entry { provider, model }) => vec![(provider.clone(), model.clone())],
                    _ => self.entries(current, kind),
                };
                if self.local_only() {
                    entries.retain(|(provider, _)| provider == LOCAL);
                }
                if let Some(only) = &only {
                    entries.retain(|entry| only.contains(entry));
                }
                let mut trouble = Vec::new();
                let mut hedged_already = vec![false; entries.len()];
                for i in 0..entries.len() {
                    if hedged_already[i] {
                        continue;
                    }
                    let (provider, model) = entries[i].clone();
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
                    let entry = Entry {
                        provider: &provider,
                        model: &model,
                        tier: current,
                    };
                    // Interactive tasks race a slow entry against the next usable one.
                    let hedge_with = (profile.hedge
                        && !matches!(request.pin, Some(Pin::Entry { .. })))
                    .then(|| {
                        (i + 1..entries.len())
                            .find(|&j| self.usable(&entries[j].0, &entries[j].1, &profile))
                    })
                    .flatten();
                    let (result, served_by) = match hedge_with {
                        Some(j) => {
                            let hedge = Entry {
                                provider: &entries[j].0,
                                model: &entries[j].1,
                                tier: current,
                            };
                            let (result, side, hedge_ran) = self
                                .hedged(
                                    &entry, &hedge, &request, &profile, &mut run, &cancel, progress,
                                )
                                .await;
                            hedged_already[j] = hedge_ran.tried();
                            if let hedge::HedgeRan::Failed(Failure::Failed(failed)) = hedge_ran {
                                let (p, m) = &entries[j];
                                trouble.push(format!("{p}/{m}: {}", failed.reason));
                                tried.push(Attempt {
                                    provider: p.clone(),
                                    model: m.clone(),
                                    tier: current,
                                    outcome: format!("hedge: {}", failed.reason),
                                });
                            }
                            let served_by = match side {
                                hedge::Side::Primary => i,
                                hedge::Side::Hedge => {
                                    tried.push(attempt(format!(
                                        "no first token within {:.1} s; the hedge {}/{} answered first",
                                        profile.first_token_ceiling().as_secs_f64(),
                                        entries[j].0,
                                        entries[j].1
                                    )));
                                    j
                                }
                            };
                            (result, served_by)
                        }
                        None => (
                            self.serve_entry(
                                &entry, &request, &profile, &mut run, &cancel, progress,
                            )
                            .await,
                            i,
                        ),
                    };
                    let (provider, model) = entries[served_by].clone();
                    match result {
                        Ok((text, usage)) => {
                            let route = Route {
                                provider,
                                model,
                                tier: current,
                                downshifted_from: (current != first_tier).then_some(first_tier),
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
                        Err(Failure::Failed(failed)) => {
                            tracing::warn!(
                                task = kind.as_str(),
                                "{provider}/{model} ({current} tier) failed: {}",
                                failed.reason
                            );
                            if let Some(ErrorClass::Fatal(Fatal::Refusal)) = failed.class {
                                return Err(RouteError::Refused {
                                    by: format!("{provider}/{model}"),
                                    reason: failed.reason,
                                });
                            }
                            if failed.class == Some(ErrorClass::Fatal(Fatal::ContextLength)) {
                                too_long.push((provider.clone(), model.clone()));
                            }
                            trouble.push(format!("{provider}/{model}: {}", failed.reason));
                            tried.push(attempt(failed.reason));
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
                tier = match request.pin {
                    Some(Pin::Entry { .. }) => None,
                    _ => current.smaller(),
                };
            }
            let rendered = |scale: f64| {
                let budget = (profile.input_tokens as f64 * scale) as usize;
                chat::render(&request.parts, budget).map_or(usize::MAX, |text| text.len())
            };
            if too_long.is_empty()
                || request.messages.is_some()
                || run.input_scale <= MIN_INPUT_SCALE
                // Nothing left around the selection to cut: the same prompt again would fail again.
                || rendered(run.input_scale / 2.0) >= rendered(run.input_scale)
            {
                break;
            }
            run.input_scale /= 2.0;
            tracing::info!(
                task = kind.as_str(),
                "prompt too long for every entry that could take it; trimming it to {:.0} % of the input budget",
                run.input_scale * 100.0
            );
            only = Some(too_long);
        }
        Err(RouteError::NothingHealthy {
            kind: kind.as_str(),
            tried,
            retry_later: run.retry_later,
            partial: run.partial,
        })
    }

    /// Serves a request from one entry: breaker admission, then attempts with
    /// governed quota and backoff between them while the task's wait budget
    /// lasts. Fatal errors never retry here; the caller moves on.
    async fn serve_entry(
        &self,
        entry: &Entry<'_>,
        request: &TaskRequest,
        profile: &TaskProfile,
        run: &mut RunState,
        cancel: &CancellationToken,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<(String, Usage), Failure> {
        let Some(provider) = self.providers.get(entry.provider).cloned() else {
            return Err(Failure::failed(
                format!("provider `{}` is not configured", entry.provider),
                Outcome::Failed,
                None,
            ));
        };
        let account = self.account(entry.provider);
        let breaker_key = breaker::key(&account, entry.provider, entry.model);
        let quota_key = governor::key(&account, entry.provider, entry.model);
        let quota = self.quota(entry.provider);
        let probe_ttl = profile.total_ceiling() + Duration::from_secs(5);
        let resilience = &self.resilience;
        let mut last_error: Option<String> = None;
        for retry in 0u32.. {
            let admission = resilience.breakers.admit(&breaker_key, probe_ttl).await;
            if let Admission::Open { reason, retry_in } = &admission {
                run.retry_later = true;
                let reason = format!(
                    "circuit open ({reason}), next probe in {:.0} s",
                    retry_in.as_secs_f64()
                );
                return Err(Failure::failed(
                    join_reasons(last_error, reason),
                    Outcome::Failed,
                    None,
                ));
            }
            let prompt = self.prompt(
                entry,
                request,
                profile,
                (&run.partial, run.input_scale),
                provider.supports_prefill(),
            );
            let prompt = match prompt {
                Ok(prompt) => prompt,
                Err(e) => {
                    resilience.breakers.abandon(&breaker_key, &admission).await;
                    return Err(Failure::OverBudget(e));
                }
            };
            if !run.partial.is_empty() && prompt.prefill.is_empty() {
                progress(Progress::Restarted);
            }
            let waited_from = Instant::now();
            let admit_by = (waited_from + run.waits.left()).min(run.deadline);
            let reservation = resilience
                .governor
                .admit(
                    &quota_key,
                    request.kind,
                    quota,
                    chat::estimate_tokens(&prompt.text()) as u64,
                    u64::from(prompt.request.max_tokens),
                    admit_by,
                )
                .await;
            run.waits.try_spend(waited_from.elapsed());
            let reservation = match reservation {
                Ok(reservation) => reservation,
                Err(starved) => {
                    resilience.breakers.abandon(&breaker_key, &admission).await;
                    run.retry_later = true;
                    return Err(Failure::failed(
                        join_reasons(last_error, starved.to_string()),
                        Outcome::Failed,
                        None,
                    ));
                }
            };
            if retry == 0 {
                resilience.retries.earn(&account);
            }
            progress(Progress::Trying {
                provider: entry.provider.to_owned(),
                model: entry.model.to_owned(),
                tier: entry.tier,
            });
            let attempt = self
                .attempt(
                    entry,
                    provider.as_ref(),
                    prompt.request,
                    profile,
                    (run.deadline, run.racer.as_ref()),
                    cancel,
                    progress,
                )
                .await;
            resilience
                .governor
                .observe(&reservation, &attempt.rate_limits)
                .await;
            let usage = attempt.result.as_ref().ok().map(|(_, usage)| *usage);
            resilience.governor.settle(reservation, usage).await;
            let failed = match attempt.result {
                Ok((text, usage)) => {
                    resilience
                        .breakers
                        .record(&breaker_key, &admission, true, "")
                        .await;
                    return Ok((prompt.prefill + &text, usage));
                }
                Err(Failure::Failed(failed)) => failed,
                Err(other) => {
                    resilience.breakers.abandon(&breaker_key, &admission).await;
                    return Err(other);
                }
            };
            let healthy_answer = failed
                .class
                .as_ref()
                .is_none_or(|class| !class.counts_against_health());
            resilience
                .breakers
                .record(&breaker_key, &admission, healthy_answer, &failed.reason)
                .await;
            if failed.partial.len() > run.partial.len() {
                run.partial = prompt.prefill.clone() + &failed.partial;
            }
            let Some(class) = failed.class.clone() else {
                return Err(Failure::Failed(failed));
            };
            // Slow now, or already part-way through an answer: the next entry
            // (continuing the partial answer) beats another wait here.
            if class.retryable() && (failed.slow || !failed.partial.is_empty()) {
                return Err(Failure::Failed(failed));
            }
            let delay = resilience.backoff.delay(&class, retry, failed.retry_after);
            if class == ErrorClass::RateLimit {
                let pause = delay.unwrap_or(Duration::from_secs(1));
                resilience.governor.pause(&quota_key, pause).await;
            }
            let Some(delay) = delay else {
                let reason = match class {
                    ErrorClass::Fatal(fatal) => match fatal.remedy(entry.provider) {
                        Some(remedy) => format!("{}: {remedy}", failed.reason),
                        None => failed.reason.clone(),
                    },
                    _ => failed.reason.clone(),
                };
                return Err(Failure::Failed(Failed { reason, ..failed }));
            };
            let give_up = |why: &str| {
                Err(Failure::Failed(Failed {
                    reason: format!("{}; {why}", failed.reason),
                    ..failed.clone()
                }))
            };
            if admission == Admission::Probe {
                run.retry_later = true;
                return give_up("the recovery probe failed");
            }
            if Instant::now() + delay > run.deadline || !run.waits.try_spend(delay) {
                run.retry_later = true;
                return give_up(&format!(
                    "a retry in {:.1} s would exceed the task's wait budget",
                    delay.as_secs_f64()
                ));
            }
            if !self.spend_retry(&account).await {
                run.retry_later = true;
                return give_up("the account's retry budget is spent");
            }
            tracing::info!(
                "{}/{}: {} ({}), retrying in {:.1} s",
                entry.provider,
                entry.model,
                failed.reason,
                class.as_str(),
                delay.as_secs_f64()
            );
            tokio::select! {
                _ = cancel.cancelled() => return Err(Failure::Cancelled),
                _ = tokio::time::sleep(delay) => {}
            }
            last_error = Some(failed.reason);
        }
        unreachable!("the retry loop returns")
    }

    /// The request for one entry: the rendered prompt within the entry's input
    /// budget, continuing `partial` as a prefill where the provider allows it
    /// (others restart cleanly).
    fn prompt(
        &self,
        entry: &Entry<'_>,
        request: &TaskRequest,
        profile: &TaskProfile,
        (partial, input_scale): (&str, f64),
        supports_prefill: bool,
    ) -> Result<Prompt, OverBudget> {
        let (input_budget, max_tokens) = self.limits(entry.provider, profile);
        let input_budget = (input_budget as f64 * input_scale) as usize;
        let max_tokens = request
            .max_tokens
            .map_or(max_tokens, |asked| max_tokens.min(asked as usize));
        let budget = input_budget.saturating_sub(chat::estimate_tokens(&request.system));
        let mut messages = match &request.messages {
            Some(messages) => {
                let needed = messages
                    .iter()
                    .map(|m| chat::estimate_tokens(&m.content))
                    .sum();
                if needed > budget {
                    return Err(OverBudget::conversation(needed, budget));
                }
                messages.clone()
            }
            None => vec![ChatMessage {
                role: Role::User,
                content: chat::render(&request.parts, budget)?,
            }],
        };
        let prefill = if supports_prefill && !partial.trim().is_empty() {
            // Providers reject a prefill that ends in whitespace.
            let prefill = partial.trim_end().to_owned();
            messages.push(ChatMessage {
                role: Role::Assistant,
                content: prefill.clone(),
            });
            prefill
        } else {
            String::new()
        };
        Ok(Prompt {
            request: ChatRequest {
                model: entry.model.to_owned(),
                system: Some(request.system.clone()),
                messages,
                max_tokens: max_tokens as u32,
                temperature: Some(0.2),
            },
            prefill,
        })
    }

    /// Whether an entry could serve now: its key is set and its beacon is healthy.
    fn usable(&self, provider: &str, model: &str, profile: &TaskProfile) -> bool {
        !self.missing_keys.contains_key(provider)
            && self
                .beacons
                .summary(provider, model)
                .unhealthy_reason(profile)
                .is_none()
    }

    /// The first tier whose chain lists this entry.
    fn tier_of(&self, provider: &str, model: &str) -> Option<Tier> {
        [Tier::Large, Tier::Medium, Tier::Small]
            .into_iter()
            .find(|tier| {
                self.config
                    .tiers
                    .get(*tier)
                    .iter()
                    .any(|e| e.split_once('/') == Some((provider, model)))
            })
    }

    /// A configured provider's settings (the well-known ones included).
    pub(crate) fn provider_config(&self, provider: &str) -> Option<&ProviderConfig> {
        self.provider_configs.get(provider)
    }

    pub(crate) fn account(&self, provider: &str) -> String {
        self.provider_config(provider)
            .map_or(provider, |p| p.account(provider))
            .to_owned()
    }

    fn quota(&self, provider: &str) -> Quota {
        self.provider_config(provider)
            .map(|p| p.quota)
            .unwrap_or_default()
    }

    async fn spend_retry(&self, account: &str) -> bool {
        self.resilience
            .retries
            .spend(self.resilience.state.as_ref(), account)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!("retry budget unavailable: {error}");
                self.config.resilience.when_unavailable == WhenUnavailable::Open
            })
    }

    /// One call to one entry, recorded in its beacon whatever the outcome.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        entry: &Entry<'_>,
        provider: &dyn Provider,
        chat_request: ChatRequest,
        profile: &TaskProfile,
        (deadline, racer): (Instant, Option<&hedge::Racer>),
        cancel: &CancellationToken,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> AttemptResult {
        let started = Instant::now();
        // Each attempt gets the task's full ceiling, within the task's deadline.
        let deadline = (started + profile.total_ceiling()).min(deadline);
        // In a hedged race a slow first token starts the hedge instead of
        // abandoning this attempt: it may still win.
        let first_token_deadline = match racer {
            Some(_) => deadline,
            None => (started + profile.first_token_ceiling()).min(deadline),
        };
        let timeouts = Timeouts {
            connect: CONNECT_TIMEOUT.min(profile.first_token_ceiling()),
            first_byte: profile.first_token_ceiling(),
            first_token: profile.first_token_ceiling(),
            idle: profile.idle_ceiling(),
        };
        let mut first_token = None;
        let mut seen = Seen::default();
        let call = consume(
            provider,
            chat_request,
            timeouts,
            started,
            first_token_deadline,
            &mut first_token,
            &mut seen,
            (racer, progress),
        );
        let result = tokio::select! {
            _ = cancel.cancelled() => Err(Failure::Cancelled),
            timed = tokio::time::timeout_at(deadline, call) => timed.unwrap_or_else(|_| Err(Failure::too_slow(
                format!("no complete answer within the {:.0} s ceiling", profile.total_ceiling().as_secs_f64()),
            ))),
        };
        let result = result.map_err(|failure| match failure {
            Failure::Failed(failed) if failed.partial.is_empty() => Failure::Failed(Failed {
                partial: seen.text.clone(),
                ..failed
            }),
            other => other,
        });
        let outcome = match &result {
            Ok(_) => Some(Outcome::Ok),
            Err(Failure::Failed(failed)) => Some(failed.outcome),
            // The loser of a hedged race was healthy, only slower so far.
            Err(Failure::Cancelled) if racer.is_some_and(hedge::Racer::lost) => Some(Outcome::Ok),
            Err(Failure::Cancelled | Failure::OverBudget(_)) => None,
        };
        if let Some(outcome) = outcome {
            // An attempt abandoned for slowness waited this long without a token.
            let slow = matches!(&result, Err(Failure::Failed(f)) if f.slow)
                || matches!(result, Err(Failure::Cancelled));
            let first_token = first_token.or(slow.then(|| started.elapsed()));
            let sample = Sample {
                at: Instant::now(),
                first_token,
                total: started.elapsed(),
                outcome,
            };
            self.beacons.record(entry.provider, entry.model, sample);
        }
        AttemptResult {
            result,
            rate_limits: seen.rate_limits,
        }
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
        if let Some(window) = &self.config.autocomplete.local_first
            && window.is_open_now()
        {
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
            idle_ms: share.as_millis() as u64,
            wait_ms: 0,
            hedge: false,
        };
        let parts = PromptParts {
            language: String::new(),
            file_name: String::new(),
            before: text.prefix.clone(),
            selection: String::new(),
            after: text.suffix.clone(),
            instruction: FIM_INSTRUCTION.into(),
        };
        let request = TaskRequest::new(TaskKind::Autocomplete, FIM_SYSTEM, parts);
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
            // No waiting: a miss goes to the next entry or the local engine at once.
            let mut run = RunState {
                deadline,
                waits: WaitBudget::new(Duration::ZERO),
                partial: String::new(),
                retry_later: false,
                racer: None,
                input_scale: 1.0,
            };
            let entry = Entry {
                provider,
                model,
                tier: Tier::Small,
            };
            match self
                .serve_entry(&entry, &request, &profile, &mut run, cancel, &|_| {})
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
                Err(Failure::Failed(failed)) => {
                    tracing::debug!(
                        "autocomplete by {provider}/{model} missed: {}",
                        failed.reason
                    )
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

    pub fn resilience(&self) -> &Resilience {
        &self.resilience
    }

    /// Re-reads breakers and quota headroom from the shared state (other
    /// processes change them too) and publishes the status if it changed.
    pub async fn refresh_shared(&self) {
        let views = SharedViews {
            breakers: self.resilience.breakers.views().await,
            quota: self.resilience.governor.views().await,
        };
        *self.shared.lock().expect("shared views lock") = views;
        self.publish();
    }

    pub(crate) fn shared_views(&self) -> SharedViews {
        self.shared.lock().expect("shared views lock").clone()
    }

    /// The list of parked tasks this router reports; front ends share theirs
    /// with each router they build.
    pub fn use_parked(mut self, parked: Arc<Mutex<Vec<ParkedStatus>>>) -> Router {
        self.parked = parked;
        self.publish();
        self
    }

    pub(crate) fn parked(&self) -> Vec<ParkedStatus> {
        self.parked.lock().expect("parked lock").clone()
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

/// What an attempt saw before it ended, kept whether it succeeded or not.
#[derive(Default)]
struct Seen {
    text: String,
    rate_limits: RateLimits,
}

/// Streams one answer, holding the first-token ceiling; classifies the outcome.
#[allow(clippy::too_many_arguments)]
async fn consume(
    provider: &dyn Provider,
    request: ChatRequest,
    timeouts: Timeouts,
    started: Instant,
    first_token_deadline: Instant,
    first_token: &mut Option<Duration>,
    seen: &mut Seen,
    (racer, progress): (Option<&hedge::Racer>, &(dyn Fn(Progress) + Send + Sync)),
) -> Result<(String, Usage), Failure> {
    let ceiling_breach = || {
        Failure::too_slow(format!(
            "no first token within {:.1} s",
            first_token_deadline.duration_since(started).as_secs_f64()
        ))
    };
    let response =
        tokio::time::timeout_at(first_token_deadline, provider.stream(request, timeouts))
            .await
            .map_err(|_| ceiling_breach())?;
    let response = match response {
        Ok(response) => response,
        Err(e) => {
            seen.rate_limits = e.rate_limits.clone();
            return Err(Failure::from_provider(e));
        }
    };
    seen.rate_limits = response.rate_limits;
    let mut stream = response.events;
    loop {
        let next = match first_token {
            None => tokio::time::timeout_at(first_token_deadline, stream.next())
                .await
                .map_err(|_| ceiling_breach())?,
            Some(_) => stream.next().await,
        };
        match next {
            Some(Ok(StreamEvent::Delta(delta))) => {
                if racer.is_some_and(|r| !r.claim()) {
                    return Err(Failure::Cancelled);
                }
                first_token.get_or_insert_with(|| started.elapsed());
                seen.text.push_str(&delta);
                progress(Progress::Delta(delta));
                progress(Progress::Received {
                    chars: seen.text.len(),
                });
            }
            Some(Ok(StreamEvent::End(finish))) => {
                let degraded = |d: Degradation, why: &str, class: Option<ErrorClass>| {
                    Err(Failure::failed(why.into(), Outcome::Degraded(d), class))
                };
                return match finish.reason {
                    FinishReason::MaxTokens => degraded(
                        Degradation::Truncated,
                        "answer truncated at max_tokens",
                        None,
                    ),
                    FinishReason::Refusal => {
                        let said: String = seen.text.trim().chars().take(200).collect();
                        let why = if said.is_empty() {
                            "the model refused (finish reason: refusal / content_filter)".to_owned()
                        } else {
                            format!(
                                "the model refused (finish reason: refusal / content_filter): {said}"
                            )
                        };
                        degraded(
                            Degradation::Refused,
                            &why,
                            Some(ErrorClass::Fatal(Fatal::Refusal)),
                        )
                    }
                    _ if seen.text.trim().is_empty() => {
                        degraded(Degradation::Empty, "empty answer", None)
                    }
                    _ => Ok((std::mem::take(&mut seen.text), finish.usage)),
                };
            }
            Some(Err(e)) => return Err(Failure::from_provider(e)),
            None => {
                return Err(Failure::failed(
                    "the stream ended without its terminal event".into(),
                    Outcome::Failed,
                    Some(ErrorClass::Transient),
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
    if e.message.starts_with(&text) {
        // The provider's message already leads with the status.
        return e.message.clone();
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
        /// An error with a body type and `retry-after`.
        FailWith {
            status: u16,
            error_type: &'static str,
            retry_after: Option<Duration>,
        },
        /// Streams `partial`, then the connection drops.
        Cut(&'static str),
    }

    struct Scripted {
        name: String,
        prefill: bool,
        /// Each request's messages, and when it arrived.
        seen: Mutex<Vec<(Instant, Vec<ChatMessage>)>>,
        script: Mutex<VecDeque<Behaviour>>,
        otherwise: Behaviour,
        calls: AtomicUsize,
    }

    impl Scripted {
        fn new(name: &str, script: Vec<Behaviour>, otherwise: Behaviour) -> Arc<Scripted> {
            Arc::new(Scripted {
                name: name.into(),
                prefill: false,
                seen: Mutex::new(Vec::new()),
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
            self.prefill
        }
        fn stream(
            &self,
            request: ChatRequest,
            _: Timeouts,
        ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.seen
                .lock()
                .unwrap()
                .push((Instant::now(), request.messages));
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
                    Behaviour::FailWith {
                        status,
                        error_type,
                        retry_after,
                    } => Err(ProviderError {
                        status: Some(status),
                        error_type: Some(error_type.into()),
                        retry_after,
                        ..ProviderError::new(name, FailureKind::Status, error_type)
                    }),
                    Behaviour::Cut(partial) => {
                        let cut = ProviderError {
                            partial: partial.into(),
                            ..ProviderError::new(name, FailureKind::StreamCut, "connection closed")
                        };
                        let events =
                            stream::iter([Ok(StreamEvent::Delta(partial.into())), Err(cut)]);
                        Ok(ResponseStream {
                            events: Box::pin(events),
                            rate_limits: RateLimits::default(),
                        })
                    }
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
        sharing(config, providers, Arc::new(Resilience::in_memory()))
    }

    /// A router over `resilience`, which other routers (processes) may share.
    fn sharing(
        config: Config,
        providers: &[&Arc<Scripted>],
        resilience: Arc<Resilience>,
    ) -> Router {
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
            resilience,
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
        TaskRequest::new(kind, "system", parts)
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
                silently_degraded(),
                silently_degraded(),
                silently_degraded(),
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

    fn fail_with(status: u16, error_type: &'static str, retry_after: Option<u64>) -> Behaviour {
        Behaviour::FailWith {
            status,
            error_type,
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_error_is_retried_once_on_the_same_entry() {
        let primary = Scripted::new("primary", vec![Behaviour::Fail(500)], ok());
        let secondary = Scripted::new("secondary", vec![], ok());
        let router = router(
            chains(&[], &["primary/m", "secondary/m"]),
            &[&primary, &secondary],
        );
        let answer = run(&router, explain()).await.unwrap();
        assert_eq!(answer.route.provider, "primary");
        assert_eq!((primary.calls(), secondary.calls()), (2, 0));
        // Full jitter on a 1 s base: the retry came within a second.
        let seen = primary.seen.lock().unwrap();
        assert!(seen[1].0 - seen[0].0 <= Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_waited_out_before_the_one_retry() {
        let primary = Scripted::new(
            "primary",
            vec![fail_with(429, "rate_limit_error", Some(2))],
            ok(),
        );
        let router = router(chains(&[], &["primary/m"]), &[&primary]);
        run(&router, explain()).await.unwrap();
        let seen = primary.seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        let gap = seen[1].0 - seen[0].0;
        assert!(
            gap >= Duration::from_secs(2) && gap <= Duration::from_millis(2_300),
            "{gap:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn persistent_overload_fails_over_once_the_wait_budget_is_spent() {
        let primary = Scripted::new("primary", vec![], Behaviour::Fail(503));
        let secondary = Scripted::new("secondary", vec![], ok());
        let mut config = chains(&[], &["primary/m", "secondary/m"]);
        config.tasks.explain.hedge = false;
        let router = router(config, &[&primary, &secondary]);
        let started = Instant::now();
        let answer = run(&router, explain()).await.unwrap();
        assert_eq!(answer.route.provider, "secondary");
        assert!(primary.calls() >= 2, "retried within the budget");
        assert!(
            started.elapsed() <= Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert!(
            answer.attempts[0].outcome.contains("wait budget"),
            "{:?}",
            answer.attempts
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_first_token_is_hedged_and_the_first_answer_wins() {
        let slow = Behaviour::Answer {
            first_token: Duration::from_secs(25),
            reason: FinishReason::EndTurn,
        };
        let primary = Scripted::new("primary", vec![], slow);
        let secondary = Scripted::new("secondary", vec![], ok());
        let router = router(
            chains(&[], &["primary/m", "secondary/m"]),
            &[&primary, &secondary],
        );
        let started = Instant::now();
        let seen = Mutex::new(Vec::new());
        let answer = router
            .run(explain(), CancellationToken::new(), &|e| {
                seen.lock().unwrap().push(e)
            })
            .await
            .unwrap();
        assert_eq!(answer.route.provider, "secondary");
        assert_eq!(answer.text, "answer from secondary");
        // Hedged at the 10 s first-token ceiling; the hedge answered 200 ms later.
        assert_eq!(started.elapsed(), Duration::from_millis(10_200));
        assert_eq!(
            (primary.calls(), secondary.calls()),
            (1, 1),
            "one hedge, no more"
        );
        assert!(
            answer.attempts[0].outcome.contains("hedge"),
            "{:?}",
            answer.attempts
        );
        // Only the winner's text and name reached the front end.
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter()
                .all(|e| !matches!(e, Progress::Trying { provider, .. } if provider == "primary"))
        );
        let text: String = seen
            .iter()
            .filter_map(|e| match e {
                Progress::Delta(d) => Some(d.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "answer from secondary");
        // The beacon counts the primary as slow, so the next request skips it.
        let summary = router.beacons().summary("primary", "m");
        assert_eq!(summary.samples, 1);
        assert!(summary.p95_first_token.unwrap() >= Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn refactors_are_not_hedged() {
        let slow = Behaviour::Answer {
            first_token: Duration::from_secs(15),
            reason: FinishReason::EndTurn,
        };
        let primary = Scripted::new("primary", vec![], slow);
        let secondary = Scripted::new("secondary", vec![], ok());
        let mut config = chains(&["primary/m", "secondary/m"], &[]);
        config.tasks.refactor.first_token_ms = 20_000;
        let router = router(config, &[&primary, &secondary]);
        let answer = run(&router, request(TaskKind::Refactor)).await.unwrap();
        assert_eq!(answer.route.provider, "primary");
        assert_eq!(secondary.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn fatal_errors_never_retry_and_say_what_to_fix() {
        let primary = Scripted::new(
            "primary",
            vec![],
            fail_with(401, "authentication_error", None),
        );
        let long = Scripted::new("long", vec![], ok());
        let first = router(chains(&[], &["primary/m", "long/m"]), &[&primary, &long]);
        let answer = run(&first, explain()).await.unwrap();
        assert_eq!(primary.calls(), 1);
        assert!(
            answer.attempts[0]
                .outcome
                .contains("check the API key for `primary`"),
            "{:?}",
            answer.attempts
        );

        let short = Scripted::new(
            "short",
            vec![],
            fail_with(400, "context_length_exceeded", None),
        );
        let second = router(chains(&[], &["short/m", "long/m"]), &[&short, &long]);
        assert_eq!(
            run(&second, explain()).await.unwrap().route.provider,
            "long"
        );
        assert_eq!(
            short.calls(),
            1,
            "context length goes to the next (larger-context) entry"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_propagates_its_reason_without_trying_elsewhere() {
        let primary = Scripted::new("primary", vec![], fail_with(400, "content_filter", None));
        let secondary = Scripted::new("secondary", vec![], ok());
        let router = router(
            chains(&[], &["primary/m", "secondary/m"]),
            &[&primary, &secondary],
        );
        let err = run(&router, explain()).await.unwrap_err();
        assert!(matches!(err, RouteError::Refused { .. }), "{err}");
        assert!(err.to_string().contains("content_filter"), "{err}");
        assert_eq!((primary.calls(), secondary.calls()), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_answer_is_continued_by_a_prefill_provider() {
        let primary = Scripted::new("primary", vec![], Behaviour::Cut("fn renamed("));
        let mut fallback = Scripted::new("fallback", vec![], ok());
        Arc::get_mut(&mut fallback).unwrap().prefill = true;
        let router = router(
            chains(&[], &["primary/m", "fallback/m"]),
            &[&primary, &fallback],
        );
        let answer = run(&router, explain()).await.unwrap();
        assert_eq!(primary.calls(), 1, "no retry once text has flowed");
        assert_eq!(answer.text, "fn renamed(answer from fallback");
        let seen = fallback.seen.lock().unwrap();
        let last = seen[0].1.last().unwrap();
        assert_eq!(
            (last.role, last.content.as_str()),
            (Role::Assistant, "fn renamed(")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fallback_without_prefill_restarts_cleanly() {
        let primary = Scripted::new("primary", vec![], Behaviour::Cut("fn renamed("));
        let fallback = Scripted::new("fallback", vec![], ok());
        let router = router(
            chains(&[], &["primary/m", "fallback/m"]),
            &[&primary, &fallback],
        );
        let answer = run(&router, explain()).await.unwrap();
        assert_eq!(answer.text, "answer from fallback");
        assert_eq!(fallback.seen.lock().unwrap()[0].1.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_breaker_is_shared_and_a_refactor_can_wait_for_it() {
        let resilience = Arc::new(Resilience::in_memory());
        let shared = |config: Config, providers: &[&Arc<Scripted>]| {
            sharing(config, providers, resilience.clone())
        };
        let down = Scripted::new("down", vec![], Behaviour::Fail(503));
        let first = shared(chains(&["down/m"], &[]), &[&down]);
        let err = run(&first, request(TaskKind::Refactor)).await.unwrap_err();
        assert!(
            matches!(
                err,
                RouteError::NothingHealthy {
                    retry_later: true,
                    ..
                }
            ),
            "{err}"
        );
        let calls = down.calls();
        assert_eq!(calls, 6, "the breaker opened after six failures in a row");

        // Another process (same shared state) does not call it at all.
        let second = shared(chains(&["down/m"], &[]), &[&down]);
        let err = run(&second, request(TaskKind::Refactor)).await.unwrap_err();
        assert!(err.to_string().contains("circuit open"), "{err}");
        assert_eq!(down.calls(), calls);
    }

    #[tokio::test(start_paused = true)]
    async fn autocomplete_never_waits_to_retry() {
        let remote = Scripted::new("remote", vec![Behaviour::Fail(500)], ok());
        let mut config = chains(&[], &[]);
        config.autocomplete.chain = vec!["remote/m".into(), "local".into()];
        let router = router(config, &[&remote]);
        let text = FimText {
            prefix: "fn a() {".into(),
            suffix: "}".into(),
        };
        let deadline = Instant::now() + Duration::from_millis(600);
        let served = router
            .autocomplete_remote(&text, deadline, &CancellationToken::new())
            .await;
        assert!(served.is_none());
        assert_eq!(remote.calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_local_first_window_keeps_completions_local() {
        let remote = Scripted::new("remote", vec![], ok());
        let mut config = chains(&[], &[]);
        config.autocomplete.chain = vec!["remote/m".into(), "local".into()];
        // Open since a minute ago, in the offset tests run with (UTC).
        let now = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
        config.autocomplete.local_first = Some(local_first::LocalFirstWindow {
            start: format!("{:02}:{:02}", now.hour(), now.minute()),
            minutes: 30,
        });
        let router = router(config, &[&remote]);
        let text = FimText {
            prefix: "fn a() {".into(),
            suffix: "}".into(),
        };
        let deadline = Instant::now() + Duration::from_millis(600);
        let served = router
            .autocomplete_remote(&text, deadline, &CancellationToken::new())
            .await;
        assert!(served.is_none());
        assert_eq!(remote.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_too_long_for_every_entry_is_trimmed_and_sent_again() {
        let too_long = fail_with(400, "context_length_exceeded", None);
        let primary = Scripted::new("primary", vec![too_long.clone(), too_long], ok());
        let first = router(chains(&[], &["primary/m"]), &[&primary]);
        let mut parts = PromptParts {
            language: "rust".into(),
            file_name: "a.rs".into(),
            before: "// context before\n".repeat(2_000),
            selection: "fn a() {}\n".into(),
            after: "// context after\n".repeat(2_000),
            instruction: "Explain.".into(),
        };
        let answer = run(
            &first,
            TaskRequest::new(TaskKind::Explain, "system", parts.clone()),
        )
        .await
        .unwrap();
        assert_eq!(answer.route.provider, "primary");
        let (sizes, kept_selection) = {
            let seen = primary.seen.lock().unwrap();
            let sizes: Vec<usize> = seen.iter().map(|(_, m)| m[0].content.len()).collect();
            let kept = seen.iter().all(|(_, m)| m[0].content.contains("fn a() {}"));
            (sizes, kept)
        };
        assert_eq!(
            sizes.len(),
            3,
            "two trimmed passes after the first: {sizes:?}"
        );
        assert!(sizes[0] > sizes[1] && sizes[1] > sizes[2], "{sizes:?}");
        assert!(kept_selection, "the selection is kept");

        // Nothing to trim around the selection: no pointless resend.
        parts.before.clear();
        parts.after.clear();
        let stuck = Scripted::new(
            "stuck",
            vec![],
            fail_with(400, "context_length_exceeded", None),
        );
        let second = router(chains(&[], &["stuck/m"]), &[&stuck]);
        let err = run(
            &second,
            TaskRequest::new(TaskKind::Explain, "system", parts),
        )
        .await;
        assert!(err.is_err());
        assert_eq!(stuck.calls(), 1);
    }
}
