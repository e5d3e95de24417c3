//! The routing core, opened the same way by every front end (the language
//! server, the gateway, the CLI). It owns the configuration: the layers as
//! received, the snapshot resolved from them (which consumers read or follow,
//! never copy), and the local-only mode; and what outlives one
//! configuration: health beacons, the status channel, parked tasks, canary
//! results and the shared state. It holds the router in force, swapped whole
//! when a change reaches what the router reads.

pub mod runbook;

use crate::privacy::audit::AuditLog;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use crate::config::{Config, ConfigError, ConfigLayers, ResilienceConfig};
use crate::privacy::rules::LocalOnlyRules;
use crate::providers::local::chat::EngineSlot;
use crate::resilience::Resilience;
use crate::router::status::{ParkedStatus, StatusReport};
use crate::router::{Lasting, Router};
use crate::state::WhenUnavailable;

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
    /// The layers as received, and what their last resolution could not apply.
    layers: Mutex<(ConfigLayers, Vec<ConfigError>)>,
    /// The configuration in force; consumers borrow it or follow it.
    config: watch::Sender<Arc<Config>>,
    lasting: RwLock<(ResilienceConfig, Lasting)>,
    router: RwLock<Arc<Router>>,
    /// The workspace roots (their `.switchyardignore` files add path rules),
    /// and the rules that keep documents local, rebuilt when either or the
    /// privacy settings change.
    roots: RwLock<Vec<PathBuf>>,
    path_rules: RwLock<Arc<LocalOnlyRules>>,
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
    let state =
        crate::state::open(&config.state).unwrap_or_else(|error| match config.when_unavailable {
            WhenUnavailable::Open => {
                tracing::error!("{error}; breakers and quota are not shared with other processes");
                Arc::new(crate::state::memory::MemoryState::new())
            }
            WhenUnavailable::Closed => {
                tracing::error!("{error}; remote calls are refused (when_unavailable = closed)");
                Arc::new(crate::state::Unavailable(error))
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
        lasting.local_only = Arc::new(AtomicBool::new(config.local_only));
        lasting.audit = Arc::new(AuditLog::open());
        crate::privacy::redact::prepare();
        configure_beacons(&lasting, &config.resilience);
        let router = Arc::new(Router::new(&config, local.clone(), lasting.clone()));
        let path_rules = LocalOnlyRules::new(&config.privacy, &[]).0;
        Core {
            local,
            config_path,
            layers: Mutex::new((layers, problems)),
            lasting: RwLock::new((config.resilience.clone(), lasting)),
            config: watch::channel(Arc::new(config)).0,
            router: RwLock::new(router),
            roots: RwLock::default(),
            path_rules: RwLock::new(Arc::new(path_rules)),
        }
    }

    /// The workspace roots whose `.switchyardignore` files add path rules.
    pub fn set_roots(&self, roots: Vec<PathBuf>) {
        *self.roots.write().expect("roots lock") = roots;
        self.refresh_path_rules();
    }

    /// Builds the local-only rules again from the privacy settings, the
    /// roots and their ignore files (one of which changed).
    pub fn refresh_path_rules(&self) {
        let roots = self.roots.read().expect("roots lock").clone();
        let (rules, problems) = LocalOnlyRules::new(&self.config().privacy, &roots);
        for problem in problems {
            tracing::warn!("path rules: {problem}");
        }
        *self.path_rules.write().expect("path rules lock") = Arc::new(rules);
    }

    /// Why the document at `path` may be served only by the local model, if
    /// a rule in force now says so.
    pub fn kept_local(&self, path: &std::path::Path) -> Option<String> {
        let rules = self.path_rules.read().expect("path rules lock").clone();
        rules.rule_for(path)
    }

    /// The rule that makes the workspace local-only, if one does.
    pub fn workspace_rule(&self) -> Option<String> {
        self.path_rules
            .read()
            .expect("path rules lock")
            .workspace
            .clone()
    }

    /// The router in force.
    pub fn router(&self) -> Arc<Router> {
        self.router.read().expect("router lock").clone()
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
    }

    /// The configuration in force, now and after every change.
    pub fn follow_config(&self) -> watch::Receiver<Arc<Config>> {
        self.config.subscribe()
    }

    /// What the last resolution could not apply.
    pub fn problems(&self) -> Vec<ConfigError> {
        self.layers.lock().expect("layers lock").1.clone()
    }

    /// Changes the layers and puts the resolved configuration in force: the
    /// router is rebuilt when anything it reads changed (the shared state
    /// reopened only when `[resilience]` did). Says what else changed.
    pub fn reconfigure(&self, change: impl FnOnce(&mut ConfigLayers)) -> Reconfigured {
        let (config, problems) = {
            let mut layers = self.layers.lock().expect("layers lock");
            change(&mut layers.0);
            let (config, problems) = layers.0.resolve();
            layers.1 = problems.clone();
            (Arc::new(config), problems)
        };
        let previous = self.config.send_replace(config.clone());
        if routing(&previous) != routing(&config) {
            self.rebuild_router(&config);
        }
        if previous.privacy != config.privacy {
            self.refresh_path_rules();
        }
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
        let read = crate::config::read_file(path);
        let unchanged = {
            let layers = &self.layers.lock().expect("layers lock").0;
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
                layers.file = file;
                layers.file_error = None;
            }
            Err(error) => layers.file_error = Some(error),
        }))
    }

    fn rebuild_router(&self, config: &Config) {
        let lasting = {
            let mut current = self.lasting.write().expect("lasting lock");
            if current.0 != config.resilience {
                current.1.resilience = open_resilience(&config.resilience);
                current.0 = config.resilience.clone();
            }
            current.1.clone()
        };
        lasting
            .local_only
            .store(config.local_only, Ordering::Release);
        configure_beacons(&lasting, &config.resilience);
        let router = Arc::new(Router::new(config, self.local.clone(), lasting));
        *self.router.write().expect("router lock") = router.clone();
        router.publish();
    }

    pub fn local_only(&self) -> bool {
        self.router().local_only()
    }

    /// Turns local-only mode on or off for every router, tells the status,
    /// keeps it in the configuration (a later resolution keeps it too) and
    /// persists it to the config file (if there is one). Turning it off is
    /// refused, changing nothing, while the configuration has failed closed.
    pub fn set_local_only(&self, on: bool) -> Result<(), LocalOnlyError> {
        if let (false, Some(reason)) = (on, &self.config().fail_closed) {
            return Err(LocalOnlyError::FailedClosed(format!(
                "local-only mode stays on until the configuration can be read: {reason}"
            )));
        }
        self.router().set_local_only(on);
        {
            let mut layers = self.layers.lock().expect("layers lock");
            let file = &mut layers.0.file;
            match (file, &self.config_path) {
                (Some((_, serde_json::Value::Object(file))), _) => {
                    file.insert("local_only".into(), on.into());
                }
                (file @ None, Some(path)) => {
                    *file = Some((path.clone(), serde_json::json!({"local_only": on})));
                }
                _ => {}
            }
        }
        self.config
            .send_modify(|config| Arc::make_mut(config).local_only = on);
        match &self.config_path {
            Some(path) => crate::config::persist_local_only(path, on).map_err(|e| {
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
        self.lasting.read().expect("lasting lock").1.parked.clone()
    }
}

/// What the router reads: everything but the local model's own settings and
/// how the editor hears of status.
fn routing(config: &Config) -> Config {
    Config {
        local: Default::default(),
        status_notifications: false,
        ..config.clone()
    }
}

/// What the local engine is made for: its settings and the window sizes.
fn engine(config: &Config) -> (crate::config::LocalConfig, usize, usize, usize, usize) {
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
impl crate::completion::RemoteFim for Core {
    fn complete<'a>(
        &'a self,
        text: &'a crate::providers::local::FimText,
        doc: &'a str,
        deadline: tokio::time::Instant,
        cancel: &'a tokio_util::sync::CancellationToken,
    ) -> futures::future::BoxFuture<'a, Option<(String, crate::entry::ModelRef)>> {
        Box::pin(async move {
            self.router()
                .autocomplete_remote(text, doc, deadline, cancel)
                .await
        })
    }
}
