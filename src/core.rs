//! The routing core, opened the same way by every front end (the language
//! server, the gateway, the CLI). It owns what outlives one configuration:
//! health beacons, the status channel, parked tasks, canary results, the
//! local-only mode and the shared state; and it holds the router in force,
//! swapped whole when the configuration changes.

use crate::privacy::audit::AuditLog;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use crate::config::{Config, ResilienceConfig};
use crate::providers::local::chat::EngineSlot;
use crate::resilience::Resilience;
use crate::router::Router;
use crate::router::beacon::Beacons;
use crate::router::canary::CanaryResult;
use crate::router::status::{ParkedStatus, StatusReport};
use crate::state::WhenUnavailable;

/// What every router a core builds shares, and what outlives each of them.
#[derive(Clone)]
pub struct Lasting {
    pub beacons: Arc<Beacons>,
    pub status: watch::Sender<StatusReport>,
    pub parked: Arc<Mutex<Vec<ParkedStatus>>>,
    pub canaries: Arc<Mutex<Vec<CanaryResult>>>,
    pub local_only: Arc<AtomicBool>,
    pub resilience: Arc<Resilience>,
    /// The outbound audit (in memory only unless opened on its file).
    pub audit: Arc<AuditLog>,
}

impl Lasting {
    /// Fresh long-lived state over `resilience` (tests, benchmarks).
    pub fn new(resilience: Arc<Resilience>) -> Lasting {
        Lasting {
            beacons: Arc::default(),
            status: watch::channel(StatusReport::default()).0,
            parked: Arc::default(),
            canaries: Arc::default(),
            local_only: Arc::default(),
            resilience,
            audit: Arc::new(AuditLog::in_memory()),
        }
    }
}

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
    /// Where `set_local_only` persists the mode.
    config_path: Option<PathBuf>,
    lasting: RwLock<(ResilienceConfig, Lasting)>,
    router: RwLock<Arc<Router>>,
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
    pub fn open(config: &Config, local: EngineSlot, config_path: Option<PathBuf>) -> Core {
        let mut lasting = Lasting::new(open_resilience(&config.resilience));
        lasting.local_only = Arc::new(AtomicBool::new(config.local_only));
        lasting.audit = Arc::new(AuditLog::open());
        crate::privacy::redact::prepare();
        configure_beacons(&lasting, &config.resilience);
        let router = Arc::new(Router::new(config, local.clone(), lasting.clone()));
        Core {
            local,
            config_path,
            lasting: RwLock::new((config.resilience.clone(), lasting)),
            router: RwLock::new(router),
        }
    }

    /// The router in force.
    pub fn router(&self) -> Arc<Router> {
        self.router.read().expect("router lock").clone()
    }

    /// Builds the router for a new configuration; the shared state is
    /// reopened only when `[resilience]` changed.
    pub fn reconfigure(&self, config: &Config) {
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
    /// and persists it to the config file (if there is one). Turning it off
    /// is refused, changing nothing, while the configuration has failed
    /// closed.
    pub fn set_local_only(&self, on: bool) -> Result<(), LocalOnlyError> {
        let router = self.router();
        if let (false, Some(reason)) = (on, &router.config().fail_closed) {
            return Err(LocalOnlyError::FailedClosed(format!(
                "local-only mode stays on until the configuration can be read: {reason}"
            )));
        }
        router.set_local_only(on);
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
