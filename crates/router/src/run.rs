//! `Router::run`: one remote-grade task walks its plan. Each usable candidate
//! is served through the pipeline (hedged for interactive tasks); a failure
//! hands the request to the next candidate, an exhausted tier downshifts, and
//! a prompt too long for every entry is trimmed and sent again.

use tokio_util::sync::CancellationToken;

use super::Router;
use super::attempt::Failure;
use super::hedge::{self, Contender, HedgeRan, Side};
use super::plan::{Ask, Candidate, Cleared, Plan, Skip, Turn};
use super::request::{Answer, Attempt, OnProgress, Pin, Route, RouteError, TaskRequest};
use super::run_state::{Lane, RunState};
use switchyard_base::entry::ModelRef;
use switchyard_base::task::{TaskKind, TaskProfile, Tier};
use switchyard_context::chat;
use switchyard_privacy::redact;
use switchyard_providers::Usage;
use switchyard_resilience::classify::{ErrorClass, Fatal};

/// Prompts are trimmed to at most this share of the budget for a model that
/// keeps saying they are too long.
const MIN_INPUT_SCALE: f64 = 0.125;

/// What one pass over the plan saw.
#[derive(Default)]
struct Pass {
    tried: Vec<Attempt>,
    /// What stood in the way, per entry in plan order (for the route's reason).
    trouble: Vec<(Tier, ModelRef, String)>,
    /// Entries that said the prompt is too long.
    too_long: Vec<ModelRef>,
    /// The rule put in force since the task began that kept an attempt from
    /// being sent.
    forbidden: Option<String>,
}

impl Pass {
    fn note(&mut self, candidate: &Candidate, outcome: String, trouble: bool) {
        if trouble {
            self.trouble.push((
                candidate.tier,
                candidate.entry.clone(),
                format!("{}: {outcome}", candidate.entry),
            ));
        }
        self.tried.push(Attempt {
            entry: candidate.entry.clone(),
            tier: candidate.tier,
            outcome,
        });
    }

    /// Why traffic is not on the plan's first entry: what stood in the way
    /// of every entry before `served` (`None` when it served first).
    fn why_moved(&self, plan: &Plan, served: &Candidate) -> Option<String> {
        let before = |entry: &ModelRef| {
            plan.candidates()
                .iter()
                .take_while(|c| *c != served)
                .any(|c| c.tier == served.tier && &c.entry == entry)
        };
        let here: Vec<&str> = self
            .trouble
            .iter()
            .filter(|(tier, entry, _)| *tier == served.tier && before(entry))
            .map(|(_, _, why)| why.as_str())
            .collect();
        let parts: Vec<String> = self
            .downshift_reason(plan.first_tier(), served.tier)
            .into_iter()
            .chain((!here.is_empty()).then(|| here.join("; ")))
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Why the task left the tiers above `served` (`None` when it did not).
    fn downshift_reason(&self, first: Tier, served: Tier) -> Option<String> {
        let mut reason = None;
        let mut tier = Some(first);
        while let Some(current) = tier.filter(|t| *t != served) {
            let troubles: Vec<&str> = self
                .trouble
                .iter()
                .filter(|(t, _, _)| *t == current)
                .map(|(_, _, why)| why.as_str())
                .collect();
            if !troubles.is_empty() || reason.is_none() {
                reason = Some(format!(
                    "{current} tier unavailable: {}",
                    if troubles.is_empty() {
                        "no usable entries".into()
                    } else {
                        troubles.join("; ")
                    }
                ));
            }
            tier = current.smaller();
        }
        reason
    }
}

impl Router {
    /// Serves a task: its answer with any secrets the prompt lost put back,
    /// or why it could not be served.
    pub async fn run(
        &self,
        request: TaskRequest,
        cancel: CancellationToken,
        progress: OnProgress<'_>,
    ) -> Result<Answer, RouteError> {
        // The path rule keeping the document local when the task begins
        // plans it; whatever is put in force later stops its next attempt.
        let kept_local = (self.rules.now()).keeps_local(request.origin.document.as_deref());
        match (
            self.route(&request, kept_local.as_deref(), cancel, progress)
                .await,
            kept_local,
        ) {
            (Ok(mut answer), _) => {
                if request.redact {
                    answer.text = redact::restore(&answer.text, &request.sources());
                }
                Ok(answer)
            }
            (Err(RouteError::NothingHealthy { tried, .. }), Some(rule)) => {
                Err(RouteError::KeptLocal { rule, tried })
            }
            (Err(RouteError::LocalOnly(_)), Some(rule)) => Err(RouteError::KeptLocal {
                rule,
                tried: Vec::new(),
            }),
            (Err(error), _) => Err(error),
        }
    }

    async fn route(
        &self,
        request: &TaskRequest,
        kept_local: Option<&str>,
        cancel: CancellationToken,
        progress: OnProgress<'_>,
    ) -> Result<Answer, RouteError> {
        let kind = request.kind;
        let profile = self.profile(kind);
        let mut run = RunState::begin(&profile, request);
        self.resilience.verdicts.refresh().await;
        let ask = Ask::task(kind)
            .pinned(request.pin.as_ref())
            .kept_local(kept_local);
        let mut plan = self.plan(ask);
        if plan.refused_by_local_only() {
            return Err(RouteError::LocalOnly(kind.as_str()));
        }
        let mut tried = Vec::new();
        // Entries that said the prompt is too long get it again, trimmed (less
        // of the code around the selection, never the selection itself), once
        // no larger-context entry could serve: half the budget each pass, down
        // to an eighth. A conversation from the gateway is never trimmed.
        loop {
            let pass = match self
                .walk(&plan, request, &profile, &mut run, &cancel, progress)
                .await
            {
                Ok(answer) => {
                    let mut answer = answer;
                    tried.append(&mut answer.attempts);
                    answer.attempts = tried;
                    return Ok(answer);
                }
                Err(Walked::Stop(error)) => return Err(error),
                Err(Walked::Exhausted(pass)) => pass,
            };
            tried.extend(pass.tried);
            if let Some(rule) = pass.forbidden {
                return Err(run.stopped_by(rule, tried));
            }
            if !trims_further(&pass.too_long, request, &profile, run.input_scale) {
                break;
            }
            run.input_scale /= 2.0;
            tracing::info!(
                task = kind.as_str(),
                "prompt too long for every entry that could take it; trimming it to {:.0} % of the input budget",
                run.input_scale * 100.0
            );
            plan.keep_only(&pass.too_long);
        }
        Err(RouteError::NothingHealthy {
            kind: kind.as_str(),
            tried,
            retry_later: run.retry_later,
            partial: run.partial,
        })
    }

    /// One pass over the plan: the first answer, a reason to stop, or what
    /// every candidate did.
    async fn walk(
        &self,
        plan: &Plan,
        request: &TaskRequest,
        profile: &TaskProfile,
        run: &mut RunState,
        cancel: &CancellationToken,
        progress: OnProgress<'_>,
    ) -> Result<Answer, Walked> {
        let mut pass = Pass::default();
        let candidates = plan.candidates();
        let mut already_tried = vec![false; candidates.len()];
        for (i, turn) in plan.walk() {
            let candidate = match turn {
                _ if already_tried[i] => continue,
                Turn::Try(candidate) => candidate,
                Turn::Skipped(candidate, skip) => {
                    pass.skipped(candidate, skip, run);
                    continue;
                }
            };
            run.alternative = candidates[i + 1..].iter().any(Candidate::usable);
            let (result, served_by) = match self.hedge_for(plan, i, request, profile) {
                Some((j, hedge)) => {
                    let pair = (candidate, hedge);
                    let (result, side, hedge_ran) = self
                        .hedged(pair, request, profile, run, (cancel, progress))
                        .await;
                    already_tried[j] = hedge_ran.tried();
                    (result, pass.after_race(pair, side, hedge_ran, profile))
                }
                None => {
                    let lane = Lane::alone(cancel, progress);
                    let result = self
                        .serve_entry(candidate, request, profile, run, lane)
                        .await;
                    (result, candidate)
                }
            };
            match result {
                Ok((text, usage)) => {
                    return Ok(self.answered(plan, &served_by, pass, text, usage, request.kind));
                }
                Err(failure) => pass.failed(&served_by, failure, request.kind)?,
            }
        }
        self.publish();
        Err(Walked::Exhausted(pass))
    }

    /// Interactive tasks race a slow entry against the next usable one of
    /// its tier (never when the caller pinned one entry).
    fn hedge_for<'p>(
        &self,
        plan: &'p Plan,
        i: usize,
        request: &TaskRequest,
        profile: &TaskProfile,
    ) -> Option<(usize, Cleared<'p>)> {
        if !profile.hedge || matches!(request.pin, Some(Pin::Entry(_))) {
            return None;
        }
        plan.next_in_tier(i)
    }

    /// Serves `primary`, hedged by `hedge` after the first-token ceiling.
    async fn hedged(
        &self,
        (primary, hedge): (Cleared<'_>, Cleared<'_>),
        request: &TaskRequest,
        profile: &TaskProfile,
        run: &mut RunState,
        (cancel, progress): (&CancellationToken, OnProgress<'_>),
    ) -> (Result<(String, Usage), Failure>, Side, HedgeRan) {
        let mut hedge_run = run.fork();
        let ceiling = profile.first_token_ceiling();
        let outcome = hedge::race(
            ceiling,
            cancel,
            progress,
            |side| self.contend(primary, request, profile, run, side),
            |side| {
                tracing::info!(
                    "{} has no first token after {:.1} s; hedging with {}",
                    primary.entry,
                    ceiling.as_secs_f64(),
                    hedge.entry
                );
                self.contend(hedge, request, profile, &mut hedge_run, side)
            },
        )
        .await;
        run.absorb(hedge_run);
        outcome
    }

    /// Serves one side of a hedged race.
    async fn contend(
        &self,
        candidate: Cleared<'_>,
        request: &TaskRequest,
        profile: &TaskProfile,
        run: &mut RunState,
        side: Contender<'_>,
    ) -> Result<(String, Usage), Failure> {
        let forward = |event| side.forward(event);
        let lane = Lane {
            cancel: &side.cancel,
            progress: &forward,
            racer: Some(&side.racer),
        };
        self.serve_entry(candidate, request, profile, run, lane)
            .await
    }

    /// The answer, its route recorded as the task kind's.
    fn answered(
        &self,
        plan: &Plan,
        served: &Candidate,
        pass: Pass,
        text: String,
        usage: Usage,
        kind: TaskKind,
    ) -> Answer {
        let route = Route {
            provider: served.entry.provider.clone(),
            model: served.entry.model.clone(),
            tier: served.tier,
            downshifted_from: (served.tier != plan.first_tier()).then_some(plan.first_tier()),
            reason: pass.why_moved(plan, served),
        };
        tracing::info!(
            task = kind.as_str(),
            "served by {} ({} tier), {} input + {} output tokens",
            served.entry,
            served.tier,
            usage.input_tokens,
            usage.output_tokens
        );
        self.served(kind, route.clone());
        Answer {
            text,
            route,
            usage,
            attempts: pass.tried,
        }
    }
}

/// Whether a prompt some entries found too long can be sent again trimmed
/// to half its budget: it is rendered from parts (a gateway conversation is
/// never trimmed), not already down to the least, and half the budget
/// really cuts something (else the same prompt would fail again).
fn trims_further(
    too_long: &[ModelRef],
    request: &TaskRequest,
    profile: &TaskProfile,
    scale: f64,
) -> bool {
    let rendered = |scale: f64| {
        let budget = (profile.input_tokens as f64 * scale) as usize;
        chat::render(&request.parts, budget).map_or(usize::MAX, |text| text.len())
    };
    !too_long.is_empty()
        && request.messages.is_none()
        && scale > MIN_INPUT_SCALE
        && rendered(scale / 2.0) < rendered(scale)
}

impl Pass {
    /// Notes a candidate the plan skipped, with why where it matters.
    fn skipped(&mut self, candidate: &Candidate, skip: &Skip, run: &mut RunState) {
        match skip {
            Skip::KeptLocal(_) | Skip::LocalOnly | Skip::LocalFirst => {}
            Skip::NoKey(_) => self.note(candidate, format!("skipped: {skip}"), false),
            Skip::Unhealthy(_) | Skip::Verdict(_) => {
                self.note(candidate, format!("skipped: {skip}"), true)
            }
            Skip::BreakerOpen { .. } | Skip::Paused { .. } => {
                // Temporary: the task may wait for the breaker to close.
                run.retry_later = true;
                self.note(candidate, skip.to_string(), true);
            }
        }
    }

    /// Notes an attempt a rule put in force since the task began kept back.
    fn forbidden(&mut self, candidate: &Candidate, rule: String) {
        self.note(candidate, format!("not sent: {rule}"), false);
        self.forbidden = Some(rule);
    }

    /// Notes what a race showed; returns the side that served.
    fn after_race<'c>(
        &mut self,
        (primary, hedge): (Cleared<'c>, Cleared<'c>),
        side: Side,
        hedge_ran: HedgeRan,
        profile: &TaskProfile,
    ) -> Cleared<'c> {
        match hedge_ran {
            HedgeRan::Failed(Failure::Failed(failed)) => {
                self.note(&hedge, format!("hedge: {}", failed.reason), true)
            }
            HedgeRan::Failed(Failure::Forbidden(rule)) => self.forbidden(&hedge, rule),
            _ => {}
        }
        match side {
            Side::Primary => primary,
            Side::Hedge => {
                let outcome = format!(
                    "slow: no first token within {:.1} s; the hedge {} answered first",
                    profile.first_token_ceiling().as_secs_f64(),
                    hedge.entry
                );
                self.note(&primary, outcome, true);
                hedge
            }
        }
    }

    /// Notes a failed candidate; a refusal or a cancel stops the walk.
    fn failed(
        &mut self,
        served: &Candidate,
        failure: Failure,
        kind: TaskKind,
    ) -> Result<(), Walked> {
        let failed = match failure {
            Failure::Cancelled => return Err(Walked::Stop(RouteError::Cancelled)),
            Failure::OverBudget(e) => {
                self.note(served, format!("skipped: {e}"), false);
                return Ok(());
            }
            Failure::Unjoinable(why) => {
                self.note(served, why.0, true);
                return Ok(());
            }
            Failure::Forbidden(rule) => {
                // A local entry later in the plan may still serve.
                self.forbidden(served, rule);
                return Ok(());
            }
            Failure::Failed(failed) => failed,
        };
        tracing::warn!(
            task = kind.as_str(),
            "{} ({} tier) failed: {}",
            served.entry,
            served.tier,
            failed.reason
        );
        match failed.class {
            Some(ErrorClass::Fatal(Fatal::Refusal)) => {
                return Err(Walked::Stop(RouteError::Refused {
                    by: served.entry.to_string(),
                    reason: failed.reason,
                }));
            }
            Some(ErrorClass::Fatal(Fatal::ContextLength)) => {
                self.too_long.push(served.entry.clone())
            }
            _ => {}
        }
        self.note(served, failed.reason, true);
        Ok(())
    }
}

/// How a pass over the plan ended without an answer.
enum Walked {
    Stop(RouteError),
    Exhausted(Pass),
}
