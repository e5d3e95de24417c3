//! Configuration: built-in defaults, overridden by the TOML file in the platform
//! config directory, then by the editor's `initializationOptions`, then by
//! `workspace/configuration`. Each layer is validated on its own so an error names
//! the layer (file, key, reason); a rejected layer leaves the last good config in force.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::entry::{ChainEntry, ModelRef};
use crate::task::{TaskProfile, TaskProfiles, Tier};

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
}

/// `[gateway]`: the local OpenAI-compatible front end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Environment variable holding the bearer token callers must send; required
    /// to listen beyond loopback.
    pub token_env: Option<String>,
}

/// `[resilience]`: what every switchyard process shares, and how it backs off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResilienceConfig {
    /// Where breakers and quota buckets live: `file` (this machine, the
    /// default), `file:///dir`, `redis://host:port` (a team) or `memory`.
    pub state: String,
    /// When the shared state cannot be reached: `open` carries on unshared,
    /// `closed` refuses remote calls until it is back.
    pub when_unavailable: crate::state::WhenUnavailable,
    pub backoff: crate::resilience::backoff::BackoffConfig,
    pub breaker: crate::resilience::breaker::BreakerConfig,
    pub governor: crate::resilience::governor::GovernorConfig,
    /// How often parked tasks are retried and shared status re-read.
    pub resume_interval_ms: u64,
    /// How often cooled-down breakers get a canary (their half-open probe).
    pub canary_interval_ms: u64,
    /// How often the primary of each tier gets a canary; 0 is off.
    pub primary_canary_ms: u64,
}

impl Default for ResilienceConfig {
    fn default() -> Self {
        ResilienceConfig {
            state: "file".into(),
            when_unavailable: Default::default(),
            backoff: Default::default(),
            breaker: Default::default(),
            governor: Default::default(),
            resume_interval_ms: 5_000,
            canary_interval_ms: 10_000,
            primary_canary_ms: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The Anthropic Messages API.
    Anthropic,
    /// Any OpenAI-compatible chat completions API (OpenAI, OpenRouter, Ollama, llama.cpp server, vLLM).
    Openai,
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
    pub quota: crate::resilience::governor::Quota,
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
    /// Inference threads; 0 uses every available core.
    pub threads: usize,
    /// Download a manifest model on first use instead of asking for `switchyard models pull`.
    pub auto_pull: bool,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            model: String::new(),
            threads: 0,
            auto_pull: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutocompleteConfig {
    pub enabled: bool,
    /// Hard budget from request to answer.
    pub budget_ms: u64,
    pub input_tokens: usize,
    pub output_tokens: usize,
    /// Of the input tokens, at most this many follow the cursor.
    pub suffix_tokens: usize,
    /// Idle time after an edit before the cache is pre-warmed for the edit position.
    pub prewarm_debounce_ms: u64,
    /// After a suggestion is shown, fill the cache as if it were accepted.
    pub precompute_next: bool,
    /// Who completes, in order: `provider/model` entries before `local` are tried
    /// first with part of the budget; the local engine answers when they miss it.
    pub chain: Vec<ChainEntry>,
    /// A daily window in which the local engine serves even when `chain` puts
    /// a remote first, so the fallback is exercised before it is needed.
    pub local_first: Option<crate::router::local_first::LocalFirstWindow>,
}

impl Default for AutocompleteConfig {
    fn default() -> Self {
        AutocompleteConfig {
            enabled: true,
            budget_ms: 1000,
            input_tokens: 2000,
            output_tokens: 200,
            suffix_tokens: 128,
            prewarm_debounce_ms: 150,
            precompute_next: true,
            chain: vec![ChainEntry::Local],
            local_first: None,
        }
    }
}

/// Where a configuration value came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOrigin {
    File(PathBuf),
    InitializationOptions,
    WorkspaceConfiguration,
}

impl std::fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigOrigin::File(path) => write!(f, "{}", path.display()),
            ConfigOrigin::InitializationOptions => f.write_str("initializationOptions"),
            ConfigOrigin::WorkspaceConfiguration => {
                f.write_str("workspace/configuration (section \"switchyard\")")
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration in {origin}: `{key}`: {reason}")]
pub struct ConfigError {
    pub origin: ConfigOrigin,
    pub key: String,
    pub reason: String,
}

/// The configuration layers as received; [`ConfigLayers::resolve`] merges them.
#[derive(Clone, Debug, Default)]
pub struct ConfigLayers {
    pub file: Option<(PathBuf, Value)>,
    /// The config file could not be read or parsed: reported with every
    /// resolution, so the editor hears of it, not only the log.
    pub file_error: Option<ConfigError>,
    pub initialization_options: Option<Value>,
    pub workspace: Option<Value>,
}

impl ConfigLayers {
    /// Merges the layers in order. A layer that fails validation is reported and
    /// skipped, so the result is always usable: the last good config plus the errors.
    pub fn resolve(&self) -> (Config, Vec<ConfigError>) {
        let mut merged = serde_json::to_value(Config::default()).expect("defaults serialize");
        let mut config = Config::default();
        let mut errors: Vec<ConfigError> = self.file_error.iter().cloned().collect();
        let layers = [
            self.file
                .as_ref()
                .map(|(path, v)| (ConfigOrigin::File(path.clone()), v)),
            self.initialization_options
                .as_ref()
                .map(|v| (ConfigOrigin::InitializationOptions, v)),
            self.workspace
                .as_ref()
                .map(|v| (ConfigOrigin::WorkspaceConfiguration, v)),
        ];
        for (origin, layer) in layers.into_iter().flatten() {
            if layer.is_null() {
                continue;
            }
            let mut candidate = merged.clone();
            merge(&mut candidate, &editor_spelling(layer));
            match parse(&candidate).and_then(|c| c.validate().map(|()| c)) {
                Ok(valid) => {
                    merged = candidate;
                    config = valid;
                }
                Err((key, reason)) => errors.push(ConfigError {
                    origin,
                    key,
                    reason,
                }),
            }
        }
        (config, errors)
    }
}

/// The config file's default location: `$SWITCHYARD_CONFIG`, else `config.toml` in the
/// platform config directory.
pub fn default_file_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SWITCHYARD_CONFIG") {
        return Some(path.into());
    }
    crate::paths::project_dirs().map(|d| d.config_dir().join("config.toml"))
}

/// Reads a TOML config file as a layer. A missing file is no layer; an unreadable
/// or malformed one is an error naming the file.
pub fn read_file(path: &Path) -> Result<Option<(PathBuf, Value)>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError {
                origin: ConfigOrigin::File(path.to_owned()),
                key: "(file)".into(),
                reason: format!("cannot read it: {e}"),
            });
        }
    };
    let value: toml::Value = toml::from_str(&text).map_err(|e| ConfigError {
        origin: ConfigOrigin::File(path.to_owned()),
        key: e.span().map_or("(file)".into(), |span| {
            let line = text[..span.start].matches('\n').count() + 1;
            format!("line {line}")
        }),
        reason: e.message().to_owned(),
    })?;
    let json = serde_json::to_value(value).map_err(|e| ConfigError {
        origin: ConfigOrigin::File(path.to_owned()),
        key: "(file)".into(),
        reason: e.to_string(),
    })?;
    Ok(Some((path.to_owned(), json)))
}

/// Records local-only mode in the config file, keeping the rest of the file
/// (comments, order) as it was. Written to a temp file and renamed into place.
pub fn persist_local_only(path: &Path, on: bool) -> std::io::Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })?;
    doc["local_only"] = toml_edit::value(on);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let temp = path.with_extension("toml.tmp");
    std::fs::write(&temp, doc.to_string())?;
    std::fs::rename(&temp, path)
}

fn parse(value: &Value) -> Result<Config, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        (key, e.into_inner().to_string())
    })
}

/// Editors spell initialization options in camelCase (`statusNotifications`,
/// as the LSP spec does); the config file uses snake_case. Accept both.
fn editor_spelling(layer: &Value) -> Value {
    let mut layer = layer.clone();
    if let Value::Object(map) = &mut layer {
        for (camel, snake) in [
            ("statusNotifications", "status_notifications"),
            ("localOnly", "local_only"),
        ] {
            if let Some(value) = map.remove(camel) {
                map.insert(snake.to_owned(), value);
            }
        }
    }
    layer
}

/// Deep-merges `overlay` into `base`: objects merge key by key, anything else replaces.
fn merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (key, value) in overlay {
                merge(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (base, overlay) => *base = overlay.clone(),
    }
}

impl Config {
    /// Configured providers over the well-known defaults.
    pub fn all_providers(&self) -> BTreeMap<String, ProviderConfig> {
        let mut all = default_providers();
        all.extend(self.providers.clone());
        all
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let providers = self.all_providers();
        let chains = [Tier::Large, Tier::Medium, Tier::Small]
            .into_iter()
            .map(|tier| (format!("tiers.{tier}"), self.tiers.get(tier)))
            .chain([(
                "autocomplete.chain".to_owned(),
                self.autocomplete.chain.as_slice(),
            )]);
        for (chain, entries) in chains {
            for (i, entry) in entries.iter().enumerate() {
                let key = format!("{chain}[{i}]");
                let Some(ModelRef { provider, .. }) = entry.remote() else {
                    continue;
                };
                if !providers.contains_key(provider) {
                    return Err((
                        key,
                        format!(
                            "`{entry}` names no configured provider (known: {})",
                            providers.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
        for (name, provider) in &self.providers {
            if !(provider.base_url.starts_with("http://")
                || provider.base_url.starts_with("https://"))
            {
                return Err((
                    format!("providers.{name}.base_url"),
                    format!("`{}` is not an http(s) URL", provider.base_url),
                ));
            }
        }
        for (kind, profile) in [
            ("explain", &self.tasks.explain),
            ("refactor", &self.tasks.refactor),
        ] {
            check_profile(kind, profile)?;
        }
        let a = &self.autocomplete;
        check("autocomplete.budget_ms", a.budget_ms as usize, 50, 10_000)?;
        check("autocomplete.input_tokens", a.input_tokens, 64, 32_768)?;
        check("autocomplete.output_tokens", a.output_tokens, 1, 4_096)?;
        check(
            "autocomplete.suffix_tokens",
            a.suffix_tokens,
            0,
            a.input_tokens / 2,
        )?;
        check(
            "autocomplete.prewarm_debounce_ms",
            a.prewarm_debounce_ms as usize,
            0,
            10_000,
        )?;
        check("local.threads", self.local.threads, 0, 256)?;
        if let Some(window) = &a.local_first {
            window
                .start_minute()
                .map_err(|reason| ("autocomplete.local_first.start".to_owned(), reason))?;
            check(
                "autocomplete.local_first.minutes",
                window.minutes as usize,
                1,
                24 * 60,
            )?;
        }
        self.resilience.validate()
    }
}

impl ResilienceConfig {
    fn validate(&self) -> Result<(), (String, String)> {
        let state = &self.state;
        if !(matches!(state.as_str(), "file" | "memory")
            || ["file://", "redis://", "rediss://"]
                .iter()
                .any(|s| state.starts_with(s)))
        {
            return Err((
                "resilience.state".into(),
                format!("`{state}` is not `file`, `file:///dir`, `redis://host:port` or `memory`"),
            ));
        }
        let share = |key: &str, value: f64| {
            if value > 0.0 && value <= 1.0 {
                Ok(())
            } else {
                Err((
                    key.to_owned(),
                    format!("must be above 0 and at most 1, got {value}"),
                ))
            }
        };
        share("resilience.governor.share", self.governor.share)?;
        share("resilience.breaker.error_rate", self.breaker.error_rate)?;
        check(
            "resilience.breaker.failures",
            self.breaker.failures as usize,
            1,
            1_000,
        )?;
        check(
            "resilience.breaker.window_ms",
            self.breaker.window_ms as usize,
            1_000,
            3_600_000,
        )?;
        check(
            "resilience.breaker.cooldown_ms",
            self.breaker.cooldown_ms as usize,
            100,
            86_400_000,
        )?;
        check(
            "resilience.resume_interval_ms",
            self.resume_interval_ms as usize,
            50,
            3_600_000,
        )?;
        let canary = self.canary_interval_ms as usize;
        check("resilience.canary_interval_ms", canary, 50, 3_600_000)?;
        let primary = self.primary_canary_ms as usize;
        check("resilience.primary_canary_ms", primary, 0, 86_400_000)?;
        let b = &self.backoff;
        check("resilience.backoff.cap_ms", b.cap_ms as usize, 1, 3_600_000)?;
        for (key, base) in [
            ("rate_limit_ms", b.rate_limit_ms),
            ("overloaded_ms", b.overloaded_ms),
            ("transient_ms", b.transient_ms),
        ] {
            check(
                &format!("resilience.backoff.{key}"),
                base as usize,
                1,
                b.cap_ms as usize,
            )?;
        }
        Ok(())
    }
}

fn check_profile(kind: &str, p: &TaskProfile) -> Result<(), (String, String)> {
    check(
        &format!("tasks.{kind}.input_tokens"),
        p.input_tokens,
        64,
        1_000_000,
    )?;
    check(
        &format!("tasks.{kind}.output_tokens"),
        p.output_tokens,
        1,
        128_000,
    )?;
    check(
        &format!("tasks.{kind}.first_token_ms"),
        p.first_token_ms as usize,
        100,
        3_600_000,
    )?;
    check(
        &format!("tasks.{kind}.total_ms"),
        p.total_ms as usize,
        p.first_token_ms as usize,
        3_600_000,
    )?;
    check(
        &format!("tasks.{kind}.idle_ms"),
        p.idle_ms as usize,
        100,
        3_600_000,
    )?;
    check(
        &format!("tasks.{kind}.wait_ms"),
        p.wait_ms as usize,
        0,
        86_400_000,
    )
}

fn check(key: &str, value: usize, min: usize, max: usize) -> Result<(), (String, String)> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err((
            key.into(),
            format!("must be between {min} and {max}, got {value}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn later_layers_override_earlier_ones() {
        let layers = ConfigLayers {
            file: Some((
                "/etc/sy.toml".into(),
                json!({"autocomplete": {"budget_ms": 800, "output_tokens": 64}}),
            )),
            initialization_options: Some(json!({"autocomplete": {"budget_ms": 700}})),
            workspace: None,
            ..Default::default()
        };
        let (config, errors) = layers.resolve();
        assert!(errors.is_empty());
        assert_eq!(config.autocomplete.budget_ms, 700);
        assert_eq!(config.autocomplete.output_tokens, 64);
        assert_eq!(config.autocomplete.input_tokens, 2000);
    }

    #[test]
    fn invalid_layer_is_reported_with_origin_and_key_and_skipped() {
        let layers = ConfigLayers {
            file: Some((
                "/etc/sy.toml".into(),
                json!({"autocomplete": {"budget_ms": 800}}),
            )),
            initialization_options: Some(json!({"autocomplete": {"budget_ms": 5}})),
            workspace: None,
            ..Default::default()
        };
        let (config, errors) = layers.resolve();
        assert_eq!(config.autocomplete.budget_ms, 800, "last good config stays");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].origin, ConfigOrigin::InitializationOptions);
        assert_eq!(errors[0].key, "autocomplete.budget_ms");
        assert!(
            errors[0].reason.contains("between 50 and 10000"),
            "{}",
            errors[0].reason
        );
    }

    #[test]
    fn unknown_and_mistyped_keys_name_the_key() {
        let unknown = ConfigLayers {
            workspace: Some(json!({"autocomplete": {"budjet_ms": 1}})),
            ..Default::default()
        };
        let (_, errors) = unknown.resolve();
        assert_eq!(errors[0].key, "autocomplete.budjet_ms");
        assert!(
            errors[0].reason.contains("unknown field"),
            "{}",
            errors[0].reason
        );

        let mistyped = ConfigLayers {
            workspace: Some(json!({"local": {"threads": "many"}})),
            ..Default::default()
        };
        let (_, errors) = mistyped.resolve();
        assert_eq!(errors[0].key, "local.threads");
        assert_eq!(
            errors[0].to_string().split(':').next().unwrap(),
            "invalid configuration in workspace/configuration (section \"switchyard\")"
        );
    }

    #[test]
    fn malformed_toml_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[autocomplete]\nbudget_ms = = 3\n").unwrap();
        let err = read_file(&path).unwrap_err();
        assert_eq!(err.origin, ConfigOrigin::File(path.clone()));
        assert_eq!(err.key, "line 2");
    }

    #[test]
    fn a_chain_entry_must_name_a_provider() {
        let layers = ConfigLayers {
            workspace: Some(json!({"tiers": {"large": ["nowhere/model-x"]}})),
            ..Default::default()
        };
        let (_, errors) = layers.resolve();
        assert_eq!(errors[0].key, "tiers.large[0]");
        assert!(
            errors[0].reason.contains("names no configured provider"),
            "{}",
            errors[0].reason
        );
    }

    #[test]
    fn status_notifications_accepts_the_camel_case_option() {
        let layers = ConfigLayers {
            initialization_options: Some(json!({"statusNotifications": true})),
            ..Default::default()
        };
        let (config, errors) = layers.resolve();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(config.status_notifications);
    }

    #[test]
    fn local_only_is_persisted_without_losing_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            "# my settings\n[autocomplete]\nbudget_ms = 800 # fast\n",
        )
        .unwrap();
        persist_local_only(&path, true).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("# my settings") && text.contains("budget_ms = 800 # fast"),
            "{text}"
        );
        let (_, layer) = read_file(&path).unwrap().unwrap();
        let (config, errors) = ConfigLayers {
            file: Some((path, layer)),
            ..Default::default()
        }
        .resolve();
        assert!(errors.is_empty() && config.local_only);
    }

    #[test]
    fn missing_file_is_no_layer() {
        assert_eq!(
            read_file(Path::new("/nonexistent/switchyard.toml")).unwrap(),
            None
        );
    }
}
