//! Platform directories for config, logs and state.

use std::path::PathBuf;

use directories::ProjectDirs;

pub fn project_dirs() -> Option<ProjectDirs> {
    ProjectDirs::from("dev", "switchyard", "switchyard")
}

/// Where logs and other state go: `SWITCHYARD_STATE_DIR`, else the platform
/// state dir, else the cache dir, else the system temp dir.
pub fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SWITCHYARD_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    project_dirs()
        .map(|d| d.state_dir().unwrap_or_else(|| d.cache_dir()).to_path_buf())
        .unwrap_or_else(|| std::env::temp_dir().join("switchyard"))
}
