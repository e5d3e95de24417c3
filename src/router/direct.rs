//! One request of a caller's own to one cleared remote entry, outside the
//! routed path (`switchyard probe` times raw providers). The provider stays
//! inside the router: the caller gets a [`Direct`], which asks the rules in
//! force and leaves its line in the outbound audit on every send, as every
//! remote attempt does (ARCHITECTURE.md invariant 17, invariant 25).

use std::sync::Arc;

use futures::future::BoxFuture;

use super::Router;
use super::plan::Cleared;
use crate::entry::ModelRef;
use crate::privacy::audit::{AuditLog, AuditRecord};
use crate::privacy::rules::RulesInForce;
use crate::providers::{
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

impl Router {
    /// The cleared candidate as a provider of `front_end`'s own.
    pub fn direct(&self, cleared: Cleared<'_>, front_end: &'static str) -> Option<Direct> {
        Some(Direct {
            entry: cleared.entry.clone(),
            provider: self.provider(cleared)?,
            rules: self.rules.clone(),
            audit: self.audit.clone(),
            front_end,
        })
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
        if let Some(rule) = self.rules.now().local_only.clone() {
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
        at_ms: crate::clock::now_ms(),
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
