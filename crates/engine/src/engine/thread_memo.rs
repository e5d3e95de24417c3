//! The thread choice remembered per machine and model, in the state
//! directory: a start takes it instead of waiting for the probes (most of a
//! load's time on a small model), and the engine measures again in the
//! background once no job has come for a while (see `threads`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::load::Probe;

/// Where choices are kept, and which one is this engine's.
#[derive(Clone, Debug)]
pub(super) struct ThreadMemo {
    file: PathBuf,
    key: String,
}

/// A remembered choice: the chosen count's measurement, and the other
/// counts measured with it (what a switch to them expects). An older
/// release kept the chosen count alone.
#[derive(Debug, Serialize, Deserialize)]
struct Remembered {
    #[serde(flatten)]
    chosen: Probe,
    #[serde(default)]
    others: Vec<Probe>,
}

/// Whether a remembered measurement can be used.
fn sound(probe: &Probe) -> bool {
    probe.threads > 0 && probe.prompt_tokens_per_s > 0.0 && probe.token_seconds > 0.0
}

impl ThreadMemo {
    /// The choice for `model` (its file name and size) among `candidates`
    /// (which follow the machine's cores), kept in `file`.
    pub(super) fn new(file: &Path, model: &Path, candidates: &[usize]) -> ThreadMemo {
        let size = std::fs::metadata(model).map_or(0, |m| m.len());
        let name = model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        ThreadMemo {
            file: file.to_owned(),
            key: format!("{name} ({size} bytes), threads from {candidates:?}"),
        }
    }

    /// The remembered measurements, the chosen count first; empty where
    /// there is no sound choice.
    pub(super) fn recall(&self) -> Vec<Probe> {
        let Some(Remembered { chosen, others }) = self.read().remove(&self.key) else {
            return Vec::new();
        };
        if !sound(&chosen) {
            return Vec::new();
        }
        let others = others
            .into_iter()
            .filter(|other| sound(other) && other.threads != chosen.threads);
        std::iter::once(chosen).chain(others).collect()
    }

    /// Records `probes` (the chosen count first), replacing the file whole
    /// (a temporary file renamed over it), so another process never reads
    /// half of it. A failure only costs the next start its probes.
    pub(super) fn remember(&self, probes: &[Probe]) {
        let Some((chosen, others)) = probes.split_first() else {
            return;
        };
        let mut all = self.read();
        all.insert(
            self.key.clone(),
            Remembered {
                chosen: *chosen,
                others: others.to_vec(),
            },
        );
        let temporary = self
            .file
            .with_extension(format!("json.{}", std::process::id()));
        let written = self
            .file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| Ok(serde_json::to_vec_pretty(&all)?))
            .and_then(|json| std::fs::write(&temporary, json))
            .and_then(|()| std::fs::rename(&temporary, &self.file));
        if let Err(e) = written {
            tracing::debug!("remembering the thread choice failed: {e}");
        }
    }

    /// Every remembered choice; none when the file is missing or unreadable.
    fn read(&self) -> BTreeMap<String, Remembered> {
        std::fs::read_to_string(&self.file)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(threads: usize) -> Probe {
        Probe {
            threads,
            prompt_tokens_per_s: 120.0 * threads as f64,
            token_seconds: 0.03,
        }
    }

    #[test]
    fn a_choice_is_recalled_for_the_same_model_and_cores_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("state/threads.json");
        let model = dir.path().join("model.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let memo = ThreadMemo::new(&file, &model, &[2, 1]);
        assert_eq!(memo.recall(), vec![], "nothing remembered yet");
        memo.remember(&[probe(1), probe(2)]);
        assert_eq!(memo.recall(), vec![probe(1), probe(2)]);
        assert_eq!(ThreadMemo::new(&file, &model, &[4, 1]).recall(), vec![]);
        std::fs::write(&model, b"GGUF, another build").unwrap();
        assert_eq!(ThreadMemo::new(&file, &model, &[2, 1]).recall(), vec![]);
    }

    #[test]
    fn an_older_release_s_file_gives_its_choice_alone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("threads.json");
        let model = dir.path().join("model.gguf");
        let memo = ThreadMemo::new(&file, &model, &[2, 1]);
        let older = format!(
            r#"{{"{}": {{"threads": 2, "prompt_tokens_per_s": 240.0, "token_seconds": 0.03}}}}"#,
            memo.key
        );
        std::fs::write(&file, older).unwrap();
        assert_eq!(memo.recall(), vec![probe(2)]);
    }

    #[test]
    fn an_unreadable_or_unsound_file_means_measuring_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("threads.json");
        let model = dir.path().join("model.gguf");
        let memo = ThreadMemo::new(&file, &model, &[2, 1]);
        std::fs::write(&file, "{ not json").unwrap();
        assert_eq!(memo.recall(), vec![]);
        memo.remember(&[Probe {
            prompt_tokens_per_s: 0.0,
            ..probe(2)
        }]);
        assert_eq!(memo.recall(), vec![]);
        memo.remember(&[probe(2)]);
        assert_eq!(
            memo.recall(),
            vec![probe(2)],
            "the broken file was replaced"
        );
    }
}
