//! Who may serve a request now: one plan, asked by everything that needs the
//! answer. It takes what the request brings ([`Ask`]: the task, a pin, a
//! path rule that keeps the document local) and what this process knows
//! (keys, local-only mode, the local-first window, beacons, verdicts, the
//! shared breakers and quota), and gives typed candidates with their keys.
//! Only a plan clears a candidate ([`Cleared`]), and a provider is handed
//! out only for a cleared one, so nothing leaves the machine without a plan:
//! `run`, remote autocomplete, canaries and probes all send through one.
//! Status and the runbook call the first cleared one "now"; canaries, history
//! and status health list the same entries; the gateway's `/v1/models` lists
//! the chains it is made from. Nobody else re-derives it (ARCHITECTURE.md
//! invariants 7 and 17).

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::Router;
use super::request::Pin;
use switchyard_base::entry::{ChainEntry, EntryKey, LOCAL, ModelRef};
use switchyard_base::task::{TaskKind, TaskProfile, Tier};
use switchyard_config::Config;
use switchyard_providers::Provider;
use switchyard_resilience::breaker::Phase;

/// Why a candidate may not serve now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// A path rule keeps the request's document on the machine (the rule).
    KeptLocal(String),
    /// Its provider's key variable is unset.
    NoKey(String),
    LocalOnly,
    /// The local-first window is open: completions stay local.
    LocalFirst,
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

/// What a request brings to the plan.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    pub kind: TaskKind,
    /// Serve from this tier or entry rather than the task's own tier.
    pub pin: Option<&'a Pin>,
    /// The path rule that keeps the request's document on the machine.
    pub kept_local: Option<&'a str>,
}

impl<'a> Ask<'a> {
    pub fn task(kind: TaskKind) -> Ask<'a> {
        Ask {
            kind,
            pin: None,
            kept_local: None,
        }
    }

    pub fn pinned(self, pin: Option<&'a Pin>) -> Ask<'a> {
        Ask { pin, ..self }
    }

    pub fn kept_local(self, rule: Option<&'a str>) -> Ask<'a> {
        Ask {
            kept_local: rule,
            ..self
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::KeptLocal(rule) => write!(f, "kept local by {rule}"),
            Skip::NoKey(var) => write!(f, "no API key in ${var}"),
            Skip::LocalOnly => f.write_str("local-only mode"),
            Skip::LocalFirst => f.write_str("the local-first window is open"),
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
    /// Its breaker and quota in the shared state.
    pub key: EntryKey,
    pub tier: Tier,
    /// Why it may not serve this request: the request's own rules (a path
    /// rule, local-only mode, the local-first window) before its standing.
    pub skip: Option<Skip>,
    /// What stands in the way of the entry itself, whoever asks (a key, its
    /// health, its breaker, its quota, a verdict).
    pub standing: Option<Skip>,
}

impl Candidate {
    pub fn usable(&self) -> bool {
        self.skip.is_none()
    }
}

/// A candidate a plan cleared to be sent to: the only key to a provider
/// ([`Providers::get`]). Its field is private, so only this module makes one,
/// and only from a plan's judgement (ARCHITECTURE.md invariants 7 and 17).
#[derive(Clone, Copy, Debug)]
pub struct Cleared<'p>(&'p Candidate);

impl Deref for Cleared<'_> {
    type Target = Candidate;

    fn deref(&self) -> &Candidate {
        self.0
    }
}

/// The configured providers, handed out only for a cleared candidate.
pub(super) struct Providers(HashMap<String, Arc<dyn Provider>>);

impl Providers {
    pub(super) fn new(providers: HashMap<String, Arc<dyn Provider>>) -> Providers {
        Providers(providers)
    }

    pub(super) fn get(&self, cleared: Cleared<'_>) -> Option<Arc<dyn Provider>> {
        self.0.get(&cleared.entry.provider).cloned()
    }
}

/// How one pass over a plan meets a candidate.
pub(super) enum Turn<'p> {
    Try(Cleared<'p>),
    Skipped(&'p Candidate, &'p Skip),
}

/// The candidates for one task, its own (or pinned) tier first, then each
/// smaller tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    first_tier: Tier,
    candidates: Vec<Candidate>,
    /// Judged entries serve when nothing else can, except where the local
    /// engine follows them (remote autocomplete).
    last_resorts: bool,
}

impl Plan {
    pub fn first_tier(&self) -> Tier {
        self.first_tier
    }

    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    fn is_last_resort(&self, candidate: &Candidate) -> bool {
        self.last_resorts && candidate.skip.as_ref().is_some_and(Skip::last_resort)
    }

    /// The candidates in the order a request tries them: the usable ones in
    /// plan order, then the judged ones as a last resort.
    pub fn order(&self) -> impl Iterator<Item = Cleared<'_>> {
        let usable = self.candidates.iter().filter(|c| c.usable());
        let last = self.candidates.iter().filter(|c| self.is_last_resort(c));
        usable.chain(last).map(Cleared)
    }

    /// The entry a request would try first.
    pub fn now(&self) -> Option<Cleared<'_>> {
        self.order().next()
    }

    /// The entry after that.
    pub fn next(&self) -> Option<Cleared<'_>> {
        self.order().nth(1)
    }

    /// One pass over the plan, each candidate by its index: every one in plan
    /// order, tried or skipped with why, then the judged ones tried as a last
    /// resort (a verdict keeps an entry from being the first choice, never the
    /// only one).
    pub(super) fn walk(&self) -> Vec<(usize, Turn<'_>)> {
        let each = self.candidates.iter().enumerate().map(|(i, c)| {
            let turn = match &c.skip {
                None => Turn::Try(Cleared(c)),
                Some(skip) => Turn::Skipped(c, skip),
            };
            (i, turn)
        });
        let last = self.candidates.iter().enumerate();
        let last = last
            .filter(|(_, c)| self.is_last_resort(c))
            .map(|(i, c)| (i, Turn::Try(Cleared(c))));
        each.chain(last).collect()
    }

    /// The next usable candidate after the `i`th in its tier: what a slow
    /// entry is raced against.
    pub(super) fn next_in_tier(&self, i: usize) -> Option<(usize, Cleared<'_>)> {
        let tier = self.candidates[i].tier;
        (i + 1..self.candidates.len())
            .map(|j| (j, &self.candidates[j]))
            .find(|(_, c)| c.tier == tier && c.usable())
            .map(|(j, c)| (j, Cleared(c)))
    }

    /// Keeps only the candidates for `entries` (a trimmed prompt goes to them again).
    pub(super) fn keep_only(&mut self, entries: &[ModelRef]) {
        self.candidates.retain(|c| entries.contains(&c.entry));
    }

    /// Whether local-only mode rules out every candidate: the task needs a
    /// remote model, and nothing is tried.
    pub fn refused_by_local_only(&self) -> bool {
        !self.candidates.is_empty()
            && self
                .candidates
                .iter()
                .all(|c| c.skip == Some(Skip::LocalOnly))
    }

    /// The remote entries a canary (a fixed prompt, no user text) may go to:
    /// all but those without a key and those nothing may leave for.
    pub(super) fn canary_targets(&self) -> impl Iterator<Item = Cleared<'_>> {
        self.candidates
            .iter()
            .filter(|c| {
                let closed = matches!(
                    c.skip,
                    Some(Skip::NoKey(_) | Skip::LocalOnly | Skip::KeptLocal(_))
                );
                !c.entry.is_local() && !closed
            })
            .map(Cleared)
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

    /// The plan for what `ask` brings, now, from what this process knows:
    /// keys, local-only mode, beacons, verdicts, and the breakers and quota
    /// as last read from the shared state.
    pub(crate) fn plan(&self, ask: Ask<'_>) -> Plan {
        let profile = self.profile(ask.kind);
        let first_tier = match ask.pin {
            Some(Pin::Tier(tier)) => *tier,
            Some(Pin::Entry(entry)) => self.tier_of(entry).unwrap_or(profile.tier),
            None => profile.tier,
        };
        let mut candidates = Vec::new();
        let mut tier = Some(first_tier);
        while let Some(current) = tier {
            let entries = match ask.pin {
                Some(Pin::Entry(entry)) => vec![entry.clone()],
                _ if ask.kind == TaskKind::Autocomplete => self.remote_autocomplete(),
                _ => self.chain(current, ask.kind),
            };
            for entry in entries {
                candidates.push(self.candidate(entry, current, &ask, &profile));
            }
            tier = match ask.pin {
                Some(Pin::Entry(_)) => None,
                _ if ask.kind == TaskKind::Autocomplete => None,
                _ => current.smaller(),
            };
        }
        Plan {
            first_tier,
            candidates,
            last_resorts: ask.kind != TaskKind::Autocomplete,
        }
    }

    fn candidate(
        &self,
        entry: ModelRef,
        tier: Tier,
        ask: &Ask<'_>,
        profile: &TaskProfile,
    ) -> Candidate {
        let key = self.key(&entry);
        let ruled_out = match ask.kept_local {
            _ if entry.is_local() => None,
            Some(rule) => Some(Skip::KeptLocal(rule.to_owned())),
            None if self.local_only() => Some(Skip::LocalOnly),
            None if ask.kind == TaskKind::Autocomplete && self.local_first_now() => {
                Some(Skip::LocalFirst)
            }
            None => None,
        };
        let standing = self.standing(&entry, &key, profile, ask.kind != TaskKind::Refactor);
        Candidate {
            skip: ruled_out.or_else(|| standing.clone()),
            standing,
            entry,
            key,
            tier,
        }
    }

    /// The remote entries `autocomplete.chain` puts before `local`.
    fn remote_autocomplete(&self) -> Vec<ModelRef> {
        self.config
            .autocomplete
            .chain
            .iter()
            .take_while(|entry| !entry.is_local())
            .filter_map(ChainEntry::remote)
            .cloned()
            .collect()
    }

    fn local_first_now(&self) -> bool {
        let window = &self.config.autocomplete.local_first;
        window.as_ref().is_some_and(|w| w.is_open_now())
    }

    /// What stands in the way of the entry itself, whoever asks: a missing
    /// key, its health, its breaker, its quota, and last a verdict (which
    /// only makes it a last resort, so it must not hide a harder block).
    pub(super) fn standing(
        &self,
        entry: &ModelRef,
        key: &EntryKey,
        profile: &TaskProfile,
        interactive: bool,
    ) -> Option<Skip> {
        if let Some(var) = self.missing_keys.get(&entry.provider) {
            return Some(Skip::NoKey(var.clone()));
        }
        if let Some(reason) = self.beacons.summary(entry).unhealthy_reason(profile) {
            return Some(Skip::Unhealthy(reason));
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
            Some(left) if left > profile.wait_budget() => {
                return Some(Skip::Paused {
                    for_s: left.as_secs(),
                });
            }
            _ => {}
        }
        self.verdict_on(key, profile, interactive)
            .map(Skip::Verdict)
    }

    /// The shared verdict on the entry, when it applies to this task.
    pub(super) fn verdict_on(
        &self,
        key: &EntryKey,
        profile: &TaskProfile,
        interactive: bool,
    ) -> Option<String> {
        let verdict = self.resilience.verdicts.last_known(&key.path())?;
        verdict
            .applies(profile.first_token_ceiling(), interactive)
            .then_some(verdict.reason)
    }

    /// Every entry the plans of this configuration can name, once each, in
    /// tier order (explain's chains, then remote autocomplete's), each judged
    /// as for explain: what status health, history and canaries list.
    pub(crate) fn planned_entries(&self) -> Plan {
        let ask = Ask::task(TaskKind::Explain);
        let mut plan = self.plan(ask.pinned(Some(&Pin::Tier(Tier::Large))));
        let profile = self.profile(TaskKind::Explain);
        for entry in self.remote_autocomplete() {
            if !plan.candidates.iter().any(|c| c.entry == entry) {
                let tier = self.profile(TaskKind::Autocomplete).tier;
                plan.candidates
                    .push(self.candidate(entry, tier, &ask, &profile));
            }
        }
        plan
    }

    /// The plan `switchyard probe` sends by: each distinct remote entry of
    /// the tier chains (of provider `only`, when given), ruled out in
    /// local-only mode and without its key. Health is what a probe measures,
    /// so nothing else rules an entry out.
    pub(crate) fn probe_plan(&self, only: Option<&str>) -> Plan {
        let candidates = chain_entries(&self.config)
            .iter()
            .filter_map(ChainEntry::remote)
            .filter(|entry| only.is_none_or(|name| name == entry.provider))
            .map(|entry| {
                let standing = self
                    .missing_keys
                    .get(&entry.provider)
                    .map(|var| Skip::NoKey(var.clone()));
                let local_only = self.local_only().then_some(Skip::LocalOnly);
                Candidate {
                    key: self.key(entry),
                    tier: self.tier_of(entry).unwrap_or(Tier::Large),
                    skip: local_only.or_else(|| standing.clone()),
                    standing,
                    entry: entry.clone(),
                }
            })
            .collect();
        Plan {
            first_tier: Tier::Large,
            candidates,
            last_resorts: false,
        }
    }

    /// The provider a cleared candidate is sent to.
    pub(crate) fn provider(&self, cleared: Cleared<'_>) -> Option<Arc<dyn Provider>> {
        self.providers.get(cleared)
    }

    /// The entry's identity in the shared state (its account's breaker and quota).
    pub(crate) fn key(&self, entry: &ModelRef) -> EntryKey {
        let account = self
            .provider_config(&entry.provider)
            .map_or(entry.provider.as_str(), |p| p.account(&entry.provider));
        EntryKey::new(account, entry.clone())
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
