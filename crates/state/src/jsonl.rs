//! Private JSON-lines logs that every switchyard process appends to (the
//! outbound audit, the completion stats): one line per record, written with
//! one `O_APPEND` write so lines from several processes never interleave,
//! 0600, and moved to `<name>.1` past a size (one process rotates at a time,
//! under a lock file). Reading takes both files, oldest first, and skips
//! lines that do not parse.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Past this size a log moves to `<name>.1` (replacing the one before).
pub const ROTATE_BYTES: u64 = 8 * 1024 * 1024;

/// Appends `record` as one line, rotating first when the file is past `rotate_bytes`.
pub fn append<T: Serialize>(path: &Path, record: &T, rotate_bytes: u64) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let full = || std::fs::metadata(path).is_ok_and(|m| m.len() > rotate_bytes);
    if full() {
        // Every switchyard process writes here: one rotates at a time, and the
        // others see the fresh file once they hold the lock (two renames in a
        // row would put a nearly empty file over the full one).
        let lock = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .mode(0o600)
            .open(with_suffix(path, ".lock"))?;
        lock.lock()?;
        if full() {
            std::fs::rename(path, rotated(path))?;
        }
    }
    let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
    line.push('\n');
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(line.as_bytes())
}

/// Every record `keep` accepts, oldest first, from the rotated file and the
/// current one.
pub fn read<T: DeserializeOwned>(
    path: &Path,
    keep: impl Fn(&T) -> bool,
) -> std::io::Result<Vec<T>> {
    let mut records = Vec::new();
    for file in [rotated(path), path.to_path_buf()] {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        records.extend(
            text.lines()
                .filter_map(|line| serde_json::from_str::<T>(line).ok())
                .filter(|r| keep(r)),
        );
    }
    Ok(records)
}

/// Where a full log moves.
pub fn rotated(path: &Path) -> PathBuf {
    with_suffix(path, ".1")
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(suffix);
    path.with_file_name(name)
}
