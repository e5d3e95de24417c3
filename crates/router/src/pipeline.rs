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

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Router;
use super::attempt::{self, Beaconed, Deadlines, Failed, Failure};
use super::beacon::Outcome;
use super::hedge::Racer;
use super::judge::Seen;
use super::plan::{Candidate, Cleared};
use super::prompt::Prompt;
use super::request::{Progress, TaskRequest};
use super::retry::{self, Facts, Then};
use super::run_state::{Lane, RunState};
use super::seam::{Seam, Unjoinable};
use switchyard_base::task::TaskProfile;
use switchyard_privacy::audit::AuditRecord;
use switchyard_providers::{Provider, Usage};
use switchyard_resilience::breaker::{Admission, Phase};
use switchyard_resilience::governor::{Quota, Reservation};
use switchyard_resilience::prefill;
use switchyard_state::WhenUnavailable;

pub(super) fn join_reasons(earlier: Option<String>, now: String) -> String {
    match earlier {
        Some(earlier) => format!("{earlier}; then {now}"),
        None => now,
    }
}

impl Router {
    /// Serves a request from one entry through the pipeline, retrying it
    /// while the retry policy allows. Fatal errors never retry here; the
    /// caller moves on.
    pub(super) async fn serve_entry(
        &self,
        candidate: Cleared<'_>,
        request: &TaskRequest,
        profile: &TaskProfile,
        run: &mut RunState,
        lane: Lane<'_>,
    ) -> Result<(String, Usage), Failure> {
        let serving = Serving {
            entry: self.entry(candidate, profile)?,
            request,
            profile,
            lane,
        };
        let mut last_error: Option<String> = None;
        for retry in 0u32.. {
            self.still_allowed(&serving)?;
            let admission = self.breakered(&serving, run, &last_error).await?;
            let governed = self.governed(&serving, run, &last_error).await?;
            // Asked again as it sends: the quota wait may be long.
            self.still_allowed(&serving)?;
            if retry == 0 {
                self.resilience
                    .retries
                    .earn(&serving.entry.candidate.key.account);
            }
            self.announce(&serving, &governed.prompt);
            let attempted = self.attempt(&serving, run, governed).await;
            let after = (admission, attempted, retry, &last_error);
            match self.next(&serving, run, after).await {
                Next::Served(text, usage) => return Ok((text, usage)),
                Next::Stop(failure) => return Err(failure),
                Next::AgainNow(reason) => last_error = reason.or(last_error),
                Next::RetryAfter(delay, failed) => {
                    self.wait_to_retry(&serving, run, delay, &failed).await?;
                    last_error = Some(failed.reason);
                }
            }
        }
        unreachable!("the retry loop returns")
    }

    /// Whether the rules in force now let this request leave for a remote
    /// entry: local-only mode or a path rule put in force after the task
    /// began stops every further attempt, whichever router the task began on
    /// (ARCHITECTURE.md invariant 25).
    fn still_allowed(&self, serving: &Serving<'_>) -> Result<(), Failure> {
        if serving.entry.candidate.entry.is_local() {
            return Ok(());
        }
        let document = serving.request.origin.document.as_deref();
        match self.rules.now().forbids(document) {
            Some(rule) => Err(Failure::Forbidden(rule)),
            None => Ok(()),
        }
    }

    /// Resolves once the rules in force keep this request from its entry
    /// (never for the local one): a wait to send ends there, not at its end.
    async fn forbidden(&self, serving: &Serving<'_>) -> Failure {
        if serving.entry.candidate.entry.is_local() {
            std::future::pending::<()>().await;
        }
        let document = serving.request.origin.document.as_deref();
        Failure::Forbidden(self.rules.forbid(document).await)
    }

    /// The entry's provider, shared-state identity and quota.
    fn entry(&self, candidate: Cleared<'_>, profile: &TaskProfile) -> Result<Entry, Failure> {
        let provider = self.providers.get(candidate).ok_or_else(|| {
            Failure::failed(
                format!("provider `{}` is not configured", candidate.entry.provider),
                Outcome::Failed,
                None,
            )
        })?;
        let quota = self
            .provider_config(&candidate.entry.provider)
            .map(|p| p.quota)
            .unwrap_or_default();
        Ok(Entry {
            candidate: Candidate::clone(&candidate),
            provider,
            quota,
            probe_ttl: profile.total_ceiling() + Duration::from_secs(5),
        })
    }

    /// Breakered: the admission (a probe permit when half-open) lives until
    /// the verdict is recorded or this future is dropped.
    async fn breakered(
        &self,
        serving: &Serving<'_>,
        run: &mut RunState,
        last_error: &Option<String>,
    ) -> Result<Admission, Failure> {
        let entry = &serving.entry;
        let admission = self
            .resilience
            .breakers
            .admit(&entry.candidate.key.breaker_key(), entry.probe_ttl)
            .await;
        if let Admission::Open { reason, retry_in } = &admission {
            run.retry_later = true;
            let reason = format!(
                "circuit open ({reason}), next probe in {:.0} s",
                retry_in.as_secs_f64()
            );
            return Err(Failure::failed(
                join_reasons(last_error.clone(), reason),
                Outcome::Failed,
                None,
            ));
        }
        Ok(admission)
    }

    /// The prompt for the entry, governed: its reservation is settled after
    /// the attempt, or refunded if this future is dropped while it runs. A
    /// request cancelled while it waits for quota stops waiting at once.
    async fn governed(
        &self,
        serving: &Serving<'_>,
        run: &mut RunState,
        last_error: &Option<String>,
    ) -> Result<Governed, Failure> {
        let (entry, request) = (&serving.entry, serving.request);
        let prefill = entry.provider.supports_prefill()
            && !self
                .resilience
                .prefills
                .rejected(&entry.candidate.key.path());
        let prompt = self
            .prompt(
                &entry.candidate.entry,
                request,
                serving.profile,
                (&run.partial, run.input_scale),
                prefill,
            )
            .map_err(Failure::OverBudget)?;
        let waited_from = Instant::now();
        let admit_by = (waited_from + run.waits.left()).min(run.deadline);
        let quota_key = entry.candidate.key.quota_key();
        let admitted = self.resilience.governor.admit(
            &quota_key,
            request.kind,
            entry.quota,
            prompt.input_tokens() as u64,
            u64::from(prompt.request.max_tokens),
            admit_by,
        );
        let reservation = tokio::select! {
            biased;
            _ = serving.lane.cancel.cancelled() => return Err(Failure::Cancelled),
            forbidden = self.forbidden(serving) => return Err(forbidden),
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
        Ok(Governed {
            prompt,
            reservation,
        })
    }

    /// Tells the front end who is tried, and the outbound audit what leaves.
    fn announce(&self, serving: &Serving<'_>, prompt: &Prompt) {
        let (candidate, request) = (&serving.entry.candidate, serving.request);
        (serving.lane.progress)(Progress::Trying {
            entry: candidate.entry.clone(),
            tier: candidate.tier,
        });
        if !candidate.entry.is_local() {
            self.audit.record(&AuditRecord {
                at_ms: switchyard_base::clock::now_ms(),
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
    }

    /// Deadlined and beaconed: one call, its answer joined to what it
    /// continues; then the verdict on the entry and the quota settled.
    async fn attempt(
        &self,
        serving: &Serving<'_>,
        run: &RunState,
        Governed {
            prompt,
            reservation,
        }: Governed,
    ) -> Attempted {
        let entry = &serving.entry;
        let racer = serving.lane.racer;
        let mut deadlines = Deadlines::new(serving.profile, run.deadline, racer.is_some());
        if run.interactive {
            // A stall shows against the entry's own pace, in seconds, not
            // only after the task's whole idle ceiling.
            let summary = self.beacons.summary(&entry.candidate.entry);
            deadlines.idle = summary.stall_limit(deadlines.idle);
        }
        let mut beacon = Beaconed::new(
            self.beacons.clone(),
            entry.candidate.entry.clone(),
            &deadlines,
        );
        // What the caller has beyond what the model is shown: the
        // whitespace the partial answer ends with.
        let shown = &run.partial[run.partial.trim_end().len()..];
        let mut seam = Seam::new(prompt.form, &prompt.continues, shown);
        let prefilled = prompt.prefilled();
        let (result, rate_limits) = attempt::call(
            entry.provider.as_ref(),
            prompt.request,
            (deadlines, &mut seam),
            &mut beacon,
            serving.lane.cancel,
            serving.lane.progress,
        )
        .await;
        let (first_token, waited) = beacon.timing();
        let seen = Seen {
            result: &result,
            first_token,
            waited,
            skipped: beacon.skipped,
            lost_race: racer.is_some_and(Racer::lost),
        };
        drop(beacon);
        self.judge(&entry.candidate.key, serving.profile, seen)
            .await;
        let governor = &self.resilience.governor;
        governor.observe(&reservation, &rate_limits).await;
        governor
            .settle(reservation, result.as_ref().ok().copied())
            .await;
        Attempted {
            result,
            seam,
            prefilled,
        }
    }

    /// What follows an attempt: the breaker records it, and the retry policy
    /// ([`super::retry`]) decides whether this entry is asked again.
    async fn next(
        &self,
        serving: &Serving<'_>,
        run: &mut RunState,
        (admission, attempted, retry, last_error): (Admission, Attempted, u32, &Option<String>),
    ) -> Next {
        let breakers = &self.resilience.breakers;
        let breaker = serving.entry.candidate.key.breaker_key();
        let failed = match attempted.result {
            Ok(usage) => {
                breakers.record(&breaker, admission, true, "").await;
                return Next::Served(attempted.seam.joined(), usage);
            }
            Err(Failure::Unjoinable(why)) => {
                breakers.record(&breaker, admission, true, "").await;
                return unjoinable(serving, run, why, last_error);
            }
            Err(Failure::Failed(failed)) => failed,
            Err(other) => return Next::Stop(other),
        };
        let was_probe = admission.is_probe();
        let healthy_answer = failed
            .class
            .as_ref()
            .is_none_or(|class| !class.counts_against_health());
        breakers
            .record(&breaker, admission, healthy_answer, &failed.reason)
            .await;
        // A model that refuses the prefill is asked again at once as a
        // continuation request, and every process learns to ask it so.
        if attempted.prefilled && prefill::rejects_prefill(&failed.reason) {
            let path = serving.entry.candidate.key.path();
            self.resilience.prefills.learn_rejected(&path).await;
            tracing::info!(
                "{}: no prefill; continuing with a continuation request",
                serving.entry.candidate.entry
            );
            return Next::AgainNow(None);
        }
        let joined = attempted.seam.joined();
        if joined.len() > run.partial.len() {
            run.partial = joined;
        }
        self.after_failure(serving, run, failed, (retry, was_probe))
            .await
    }

    /// Acts on the retry policy's decision after `failed`.
    async fn after_failure(
        &self,
        serving: &Serving<'_>,
        run: &mut RunState,
        failed: Failed,
        (retry, was_probe): (u32, bool),
    ) -> Next {
        let facts = Facts {
            retry,
            was_probe,
            interactive: run.interactive,
            alternative: run.alternative,
            room_to_wait: run.room_to_wait(),
            provider: &serving.entry.candidate.key.model.provider,
        };
        let decision = retry::decide(&self.resilience.backoff, failed.clone(), facts);
        if let Some(pause) = decision.pause_quota {
            let quota = serving.entry.candidate.key.quota_key();
            self.resilience.governor.pause(&quota, pause).await;
        }
        match decision.then {
            Then::Retry(delay) if self.spend_retry(&serving.entry.candidate.key.account).await => {
                run.waits.try_spend(delay);
                Next::RetryAfter(delay, failed)
            }
            Then::Retry(_) => {
                run.retry_later = true;
                Next::Stop(Failure::Failed(retry::budget_spent(failed)))
            }
            Then::MoveOn(failed) => Next::Stop(Failure::Failed(failed)),
            Then::Later(failed) => {
                run.retry_later = true;
                Next::Stop(Failure::Failed(failed))
            }
        }
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

    /// Waits `delay` to retry; a breaker that opens meanwhile (another
    /// request's verdict) or a cancel ends the wait.
    async fn wait_to_retry(
        &self,
        serving: &Serving<'_>,
        run: &mut RunState,
        delay: Duration,
        failed: &Failed,
    ) -> Result<(), Failure> {
        tracing::info!(
            "{}: {}, retrying in {:.1} s",
            serving.entry.candidate.entry,
            failed.reason,
            delay.as_secs_f64()
        );
        let breakers = &self.resilience.breakers;
        let key = serving.entry.candidate.key.breaker_key();
        let tripped = breakers.tripped(&key);
        let notified = tripped.notified();
        tokio::pin!(notified);
        // Listening first, then looking: a trip between this attempt's
        // failure and now (another request's, or its own) is not missed.
        notified.as_mut().enable();
        let mut circuit_opened = || {
            run.retry_later = true;
            Err(Failure::Failed(Failed {
                reason: format!(
                    "{}; its circuit opened while waiting to retry",
                    failed.reason
                ),
                ..failed.clone()
            }))
        };
        if matches!(breakers.last_known(&key), Some((Phase::Open, ..))) {
            return circuit_opened();
        }
        tokio::select! {
            biased;
            _ = serving.lane.cancel.cancelled() => Err(Failure::Cancelled),
            _ = &mut notified => circuit_opened(),
            forbidden = self.forbidden(serving) => Err(forbidden),
            _ = tokio::time::sleep(delay) => Ok(()),
        }
    }
}

/// A continuation that cannot be joined: a whole answer from the same entry
/// when the caller has seen nothing, else the end of this entry's turn
/// (ARCHITECTURE.md invariant 18).
fn unjoinable(
    serving: &Serving<'_>,
    run: &mut RunState,
    why: Unjoinable,
    last_error: &Option<String>,
) -> Next {
    let reason = format!(
        "its continuation could not be joined to the answer so far: {}",
        why.0
    );
    if serving.request.streamed {
        // The caller has the answer so far: no other text can replace it.
        let reason = join_reasons(last_error.clone(), reason);
        return Next::Stop(Failure::failed(reason, Outcome::Ok, None));
    }
    tracing::info!(
        "{}: {reason}; asking it for a whole answer instead",
        serving.entry.candidate.entry
    );
    run.partial.clear();
    Next::AgainNow(Some(reason))
}

/// One request served by one entry: what every step of its attempts reads.
struct Serving<'a> {
    entry: Entry,
    request: &'a TaskRequest,
    profile: &'a TaskProfile,
    lane: Lane<'a>,
}

/// An entry as the pipeline serves it.
struct Entry {
    candidate: Candidate,
    provider: Arc<dyn Provider>,
    quota: Quota,
    /// How long a probe may hold the half-open lease: the attempt's ceiling.
    probe_ttl: Duration,
}

/// A prompt with its quota in hand.
struct Governed {
    prompt: Prompt,
    reservation: Reservation,
}

/// What one call brought back.
struct Attempted {
    result: Result<Usage, Failure>,
    /// The answer joined to what it continues (so far, when it failed).
    seam: Seam,
    /// It went out with the answer so far as a prefill.
    prefilled: bool,
}

/// What the pipeline does after an attempt.
enum Next {
    Served(String, Usage),
    /// Ask the same entry again at once (a prefill refused; a whole answer
    /// in place of a continuation that cannot be joined), noting why.
    AgainNow(Option<String>),
    /// Ask the same entry again after the delay, unless its circuit opens.
    RetryAfter(Duration, Failed),
    Stop(Failure),
}
