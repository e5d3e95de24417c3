//! The routing core, opened the same way by every front end (the language
//! server, the gateway, the CLI). It owns the configuration: the layers as
//! received (local-only mode among them) and the workspace roots, changed
//! under one lock; what is in force, one [`Snapshot`] (the configuration
//! resolved from them and the router built over it) that consumers borrow or
//! follow, never copy, swapped whole with every change; and what outlives one
//! configuration: health beacons, the status channel, parked tasks, canary
//! results, the shared state, the rules every attempt asks as it sends and
//! what the routers learned.

pub mod loading;
pub mod parking;
pub mod prewarm;
pub mod runbook;
pub mod session;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use switchyard_config::{Config, ConfigError, ConfigLayers, PrivacyConfig};
use switchyard_privacy::audit::AuditLog;
use switchyard_privacy::rules::{InForce, LocalOnlyRules, RulesInForce};
use switchyard_providers::local::chat::EngineSlot;
use switchyard_resilience::{Resilience, ResilienceConfig};
use switchyard_router::status::{ParkedStatus, StatusReport};
use switchyard_router::{Lasting, Router};
use switchyard_state::WhenUnavailable;

/// Why `set_local_only` did not do all it was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LocalOnlyError {
    /// Nothing changed: the configuration failed closed.
    #[error("{0}")]
    FailedClosed(String),
    /// The mode changed for this session only.
    #[error("{0}")]
    NotSaved(String),
}

pub struct Core {
    local: EngineSlot,
    /// Where `set_local_only` persists the mode, and `reload_file` reads.
    config_path: Option<PathBuf>,
    /// What changes, changed under this one lock: a change resolves the
    /// layers, puts the rules in force, and swaps the snapshot before it
    /// lets go, so two changes never cross.
    held: Mutex<Held>,
    /// What is in force; written only under `held`.
    now: watch::Sender<Snapshot>,
    /// The rules in force, the handle every router reads (changed only
    /// under `held`): read here without the lock, which a change holds
    /// while it builds a router.
    rules: RulesInForce,
}

/// What is in force, swapped whole: the configuration and the router built
/// over it (which reads that same `Arc`, no copy).
#[derive(Clone)]
pub struct Snapshot {
    pub config: Arc<Config>,
    pub router: Arc<Router>,
}

/// What the core's lock holds.
struct Held {
    /// The layers as received.
    layers: ConfigLayers,
    /// What their last resolution could not apply.
    problems: Vec<ConfigError>,
    /// The workspace roots (their `.switchyardignore` files add path rules).
    roots: Vec<PathBuf>,
    /// What outlives a router, the rules in force among it: local-only mode
    /// and the rules that keep documents local, which every router's remote
    /// attempts ask as they send (so a change reaches tasks already running).
    lasting: Lasting,
}

/// What a change of configuration changed, for the front end to act on.
#[derive(Debug)]
pub struct Reconfigured {
    pub config: Arc<Config>,
    /// What could not be applied (the whole resolution's).
    pub problems: Vec<ConfigError>,
    /// The local model's settings, or the sizes its context is made for.
    pub engine: bool,
}

/// The configured shared state, with the one policy for a state that cannot
/// be opened: `when_unavailable = "open"` carries on with state private to
/// this process; `"closed"` keeps a backend that refuses every call, so
/// remote calls are refused (with the reason) until the configuration changes.
fn open_resilience(config: &ResilienceConfig) -> Arc<Resilience> {
    let state = switchyard_state::open(&config.state).unwrap_or_else(|error| {
        match config.when_unavailable {
            WhenUnavailable::Open => {
                tracing::error!("{error}; breakers and quota are not shared with other processes");
                Arc::new(switchyard_state::memory::MemoryState::new())
            }
            WhenUnavailable::Closed => {
                tracing::error!("{error}; remote calls are refused (when_unavailable = closed)");
                Arc::new(switchyard_state::Unavailable(error))
            }
        }
    });
    Arc::new(Resilience::new(state, config))
}

fn configure_beacons(lasting: &Lasting, config: &ResilienceConfig) {
    lasting.beacons.configure(
        std::time::Duration::from_millis(config.beacon_window_ms),
        config.beacon_min_samples,
    );
}

impl Core {
    /// Opens the core over `layers` (resolved as every front end resolves
    /// them); what could not be applied is in [`Core::problems`].
    pub fn open(layers: ConfigLayers, local: EngineSlot, config_path: Option<PathBuf>) -> Core {
        let (config, problems) = layers.resolve();
        let mut lasting = Lasting::new(open_resilience(&config.resilience));
        lasting.audit = Arc::new(AuditLog::open());
        switchyard_privacy::redact::prepare();
        configure_beacons(&lasting, &config.resilience);
        lasting.rules.change(|_| InForce::of(&config));
        let rules = lasting.rules.clone();
        let config = Arc::new(config);
        let router = Arc::new(Router::new(config.clone(), local.clone(), lasting.clone()));
        Core {
            local,
            config_path,
            held: Mutex::new(Held {
                layers,
                problems,
                roots: Vec::new(),
                lasting,
            }),
            now: watch::channel(Snapshot { config, router }).0,
            rules,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().expect("core lock")
    }

    /// The workspace roots whose `.switchyardignore` files add path rules.
    pub fn set_roots(&self, roots: Vec<PathBuf>) {
        let mut held = self.lock();
        held.roots = roots;
        self.put_document_rules(&held);
    }

    /// Builds the local-only rules again from the privacy settings, the
    /// roots and their ignore files (one of which changed).
    pub fn refresh_path_rules(&self) {
        self.put_document_rules(&self.lock());
    }

    /// Puts the document rules of the configuration in force for `held`'s
    /// roots in force (the configuration changes only under the same lock).
    fn put_document_rules(&self, held: &Held) {
        let documents = document_rules(&self.config().privacy, &held.roots);
        held.lasting.rules.change(|now| InForce {
            local_only: now.local_only.clone(),
            documents,
        });
    }

    /// The rule that makes the workspace local-only, if one does.
    pub fn workspace_rule(&self) -> Option<String> {
        self.rules.now().documents.workspace.clone()
    }

    /// Where the local engine is, for the router's local entry.
    pub fn engine_slot(&self) -> EngineSlot {
        self.local.clone()
    }

    /// The router in force.
    pub fn router(&self) -> Arc<Router> {
        self.now.borrow().router.clone()
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.now.borrow().config.clone()
    }

    /// What is in force, now and after every change.
    pub fn follow(&self) -> watch::Receiver<Snapshot> {
        self.now.subscribe()
    }

    /// What the last resolution could not apply.
    pub fn problems(&self) -> Vec<ConfigError> {
        self.lock().problems.clone()
    }

    /// Changes the layers and puts the resolved configuration in force, all
    /// under one lock so two changes never cross: the router is rebuilt over
    /// what the routers learned (the shared state reopened only when where it
    /// lives changed). Says what else changed.
    pub fn reconfigure(&self, change: impl FnOnce(&mut ConfigLayers)) -> Reconfigured {
        let mut held = self.lock();
        change(&mut held.layers);
        let (config, problems) = held.layers.resolve();
        held.problems = problems.clone();
        let config = Arc::new(config);
        let previous = self.config();
        if previous.resilience != config.resilience {
            held.lasting.resilience = reopened(
                &held.lasting.resilience,
                &previous.resilience,
                &config.resilience,
            );
            configure_beacons(&held.lasting, &config.resilience);
        }
        // In force before anything else: an attempt of a task already
        // running asks these as it sends, whichever router it runs on.
        let documents = (previous.privacy != config.privacy)
            .then(|| document_rules(&config.privacy, &held.roots));
        held.lasting.rules.change(|now| InForce {
            local_only: config.local_only_reason(),
            documents: documents.unwrap_or_else(|| now.documents.clone()),
        });
        let router = Arc::new(Router::new(
            config.clone(),
            self.local.clone(),
            held.lasting.clone(),
        ));
        self.now.send_replace(Snapshot {
            config: config.clone(),
            router: router.clone(),
        });
        drop(held);
        router.publish();
        Reconfigured {
            engine: engine(&previous) != engine(&config),
            config,
            problems,
        }
    }

    /// The config file this core reads, if any.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.config_path.as_deref()
    }

    /// Reads the config file again and applies it when its text changed;
    /// `None` when there is no file to read or nothing changed.
    pub fn reload_file(&self) -> Option<Reconfigured> {
        let path = self.config_path.as_ref()?;
        let read = switchyard_config::read_file(path);
        let unchanged = {
            let layers = &self.lock().layers;
            match &read {
                Ok(file) => layers.file_error.is_none() && &layers.file == file,
                Err(error) => layers.file_error.as_ref() == Some(error),
            }
        };
        if unchanged {
            return None;
        }
        Some(self.reconfigure(|layers| match read {
            Ok(file) => {
                // A hand edit of the file's `local_only` ends the toggle.
                if file_local_only(&file) != file_local_only(&layers.file) {
                    layers.local_only = None;
                }
                layers.file = file;
                layers.file_error = None;
            }
            Err(error) => layers.file_error = Some(error),
        }))
    }

    pub fn local_only(&self) -> bool {
        self.router().local_only()
    }

    /// Turns local-only mode on or off: a layer of the configuration over
    /// every other (so the router in force, the status and every later
    /// resolution have it), persisted to the config file if there is one.
    /// Turning it off is refused, changing nothing, while the configuration
    /// has failed closed.
    pub fn set_local_only(&self, on: bool) -> Result<(), LocalOnlyError> {
        if let (false, Some(reason)) = (on, &self.config().fail_closed) {
            return Err(LocalOnlyError::FailedClosed(format!(
                "local-only mode stays on until the configuration can be read: {reason}"
            )));
        }
        self.reconfigure(|layers| layers.local_only = Some(on));
        match &self.config_path {
            Some(path) => switchyard_config::persist_local_only(path, on).map_err(|e| {
                LocalOnlyError::NotSaved(format!(
                    "local-only mode is {} for this session but could not be saved to {}: {e}",
                    if on { "on" } else { "off" },
                    path.display()
                ))
            }),
            None => Ok(()),
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<StatusReport> {
        self.router().subscribe()
    }

    /// The parked-task list status shows; the front end that parks keeps it.
    pub fn parked(&self) -> Arc<Mutex<Vec<ParkedStatus>>> {
        self.lock().lasting.parked.clone()
    }
}

/// The rules that keep documents local under `privacy` for `roots`.
fn document_rules(privacy: &PrivacyConfig, roots: &[PathBuf]) -> Arc<LocalOnlyRules> {
    let (rules, problems) = LocalOnlyRules::new(privacy, roots);
    for problem in problems {
        tracing::warn!("path rules: {problem}");
    }
    Arc::new(rules)
}

/// The `local_only` a config file layer sets, if it does.
fn file_local_only(file: &Option<(PathBuf, serde_json::Value)>) -> Option<bool> {
    file.as_ref()?.1.get("local_only")?.as_bool()
}

/// The resilience for `next`: the same backend where it lives in the same
/// place (so the breakers and quota it holds, in memory too, stay), a new
/// one where that changed.
fn reopened(
    current: &Arc<Resilience>,
    previous: &ResilienceConfig,
    next: &ResilienceConfig,
) -> Arc<Resilience> {
    if previous.state == next.state && previous.when_unavailable == next.when_unavailable {
        Arc::new(Resilience::new(current.state.clone(), next))
    } else {
        open_resilience(next)
    }
}

/// What the local engine is made for: its settings and the window sizes.
fn engine(config: &Config) -> (switchyard_config::LocalConfig, usize, usize, usize, usize) {
    let a = &config.autocomplete;
    (
        config.local.clone(),
        a.input_tokens,
        a.suffix_tokens,
        a.repository_tokens,
        a.output_tokens,
    )
}

/// Remote autocomplete goes through the router in force.
impl switchyard_completion::RemoteFim for Core {
    fn complete<'a>(
        &'a self,
        ask: switchyard_completion::RemoteAsk<'a>,
        cancel: &'a tokio_util::sync::CancellationToken,
    ) -> futures::future::BoxFuture<'a, Option<(String, switchyard_base::entry::ModelRef)>> {
        Box::pin(async move {
            let switchyard_completion::RemoteAsk {
                text,
                doc,
                document,
                deadline,
            } = ask;
            self.router()
                .autocomplete_remote(text, (doc, document), deadline, cancel)
                .await
        })
    }
}
