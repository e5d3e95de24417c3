//! Editor windows share the machine: one engine per machine and model
//! (ARCHITECTURE.md invariant 24).
//!
//! Every window's switchyard meets the others at a lock and a socket in the
//! state directory, named by the engine's options (the same model, sizes
//! and release share). The window holding the lock hosts the engine
//! in-process and serves the others' jobs from its own queue (`host`); the
//! others send theirs over the socket (`client`). A second window so costs
//! no model, no KV cache and no compute buffers, and one queue orders every
//! window's requests before every window's background fills. When the host
//! exits or crashes, the kernel frees its lock and a remaining window takes
//! over: it loads the model and the others connect to it; meanwhile their
//! completions answer "loading", as at a start.

mod client;
mod host;
mod wire;

use std::fs::{File, Permissions, TryLockError};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::{EngineOptions, EngineStatus, Job, LocalEngine};
use client::Ended;
use host::Hosting;

/// How long a window looks for a host (one holds the lock but has not yet
/// bound its socket, or is closing) before it runs an engine of its own.
const HOST_FOUND_WITHIN: Duration = Duration::from_secs(10);
const LOOK_AGAIN_AFTER: Duration = Duration::from_millis(50);

/// The lock and the socket where windows running the same engine meet.
#[derive(Clone, Debug)]
struct MeetingPlace {
    lock: PathBuf,
    socket: PathBuf,
}

enum Role {
    Host(Hosting),
    Client(UnixStream),
}

impl LocalEngine {
    /// The engine shared with every other window that runs the same one,
    /// meeting in `dir`: hosted here if none is yet, else a client of the
    /// window hosting it.
    pub fn shared(options: EngineOptions, dir: &Path) -> LocalEngine {
        let place = MeetingPlace::for_engine(&options, dir);
        LocalEngine::on_thread(move |sender, rx, status| {
            share(options, &place, (sender, rx), status)
        })
    }
}

/// Hosts the engine or relays to its host, taking over when the host leaves.
fn share(
    options: EngineOptions,
    place: &MeetingPlace,
    (sender, jobs): (Sender<Job>, Receiver<Job>),
    status: watch::Sender<EngineStatus>,
) {
    loop {
        match place.elect() {
            Ok(Role::Host(hosting)) => {
                return host::serve(options, hosting, (sender, jobs), status);
            }
            Ok(Role::Client(stream)) => {
                tracing::info!("the local engine is hosted by another window");
                match client::relay(stream, &jobs, &status) {
                    Ended::Shutdown => return,
                    Ended::HostLeft => {
                        tracing::info!(
                            "the window hosting the local engine left; choosing a new host"
                        );
                        status.send_replace(EngineStatus::Loading);
                    }
                }
            }
            Err(e) => {
                // Alone is slower on a shared machine, never wrong.
                tracing::warn!("cannot share the local engine ({e}); this window runs its own");
                return crate::engine::run(options, jobs, status);
            }
        }
    }
}

/// How many engines other processes host in `dir` now: meeting places
/// whose lock is held (a host holds it as long as it lives).
pub fn engines_hosted_in(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("engine-") && name.ends_with(".lock")
        })
        .filter(|path| {
            let Ok(lock) = File::options().write(true).open(path) else {
                return false;
            };
            matches!(lock.try_lock(), Err(TryLockError::WouldBlock))
        })
        .count()
}

impl MeetingPlace {
    /// Named by everything that makes two engines differ, and the release.
    fn for_engine(options: &EngineOptions, dir: &Path) -> MeetingPlace {
        let mut hasher = DefaultHasher::new();
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        // Every field, so that a new option is a decision here.
        let EngineOptions {
            model_name: _,
            model_path,
            threads,
            budget,
            max_output_tokens,
            reuse_cache,
            draft_tokens,
            recent_prompts,
            thread_memo: _,
        } = options;
        let engine = format!(
            "{model_path:?} {threads} {budget:?} {max_output_tokens} {reuse_cache} {draft_tokens} {recent_prompts}"
        );
        engine.hash(&mut hasher);
        let name = format!("engine-{:016x}", hasher.finish());
        MeetingPlace {
            lock: dir.join(format!("{name}.lock")),
            socket: dir.join(format!("{name}.sock")),
        }
    }

    /// Takes the lock and hosts, or connects to the window that holds it.
    fn elect(&self) -> io::Result<Role> {
        if let Some(dir) = self.lock.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let given_up = Instant::now() + HOST_FOUND_WITHIN;
        loop {
            let lock = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&self.lock)?;
            match lock.try_lock() {
                Ok(()) => return self.host_with(lock),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(e),
            }
            if let Ok(stream) = UnixStream::connect(&self.socket) {
                return Ok(Role::Client(stream));
            }
            if Instant::now() >= given_up {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the window holding {} does not answer", self.lock.display()),
                ));
            }
            std::thread::sleep(LOOK_AGAIN_AFTER);
        }
    }

    fn host_with(&self, lock: File) -> io::Result<Role> {
        // A socket left by a host that crashed: the lock says nobody serves it.
        let _ = std::fs::remove_file(&self.socket);
        let listener = UnixListener::bind(&self.socket)?;
        // The engine's caches hold this user's documents: no other user's
        // process may ask it for completions.
        std::fs::set_permissions(&self.socket, Permissions::from_mode(0o600))?;
        Ok(Role::Host(Hosting {
            lock,
            listener,
            socket: self.socket.clone(),
        }))
    }
}
