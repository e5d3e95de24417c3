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

#[derive(Debug, Serialize, Deserialize)]
struct Remembered {
    threads: usize,
    prompt_tokens_per_s: f64,
    token_seconds: f64,
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

    /// The remembered choice, if there is a sound one.
    pub(super) fn recall(&self) -> Option<Probe> {
        let remembered = self.read().remove(&self.key)?;
        let sound = remembered.threads > 0
            && remembered.prompt_tokens_per_s > 0.0
            && remembered.token_seconds > 0.0;
        sound.then_some(Probe {
            threads: remembered.threads,
            prompt_tokens_per_s: remembered.prompt_tokens_per_s,
            token_seconds: remembered.token_seconds,
        })
    }

    /// Records `probe`, replacing the file whole (a temporary file renamed
    /// over it), so another process never reads half of it. A failure only
    /// costs the next start its probes.
    pub(super) fn remember(&self, probe: &Probe) {
        let mut all = self.read();
        all.insert(
            self.key.clone(),
            Remembered {
                threads: probe.threads,
                prompt_tokens_per_s: probe.prompt_tokens_per_s,
                token_seconds: probe.token_seconds,
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
            prompt_tokens_per_s: 120.0,
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
        assert_eq!(memo.recall(), None, "nothing remembered yet");
        memo.remember(&probe(1));
        assert_eq!(memo.recall(), Some(probe(1)));
        assert_eq!(ThreadMemo::new(&file, &model, &[4, 1]).recall(), None);
        std::fs::write(&model, b"GGUF, another build").unwrap();
        assert_eq!(ThreadMemo::new(&file, &model, &[2, 1]).recall(), None);
    }

    #[test]
    fn an_unreadable_or_unsound_file_means_measuring_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("threads.json");
        let model = dir.path().join("model.gguf");
        let memo = ThreadMemo::new(&file, &model, &[2, 1]);
        std::fs::write(&file, "{ not json").unwrap();
        assert_eq!(memo.recall(), None);
        memo.remember(&Probe {
            prompt_tokens_per_s: 0.0,
            ..probe(2)
        });
        assert_eq!(memo.recall(), None);
        memo.remember(&probe(2));
        assert_eq!(
            memo.recall(),
            Some(probe(2)),
            "the broken file was replaced"
        );
    }
}
