//! What turns completions off where the user asked: a language rule
//! (`autocomplete.languages`) and a snooze. The snooze is a time, kept in
//! the state directory (0600), so a restart keeps it and every switchyard
//! process of the user honours it, as the local-only toggle is kept.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{CompletionRequest, NoSuggestion};
use switchyard_base::clock::now_ms;
use switchyard_config::AutocompleteConfig;
use switchyard_state::file::{create_private_dir, replace_file};

/// How often the snooze file is read again (another process may have
/// snoozed or resumed): often enough to follow a click, rarely enough that
/// a keystroke never waits for the disk.
const REREAD_EVERY: Duration = Duration::from_secs(1);

impl super::CompletionService {
    /// Whether the user has completions on here: enabled, not snoozed, on
    /// for the document's language.
    pub(super) fn turned_on(
        &self,
        request: &CompletionRequest,
        config: &AutocompleteConfig,
    ) -> Result<(), NoSuggestion> {
        if !config.enabled {
            return Err(NoSuggestion::Disabled);
        }
        if let Some(until_ms) = self.snooze().until_ms() {
            return Err(NoSuggestion::Snoozed { until_ms });
        }
        match &request.language {
            Some(language) if !language_enabled(&config.languages, language) => {
                Err(NoSuggestion::LanguageOff(language.clone()))
            }
            _ => Ok(()),
        }
    }
}

/// Whether completions are on for `language_id`: its own rule, else `"*"`,
/// else on.
pub fn language_enabled(languages: &BTreeMap<String, bool>, language_id: &str) -> bool {
    languages
        .get(language_id)
        .or_else(|| languages.get("*"))
        .copied()
        .unwrap_or(true)
}

#[derive(Serialize, Deserialize)]
struct SnoozeRecord {
    until_ms: u64,
}

/// Completions paused until a time, for every editor of the user.
pub struct Snooze {
    /// `None`: this process only (tests, one-shot commands).
    path: Option<PathBuf>,
    /// The end last read or set, and when it was read.
    known: Mutex<(Option<u64>, Option<Instant>)>,
}

impl Snooze {
    /// The snooze kept in `dir` (the state directory).
    pub fn kept_in(dir: &Path) -> Snooze {
        Snooze {
            path: Some(dir.join("snooze.json")),
            known: Mutex::new((None, None)),
        }
    }

    pub fn in_memory() -> Snooze {
        Snooze {
            path: None,
            known: Mutex::new((None, None)),
        }
    }

    /// When the snooze ends (ms since the epoch), while one is on.
    pub fn until_ms(&self) -> Option<u64> {
        let mut known = self.known.lock().expect("snooze lock");
        let stale = known.1.is_none_or(|at| at.elapsed() >= REREAD_EVERY);
        if let (Some(path), true) = (&self.path, stale) {
            *known = (read(path), Some(Instant::now()));
        }
        known.0.filter(|&until| until > now_ms())
    }

    /// Pauses completions for `length` from now; returns when they resume.
    pub fn snooze(&self, length: Duration) -> io::Result<u64> {
        let until_ms = now_ms() + length.as_millis() as u64;
        self.keep(Some(until_ms))?;
        Ok(until_ms)
    }

    /// Ends a snooze now.
    pub fn resume(&self) -> io::Result<()> {
        self.keep(None)
    }

    fn keep(&self, until_ms: Option<u64>) -> io::Result<()> {
        *self.known.lock().expect("snooze lock") = (until_ms, Some(Instant::now()));
        let Some(path) = &self.path else {
            return Ok(());
        };
        match until_ms {
            Some(until_ms) => {
                if let Some(dir) = path.parent() {
                    create_private_dir(dir)?;
                }
                let record = serde_json::to_vec(&SnoozeRecord { until_ms })?;
                replace_file(path, &record)
            }
            None => match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        }
    }
}

/// The end the file holds; a missing or broken file is no snooze.
fn read(path: &Path) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    let record: SnoozeRecord = serde_json::from_slice(&bytes).ok()?;
    Some(record.until_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_language_rule_wins_over_the_default() {
        let rules: BTreeMap<String, bool> = [("*".into(), false), ("rust".into(), true)].into();
        assert!(language_enabled(&rules, "rust"));
        assert!(!language_enabled(&rules, "markdown"));
        assert!(language_enabled(&BTreeMap::new(), "markdown"));
    }

    #[tokio::test]
    async fn a_snooze_survives_a_restart_and_ends_on_resume() {
        let dir = tempfile::tempdir().unwrap();
        let until = Snooze::kept_in(dir.path())
            .snooze(Duration::from_secs(300))
            .unwrap();
        let restarted = Snooze::kept_in(dir.path());
        assert_eq!(restarted.until_ms(), Some(until));
        restarted.resume().unwrap();
        assert_eq!(Snooze::kept_in(dir.path()).until_ms(), None);
        std::fs::write(dir.path().join("snooze.json"), "garbage").unwrap();
        assert_eq!(Snooze::kept_in(dir.path()).until_ms(), None);
    }
}
