//! Checking a model file against its manifest entry, and the `<file>.verified`
//! marker that lets startup trust a file without re-hashing hundreds of MB.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::ModelEntry;

/// Read size for hashing: large enough that syscalls don't dominate.
pub(crate) const HASH_BUFFER_BYTES: usize = 1 << 20;

/// Why a model file on disk is not the model its entry describes.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "model `{model}` is not downloaded: `{}` does not exist; run `switchyard models pull {model}`",
        path.display()
    )]
    Missing { model: String, path: PathBuf },
    #[error("could not read `{}` (model `{model}`): {error}", path.display())]
    Io {
        model: String,
        path: PathBuf,
        error: io::Error,
    },
    #[error(
        "`{}` is {actual} bytes but model `{model}` is {expected} bytes, so the file is incomplete or \
         corrupt; run `switchyard models pull {model}` to replace it",
        path.display()
    )]
    WrongSize {
        model: String,
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    #[error(
        "`{}` has SHA-256 {actual} but model `{model}` has SHA-256 {expected}, so the file is corrupt \
         or a different model; run `switchyard models pull {model}` to replace it",
        path.display()
    )]
    WrongDigest {
        model: String,
        path: PathBuf,
        expected: String,
        actual: String,
    },
}

/// Checks `path` against `entry`'s size and SHA-256 (each where known), then
/// records success in the `.verified` marker so [`is_present`] can skip the
/// hash next time. A failed check removes any marker.
pub fn verify(entry: &ModelEntry, path: &Path) -> Result<(), VerifyError> {
    match check(entry, path, |_| {}) {
        Ok(digest) => {
            if let Err(error) = write_marker(path, &digest) {
                // The file is good; only the next startup's shortcut is lost.
                tracing::warn!(path = %path.display(), %error, "could not write the .verified marker");
            }
            Ok(())
        }
        Err(error) => {
            let _ = fs::remove_file(marker_path(path));
            Err(error)
        }
    }
}

/// True when each of `entry`'s files is in `dir` with the expected size and a
/// `.verified` marker at least as new as the file. Does not hash.
pub fn is_present(entry: &ModelEntry, dir: &Path) -> bool {
    entry.files().iter().all(|file| file_is_present(file, dir))
}

fn file_is_present(entry: &ModelEntry, dir: &Path) -> bool {
    let path = entry.path_in(dir);
    let Ok(file) = fs::metadata(&path) else {
        return false;
    };
    if !file.is_file() || entry.size.is_some_and(|size| size != file.len()) {
        return false;
    }
    let Ok(marker) = fs::metadata(marker_path(&path)) else {
        return false;
    };
    // A file rewritten after it was verified has a newer mtime than its marker.
    matches!((file.modified(), marker.modified()), (Ok(file), Ok(marker)) if marker >= file)
}

/// Size and digest check; returns the file's SHA-256. `on_chunk` sees each
/// hashed chunk's length, for progress.
pub(crate) fn check(
    entry: &ModelEntry,
    path: &Path,
    on_chunk: impl FnMut(u64),
) -> Result<String, VerifyError> {
    let io_error = |error: io::Error| {
        if error.kind() == io::ErrorKind::NotFound {
            VerifyError::Missing {
                model: entry.name.clone(),
                path: path.to_owned(),
            }
        } else {
            VerifyError::Io {
                model: entry.name.clone(),
                path: path.to_owned(),
                error,
            }
        }
    };
    let metadata = fs::metadata(path).map_err(io_error)?;
    if !metadata.is_file() {
        return Err(io_error(io::Error::other("not a regular file")));
    }
    let wrong_size = |actual| VerifyError::WrongSize {
        model: entry.name.clone(),
        path: path.to_owned(),
        expected: entry.size.unwrap_or_default(),
        actual,
    };
    // Cheap test first: a truncated download need not be hashed to be rejected.
    if entry.size.is_some_and(|size| size != metadata.len()) {
        return Err(wrong_size(metadata.len()));
    }
    let (length, digest) = hash_file(path, on_chunk).map_err(io_error)?;
    if entry.size.is_some_and(|size| size != length) {
        return Err(wrong_size(length));
    }
    if let Some(expected) = &entry.sha256
        && !expected.eq_ignore_ascii_case(&digest)
    {
        return Err(VerifyError::WrongDigest {
            model: entry.name.clone(),
            path: path.to_owned(),
            expected: expected.clone(),
            actual: digest,
        });
    }
    Ok(digest)
}

/// Streams `path` through SHA-256; returns (length, lowercase hex digest).
pub(crate) fn hash_file(path: &Path, mut on_chunk: impl FnMut(u64)) -> io::Result<(u64, String)> {
    let mut file = fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; HASH_BUFFER_BYTES];
    let mut length = 0;
    loop {
        let read = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        hasher.update(&buffer[..read]);
        length += read as u64;
        on_chunk(read as u64);
    }
    Ok((length, hex::encode(hasher.finalize())))
}

/// Records a verified file. The content is `sha256sum` format, so
/// `sha256sum -c <file>.verified` re-checks it by hand; only the marker's
/// mtime matters to [`is_present`].
pub(crate) fn write_marker(path: &Path, digest: &str) -> io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    fs::write(marker_path(path), format!("{digest}  {name}\n"))
}

pub(crate) fn marker_path(path: &Path) -> PathBuf {
    with_suffix(path, ".verified")
}

/// `path` with `suffix` appended to its file name (`a.gguf` -> `a.gguf.partial`).
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::ModelSource;

    const CONTENT: &[u8] = b"not really a gguf, but hashable";
    /// `printf 'not really a gguf, but hashable' | sha256sum`
    const CONTENT_SHA256: &str = "df29495d6f0064389caa80dcd61c14b3518d43afe134c0e9d105679da7a79c95";
    const WRONG_SHA256: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    fn entry(size: Option<u64>, sha256: Option<&str>) -> ModelEntry {
        ModelEntry {
            name: "tiny".to_owned(),
            file: "tiny.gguf".to_owned(),
            size,
            sha256: sha256.map(str::to_owned),
            description: String::new(),
            source: ModelSource::Url {
                url: "https://example.invalid/tiny.gguf".to_owned(),
            },
            alternatives: Vec::new(),
            former_files: Vec::new(),
            more_parts: Vec::new(),
        }
    }

    fn write_model(dir: &Path, content: &[u8]) -> PathBuf {
        let path = dir.join("tiny.gguf");
        fs::write(&path, content).expect("write model");
        path
    }

    #[test]
    fn hash_file_matches_a_one_shot_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_model(dir.path(), CONTENT);
        let mut chunks = 0;
        let (length, digest) = hash_file(&path, |n| chunks += n).expect("hash");
        assert_eq!(
            (length, chunks),
            (CONTENT.len() as u64, CONTENT.len() as u64)
        );
        assert_eq!(digest, CONTENT_SHA256);
    }

    #[test]
    fn verify_accepts_the_right_file_and_marks_it_present() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_model(dir.path(), CONTENT);
        let entry = entry(Some(CONTENT.len() as u64), Some(CONTENT_SHA256));
        assert!(!is_present(&entry, dir.path()), "no marker yet");
        verify(&entry, &path).expect("verifies");
        assert!(is_present(&entry, dir.path()));
        let marker = fs::read_to_string(marker_path(&path)).expect("marker");
        assert_eq!(marker, format!("{}  tiny.gguf\n", CONTENT_SHA256));
    }

    #[test]
    fn verify_rejects_a_wrong_size_before_hashing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_model(dir.path(), &CONTENT[..10]);
        let error = verify(
            &entry(Some(CONTENT.len() as u64), Some(CONTENT_SHA256)),
            &path,
        )
        .expect_err("short file");
        assert!(
            matches!(error, VerifyError::WrongSize { actual: 10, .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("is 10 bytes"), "{message}");
        assert!(message.contains("switchyard models pull tiny"), "{message}");
        assert!(!marker_path(&path).exists());
    }

    #[test]
    fn verify_rejects_a_wrong_digest_and_drops_a_stale_marker() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_model(dir.path(), CONTENT);
        fs::write(marker_path(&path), "stale").expect("marker");
        let entry = entry(Some(CONTENT.len() as u64), Some(WRONG_SHA256));
        let error = verify(&entry, &path).expect_err("wrong digest");
        let VerifyError::WrongDigest {
            expected, actual, ..
        } = &error
        else {
            panic!("expected a digest error, got {error:?}");
        };
        assert_eq!(
            (expected.as_str(), actual.as_str()),
            (WRONG_SHA256, CONTENT_SHA256)
        );
        assert!(error.to_string().contains(CONTENT_SHA256));
        assert!(
            !marker_path(&path).exists(),
            "a failed verify must not leave a marker"
        );
        assert!(!is_present(&entry, dir.path()));
    }

    #[test]
    fn verify_names_a_missing_file_and_the_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error = verify(&entry(None, None), &dir.path().join("tiny.gguf")).expect_err("missing");
        assert!(matches!(error, VerifyError::Missing { .. }));
        assert!(
            error
                .to_string()
                .contains("run `switchyard models pull tiny`")
        );
    }

    #[test]
    fn is_present_requires_marker_size_and_freshness() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_model(dir.path(), CONTENT);
        let entry = entry(Some(CONTENT.len() as u64), None);
        assert!(!is_present(&entry, dir.path()), "file without marker");

        fs::write(marker_path(&path), "").expect("marker");
        assert!(
            is_present(&entry, dir.path()),
            "an empty marker (from the fetch script) counts"
        );

        let mut other_size = entry.clone();
        other_size.size = Some(1);
        assert!(
            !is_present(&other_size, dir.path()),
            "size differs from the manifest"
        );

        let later = SystemTime::now() + Duration::from_secs(60);
        let file = fs::File::options().write(true).open(&path).expect("open");
        file.set_modified(later).expect("set mtime");
        assert!(
            !is_present(&entry, dir.path()),
            "file changed after the marker"
        );
    }
}
