//! One call to one entry: the deadlined and beaconed layers.
//!
//! [`Deadlines`] is the single definition of an attempt's first-token, idle
//! and total limits; the provider's own timeouts are derived from it, so the
//! router and the provider layer never run two clocks for one limit.
//! [`Beaconed`] records the attempt in its entry's beacon when it ends, and
//! also when its future is dropped (a cancelled request, a lost hedge race).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::beacon::{Beacons, Degradation, Outcome, Sample};
use super::request::{OnProgress, Progress};
use super::seam::{Seam, Unjoinable};
use switchyard_base::entry::ModelRef;
use switchyard_base::task::TaskProfile;
use switchyard_providers::{
    ChatRequest, FailureKind, FinishReason, Provider, ProviderError, RateLimits, StreamEvent,
    Timeouts, Usage,
};
use switchyard_resilience::classify::{ErrorClass, Fatal, classify};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) enum Failure {
    Cancelled,
    OverBudget(switchyard_context::chat::OverBudget),
    Failed(Failed),
    /// A healthy answer that cannot be joined to the answer it was asked to
    /// continue (`seam`): nothing is wrong with the entry.
    Unjoinable(Unjoinable),
    /// Not sent: a rule in force now (put there after the task began) keeps
    /// the request on the machine. The rule as the user should read it.
    Forbidden(String),
}

/// An attempt that ended without an answer.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Failed {
    pub reason: String,
    pub outcome: Outcome,
    /// `None` for answers that came back degraded with status 200: no retry on
    /// the same model helps, but nothing is wrong with the provider either.
    pub class: Option<ErrorClass>,
    pub retry_after: Option<Duration>,
    /// Text streamed before the failure, for a continuation.
    pub partial: String,
    /// A ceiling or stall timeout: the entry is slow now, so the next entry is
    /// a better bet than another wait on this one.
    pub slow: bool,
    /// How the provider failed, when it was the provider.
    pub kind: Option<FailureKind>,
    /// It said it stopped for length before reaching the limit asked: the
    /// provider cut the answer short.
    pub cut_short: bool,
}

impl Failed {
    pub fn new(reason: String, outcome: Outcome, class: Option<ErrorClass>) -> Failed {
        Failed {
            reason,
            outcome,
            class,
            retry_after: None,
            partial: String::new(),
            slow: false,
            kind: None,
            cut_short: false,
        }
    }
}

impl Failure {
    pub fn failed(reason: String, outcome: Outcome, class: Option<ErrorClass>) -> Failure {
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
            kind: Some(e.kind.clone()),
            ..Failed::new(describe(&e), Outcome::Failed, Some(class))
        })
    }
}

/// An attempt's limits, all measured from when it starts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadlines {
    pub started: Instant,
    /// The first token must arrive by then (for a hedged primary, the total:
    /// a late first token starts the hedge instead of ending this attempt).
    pub first_token: Instant,
    pub total: Instant,
    /// Longest silence between stream events once text flows.
    pub idle: Duration,
    first_token_ceiling: Duration,
    total_ceiling: Duration,
}

impl Deadlines {
    /// Each attempt gets the task's full ceilings, within the task's deadline.
    pub fn new(profile: &TaskProfile, task_deadline: Instant, hedged: bool) -> Deadlines {
        let started = Instant::now();
        let total = (started + profile.total_ceiling()).min(task_deadline);
        let first_token = if hedged {
            total
        } else {
            (started + profile.first_token_ceiling()).min(total)
        };
        Deadlines {
            started,
            first_token,
            total,
            idle: profile.idle_ceiling(),
            first_token_ceiling: profile.first_token_ceiling(),
            total_ceiling: profile.total_ceiling(),
        }
    }

    /// The provider's own limits, derived from these: never earlier than the
    /// router's, so the router's deadline is the one that decides.
    pub fn timeouts(&self) -> Timeouts {
        let first_token = self.first_token.saturating_duration_since(self.started);
        Timeouts {
            connect: CONNECT_TIMEOUT.min(first_token),
            first_byte: first_token,
            first_token,
            idle: self.idle,
        }
    }
}

/// Records one attempt in its beacon exactly once: with the outcome the
/// attempt reached, or, when dropped first, with what the drop says (a first
/// token seen is a healthy sample; none by the first-token ceiling is a slow
/// one; anything else teaches nothing).
pub(super) struct Beaconed {
    beacons: Arc<Beacons>,
    entry: ModelRef,
    started: Instant,
    first_token_ceiling: Duration,
    first_token: Option<Duration>,
    outcome: Option<(Outcome, bool)>,
    /// Malformed events the stream skipped.
    pub skipped: u32,
    last_delta: Option<Instant>,
    longest_gap: Option<Duration>,
}

impl Beaconed {
    pub fn new(beacons: Arc<Beacons>, entry: ModelRef, deadlines: &Deadlines) -> Beaconed {
        Beaconed {
            beacons,
            entry,
            started: deadlines.started,
            first_token_ceiling: deadlines.first_token_ceiling,
            first_token: None,
            outcome: None,
            skipped: 0,
            last_delta: None,
            longest_gap: None,
        }
    }

    /// A delta arrived: the first token, or the end of a gap.
    fn delta(&mut self) {
        let now = Instant::now();
        if let Some(last) = self.last_delta {
            let gap = now - last;
            self.longest_gap = Some(self.longest_gap.map_or(gap, |g| g.max(gap)));
        }
        self.last_delta = Some(now);
        self.first_token
            .get_or_insert_with(|| self.started.elapsed());
    }

    /// When the first token came, and how long the attempt has run.
    pub fn timing(&self) -> (Option<Duration>, Duration) {
        (self.first_token, self.started.elapsed())
    }

    /// The attempt's verdict; `slow` when it was abandoned without a token.
    fn finish(&mut self, outcome: Outcome, slow: bool) {
        self.outcome = Some((outcome, slow));
    }
}

impl Drop for Beaconed {
    fn drop(&mut self) {
        let waited = self.started.elapsed();
        let (outcome, slow) = match self.outcome {
            Some(verdict) => verdict,
            None if self.first_token.is_some() => (Outcome::Ok, false),
            None if waited >= self.first_token_ceiling => (Outcome::Ok, true),
            None => return,
        };
        let sample = Sample {
            at: Instant::now(),
            first_token: self.first_token.or(slow.then_some(waited)),
            total: waited,
            outcome,
            longest_gap: self.longest_gap,
        };
        self.beacons.record(&self.entry, sample);
    }
}

/// What an attempt saw before it ended, kept whether it succeeded or not.
#[derive(Default)]
pub(super) struct Seen {
    /// This attempt's own text, as the provider streamed it.
    pub text: String,
    pub rate_limits: RateLimits,
}

/// One call: streams the answer within `deadlines` through `seam` (which
/// joins it to any answer it continues, and holds the whole answer),
/// forwards text through `progress`, classifies the end.
pub(super) async fn call(
    provider: &dyn Provider,
    request: ChatRequest,
    (deadlines, seam): (Deadlines, &mut Seam),
    beacon: &mut Beaconed,
    cancel: &CancellationToken,
    progress: OnProgress<'_>,
) -> (Result<Usage, Failure>, RateLimits) {
    let mut seen = Seen::default();
    let total_ceiling = deadlines.total_ceiling;
    let streamed = consume(
        provider,
        request,
        (deadlines, seam),
        beacon,
        &mut seen,
        progress,
    );
    let result = tokio::select! {
        _ = cancel.cancelled() => Err(Failure::Cancelled),
        timed = tokio::time::timeout_at(deadlines.total, streamed) => timed.unwrap_or_else(|_| Err(Failure::too_slow(
            format!("no complete answer within the {:.0} s ceiling", total_ceiling.as_secs_f64()),
        ))),
    };
    let result = result.map_err(|failure| match failure {
        Failure::Failed(failed) if failed.partial.is_empty() => Failure::Failed(Failed {
            partial: seen.text.clone(),
            ..failed
        }),
        other => other,
    });
    match &result {
        Ok(_) | Err(Failure::Unjoinable(_)) => beacon.finish(Outcome::Ok, false),
        Err(Failure::Failed(failed)) => beacon.finish(failed.outcome, failed.slow),
        // A cancelled attempt is judged by what it saw (the beacon's drop rule).
        Err(Failure::Cancelled | Failure::OverBudget(_) | Failure::Forbidden(_)) => {}
    }
    (result, seen.rate_limits)
}

async fn consume(
    provider: &dyn Provider,
    request: ChatRequest,
    (deadlines, seam): (Deadlines, &mut Seam),
    beacon: &mut Beaconed,
    seen: &mut Seen,
    progress: OnProgress<'_>,
) -> Result<Usage, Failure> {
    let asked = request.max_tokens;
    let ceiling_breach = || no_first_token(&deadlines);
    let mut stream = open(provider, request, &deadlines, seen).await?;
    let mut got_text = false;
    loop {
        let next = if got_text {
            stream.next().await
        } else {
            tokio::time::timeout_at(deadlines.first_token, stream.next())
                .await
                .map_err(|_| ceiling_breach())?
        };
        match next {
            Some(Ok(StreamEvent::Delta(delta))) => {
                got_text = true;
                beacon.delta();
                seen.text.push_str(&delta);
                if let Some(shown) = seam.push(&delta).map_err(Failure::Unjoinable)? {
                    progress(Progress::Delta(shown));
                }
                progress(Progress::Received {
                    chars: seen.text.len(),
                });
            }
            Some(Ok(StreamEvent::Skipped(why))) => {
                tracing::debug!("skipped a malformed event: {why}");
                beacon.skipped += 1;
            }
            Some(Ok(StreamEvent::End(finish))) => {
                let usage = finished(finish, seen, asked)?;
                if let Some(held) = seam.finish().map_err(Failure::Unjoinable)? {
                    progress(Progress::Delta(held));
                }
                return Ok(usage);
            }
            Some(Err(e)) => return Err(Failure::from_provider(e)),
            None => {
                return Err(Failure::Failed(Failed {
                    kind: Some(FailureKind::StreamCut),
                    ..Failed::new(
                        "the stream ended without its terminal event".into(),
                        Outcome::Failed,
                        Some(ErrorClass::Transient),
                    )
                }));
            }
        }
    }
}

fn no_first_token(deadlines: &Deadlines) -> Failure {
    Failure::too_slow(format!(
        "no first token within {:.1} s",
        deadlines
            .first_token
            .duration_since(deadlines.started)
            .as_secs_f64()
    ))
}

/// Sends the request; the answer's events once its headers are in, by the
/// first-token deadline.
async fn open(
    provider: &dyn Provider,
    request: ChatRequest,
    deadlines: &Deadlines,
    seen: &mut Seen,
) -> Result<futures::stream::BoxStream<'static, Result<StreamEvent, ProviderError>>, Failure> {
    let opened = tokio::time::timeout_at(
        deadlines.first_token,
        provider.stream(request, deadlines.timeouts()),
    )
    .await
    .map_err(|_| no_first_token(deadlines))?;
    match opened {
        Ok(response) => {
            seen.rate_limits = response.rate_limits;
            Ok(response.events)
        }
        Err(e) => {
            seen.rate_limits = e.rate_limits.clone();
            Err(Failure::from_provider(e))
        }
    }
}

/// Classifies a stream that reached its terminal event; `asked` is the
/// output limit the request set.
fn finished(
    finish: switchyard_providers::Finish,
    seen: &Seen,
    asked: u32,
) -> Result<Usage, Failure> {
    let degraded = |d: Degradation, why: String, class: Option<ErrorClass>| {
        Failed::new(why, Outcome::Degraded(d), class)
    };
    match finish.reason {
        FinishReason::MaxTokens => {
            // Providers that report no usage: the prompts' own estimate.
            let written = match finish.usage.output_tokens {
                0 => switchyard_context::chat::estimate_tokens(&seen.text) as u64,
                n => n,
            };
            let cut_short = written < u64::from(asked);
            let why = if cut_short {
                format!(
                    "answer cut short: stopped for length after {written} of the {asked} tokens asked"
                )
            } else {
                "answer truncated at max_tokens".to_owned()
            };
            Err(Failure::Failed(Failed {
                cut_short,
                ..degraded(Degradation::Truncated, why, None)
            }))
        }
        FinishReason::Refusal => {
            let said: String = seen.text.trim().chars().take(200).collect();
            let why = if said.is_empty() {
                "the model refused (finish reason: refusal / content_filter)".to_owned()
            } else {
                format!("the model refused (finish reason: refusal / content_filter): {said}")
            };
            Err(Failure::Failed(degraded(
                Degradation::Refused,
                why,
                Some(ErrorClass::Fatal(Fatal::Refusal)),
            )))
        }
        _ if seen.text.trim().is_empty() => Err(Failure::Failed(degraded(
            Degradation::Empty,
            "empty answer".into(),
            None,
        ))),
        _ => Ok(finish.usage),
    }
}

fn describe(e: &ProviderError) -> String {
    let mut text = match (e.status, &e.kind) {
        (Some(status), _) => format!("HTTP {status}"),
        (None, FailureKind::StreamCut) => "the stream was cut".into(),
        (None, FailureKind::Stalled) => "the stream stalled".into(),
        (None, FailureKind::Malformed) => "the stream was malformed".into(),
        (None, kind) => format!("{kind:?}").to_lowercase(),
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
