//! The work the core owns for every front end, built whole at open:
//! completion (over the local engine, with the router for the chain's remote
//! entries), loading the local engine again when its settings change, when to
//! prewarm, parked work and its resume, and the canaries that keep the routes
//! known. The language server, the gateway and the CLI open one and only
//! translate between their protocol and it.

use std::sync::Arc;

use super::loading::{self, LoadReport};
use super::parking::{self, ParkRequest, ParkedFront, Parking};
use super::prewarm::{Pause, Place, Prewarming};
use super::{Core, Reconfigured};
use switchyard_completion::CompletionService;
use switchyard_completion::controls::Snooze;
use switchyard_config::ConfigLayers;
use switchyard_context::repository::OpenDocuments;
use switchyard_engine::ModelInfo;
use switchyard_router::{Answer, OnProgress, RouteError, Router, TaskRequest, canary};
use tokio_util::sync::CancellationToken;

/// How often a followed config file is looked at for changes.
pub const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub struct Session {
    core: Arc<Core>,
    completion: Arc<CompletionService>,
    /// Where a load says what it does.
    report: Arc<dyn LoadReport>,
    /// One load at a time: a change made while the model loads waits for
    /// that load, then loads what is configured then.
    loading: tokio::sync::Mutex<()>,
    prewarming: Prewarming,
    /// Parked work; `None` where the state directory cannot hold it.
    parking: Option<Arc<Parking>>,
}

/// A task the session parked: where to find it, and why it waits.
pub struct Parked {
    pub id: String,
    pub note: String,
}

/// What a front end brings to a session besides the core.
pub struct Parts {
    /// Where a load of the local engine is told.
    pub report: Arc<dyn LoadReport>,
    /// Where the snooze is kept (the state directory, for the editors).
    pub snooze: Arc<Snooze>,
    /// The documents open in the editor, where the repository context looks
    /// up definitions; none outside an editor.
    pub open_documents: Option<Arc<dyn Fn() -> OpenDocuments + Send + Sync>>,
}

impl Session {
    pub fn open(core: Arc<Core>, parts: Parts) -> Arc<Session> {
        let in_force = core.follow();
        let settings = move || in_force.borrow().config.autocomplete.clone();
        let mut completion = CompletionService::following(settings)
            .with_remote(core.clone())
            .with_snooze(parts.snooze);
        if let Some(documents) = parts.open_documents {
            completion = completion.with_open_documents(documents);
        }
        Arc::new(Session {
            parking: Parking::open(core.clone()),
            core,
            completion: Arc::new(completion),
            report: parts.report,
            loading: tokio::sync::Mutex::new(()),
            prewarming: Prewarming::default(),
        })
    }

    /// The routing core: configuration, router, path rules.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    pub fn completion(&self) -> &Arc<CompletionService> {
        &self.completion
    }

    /// Loads the configured local model (after the one loaded, if any) and
    /// waits until it is ready.
    pub async fn load_engine(&self) -> Result<ModelInfo, String> {
        let _one_at_a_time = self.loading.lock().await;
        let config = self.core.config();
        let slot = self.core.engine_slot();
        loading::load(&config, &slot, &self.completion, &*self.report).await
    }

    /// Loads the local model in the background.
    pub fn start_engine(self: &Arc<Self>) {
        let session = self.clone();
        tokio::spawn(async move { session.load_engine().await });
    }

    /// Changes the configuration's layers (see [`Core::reconfigure`]) and,
    /// where the local model's settings changed, loads it again.
    pub fn reconfigure(self: &Arc<Self>, change: impl FnOnce(&mut ConfigLayers)) -> Reconfigured {
        let changed = self.core.reconfigure(change);
        self.follow(&changed);
        changed
    }

    /// Reads the config file again (see [`Core::reload_file`]) and, where the
    /// local model's settings changed, loads it again.
    pub fn reload_file(self: &Arc<Self>) -> Option<Reconfigured> {
        let changed = self.core.reload_file()?;
        self.follow(&changed);
        Some(changed)
    }

    /// Applies the config file whenever its text changes (the gateway's
    /// way; an editor sends its changes instead), saying what could not be
    /// applied. Read again only once its size or time changed, and off the
    /// request threads: a reload never holds up a request.
    pub async fn follow_config_file(self: Arc<Self>) {
        let Some(path) = self.core.config_path().map(ToOwned::to_owned) else {
            return;
        };
        let stamp = |path: &std::path::Path| {
            std::fs::metadata(path)
                .ok()
                .map(|m| (m.modified().ok(), m.len()))
        };
        // Nothing seen yet: the first pass reads the file once, so an edit
        // made between the core's first read and this loop is not missed.
        let mut seen = None;
        loop {
            tokio::time::sleep(RELOAD_EVERY).await;
            let now = stamp(&path);
            if now == seen {
                continue;
            }
            seen = now;
            let reloading = self.clone();
            let reloaded = tokio::task::spawn_blocking(move || reloading.reload_file()).await;
            if let Ok(Some(changed)) = reloaded {
                tracing::info!("the config file changed; applied");
                for problem in &changed.problems {
                    tracing::warn!("{problem}");
                }
            }
        }
    }

    fn follow(self: &Arc<Self>, changed: &Reconfigured) {
        if changed.engine {
            tracing::info!("the local model's settings changed; loading it again");
            self.start_engine();
        }
    }

    /// Runs a remote-grade task (explain, refactor, a gateway request) on the
    /// router in force as it begins; the front end only translates.
    pub async fn serve(
        &self,
        task: TaskRequest,
        cancel: CancellationToken,
        progress: OnProgress<'_>,
    ) -> Result<Answer, RouteError> {
        self.core.router().run(task, cancel, progress).await
    }

    /// Parks a task that only temporary trouble stopped (`e`), where parking
    /// is on, with what it streamed and why it stopped; `e` back where the
    /// task does not wait or its checkpoint cannot be written.
    pub fn park(&self, e: RouteError, mut park: ParkRequest) -> Result<Parked, RouteError> {
        let kind = park.kind;
        let Some(parking) = self
            .parking
            .as_ref()
            .filter(|_| parking::parkable(kind, &e))
        else {
            return Err(e);
        };
        if let RouteError::NothingHealthy { partial, .. } = &e {
            park.partial = partial.clone();
        }
        park.note = e.to_string();
        let note = park.note.clone();
        match parking.park(park) {
            Ok(id) => Ok(Parked { id, note }),
            Err(io) => {
                tracing::error!("could not park the {}: {io}", kind.as_str());
                Err(e)
            }
        }
    }

    /// Where work that cannot be served now is parked, if anywhere.
    pub fn parking(&self) -> Option<&Arc<Parking>> {
        self.parking.as_ref()
    }

    /// Resumes parked work in the background; `front` applies the answers.
    pub fn resume_parked<F: ParkedFront>(&self, front: Arc<F>) {
        if let Some(parking) = &self.parking {
            tokio::spawn(parking.clone().run(front));
        }
    }

    /// Runs the canaries in the background, each canary interval as
    /// configured now; `on_tick` sees the router after each round.
    pub fn keep_routes_known(&self, on_tick: impl Fn(&Router) + Send + 'static) {
        let core = self.core.clone();
        let changes = Some(core.follow());
        tokio::spawn(canary::upkeep(move || core.router(), changes, on_tick));
    }

    /// The user paused in `doc`: prewarm there once the pause lasts (see
    /// `prewarm`); `place` is `None` where the document is not worth
    /// completing in, which still counts as activity.
    pub fn paused(&self, doc: &str, place: Option<Place>, pause: Pause) {
        self.prewarming.paused(&self.completion, doc, place, pause);
    }

    /// `doc` was closed: nothing waits for it and nothing is kept of it.
    pub fn closed(&self, doc: &str) {
        self.prewarming.closed(doc);
        self.completion.forget(doc);
    }

    /// Stops the local engine (at exit).
    pub async fn shutdown(&self) {
        if let Some(engine) = self.core.engine_slot().get() {
            let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
        }
    }
}
