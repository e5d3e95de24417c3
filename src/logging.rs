//! Logging with tracing. stdout belongs to the protocol (ARCHITECTURE.md invariant 1): logs go to
//! a file, and to stderr only when asked.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::MakeWriterExt;

/// Default filter: our own info, everyone else's (llama.cpp is chatty) warnings.
const DEFAULT_FILTER: &str = "warn,switchyard=info";

pub fn default_log_file() -> PathBuf {
    switchyard_base::paths::state_dir().join("switchyard.log")
}

/// Installs the global subscriber. `SWITCHYARD_LOG` sets the filter
/// (tracing's env-filter syntax).
///
/// Each event is one append to the file, written by the thread that logged
/// it. A background writer thread would spare the caller that write, but its
/// channel spins (`sched_yield`) after every event it wakes for: with a line
/// per request on two cores, that spinning took CPU from the requests.
pub fn init(file: &Path, also_stderr: bool) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    // Logs quote code and prompts: private to the user, like the state files.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let writer = Mutex::new(options.open(file)?);
    let filter = EnvFilter::try_from_env("SWITCHYARD_LOG")
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    if also_stderr {
        builder.with_writer(writer.and(std::io::stderr)).init();
    } else {
        builder.with_writer(writer).init();
    }
    Ok(())
}
