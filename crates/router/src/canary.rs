//! Canaries: small known requests the server sends itself, so that recovery
//! is noticed by a canary rather than by a user's request, and (optionally)
//! so that a primary's silent degradation is seen before users feel it.
//!
//! A canary is never user traffic: it skips the breaker's admission and the
//! plan, and never changes a task's route, the status's routes or the
//! editor's messages. It is deadlined, governed and recorded in the beacon
//! like any attempt, and its verdict is shared: a healthy canary closes the
//! entry's breaker and ends its health verdict for every process.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Router;
use super::attempt::{self, Beaconed, Deadlines, Failure};
use super::plan::{Cleared, Plan};
use super::seam::{Form, Seam};
use switchyard_base::entry::ModelRef;
use switchyard_base::task::{TaskKind, Tier};
use switchyard_config::follow::sleep_or_change;
use switchyard_providers::{ChatMessage, ChatRequest, Role, Usage};
use switchyard_resilience::breaker::Phase;

/// The answer must contain this.
pub const TOKEN: &str = "SWITCHYARD-CANARY-OK";
const MAX_KEPT: usize = 50;

#[derive(Clone, Debug, PartialEq)]
pub struct CanaryResult {
    pub at_ms: u64,
    pub provider: String,
    pub model: String,
    pub ok: bool,
    pub latency_ms: u64,
    /// Why it failed.
    pub error: Option<String>,
    /// What sent it: a breaker's recovery check or the primary's watch.
    pub reason: String,
}

impl Router {
    /// Sends the canaries due now, one per entry per canary interval across
    /// every process: to each entry out of user traffic (a breaker open or
    /// cooled down, a health verdict), and with `watch_primaries` to the first
    /// remote entry of the large and medium tiers.
    pub async fn canary_round(&self, watch_primaries: bool) -> Vec<CanaryResult> {
        self.refresh_shared().await;
        // Local-only mode clears no canary: nothing leaves the machine.
        let planned = self.planned_entries();
        let due = self.canaries_due(&planned, watch_primaries);
        let every = Duration::from_millis(self.config.resilience.canary_interval_ms.max(1));
        let mut results = Vec::new();
        for (candidate, reason) in due {
            // Local-only mode put in force during the round: nothing more leaves.
            if self.rules.now().local_only.is_some() {
                break;
            }
            // A provider that said when to come back hears no canary sooner.
            let quota = candidate.key.quota_key();
            self.resilience.governor.refresh(&quota).await;
            if self.resilience.governor.paused_for(&quota).is_some() {
                continue;
            }
            let turn = candidate.key.breaker_key();
            if !self.resilience.breakers.canary_turn(&turn, every).await {
                continue; // another process sends this one
            }
            results.push(self.canary(candidate, reason).await);
        }
        if !results.is_empty() {
            let mut kept = self.canaries.lock().expect("canaries lock");
            kept.extend(results.iter().cloned());
            let excess = kept.len().saturating_sub(MAX_KEPT);
            kept.drain(..excess);
        }
        self.refresh_shared().await;
        results
    }

    /// The plan's remote entries out of user traffic (a breaker not closed,
    /// a health verdict), and with `watch_primaries` the first remote entry
    /// with a key of the large and medium tiers, each once.
    fn canaries_due<'p>(
        &self,
        planned: &'p Plan,
        watch_primaries: bool,
    ) -> Vec<(Cleared<'p>, &'static str)> {
        let entries: Vec<Cleared<'p>> = planned.canary_targets().collect();
        let breakers = self.shared_views().breakers;
        let judged = self.resilience.verdicts.judged();
        let mut due: Vec<(Cleared<'p>, &'static str)> = Vec::new();
        for &candidate in &entries {
            let out = breakers
                .iter()
                .any(|b| b.key == candidate.key.path() && b.phase != Phase::Closed);
            if out {
                due.push((candidate, "breaker recovery check"));
            } else if judged.contains(&candidate.key.path()) {
                due.push((candidate, "verdict recovery check"));
            }
        }
        let primaries = [Tier::Large, Tier::Medium]
            .into_iter()
            .filter(|_| watch_primaries)
            .filter_map(|tier| entries.iter().find(|c| c.tier == tier));
        for primary in primaries {
            if !due.iter().any(|(c, _)| c.entry == primary.entry) {
                due.push((*primary, "primary watch"));
            }
        }
        due
    }

    /// One canary, outside user traffic: no breaker admission, no route, no
    /// status message. It is governed like any request, and its verdict is
    /// shared: a healthy answer within the explain task's first-token ceiling
    /// closes the entry's breaker, ends its health verdict and starts its
    /// beacon afresh; a failed one leaves both as they are.
    async fn canary(&self, candidate: Cleared<'_>, reason: &str) -> CanaryResult {
        let (entry, key) = (&candidate.entry, &candidate.key);
        let started = Instant::now();
        let outcome = self.probe(candidate).await;
        let error = outcome.err();
        match &error {
            None => {
                self.resilience.verdicts.clear(&key.path()).await;
                self.resilience
                    .breakers
                    .record_canary(&key.breaker_key(), true, "")
                    .await;
            }
            Some(why) => {
                self.resilience
                    .breakers
                    .record_canary(&key.breaker_key(), false, why)
                    .await
            }
        }
        tracing::info!(
            "canary to {entry} ({reason}): {}",
            error.as_deref().unwrap_or("ok")
        );
        CanaryResult {
            at_ms: switchyard_base::clock::now_ms(),
            provider: entry.provider.clone(),
            model: entry.model.clone(),
            ok: error.is_none(),
            latency_ms: started.elapsed().as_millis() as u64,
            error,
            reason: reason.into(),
        }
    }

    /// Sends the known-token prompt to `entry`; `Err` says why it is not healthy.
    async fn probe(&self, candidate: Cleared<'_>) -> Result<(), String> {
        let (entry, key) = (&candidate.entry, &candidate.key);
        let unknown = || format!("provider `{}` is not configured", entry.provider);
        let provider = self.providers.get(candidate).ok_or_else(unknown)?;
        let profile = self.profile(TaskKind::Explain);
        let request = known_token_request(entry);
        let quota = self.provider_config(&entry.provider).map(|p| p.quota);
        let deadlines = Deadlines::new(&profile, Instant::now() + profile.total_ceiling(), false);
        let reservation = self
            .resilience
            .governor
            .admit(
                &key.quota_key(),
                TaskKind::Explain,
                quota.unwrap_or_default(),
                32,
                16,
                deadlines.first_token,
            )
            .await
            .map_err(|starved| starved.to_string())?;
        self.audit
            .record(&super::direct::own_prompt(entry, &request, "canary"));
        let mut beacon = Beaconed::new(self.beacons.clone(), entry.clone(), &deadlines);
        let mut seam = Seam::new(Form::Fresh, "", "");
        let (result, rate_limits) = attempt::call(
            provider.as_ref(),
            request,
            (deadlines, &mut seam),
            &mut beacon,
            &CancellationToken::new(),
            &|_| {},
        )
        .await;
        let (first_token, _) = beacon.timing();
        let governor = &self.resilience.governor;
        self.pause_on_retry_after(&key.quota_key(), &result).await;
        governor.observe(&reservation, &rate_limits).await;
        governor
            .settle(reservation, result.as_ref().ok().copied())
            .await;
        // A canary must be as fast as the ceiling an entry was judged slow
        // for (an autocomplete's is far shorter than an explanation's).
        let ceiling = self
            .resilience
            .verdicts
            .last_known(&key.path())
            .and_then(|v| v.ceiling_ms)
            .map_or(profile.first_token_ceiling(), Duration::from_millis)
            .min(profile.first_token_ceiling());
        let verdict = healthy(result, &seam.joined(), first_token, ceiling);
        if verdict.is_ok() {
            // What it did before it recovered says nothing about it now; the
            // canary's own sample (recorded as the guard drops) starts afresh.
            self.beacons.forget(entry);
        }
        drop(beacon);
        verdict
    }

    /// A provider's `retry-after` holds every process off, whoever heard
    /// it: a canary's as much as a request's.
    async fn pause_on_retry_after(&self, quota: &str, result: &Result<Usage, Failure>) {
        if let Err(Failure::Failed(failed)) = result
            && let Some(class) = &failed.class
            && let Some(pause) =
                super::retry::pause_after(&self.resilience.backoff, class, failed, 0)
        {
            self.resilience.governor.pause(quota, pause).await;
        }
    }

    pub fn canaries(&self) -> Vec<CanaryResult> {
        self.canaries.lock().expect("canaries lock").clone()
    }
}

/// The prompt whose one right answer is [`TOKEN`].
fn known_token_request(entry: &ModelRef) -> ChatRequest {
    ChatRequest {
        model: entry.model.clone(),
        system: Some("You are a health check.".into()),
        messages: vec![ChatMessage {
            role: Role::User,
            content: format!("Reply with exactly {TOKEN} and nothing else."),
        }],
        max_tokens: 16,
        temperature: Some(0.0),
    }
}

/// Whether a canary's answer shows a healthy entry: the known token, in time.
fn healthy(
    result: Result<Usage, Failure>,
    text: &str,
    first_token: Option<Duration>,
    ceiling: Duration,
) -> Result<(), String> {
    match result {
        Ok(_) if !text.contains(TOKEN) => Err(format!("wrong answer: {text:.60}")),
        Ok(_) if first_token.is_none_or(|t| t > ceiling) => Err(format!(
            "first token after the {:.1} s ceiling",
            ceiling.as_secs_f64()
        )),
        Ok(_) => Ok(()),
        Err(Failure::Failed(failed)) => Err(failed.reason),
        Err(Failure::Cancelled) => Err("cancelled".into()),
        Err(Failure::OverBudget(e)) => Err(e.to_string()),
        Err(Failure::Unjoinable(why)) => Err(why.0),
        Err(Failure::Forbidden(rule)) => Err(rule),
    }
}

/// Keeps a front end's shared view fresh and sends canaries: every canary
/// interval, re-read breakers and quota and check cooled-down breakers; every
/// primary interval (when set), watch the primaries. `current` gives the
/// router in force (rebuilt on configuration changes); both intervals are read
/// from it at each pass, and a change on `changes` cuts a sleep short.
pub async fn upkeep<T>(
    current: impl Fn() -> Arc<Router>,
    mut changes: Option<watch::Receiver<T>>,
    on_tick: impl Fn(&Router),
) {
    let mut last_primary_watch = Instant::now();
    loop {
        let tick = current().config().resilience.canary_interval_ms;
        if !sleep_or_change(Duration::from_millis(tick), &mut changes).await {
            continue;
        }
        let router = current();
        let primary_ms = router.config().resilience.primary_canary_ms;
        let primary_every = (primary_ms > 0).then(|| Duration::from_millis(primary_ms));
        let watch = primary_every.is_some_and(|every| last_primary_watch.elapsed() >= every);
        if watch {
            last_primary_watch = Instant::now();
        }
        router.canary_round(watch).await;
        on_tick(&router);
    }
}
