//! What the models take on disk, and removing one: its files, their
//! verification markers and any download in progress.

use std::fs;
use std::io;
use std::path::Path;

use super::ModelEntry;
use super::pull::WORKING_SUFFIXES;
use super::verify::{marker_path, with_suffix};

/// Bytes the files under `dir` take (partial downloads included).
pub fn disk_use(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| size_of(&entry.path()))
        .sum()
}

/// Bytes `path` takes: a file's length, a folder's files', 0 when absent.
fn size_of(path: &Path) -> u64 {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => disk_use(path),
        Ok(meta) => meta.len(),
        Err(_) => 0,
    }
}

/// Every path `entry` keeps in `dir`: each part, its marker and its work
/// in progress.
fn paths_of(entry: &ModelEntry, dir: &Path) -> Vec<std::path::PathBuf> {
    entry
        .files()
        .iter()
        .flat_map(|file| {
            let path = file.path_in(dir);
            let working = WORKING_SUFFIXES.map(|suffix| with_suffix(&path, suffix));
            [marker_path(&path), path].into_iter().chain(working)
        })
        .collect()
}

/// Bytes `entry` takes in `dir`, downloads in progress included.
pub fn used_by(entry: &ModelEntry, dir: &Path) -> u64 {
    paths_of(entry, dir).iter().map(|path| size_of(path)).sum()
}

/// Removes `entry` from `dir`; the bytes freed (0 when it was not there).
pub fn remove(entry: &ModelEntry, dir: &Path) -> io::Result<u64> {
    let freed = used_by(entry, dir);
    for path in paths_of(entry, dir) {
        let removed = match fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(&path),
            Ok(_) => fs::remove_file(&path),
            Err(_) => Ok(()),
        };
        removed?;
    }
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Manifest;

    #[test]
    fn removing_a_model_takes_its_file_marker_and_partial_download_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = Manifest::embedded();
        let entry = manifest.default_model();
        let other = manifest
            .models
            .iter()
            .find(|m| m.name != entry.name)
            .unwrap();
        let path = entry.files()[0].path_in(dir.path());
        fs::write(&path, vec![0u8; 1000]).unwrap();
        fs::write(marker_path(&path), "").unwrap();
        fs::write(with_suffix(&path, ".partial"), vec![0u8; 24]).unwrap();
        let kept = other.files()[0].path_in(dir.path());
        fs::write(&kept, vec![0u8; 10]).unwrap();
        assert_eq!(used_by(entry, dir.path()), 1024);
        assert_eq!(disk_use(dir.path()), 1034);
        assert_eq!(remove(entry, dir.path()).unwrap(), 1024);
        assert_eq!(disk_use(dir.path()), 10);
        assert!(kept.exists());
        assert_eq!(remove(entry, dir.path()).unwrap(), 0);
    }
}
