//! Router behaviour on a paused clock, with scripted providers below the HTTP line.

mod cancellation;
mod faults;
mod fleet;
mod plan;
mod policy;
mod recovery;
mod routing;
mod said_no;
mod yielding;

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use switchyard_base::entry::ModelRef;
use switchyard_base::task::Tier;
use switchyard_config::TierChains;
use switchyard_context::chat::PromptParts;
use switchyard_engine::FimText;
use switchyard_providers::{
    ChatMessage, ChatRequest, FailureKind, Finish, FinishReason, ProviderError, RateLimits,
    ResponseStream, Role, StreamEvent, Timeouts, Usage,
};

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
    /// Streams `partial`, then falls silent; ends as the SSE reader ends a
    /// stream silent for the idle limit it was given (its own timing is
    /// tested in providers/sse.rs).
    Stall(&'static str),
}

struct Scripted {
    name: String,
    prefill: bool,
    /// Each request's messages, and when it arrived.
    seen: Mutex<Vec<(Instant, Vec<ChatMessage>)>>,
    script: Mutex<VecDeque<Behaviour>>,
    otherwise: Mutex<Behaviour>,
    calls: AtomicUsize,
    /// Names of every scripted provider called, in order, when shared.
    order: Option<Arc<Mutex<Vec<String>>>>,
}

impl Scripted {
    fn new(name: &str, script: Vec<Behaviour>, otherwise: Behaviour) -> Arc<Scripted> {
        Arc::new(Scripted {
            name: name.into(),
            prefill: false,
            seen: Mutex::new(Vec::new()),
            script: Mutex::new(script.into()),
            otherwise: Mutex::new(otherwise),
            calls: AtomicUsize::new(0),
            order: None,
        })
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    /// What every request gets from now on, once the script is spent.
    fn set_otherwise(&self, behaviour: Behaviour) {
        *self.otherwise.lock().unwrap() = behaviour;
    }
    /// When each request arrived: the canaries' (`canaries`) or the users'.
    fn arrivals(&self, canaries: bool) -> Vec<Instant> {
        let is_canary = |m: &Vec<ChatMessage>| m.iter().any(|m| m.content.contains(canary::TOKEN));
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, m)| is_canary(m) == canaries)
            .map(|(at, _)| *at)
            .collect()
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
        timeouts: Timeouts,
    ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        // A canary asks for its token back, as a healthy model would answer.
        let canary = request
            .messages
            .iter()
            .any(|m| m.content.contains(canary::TOKEN));
        if let Some(order) = &self.order {
            order.lock().unwrap().push(self.name.clone());
        }
        self.seen
            .lock()
            .unwrap()
            .push((Instant::now(), request.messages));
        let behaviour = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| self.otherwise.lock().unwrap().clone());
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
                    let events = stream::iter([Ok(StreamEvent::Delta(partial.into())), Err(cut)]);
                    Ok(ResponseStream {
                        events: Box::pin(events),
                        rate_limits: RateLimits::default(),
                    })
                }
                Behaviour::Stall(partial) => {
                    let silent = async move {
                        tokio::time::sleep(timeouts.idle).await;
                        Err(ProviderError {
                            partial: partial.into(),
                            ..ProviderError::new(name, FailureKind::Stalled, "stream silent")
                        })
                    };
                    let events = stream::iter([Ok(StreamEvent::Delta(partial.into()))])
                        .chain(stream::once(silent));
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
                        let text = match canary {
                            true => canary::TOKEN.to_owned(),
                            false => format!("answer from {name}"),
                        };
                        Ok(StreamEvent::Delta(text))
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

/// A router whose breakers, backoff and governor follow `config.resilience`.
fn configured(config: Config, providers: &[&Arc<Scripted>]) -> Router {
    let state = Arc::new(switchyard_state::memory::MemoryState::new());
    let resilience = Arc::new(Resilience::new(state, &config.resilience));
    sharing(config, providers, resilience)
}

/// A router over `resilience`, which other routers (processes) may share.
fn sharing(config: Config, providers: &[&Arc<Scripted>], resilience: Arc<Resilience>) -> Router {
    let map = providers
        .iter()
        .map(|p| (p.name.clone(), (*p).clone() as Arc<dyn Provider>))
        .collect();
    let lasting = Lasting::new(resilience);
    Router::with_providers(&config, map, HashMap::new(), EngineSlot::default(), lasting)
}

fn chains(large: &[&str], medium: &[&str]) -> Config {
    let list = |l: &[&str]| {
        l.iter()
            .map(|s| switchyard_base::entry::ChainEntry::try_from(s.to_string()).unwrap())
            .collect()
    };
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

/// A runtime on a paused clock, for a property test's cases.
fn paused_clock() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

async fn run(router: &Router, request: TaskRequest) -> Result<Answer, RouteError> {
    router.run(request, CancellationToken::new(), &|_| {}).await
}

fn fail_with(status: u16, error_type: &'static str, retry_after: Option<u64>) -> Behaviour {
    Behaviour::FailWith {
        status,
        error_type,
        retry_after: retry_after.map(Duration::from_secs),
    }
}
