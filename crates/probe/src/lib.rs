//! Synthetic health checks: a known prompt sent to a provider/model outside the
//! router, timed (time to first token and total) and checked for a fixed token.
//!
//! A probe measures the provider itself, so it bypasses the router: it is not
//! counted in breakers, beacons or quota, and it never fails over. `targets`
//! picks what to probe from the configuration, `history` keeps the results
//! (`probes.jsonl` in the state directory) for p95s and for status displays,
//! and `local` checks the local fallback end to end.

pub mod doctor;
pub mod history;
pub mod local;
pub mod report;
pub mod targets;

use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use switchyard_base::task::TaskKind;
use switchyard_config::Config;
use switchyard_providers::{
    ChatMessage, ChatRequest, Provider, ProviderError, Role, StreamEvent, Timeouts,
};

/// The token a healthy model's answer contains. Unusual enough that no model
/// writes it by accident, so an answer with it shows the prompt was read.
pub const PROBE_TOKEN: &str = "SWITCHYARD-PROBE-7Q";
const PROBE_PROMPT: &str =
    "This is an automated health check. Reply with exactly SWITCHYARD-PROBE-7Q and nothing else.";
/// The shortest time a probe is given, however tight the ceiling: a probe
/// must see a slow answer arrive to report its latency, not just a timeout.
const MIN_PROBE_LIMIT: Duration = Duration::from_secs(30);
/// How much of a wrong answer is kept: enough to recognise it, never a page.
const ANSWER_EXCERPT_CHARS: usize = 60;

/// The latency a healthy entry stays under, at p95.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ceiling {
    pub first_token: Duration,
    pub total: Duration,
}

impl Ceiling {
    /// The explain task's ceilings: a probe answers the question "could this
    /// entry serve an interactive task now?".
    pub fn from_config(config: &Config) -> Ceiling {
        let explain = config.tasks.get(TaskKind::Explain);
        Ceiling {
            first_token: explain.first_token_ceiling(),
            total: explain.total_ceiling(),
        }
    }

    /// How long one probe may run before it counts as a failure.
    fn probe_limit(self) -> Duration {
        (self.total * 2).max(MIN_PROBE_LIMIT)
    }
}

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// The model answered without the token; an excerpt of what it said.
    WrongAnswer(String),
    /// The call failed (provider errors are already free of API keys).
    Failed(String),
}

impl Verdict {
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Ok)
    }

    /// Short text for tables and the history's `error` field; `None` when ok.
    pub fn problem(&self) -> Option<String> {
        match self {
            Verdict::Ok => None,
            Verdict::WrongAnswer(excerpt) => Some(format!("wrong answer: {excerpt:?}")),
            Verdict::Failed(reason) => Some(reason.clone()),
        }
    }
}

/// One probe of one `provider/model`.
#[derive(Clone, Debug)]
pub struct ProbeResult {
    pub provider: String,
    pub model: String,
    pub verdict: Verdict,
    /// From sending the request to the first text; `None` when no text came.
    pub ttft: Option<Duration>,
    /// From sending the request to the end of the answer (or the failure).
    pub total: Duration,
}

/// The request every probe sends: the explain task's output budget, so a
/// reasoning model has room to think before it writes the token.
fn probe_request(model: &str, config: &Config) -> ChatRequest {
    ChatRequest {
        model: model.to_owned(),
        system: None,
        messages: vec![ChatMessage {
            role: Role::User,
            content: PROBE_PROMPT.to_owned(),
        }],
        max_tokens: u32::try_from(config.tasks.get(TaskKind::Explain).output_tokens)
            .unwrap_or(u32::MAX),
        temperature: None,
    }
}

/// Sends the probe prompt to `provider` directly (not through the router) and
/// times it.
pub async fn probe(
    provider: &dyn Provider,
    model: &str,
    config: &Config,
    ceiling: Ceiling,
) -> ProbeResult {
    let limit = ceiling.probe_limit();
    let timeouts = Timeouts {
        connect: limit.min(Duration::from_secs(10)),
        first_byte: limit,
        first_token: limit,
        idle: limit,
    };
    let started = Instant::now();
    let mut ttft = None;
    let mut answer = String::new();
    let call = async {
        let response = provider
            .stream(probe_request(model, config), timeouts)
            .await
            .map_err(|e| describe(&e))?;
        let mut events = response.events;
        while let Some(event) = events.next().await {
            match event.map_err(|e| describe(&e))? {
                StreamEvent::Delta(text) if text.is_empty() => {}
                StreamEvent::Delta(text) => {
                    ttft.get_or_insert_with(|| started.elapsed());
                    answer.push_str(&text);
                }
                StreamEvent::Skipped(why) => return Err(format!("malformed event: {why}")),
                StreamEvent::End(_) => return Ok(()),
            }
        }
        Err("the stream ended without its terminal event".to_owned())
    };
    let outcome = match tokio::time::timeout(limit, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "no complete answer within {} ms",
            limit.as_millis()
        )),
    };
    let verdict = match outcome {
        Err(reason) => Verdict::Failed(reason),
        Ok(()) if answer.contains(PROBE_TOKEN) => Verdict::Ok,
        Ok(()) => Verdict::WrongAnswer(excerpt(&answer)),
    };
    ProbeResult {
        provider: provider.name().to_owned(),
        model: model.to_owned(),
        verdict,
        ttft,
        total: started.elapsed(),
    }
}

/// A provider error without the provider's name (the entry already names it):
/// the HTTP status when there was one, then the provider's message.
fn describe(e: &ProviderError) -> String {
    let head = match e.status {
        Some(status) => format!("HTTP {status}"),
        None => format!("{:?}", e.kind).to_lowercase(),
    };
    match e.message.trim() {
        "" => head,
        message => format!("{head}: {message}"),
    }
}

fn excerpt(answer: &str) -> String {
    let answer = answer.trim();
    match answer.char_indices().nth(ANSWER_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &answer[..cut]),
        None => answer.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::future::BoxFuture;
    use futures::stream;

    use super::*;
    use switchyard_providers::{
        FailureKind, Finish, FinishReason, RateLimits, ResponseStream, Usage,
    };

    /// Answers with fixed events, or fails before the stream.
    struct Scripted {
        events: Result<Vec<StreamEvent>, String>,
    }

    impl Provider for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }

        fn supports_prefill(&self) -> bool {
            false
        }

        fn stream(
            &self,
            _request: ChatRequest,
            _timeouts: Timeouts,
        ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
            let events = self.events.clone();
            Box::pin(async move {
                match events {
                    Ok(events) => Ok(ResponseStream {
                        events: stream::iter(events.into_iter().map(Ok)).boxed(),
                        rate_limits: RateLimits::default(),
                    }),
                    Err(message) => {
                        Err(ProviderError::new("scripted", FailureKind::Status, message))
                    }
                }
            })
        }
    }

    fn answering(text: &str, end: bool) -> Arc<Scripted> {
        let mut events = vec![StreamEvent::Delta(text.to_owned())];
        if end {
            events.push(StreamEvent::End(Finish {
                reason: FinishReason::EndTurn,
                usage: Usage::default(),
            }));
        }
        Arc::new(Scripted { events: Ok(events) })
    }

    async fn run(provider: &Scripted) -> ProbeResult {
        let config = Config::default();
        probe(provider, "m", &config, Ceiling::from_config(&config)).await
    }

    #[tokio::test]
    async fn an_answer_with_the_token_is_ok_and_timed() {
        let result = run(&answering("SWITCHYARD-PROBE-7Q", true)).await;
        assert_eq!(result.verdict, Verdict::Ok);
        assert!(result.ttft.is_some());
        assert_eq!(
            (result.provider.as_str(), result.model.as_str()),
            ("scripted", "m")
        );
    }

    #[tokio::test]
    async fn an_answer_without_the_token_is_a_wrong_answer_with_an_excerpt() {
        let result = run(&answering(&"no ".repeat(100), true)).await;
        let Verdict::WrongAnswer(excerpt) = &result.verdict else {
            panic!("{result:?}");
        };
        assert!(
            excerpt.chars().count() <= ANSWER_EXCERPT_CHARS + 1,
            "{excerpt}"
        );
        assert!(
            result
                .verdict
                .problem()
                .unwrap()
                .starts_with("wrong answer")
        );
    }

    #[tokio::test]
    async fn a_stream_without_its_end_is_a_failure_even_with_the_token() {
        let result = run(&answering("SWITCHYARD-PROBE-7Q", false)).await;
        assert!(matches!(result.verdict, Verdict::Failed(_)), "{result:?}");
    }

    #[tokio::test]
    async fn a_provider_error_is_a_failure_with_its_message() {
        let provider = Scripted {
            events: Err("HTTP 503".into()),
        };
        let result = run(&provider).await;
        assert_eq!(result.verdict, Verdict::Failed("status: HTTP 503".into()));
        assert_eq!(result.ttft, None);
    }

    #[test]
    fn the_probe_limit_leaves_room_to_measure_a_slow_answer() {
        let tight = Ceiling {
            first_token: Duration::from_millis(100),
            total: Duration::from_millis(200),
        };
        assert_eq!(tight.probe_limit(), MIN_PROBE_LIMIT);
        let loose = Ceiling {
            first_token: Duration::from_secs(10),
            total: Duration::from_secs(60),
        };
        assert_eq!(loose.probe_limit(), Duration::from_secs(120));
    }
}
