//! Configuration: built-in defaults, overridden by the TOML file in the platform
//! config directory, then by the editor's `initializationOptions`, then by
//! `workspace/configuration`. Each layer is validated on its own so an error names
//! the layer (file, key, reason); a rejected layer leaves the last good config in force.

pub mod follow;
mod layers;
pub mod local_first;
pub mod local_setup;
mod resolve;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use switchyard_base::entry::ChainEntry;
use switchyard_base::task::{TaskProfiles, Tier};
use switchyard_providers::ProviderKind;
use switchyard_resilience::ResilienceConfig;

pub use layers::{
    ConfigError, ConfigLayers, ConfigOrigin, default_file_path, persist_local_only, read_file,
};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub local: LocalConfig,
    pub autocomplete: AutocompleteConfig,
    /// Remote providers by name; chains refer to them as `name/model`.
    pub providers: BTreeMap<String, ProviderConfig>,
    pub tiers: TierChains,
    pub tasks: TaskProfiles,
    /// Only the local engine serves (toggled by `switchyard.toggleLocalOnly`).
    pub local_only: bool,
    /// The client handles `switchyard/status` notifications (editor integrations opt in).
    pub status_notifications: bool,
    pub resilience: ResilienceConfig,
    pub gateway: GatewayConfig,
    pub privacy: PrivacyConfig,
    /// Settings that decide what leaves the machine could not be read (or
    /// the file at all): only the local model serves, whatever `local_only`
    /// says, until they can. Why, as the user should read it. Never read
    /// from a layer: resolution sets it.
    #[serde(skip)]
    pub fail_closed: Option<String>,
}

/// `[privacy]`: what may leave the machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrivacyConfig {
    /// Documents only the local model may serve (gitignore syntax; `!` takes
    /// a path back out). Added to the privacy rules' default local-only paths
    /// and to each workspace root's `.switchyardignore`.
    pub local_only_paths: Vec<String>,
    /// Folders (and everything under them) whose documents only the local
    /// model may serve: a workspace that is local-only while others are not.
    /// `~/` is the home directory.
    pub local_only_workspaces: Vec<String>,
    /// Replace secrets in the gateway's callers' messages too (editor requests
    /// are always redacted).
    pub redact_gateway: bool,
}

impl Default for PrivacyConfig {
    fn default() -> PrivacyConfig {
        PrivacyConfig {
            local_only_paths: Vec::new(),
            local_only_workspaces: Vec::new(),
            redact_gateway: true,
        }
    }
}

/// `[gateway]`: the local OpenAI-compatible front end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Environment variable holding the bearer token callers must send; required
    /// to listen beyond loopback.
    pub token_env: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    pub base_url: String,
    /// Environment variable holding the API key (the key itself never goes in config).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Extra request headers (OpenRouter's `HTTP-Referer`, `X-Title`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The account this provider's quota and breakers belong to; providers
    /// that share a key share one. Defaults to the provider's name.
    #[serde(default)]
    pub account: Option<String>,
    /// Per-minute quotas of the account; learned from rate-limit headers where unset.
    #[serde(default)]
    pub quota: switchyard_resilience::governor::Quota,
}

impl ProviderConfig {
    pub fn account<'a>(&'a self, name: &'a str) -> &'a str {
        self.account.as_deref().unwrap_or(name)
    }
}

/// Ordered `provider/model` entries per tier; `local` is the local engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TierChains {
    pub large: Vec<ChainEntry>,
    pub medium: Vec<ChainEntry>,
    pub small: Vec<ChainEntry>,
}

impl Default for TierChains {
    fn default() -> Self {
        let entries = |list: &[&str]| {
            list.iter()
                .map(|s| ChainEntry::try_from(s.to_string()).expect("default chain entries parse"))
                .collect()
        };
        TierChains {
            large: entries(&[
                "anthropic/claude-sonnet-4-5",
                "openrouter/anthropic/claude-sonnet-4.5",
                "openai/gpt-5",
            ]),
            medium: entries(&[
                "anthropic/claude-haiku-4-5",
                "openrouter/anthropic/claude-haiku-4.5",
                "openai/gpt-5-mini",
            ]),
            small: entries(&["local"]),
        }
    }
}

impl TierChains {
    pub fn get(&self, tier: Tier) -> &[ChainEntry] {
        match tier {
            Tier::Large => &self.large,
            Tier::Medium => &self.medium,
            Tier::Small => &self.small,
        }
    }
}

/// The well-known providers, usable as soon as their key is in the environment.
pub fn default_providers() -> BTreeMap<String, ProviderConfig> {
    let provider = |kind, base_url: &str, key: &str| ProviderConfig {
        kind,
        base_url: base_url.into(),
        api_key_env: Some(key.into()),
        headers: BTreeMap::new(),
        account: None,
        quota: Default::default(),
    };
    let mut openrouter = provider(
        ProviderKind::Openai,
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
    );
    openrouter
        .headers
        .insert("X-Title".into(), "switchyard".into());
    BTreeMap::from([
        (
            "anthropic".to_owned(),
            provider(
                ProviderKind::Anthropic,
                "https://api.anthropic.com",
                "ANTHROPIC_API_KEY",
            ),
        ),
        (
            "openai".to_owned(),
            provider(
                ProviderKind::Openai,
                "https://api.openai.com/v1",
                "OPENAI_API_KEY",
            ),
        ),
        ("openrouter".to_owned(), openrouter),
    ])
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    /// A model name from the manifest (`switchyard models list`) or a path to a `.gguf` file.
    /// Empty picks the machine's default.
    pub model: String,
    /// Inference threads; 0 follows the machine: every core while it is
    /// quiet, fewer while other processes take cores.
    pub threads: usize,
    /// Speculative decoding: most tokens drafted by n-gram lookup in the prompt
    /// and verified in one batch per step; 0 turns it off. Output is unchanged.
    pub draft_tokens: usize,
    /// The KV caches of this many recently left prompts (other documents,
    /// other places) are kept in memory, at most 128 MiB, so switching back is
    /// warm; 0 keeps none.
    pub recent_prompts: usize,
    /// Download a manifest model on first use instead of asking for `switchyard models pull`.
    pub auto_pull: bool,
    /// Editor windows running the same model share one engine: the first
    /// hosts it, the others send their jobs to it (one model in memory, one
    /// queue for the machine). Off: every window runs its own.
    pub share_engine: bool,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            model: String::new(),
            threads: 0,
            draft_tokens: 8,
            recent_prompts: 4,
            auto_pull: true,
            share_engine: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutocompleteConfig {
    pub enabled: bool,
    /// Hard budget from request to answer.
    pub budget_ms: u64,
    /// The budget of a request the user asked for (the editor's "trigger
    /// suggestion" key): longer, since the user is waiting for it.
    pub invoked_budget_ms: u64,
    /// Completions on or off by language id (`"markdown" = false`); `"*"`
    /// is every language not named (on when absent).
    pub languages: BTreeMap<String, bool>,
    pub input_tokens: usize,
    pub output_tokens: usize,
    /// Of the input tokens, at most this many follow the cursor.
    pub suffix_tokens: usize,
    /// Tokens of repository context (snippets of places visited and
    /// definitions from other open documents) in front of the window, on top
    /// of `input_tokens`; 0 turns repository context off.
    pub repository_tokens: usize,
    /// Idle time after an edit before the cache is pre-warmed for the edit position.
    pub prewarm_debounce_ms: u64,
    /// After a suggestion is shown, fill the cache as if it were accepted.
    pub precompute_next: bool,
    /// Who completes, in order: `provider/model` entries before `local` are tried
    /// first with part of the budget; the local engine answers when they miss it.
    pub chain: Vec<ChainEntry>,
    /// A daily window in which the local engine serves even when `chain` puts
    /// a remote first, so the fallback is exercised before it is needed.
    pub local_first: Option<local_first::LocalFirstWindow>,
}

impl Default for AutocompleteConfig {
    fn default() -> Self {
        AutocompleteConfig {
            enabled: true,
            budget_ms: 1000,
            invoked_budget_ms: 3000,
            languages: BTreeMap::new(),
            input_tokens: 2000,
            output_tokens: 200,
            suffix_tokens: 128,
            repository_tokens: 1024,
            prewarm_debounce_ms: 150,
            precompute_next: true,
            chain: vec![ChainEntry::Local],
            local_first: None,
        }
    }
}

/// What the user is told when the configuration failed closed for `reason`.
pub fn failed_closed_notice(reason: &str) -> String {
    format!("only the local model serves until the configuration can be read: {reason}")
}

impl Config {
    /// Why only the local model may serve anything, if it may: the mode is
    /// on, or the configuration failed closed.
    pub fn local_only_reason(&self) -> Option<String> {
        match (&self.fail_closed, self.local_only) {
            (Some(reason), _) => Some(format!("local-only mode is on: {reason}")),
            (None, true) => Some("local-only mode is on".into()),
            (None, false) => None,
        }
    }

    /// Configured providers over the well-known defaults.
    pub fn all_providers(&self) -> BTreeMap<String, ProviderConfig> {
        let mut all = default_providers();
        all.extend(self.providers.clone());
        all
    }
}
