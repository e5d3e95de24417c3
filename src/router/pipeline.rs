//! The per-entry pipeline: every remote attempt passes the same layers, each
//! holding a guard, so a step cannot be forgotten on an early return and a
//! dropped request future leaks nothing.
//!
//! ```text
//! breakered ─▶ governed ─▶ deadlined + beaconed ─▶ provider
//!  (probe permit:  (reservation:   (one clock for first
//!   released on     settled, or     token, idle, total;
//!   verdict or      refunded on     sample on end or
//!   drop)           drop)           drop)
//! ```
//!
//! The retry policy ([`super::retry`]) decides after each failed attempt
//! whether the same entry is tried again. No remote attempt leaves any other
//! way (ARCHITECTURE.md invariant 5), and each guard settles on drop
//! (invariant 6).

use crate::entry::LOCAL;
use crate::privacy::audit::AuditRecord;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Router;
use super::attempt::{self, Beaconed, Deadlines, Failed, Failure};
use super::beacon::Outcome;
use super::hedge::Racer;
use super::judge::Seen;
use super::plan::Candidate;
use super::request::{OnProgress, Progress, TaskRequest};
use super::seam::Seam;
use crate::entry::EntryKey;
use crate::providers::{Provider, Usage};
use crate::resilience::backoff::WaitBudget;
use crate::resilience::breaker::Admission;
use crate::resilience::prefill;
use crate::task::TaskProfile;

/// What one task has left as it walks its plan.
pub(super) struct RunState {
    pub deadline: Instant,
    pub waits: WaitBudget,
    /// The longest answer streamed so far, continued by the next attempt.
    pub partial: String,
    /// Something temporary (an open breaker, an empty quota, a spent wait
    /// budget) stood in the way: the task can be parked and resumed.
    pub retry_later: bool,
    /// This run's side of a hedged race, while one is on.
    pub racer: Option<Racer>,
    /// Share of the input budget prompts are rendered to; halved when a
    /// model says the prompt is too long.
    pub input_scale: f64,
    /// An interactive task (explain, autocomplete): little patience per entry.
    pub interactive: bool,
    /// Another usable entry could take the request after this one.
    pub alternative: bool,
}

impl RunState {
    pub fn new(
        deadline: Instant,
        wait_budget: Duration,
        partial: String,
        interactive: bool,
    ) -> RunState {
        RunState {
            deadline,
            waits: WaitBudget::new(wait_budget),
            partial,
            retry_later: false,
            racer: None,
            input_scale: 1.0,
            interactive,
            alternative: false,
        }
    }

    /// The hedge's own state: same deadline and wait budget left.
    pub fn fork(&self, racer: Racer) -> RunState {
        RunState {
            deadline: self.deadline,
            waits: self.waits,
            partial: self.partial.clone(),
            retry_later: false,
            racer: Some(racer),
            input_scale: self.input_scale,
            interactive: self.interactive,
            alternative: self.alternative,
        }
    }

    /// Takes in what the hedge learned.
    pub fn absorb(&mut self, hedge: RunState) {
        self.retry_later |= hedge.retry_later;
        if hedge.partial.len() > self.partial.len() {
            self.partial = hedge.partial;
        }
    }
}

pub(super) fn join_reasons(earlier: Option<String>, now: String) -> String {
    match earlier {
        Some(earlier) => format!("{earlier}; then {now}"),
        None => now,
    }
}

impl Router {
    /// The entry's identity in the shared state (its account's breaker and quota).
    pub(crate) fn key(&self, entry: &crate::entry::ModelRef) -> EntryKey {
        let account = self
            .provider_config(&entry.provider)
            .map_or(entry.provider.as_str(), |p| p.account(&entry.provider));
        EntryKey::new(account, entry.clone())
    }

    fn provider(&self, candidate: &Candidate) -> Result<Arc<dyn Provider>, Failure> {
        self.providers
            .get(&candidate.entry.provider)
            .cloned()
            .ok_or_else(|| {
                Failure::failed(
                    format!("provider `{}` is not configured", candidate.entry.provider),
                    Outcome::Failed,
                    None,
                )
            })
    }

    /// Serves a request from one entry through the pipeline, retrying it
    /// while the retry policy allows. Fatal errors never retry here; the
    /// caller moves on.
    pub(super) async fn serve_entry(
        &self,
        candidate: &Candidate,
        request: &TaskRequest,
        profile: &TaskProfile,
        run: &mut RunState,
        cancel: &CancellationToken,
        progress: OnProgress<'_>,
    ) -> Result<(String, Usage), Failure> {
        let provider = self.provider(candidate)?;
        let key = self.key(&candidate.entry);
        let (breaker_key, quota_key) = (key.breaker_key(), key.quota_key());
        let quota = self
            .provider_config(&key.model.provider)
            .map(|p| p.quota)
            .unwrap_or_default();
        let probe_ttl = profile.total_ceiling() + Duration::from_secs(5);
        let resilience = &self.resilience;
        let mut last_error: Option<String> = None;
        for retry in 0u32.. {
            // Breakered: the admission (a probe permit when half-open) lives
            // until the verdict is recorded or this future is dropped.
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
            let prompt = self
                .prompt(
                    &candidate.entry,
                    request,
                    profile,
                    (&run.partial, run.input_scale),
                    provider.supports_prefill() && !resilience.prefills.rejected(&key.path()),
                )
                .map_err(Failure::OverBudget)?;
            // Governed: the reservation is settled below, or refunded if this
            // future is dropped while the request runs.
            let waited_from = Instant::now();
            let admit_by = (waited_from + run.waits.left()).min(run.deadline);
            let admitted = resilience.governor.admit(
                &quota_key,
                request.kind,
                quota,
                prompt.input_tokens() as u64,
                u64::from(prompt.request.max_tokens),
                admit_by,
            );
            // A request cancelled while it waits for quota stops waiting at once
            // (and drops its breaker admission with it).
            let reservation = tokio::select! {
                _ = cancel.cancelled() => return Err(Failure::Cancelled),
                reservation = admitted => reservation,
            };
            run.waits.try_spend(waited_from.elapsed());
            let reservation = reservation.map_err(|starved| {
                run.retry_later = true;
                Failure::failed(
                    join_reasons(last_error.clone(), starved.to_string()),
                    Outcome::Failed,
                    None,
                )
            })?;
            if retry == 0 {
                resilience.retries.earn(&key.account);
            }
            progress(Progress::Trying {
                entry: candidate.entry.clone(),
                tier: candidate.tier,
            });
            if candidate.entry.provider != LOCAL {
                self.audit.record(&AuditRecord {
                    at_ms: crate::resilience::park::now_ms(),
                    task: request.kind.as_str().into(),
                    front_end: request.origin.front_end.into(),
                    provider: candidate.entry.provider.clone(),
                    model: candidate.entry.model.clone(),
                    subject: request.origin.subject.clone(),
                    bytes: prompt.bytes(),
                    estimated_tokens: prompt.input_tokens(),
                    redactions: prompt.redactions,
                });
            }
            // Deadlined and beaconed.
            let mut deadlines = Deadlines::new(profile, run.deadline, run.racer.is_some());
            if run.interactive {
                // A stall shows against the entry's own pace, in seconds, not
                // only after the task's whole idle ceiling.
                deadlines.idle = self
                    .beacons
                    .summary(&candidate.entry)
                    .stall_limit(deadlines.idle);
            }
            let mut beacon =
                Beaconed::new(self.beacons.clone(), candidate.entry.clone(), &deadlines);
            // What the caller has beyond what the model is shown: the
            // whitespace the partial answer ends with.
            let shown = &run.partial[run.partial.trim_end().len()..];
            let mut seam = Seam::new(prompt.form, &prompt.continues, shown);
            let prefilled = prompt.prefilled();
            let (result, rate_limits) = attempt::call(
                provider.as_ref(),
                prompt.request,
                (deadlines, &mut seam),
                &mut beacon,
                cancel,
                (run.racer.as_ref(), progress),
            )
            .await;
            let (first_token, waited) = beacon.timing();
            let seen = Seen {
                result: &result,
                first_token,
                waited,
                skipped: beacon.skipped,
                lost_race: run.racer.as_ref().is_some_and(Racer::lost),
            };
            drop(beacon);
            self.judge(&key, profile, seen).await;
            resilience
                .governor
                .observe(&reservation, &rate_limits)
                .await;
            resilience
                .governor
                .settle(reservation, result.as_ref().ok().copied())
                .await;
            let failed = match result {
                Ok(usage) => {
                    resilience
                        .breakers
                        .record(&breaker_key, admission, true, "")
                        .await;
                    return Ok((seam.joined(), usage));
                }
                Err(Failure::Unjoinable(why)) => {
                    resilience
                        .breakers
                        .record(&breaker_key, admission, true, "")
                        .await;
                    let reason = format!(
                        "its continuation could not be joined to the answer so far: {}",
                        why.0
                    );
                    if request.streamed {
                        // The caller has the answer so far: no other text can replace it.
                        return Err(Failure::failed(
                            join_reasons(last_error, reason),
                            Outcome::Ok,
                            None,
                        ));
                    }
                    // The caller has seen nothing: a whole answer from this entry alone.
                    tracing::info!(
                        "{}: {reason}; asking it for a whole answer instead",
                        candidate.entry
                    );
                    run.partial.clear();
                    last_error = Some(reason);
                    continue;
                }
                Err(Failure::Failed(failed)) => failed,
                Err(other) => return Err(other),
            };
            let was_probe = admission.is_probe();
            let healthy_answer = failed
                .class
                .as_ref()
                .is_none_or(|class| !class.counts_against_health());
            resilience
                .breakers
                .record(&breaker_key, admission, healthy_answer, &failed.reason)
                .await;
            // A model that refuses the prefill is asked again at once as a
            // continuation request, and every process learns to ask it so.
            if prefilled && prefill::rejects_prefill(&failed.reason) {
                resilience.prefills.learn_rejected(&key.path()).await;
                tracing::info!(
                    "{}: no prefill; continuing with a continuation request",
                    candidate.entry
                );
                continue;
            }
            let joined = seam.joined();
            if joined.len() > run.partial.len() {
                run.partial = joined;
            }
            let delay = self
                .retry_delay(&key, failed.clone(), retry, was_probe, run)
                .await
                .map_err(Failure::Failed)?;
            tracing::info!(
                "{}: {}, retrying in {:.1} s",
                candidate.entry,
                failed.reason,
                delay.as_secs_f64()
            );
            // A breaker that opens meanwhile (another request's verdict) ends the wait.
            let tripped = resilience.breakers.tripped(&breaker_key);
            tokio::select! {
                _ = cancel.cancelled() => return Err(Failure::Cancelled),
                _ = tripped.notified() => {
                    run.retry_later = true;
                    return Err(Failure::Failed(Failed {
                        reason: format!("{}; its circuit opened while waiting to retry", failed.reason),
                        ..failed
                    }));
                }
                _ = tokio::time::sleep(delay) => {}
            }
            last_error = Some(failed.reason);
        }
        unreachable!("the retry loop returns")
    }
}
