//! Logging with tracing. stdout belongs to the protocol (ARCHITECTURE.md invariant 1): logs go to
//! a file, and to stderr only when asked.

use std::path::{Path, PathBuf};

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::MakeWriterExt;

/// Default filter: our own info, everyone else's (llama.cpp is chatty) warnings.
const DEFAULT_FILTER: &str = "warn,switchyard=info";

pub fn default_log_file() -> PathBuf {
    crate::paths::state_dir().join("switchyard.log")
}

/// Installs the global subscriber. Keep the guard alive: it flushes on drop.
/// `SWITCHYARD_LOG` sets the filter (tracing's env-filter syntax).
pub fn init(file: &Path, also_stderr: bool) -> std::io::Result<WorkerGuard> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    // Logs quote code and prompts: private to the user, like the state files.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let log = options.open(file)?;
    let (writer, guard) = tracing_appender::non_blocking(log);
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
    Ok(guard)
}
