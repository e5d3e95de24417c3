//! Which provider and tier serve a task now.
//!
//! `plan.rs` decides who may serve (one plan for routing, autocomplete,
//! status, canaries and history); `run.rs` walks it; `pipeline.rs` serves one
//! entry through the layers that make every attempt deadlined, admitted by
//! its breaker, governed, classified and recorded in its beacon; `retry.rs`
//! decides whether the same entry is tried again and the pipeline acts on it;
//! `hedge.rs` races any two attempts. This file holds the router's state and
//! accessors. The modules point one way and the functions are steps
//! (ARCHITECTURE.md invariant 19).

mod attempt;
mod autocomplete;
pub mod beacon;
pub mod canary;
mod direct;
mod hedge;
pub mod history;
mod judge;
mod lasting;
mod pipeline;
pub mod plan;
mod prompt;
mod request;
mod retry;
mod run;
mod run_state;
mod seam;
pub mod status;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

pub use direct::{Direct, ProbeRoster};
pub use lasting::{Lasting, Learned};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use beacon::Beacons;
use plan::Providers;
use status::{ParkedStatus, Route, Served, StatusReport};
use switchyard_base::entry::LOCAL;
use switchyard_base::task::{TaskKind, TaskProfile, Tier};
use switchyard_config::{Config, ProviderConfig};
use switchyard_privacy::rules::InForce;
use switchyard_providers::local::chat::{EngineSlot, LocalProvider};
use switchyard_providers::{Provider, Secret};
use switchyard_resilience::Resilience;
use switchyard_resilience::breaker::BreakerView;
use switchyard_resilience::governor::MeterView;

pub use request::{Answer, Attempt, OnProgress, Origin, Pin, Progress, RouteError, TaskRequest};

pub struct Router {
    providers: Providers,
    /// Providers left out because their key variable is unset: name -> variable.
    missing_keys: HashMap<String, String>,
    /// The configuration in force, shared with the core that built this
    /// router (not a copy of it).
    config: Arc<Config>,
    /// `config.all_providers()`, resolved once: read on every attempt.
    provider_configs: BTreeMap<String, ProviderConfig>,
    beacons: Arc<Beacons>,
    local: EngineSlot,
    learned: Arc<Learned>,
    status: watch::Sender<StatusReport>,
    resilience: Arc<Resilience>,
    /// Parked tasks, kept by the front end that parked them.
    parked: Arc<Mutex<Vec<ParkedStatus>>>,
    /// The latest canary results, newest last.
    canaries: Arc<Mutex<Vec<canary::CanaryResult>>>,
    audit: Arc<switchyard_privacy::audit::AuditLog>,
    /// Asked by every remote attempt as it sends, not only when its task began.
    rules: switchyard_privacy::rules::RulesInForce,
}

/// What the shared state says, read asynchronously and shown synchronously.
#[derive(Clone, Debug, Default)]
pub(crate) struct SharedViews {
    pub breakers: Vec<BreakerView>,
    pub quota: Vec<MeterView>,
}

/// Builds provider `name` as configured; its key comes from the variable it
/// names. `Err` carries that variable when it is unset or empty. Only the
/// router builds providers: every send it makes asks the rules in force and
/// leaves its audit line (ARCHITECTURE.md invariant 25).
fn build_provider(name: &str, settings: &ProviderConfig) -> Result<Arc<dyn Provider>, String> {
    let key = match &settings.api_key_env {
        Some(var) => Some(Secret::from_env(var).ok_or_else(|| var.clone())?),
        None => None,
    };
    let headers = settings
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(switchyard_providers::build(
        name,
        settings.kind,
        &settings.base_url,
        key,
        headers,
    ))
}

impl Router {
    /// Builds the configured providers; the API keys come from the environment.
    /// `lasting` outlives routers rebuilt on configuration changes.
    pub fn new(config: Arc<Config>, local: EngineSlot, lasting: Lasting) -> Router {
        let mut providers: HashMap<String, Arc<dyn Provider>> = HashMap::new();
        let mut missing_keys = HashMap::new();
        for (name, settings) in config.all_providers() {
            match build_provider(&name, &settings) {
                Ok(provider) => {
                    providers.insert(name, provider);
                }
                Err(var) => {
                    missing_keys.insert(name, var);
                }
            }
        }
        providers.insert(LOCAL.into(), Arc::new(LocalProvider::new(local.clone())));
        Router::assemble(config, providers, missing_keys, local, lasting)
    }

    /// A router of its own over in-memory resilience state, in local-only
    /// mode where the configuration says so (`switchyard probe`).
    pub fn standalone(config: &Config) -> Router {
        let lasting = Lasting::new(Arc::new(Resilience::in_memory()));
        lasting.rules.change(|_| InForce::of(config));
        Router::new(Arc::new(config.clone()), EngineSlot::default(), lasting)
    }

    /// A router over given providers (tests substitute scripted ones).
    pub fn with_providers(
        config: &Config,
        providers: HashMap<String, Arc<dyn Provider>>,
        missing_keys: HashMap<String, String>,
        local: EngineSlot,
        lasting: Lasting,
    ) -> Router {
        let config = Arc::new(config.clone());
        Router::assemble(config, providers, missing_keys, local, lasting)
    }

    fn assemble(
        config: Arc<Config>,
        providers: HashMap<String, Arc<dyn Provider>>,
        missing_keys: HashMap<String, String>,
        local: EngineSlot,
        lasting: Lasting,
    ) -> Router {
        let router = Router {
            providers: Providers::new(providers),
            missing_keys,
            provider_configs: config.all_providers(),
            config,
            beacons: lasting.beacons,
            local,
            learned: lasting.learned,
            status: lasting.status,
            resilience: lasting.resilience,
            parked: lasting.parked,
            canaries: lasting.canaries,
            audit: lasting.audit,
            rules: lasting.rules,
        };
        router.publish();
        router
    }

    /// Only the local model serves: the mode is on, or the configuration
    /// failed closed.
    pub fn local_only(&self) -> bool {
        self.config.local_only_reason().is_some()
    }

    /// The path rule in force now that keeps `document` on the machine, if any.
    pub fn keeps_local(&self, document: Option<&std::path::Path>) -> Option<String> {
        self.rules.now().keeps_local(document)
    }

    pub fn subscribe(&self) -> watch::Receiver<StatusReport> {
        self.status.subscribe()
    }

    pub fn status(&self) -> StatusReport {
        status::report(self)
    }

    /// Recomputes the status; subscribers hear of it only when it changed.
    pub fn publish(&self) {
        let report = self.status();
        self.status.send_if_modified(|current| {
            let changed = !current.same_state(&report);
            *current = report;
            changed
        });
    }

    /// The task's limits; autocomplete's come from `[autocomplete]`.
    fn profile(&self, kind: TaskKind) -> TaskProfile {
        if kind != TaskKind::Autocomplete {
            return self.config.tasks.get(kind);
        }
        // The ceilings are the completion budget, the same for every request,
        // so a slow verdict on an entry holds for the next keystroke; each
        // attempt is still cut at its request's share of it.
        let autocomplete = &self.config.autocomplete;
        let budget_ms = autocomplete.budget_ms;
        TaskProfile {
            tier: Tier::Small,
            input_tokens: autocomplete.input_tokens,
            output_tokens: autocomplete.output_tokens,
            first_token_ms: budget_ms,
            total_ms: budget_ms,
            idle_ms: budget_ms,
            wait_ms: 0,
            hedge: false,
        }
    }

    /// Records a served task as its kind's route and tells the status.
    fn served(&self, kind: TaskKind, route: Route) {
        let at_ms = switchyard_base::clock::now_ms();
        self.learned
            .active
            .lock()
            .expect("active lock")
            .insert(kind, Served { route, at_ms });
        *self.learned.last.lock().expect("last lock") = Some(kind);
        self.publish();
    }

    /// A configured provider's settings (the well-known ones included).
    pub fn provider_config(&self, provider: &str) -> Option<&ProviderConfig> {
        self.provider_configs.get(provider)
    }

    pub fn resilience(&self) -> &Resilience {
        &self.resilience
    }

    /// Re-reads breakers and quota headroom from the shared state (other
    /// processes change them too) and publishes the status if it changed.
    pub async fn refresh_shared(&self) {
        for candidate in self.planned_entries().candidates() {
            if !candidate.entry.is_local() {
                let key = candidate.key.quota_key();
                self.resilience.governor.refresh(&key).await;
            }
        }
        self.resilience.verdicts.refresh().await;
        self.resilience.prefills.refresh().await;
        let views = SharedViews {
            breakers: self.resilience.breakers.views().await,
            quota: self.resilience.governor.views().await,
        };
        *self.learned.shared.lock().expect("shared views lock") = views;
        self.publish();
    }

    pub(crate) fn shared_views(&self) -> SharedViews {
        self.learned
            .shared
            .lock()
            .expect("shared views lock")
            .clone()
    }

    pub(crate) fn parked(&self) -> Vec<ParkedStatus> {
        self.parked.lock().expect("parked lock").clone()
    }

    pub(crate) fn beacons(&self) -> &Beacons {
        &self.beacons
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn active_routes(&self) -> HashMap<TaskKind, Served> {
        self.learned.active.lock().expect("active lock").clone()
    }

    pub(crate) fn outbound_last_hour(&self) -> Vec<switchyard_privacy::audit::ProviderTotal> {
        self.audit.last_hour()
    }

    pub(crate) fn last_kind(&self) -> Option<TaskKind> {
        *self.learned.last.lock().expect("last lock")
    }
}
