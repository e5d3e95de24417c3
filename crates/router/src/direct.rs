//! One request of a caller's own to one cleared remote entry, outside the
//! routed path (`switchyard probe` times raw providers). The provider stays
//! inside the router: the caller gets a [`Direct`], which asks the rules in
//! force and leaves its line in the outbound audit on every send, as every
//! remote attempt does (ARCHITECTURE.md invariant 17, invariant 25).

use std::sync::Arc;

use futures::future::BoxFuture;

use super::Router;
use super::plan::{Cleared, Skip};
use switchyard_base::entry::ModelRef;
use switchyard_privacy::audit::{AuditLog, AuditRecord};
use switchyard_privacy::rules::RulesInForce;
use switchyard_providers::{
    ChatRequest, FailureKind, Provider, ProviderError, ResponseStream, Timeouts,
};

/// A cleared remote entry that sends only what the rules in force let go.
pub struct Direct {
    entry: ModelRef,
    provider: Arc<dyn Provider>,
    rules: RulesInForce,
    audit: Arc<AuditLog>,
    /// What the audit calls the sender (`probe`).
    front_end: &'static str,
}

/// What `switchyard probe` may send to: each distinct remote entry of the
/// tier chains (of one provider, when asked), cleared by the probe plan.
pub struct ProbeRoster {
    pub targets: Vec<Direct>,
    /// Entries ruled out for want of their key, and the variable it lacks.
    pub missing_keys: Vec<(ModelRef, String)>,
    /// Whether the chains name any such entry at all.
    pub chained: bool,
    /// Local-only mode is on: nothing is probed.
    pub local_only: bool,
}

impl Router {
    /// The probe's targets, each a [`Direct`] of the front end `probe`.
    pub fn probe_roster(&self, only: Option<&str>) -> ProbeRoster {
        let plan = self.probe_plan(only);
        let missing_keys = plan
            .candidates()
            .iter()
            .filter_map(|c| match &c.skip {
                Some(Skip::NoKey(var)) => Some((c.entry.clone(), var.clone())),
                _ => None,
            })
            .collect();
        ProbeRoster {
            targets: plan
                .order()
                .filter_map(|cleared| self.direct(cleared, "probe"))
                .collect(),
            missing_keys,
            chained: !plan.candidates().is_empty(),
            local_only: plan.refused_by_local_only(),
        }
    }

    /// The cleared candidate as a provider of `front_end`'s own.
    pub(crate) fn direct(&self, cleared: Cleared<'_>, front_end: &'static str) -> Option<Direct> {
        Some(Direct {
            entry: cleared.entry.clone(),
            provider: self.provider(cleared)?,
            rules: self.rules.clone(),
            audit: self.audit.clone(),
            front_end,
        })
    }
}

impl Direct {
    pub fn entry(&self) -> &ModelRef {
        &self.entry
    }
}

impl Provider for Direct {
    fn name(&self) -> &str {
        self.provider.name()
    }

    fn supports_prefill(&self) -> bool {
        self.provider.supports_prefill()
    }

    fn stream(
        &self,
        request: ChatRequest,
        timeouts: Timeouts,
    ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
        // Its prompt is switchyard's own: no document, so no path rule.
        if let Some(rule) = self.rules.now().forbids(None) {
            let refused = ProviderError::new(
                self.provider.name(),
                FailureKind::Misconfigured,
                format!("not sent: {rule}"),
            );
            return Box::pin(async move { Err(refused) });
        }
        self.audit
            .record(&own_prompt(&self.entry, &request, self.front_end));
        self.provider.stream(request, timeouts)
    }
}

/// The outbound audit's line for a prompt of switchyard's own (a canary's,
/// a probe's), which holds no document.
pub(super) fn own_prompt(entry: &ModelRef, request: &ChatRequest, sender: &str) -> AuditRecord {
    let bytes = request.system.as_ref().map_or(0, String::len)
        + request
            .messages
            .iter()
            .map(|m| m.content.len())
            .sum::<usize>();
    AuditRecord {
        at_ms: switchyard_base::clock::now_ms(),
        task: sender.into(),
        front_end: sender.into(),
        provider: entry.provider.clone(),
        model: entry.model.clone(),
        subject: format!("the {sender}'s own prompt"),
        bytes,
        estimated_tokens: bytes / 4,
        redactions: 0,
    }
}
