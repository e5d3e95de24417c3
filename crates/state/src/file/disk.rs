//! How records sit on disk: file names for keys, private (0700/0600)
//! directories and files, lock files and their exclusive locks, and atomic
//! replacement of a file by renaming a temp file over it.
//!
//! The directory helpers and [`replace_file`] are also used outside the shared
//! state (probe history, parked work), through `crate::file`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

pub(super) const TEMP_SUFFIX: &str = ".tmp";
/// Escaped keys longer than this are cut and suffixed with a hash of the whole
/// key, keeping every file name (temp names included) under the usual 255 bytes.
pub(super) const MAX_NAME_STEM: usize = 100;

/// Keys hold '/' and ':'; a file name holds only `[A-Za-z0-9._-]` and `%XX` escapes.
pub(super) fn escape(key: &str) -> String {
    let mut name = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            name.push(byte as char);
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

/// The file name of `key` without suffix: its escaped form, or for long keys a
/// cut of it plus `~` and a hash (`~` never appears in an escaped key).
pub(super) fn file_stem(key: &str) -> String {
    let mut stem = escape(key);
    if stem.len() > MAX_NAME_STEM {
        let hash = hex::encode(Sha256::digest(key.as_bytes()));
        stem.truncate(MAX_NAME_STEM);
        stem.push('~');
        stem.push_str(&hash[..32]);
    }
    stem
}

/// Creates `dir` and its parents; new directories are 0700 on Unix.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn private_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

pub(super) fn open_lock_file(path: &Path) -> io::Result<File> {
    private_file_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Takes `file`'s exclusive lock; it is released when the file is dropped.
pub(super) async fn lock(file: File) -> io::Result<File> {
    match file.try_lock() {
        Ok(()) => return Ok(file),
        Err(fs::TryLockError::WouldBlock) => {}
        Err(fs::TryLockError::Error(e)) => return Err(e),
    }
    // Contended: wait on the blocking pool, not on a runtime thread.
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime
            .spawn_blocking(move || file.lock().map(|()| file))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e))),
        Err(_) => file.lock().map(|()| file),
    }
}

/// Writes `bytes` to a fresh private (0600 on Unix) temp file beside `path`,
/// then renames it over `path`: readers and crashes see the old or the new file.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("record");
    let temp = path.with_file_name(format!(
        ".{name}.{}.{}{TEMP_SUFFIX}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = private_file_options()
        .write(true)
        .create_new(true)
        .open(&temp)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| fs::rename(&temp, path));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_names_distinct_and_short() {
        assert_eq!(
            escape("breaker/openai:gpt-4.1"),
            "breaker%2Fopenai%3Agpt-4.1"
        );
        assert_ne!(file_stem("a/b"), file_stem("a%2Fb"));
        let long = "k".repeat(1000);
        assert!(file_stem(&long).len() < 140);
        assert_ne!(file_stem(&long), file_stem(&"k".repeat(1001)));
    }
}
