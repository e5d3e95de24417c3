//! Who may serve a task now: one plan, asked by everything that needs the
//! answer. `run` tries its candidates in order; status and the runbook call
//! the first usable one "now"; canaries, history, the gateway's `/v1/models`
//! and the probe targets list the same entries. Nobody else re-derives it
//! (ARCHITECTURE.md invariant 7).

use std::fmt;

use super::Router;
use super::request::Pin;
use crate::config::Config;
use crate::entry::{ChainEntry, LOCAL, ModelRef};
use crate::resilience::breaker::Phase;
use crate::task::{TaskKind, Tier};

/// Why a candidate may not serve now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Its provider's key variable is unset.
    NoKey(String),
    LocalOnly,
    /// Its beacon judges it too slow or degraded for the task.
    Unhealthy(String),
    /// A user request found it slow, degraded or overloaded, and no canary
    /// has found it healthy since (shared by every process).
    Verdict(String),
    /// Its breaker is open (shared by every process).
    BreakerOpen {
        reason: String,
        retry_in_s: u64,
    },
    /// A rate limit paused it (for every process) past the task's wait budget.
    Paused {
        for_s: u64,
    },
}

impl Skip {
    /// A judged entry still serves when no other entry can.
    pub fn last_resort(&self) -> bool {
        matches!(self, Skip::Verdict(_))
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::NoKey(var) => write!(f, "no API key in ${var}"),
            Skip::LocalOnly => f.write_str("local-only mode"),
            Skip::Unhealthy(reason) | Skip::Verdict(reason) => f.write_str(reason),
            Skip::BreakerOpen { reason, retry_in_s } => {
                write!(f, "circuit open ({reason}), next probe in {retry_in_s} s")
            }
            Skip::Paused { for_s } => write!(f, "paused by a rate limit for {for_s} s more"),
        }
    }
}

/// One entry of a plan, in the order it would be tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The model that would answer (the local engine as `local/<model>`).
    pub entry: ModelRef,
    pub tier: Tier,
    pub skip: Option<Skip>,
}

impl Candidate {
    pub fn usable(&self) -> bool {
        self.skip.is_none()
    }
}

/// The candidates for one task, its own (or pinned) tier first, then each
/// smaller tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub first_tier: Tier,
    pub candidates: Vec<Candidate>,
}

impl Plan {
    /// The candidates in the order a request tries them: the usable ones in
    /// plan order, then the judged ones as a last resort.
    pub fn order(&self) -> impl Iterator<Item = &Candidate> {
        let usable = self.candidates.iter().filter(|c| c.usable());
        let last = self
            .candidates
            .iter()
            .filter(|c| c.skip.as_ref().is_some_and(Skip::last_resort));
        usable.chain(last)
    }

    /// The entry a request would try first.
    pub fn now(&self) -> Option<&Candidate> {
        self.order().next()
    }

    /// The entry after that.
    pub fn next(&self) -> Option<&Candidate> {
        self.order().nth(1)
    }
}

/// The distinct entries of the tier chains, large to small, in chain order
/// (the gateway's model list, the probe targets).
pub fn chain_entries(config: &Config) -> Vec<ChainEntry> {
    let mut entries: Vec<ChainEntry> = Vec::new();
    for tier in [Tier::Large, Tier::Medium, Tier::Small] {
        for entry in config.tiers.get(tier) {
            if !entries.contains(entry) {
                entries.push(entry.clone());
            }
        }
    }
    entries
}

impl Router {
    /// The entries of `tier` that can serve `kind` at all, as the models that
    /// would answer. The local engine never serves refactors.
    pub(crate) fn chain(&self, tier: Tier, kind: TaskKind) -> Vec<ModelRef> {
        self.config
            .tiers
            .get(tier)
            .iter()
            .filter_map(|entry| match entry {
                ChainEntry::Remote(model) => Some(model.clone()),
                ChainEntry::Local if kind == TaskKind::Refactor => None,
                ChainEntry::Local => Some(self.local_model()),
            })
            .collect()
    }

    /// The local engine's entry: `local/<loaded model>`.
    pub(crate) fn local_model(&self) -> ModelRef {
        let name = self
            .local
            .model()
            .map_or_else(|| LOCAL.to_owned(), |m| m.name);
        ModelRef::new(LOCAL, name)
    }

    /// The plan for `kind` now, from what this process knows: keys, local-only
    /// mode, beacons, and the breakers as last read from the shared state.
    pub fn candidates(&self, kind: TaskKind, pin: Option<&Pin>) -> Plan {
        let profile = self.profile(kind);
        let first_tier = match pin {
            Some(Pin::Tier(tier)) => *tier,
            Some(Pin::Entry(entry)) => self.tier_of(entry).unwrap_or(profile.tier),
            None => profile.tier,
        };
        let mut candidates = Vec::new();
        let mut tier = Some(first_tier);
        while let Some(current) = tier {
            let entries = match pin {
                Some(Pin::Entry(entry)) => vec![entry.clone()],
                _ => self.chain(current, kind),
            };
            for entry in entries {
                let skip = self.skip(&entry, &profile, kind != TaskKind::Refactor);
                candidates.push(Candidate {
                    entry,
                    tier: current,
                    skip,
                });
            }
            tier = match pin {
                Some(Pin::Entry(_)) => None,
                _ => current.smaller(),
            };
        }
        Plan {
            first_tier,
            candidates,
        }
    }

    pub(super) fn skip(
        &self,
        entry: &ModelRef,
        profile: &crate::task::TaskProfile,
        interactive: bool,
    ) -> Option<Skip> {
        if let Some(var) = self.missing_keys.get(&entry.provider) {
            return Some(Skip::NoKey(var.clone()));
        }
        if self.local_only() && entry.provider != LOCAL {
            return Some(Skip::LocalOnly);
        }
        if let Some(reason) = self.beacons.summary(entry).unhealthy_reason(profile) {
            return Some(Skip::Unhealthy(reason));
        }
        let key = self.key(entry);
        if let Some(verdict) = self.resilience.verdicts.last_known(&key.path())
            && verdict.applies(profile.first_token_ceiling(), interactive)
        {
            return Some(Skip::Verdict(verdict.reason));
        }
        if let Some((Phase::Open, reason, retry_in)) =
            self.resilience.breakers.last_known(&key.breaker_key())
        {
            return Some(Skip::BreakerOpen {
                reason,
                retry_in_s: retry_in.as_secs(),
            });
        }
        match self.resilience.governor.paused_for(&key.quota_key()) {
            Some(left) if left > profile.wait_budget() => Some(Skip::Paused {
                for_s: left.as_secs(),
            }),
            _ => None,
        }
    }

    /// The first tier whose chain lists this entry.
    fn tier_of(&self, entry: &ModelRef) -> Option<Tier> {
        [Tier::Large, Tier::Medium, Tier::Small]
            .into_iter()
            .find(|tier| {
                self.config
                    .tiers
                    .get(*tier)
                    .iter()
                    .any(|e| e.remote() == Some(entry))
            })
    }
}
