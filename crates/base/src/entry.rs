//! Typed identities of what can serve a task: a chain entry is the local engine
//! or a remote `provider/model`, parsed once when the configuration is read;
//! an [`EntryKey`] adds the account and names the entry's breaker and quota.
//! Strings exist only at the edges (config files, state keys, wire formats).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The chain entry that names the local engine.
pub const LOCAL: &str = "local";

/// A remote model: the provider's configured name and the model it serves.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

impl ModelRef {
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> ModelRef {
        ModelRef {
            provider: provider.into(),
            model: model.into(),
        }
    }

    /// The local engine (`local/<model>`), not a remote provider: nothing
    /// sent to it leaves the machine.
    pub fn is_local(&self) -> bool {
        self.provider == LOCAL
    }

    /// `provider/model`; the model may itself contain `/` (OpenRouter ids).
    pub fn parse(text: &str) -> Option<ModelRef> {
        let (provider, model) = text.split_once('/')?;
        (!provider.is_empty() && !model.is_empty()).then(|| ModelRef::new(provider, model))
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// One entry of a tier chain or of `autocomplete.chain`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ChainEntry {
    Local,
    Remote(ModelRef),
}

impl ChainEntry {
    pub fn remote(&self) -> Option<&ModelRef> {
        match self {
            ChainEntry::Local => None,
            ChainEntry::Remote(model) => Some(model),
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, ChainEntry::Local)
    }
}

impl TryFrom<String> for ChainEntry {
    type Error = String;

    fn try_from(text: String) -> Result<ChainEntry, String> {
        if text == LOCAL {
            return Ok(ChainEntry::Local);
        }
        ModelRef::parse(&text)
            .map(ChainEntry::Remote)
            .ok_or_else(|| format!("`{text}` is not `provider/model` or `{LOCAL}`"))
    }
}

impl From<ChainEntry> for String {
    fn from(entry: ChainEntry) -> String {
        entry.to_string()
    }
}

impl fmt::Display for ChainEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainEntry::Local => f.write_str(LOCAL),
            ChainEntry::Remote(model) => model.fmt(f),
        }
    }
}

/// An entry as the shared state knows it: its breaker and its quota belong to
/// the account, so providers that share a key share them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryKey {
    pub account: String,
    pub model: ModelRef,
}

impl EntryKey {
    pub fn new(account: impl Into<String>, model: ModelRef) -> EntryKey {
        EntryKey {
            account: account.into(),
            model,
        }
    }

    /// `account/provider/model`: the quota key, and the breaker key after `breaker/`.
    pub fn path(&self) -> String {
        format!("{}/{}", self.account, self.model)
    }

    pub fn breaker_key(&self) -> String {
        format!("breaker/{}", self.path())
    }

    pub fn quota_key(&self) -> String {
        self.path()
    }

    /// Reads back [`EntryKey::path`]: account and provider names hold no `/`.
    pub fn parse_path(path: &str) -> Option<EntryKey> {
        let (account, rest) = path.split_once('/')?;
        Some(EntryKey::new(account, ModelRef::parse(rest)?))
    }
}

impl fmt::Display for EntryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_entries_round_trip_and_models_keep_their_slashes() {
        let entry: ChainEntry = serde_json::from_str("\"openrouter/anthropic/claude\"").unwrap();
        assert_eq!(
            entry,
            ChainEntry::Remote(ModelRef::new("openrouter", "anthropic/claude"))
        );
        assert_eq!(
            serde_json::to_string(&entry).unwrap(),
            "\"openrouter/anthropic/claude\""
        );
        assert_eq!(
            ChainEntry::try_from("local".to_owned()),
            Ok(ChainEntry::Local)
        );
        assert!(ChainEntry::try_from("nope".to_owned()).is_err());
        assert!(ChainEntry::try_from("p/".to_owned()).is_err());
    }

    #[test]
    fn an_entry_key_parses_back_from_its_path() {
        let key = EntryKey::new("team", ModelRef::new("openrouter", "x/y"));
        assert_eq!(key.breaker_key(), "breaker/team/openrouter/x/y");
        assert_eq!(EntryKey::parse_path(&key.path()), Some(key));
    }
}
