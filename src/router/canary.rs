//! Canaries: small known requests the server sends itself, so that recovery
//! is noticed by a canary rather than by a user's request, and (optionally)
//! so that a primary's silent degradation is seen before users feel it.
//!
//! A canary goes through the same path as any request (breaker admission,
//! governor, beacon), pinned to one entry: for a breaker that has cooled down
//! it is the one half-open probe, and it spends quota like anything else.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Pin, RouteError, Router, TaskRequest};
use crate::context::chat::PromptParts;
use crate::entry::{EntryKey, LOCAL, ModelRef};
use crate::resilience::breaker::Phase;
use crate::providers::{ChatMessage, Role};
use crate::task::{TaskKind, Tier};

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
    /// Sends the canaries due now: one to each entry whose breaker has cooled
    /// down (the half-open probe), and with `watch_primaries` one to the first
    /// remote entry of each tier.
    pub async fn canary_round(&self, watch_primaries: bool) -> Vec<CanaryResult> {
        self.refresh_shared().await;
        let mut due: Vec<(ModelRef, &'static str)> = Vec::new();
        for breaker in self.shared_views().breakers {
            if breaker.phase != Phase::HalfOpen {
                continue;
            }
            if let Some(key) = EntryKey::parse_path(&breaker.key)
                && self.providers.contains_key(&key.model.provider)
            {
                due.push((key.model, "breaker recovery check"));
            }
        }
        if watch_primaries {
            for tier in [Tier::Large, Tier::Medium] {
                let primary = self.chain(tier, TaskKind::Explain).into_iter().find(|e| {
                    e.provider != LOCAL && !self.missing_keys.contains_key(&e.provider)
                });
                if let Some(entry) = primary
                    && !due.iter().any(|(e, _)| *e == entry)
                {
                    due.push((entry, "primary watch"));
                }
            }
        }
        let mut results = Vec::new();
        for (entry, reason) in due {
            if let Some(result) = self.canary(&entry, reason).await {
                results.push(result);
            }
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

    /// One canary; `None` when it was not sent (another process holds the probe).
    async fn canary(&self, entry: &ModelRef, reason: &str) -> Option<CanaryResult> {
        let request = TaskRequest {
            messages: Some(vec![ChatMessage {
                role: Role::User,
                content: format!("Reply with exactly {TOKEN} and nothing else."),
            }]),
            pin: Some(Pin::Entry(entry.clone())),
            max_tokens: Some(16),
            ..TaskRequest::new(
                TaskKind::Explain,
                "You are a health check.",
                PromptParts::default(),
            )
        };
        let started = Instant::now();
        let outcome = self.run(request, CancellationToken::new(), &|_| {}).await;
        let (ok, error) = match outcome {
            Ok(answer) if answer.text.contains(TOKEN) => (true, None),
            Ok(answer) => (false, Some(format!("wrong answer: {:.60}", answer.text))),
            Err(RouteError::NothingHealthy { tried, .. })
                if tried.iter().all(|a| a.outcome.starts_with("circuit open")) =>
            {
                return None;
            }
            Err(e) => (false, Some(e.to_string())),
        };
        tracing::info!(
            "canary to {entry} ({reason}): {}",
            error.as_deref().unwrap_or("ok")
        );
        Some(CanaryResult {
            at_ms: crate::resilience::park::now_ms(),
            provider: entry.provider.clone(),
            model: entry.model.clone(),
            ok,
            latency_ms: started.elapsed().as_millis() as u64,
            error,
            reason: reason.into(),
        })
    }

    pub fn canaries(&self) -> Vec<CanaryResult> {
        self.canaries.lock().expect("canaries lock").clone()
    }
}

/// Keeps a front end's shared view fresh and sends canaries: every `tick`,
/// re-read breakers and quota and check cooled-down breakers; every
/// `primary_every` (when set), watch the primaries. `current` gives the router
/// in force (the language server rebuilds it on configuration changes).
pub async fn upkeep(
    current: impl Fn() -> Arc<Router>,
    tick: Duration,
    primary_every: Option<Duration>,
    on_tick: impl Fn(&Router),
) {
    let mut last_primary_watch = Instant::now();
    loop {
        tokio::time::sleep(tick).await;
        let router = current();
        let watch = primary_every.is_some_and(|every| last_primary_watch.elapsed() >= every);
        if watch {
            last_primary_watch = Instant::now();
        }
        router.canary_round(watch).await;
        on_tick(&router);
    }
}
