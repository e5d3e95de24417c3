//! The layers and their resolution: file reading, merge, validation, errors, persistence.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Config;
use switchyard_resilience::ResilienceConfig;

use switchyard_base::entry::{LOCAL, ModelRef};
use switchyard_base::task::{TaskProfile, Tier};

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

/// A key of a layer that could not be applied, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub origin: ConfigOrigin,
    pub key: String,
    pub reason: String,
    /// An unknown or removed key, left out while the rest of its layer
    /// applies; otherwise a value that was rejected.
    pub ignored: bool,
    /// The key an unknown one was probably meant to be (`section.key`).
    pub meant: Option<String>,
}

impl std::error::Error for ConfigError {}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ConfigError {
            origin,
            key,
            reason,
            ..
        } = self;
        match self.ignored {
            true => write!(f, "ignoring `{key}` in {origin}: {reason}"),
            false => write!(f, "invalid configuration in {origin}: `{key}`: {reason}"),
        }
    }
}

impl ConfigError {
    /// A value (or a file) that could not be applied.
    pub fn invalid(
        origin: ConfigOrigin,
        key: impl Into<String>,
        reason: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            origin,
            key: key.into(),
            reason: reason.into(),
            ignored: false,
            meant: None,
        }
    }

    /// An unknown or removed key, left out.
    pub fn ignored(
        origin: ConfigOrigin,
        key: String,
        reason: String,
        meant: Option<String>,
    ) -> ConfigError {
        ConfigError {
            origin,
            key,
            reason,
            ignored: true,
            meant,
        }
    }
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
    /// The user's last local-only toggle (`switchyard.toggleLocalOnly`),
    /// laid over every layer; a hand edit of the file's `local_only` ends it.
    pub local_only: Option<bool>,
}

/// The config file's default location: `$SWITCHYARD_CONFIG`, else `config.toml` in the
/// platform config directory.
pub fn default_file_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SWITCHYARD_CONFIG") {
        return Some(path.into());
    }
    switchyard_base::paths::project_dirs().map(|d| d.config_dir().join("config.toml"))
}

/// Reads a TOML config file as a layer. A missing file is no layer; an unreadable
/// or malformed one is an error naming the file.
pub fn read_file(path: &Path) -> Result<Option<(PathBuf, Value)>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError::invalid(
                ConfigOrigin::File(path.to_owned()),
                "(file)",
                format!("cannot read it: {e}"),
            ));
        }
    };
    let value: toml::Value = toml::from_str(&text).map_err(|e| {
        let key = e.span().map_or("(file)".into(), |span| {
            let line = text[..span.start].matches('\n').count() + 1;
            format!("line {line}")
        });
        ConfigError::invalid(ConfigOrigin::File(path.to_owned()), key, e.message())
    })?;
    let json = serde_json::to_value(value).map_err(|e| {
        ConfigError::invalid(ConfigOrigin::File(path.to_owned()), "(file)", e.to_string())
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

pub(super) fn parse(value: &Value) -> Result<Config, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        (key, e.into_inner().to_string())
    })
}

/// Editors spell initialization options in camelCase (`statusNotifications`,
/// as the LSP spec does); the config file uses snake_case. Accept both.
pub(super) fn editor_spelling(layer: &Value) -> Value {
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
pub(super) fn merge(base: &mut Value, overlay: &Value) {
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
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        self.validate_chains()?;
        if self.providers.contains_key(LOCAL) {
            return Err((
                format!("providers.{LOCAL}"),
                format!("`{LOCAL}` is the local model's name; give the provider another"),
            ));
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
        self.validate_autocomplete()?;
        validate_resilience(&self.resilience)
    }

    /// Every remote entry of every chain names a configured provider.
    fn validate_chains(&self) -> Result<(), (String, String)> {
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
                let Some(ModelRef { provider, .. }) = entry.remote() else {
                    continue;
                };
                if !providers.contains_key(provider) {
                    return Err((
                        format!("{chain}[{i}]"),
                        format!(
                            "`{entry}` names no configured provider (known: {})",
                            providers.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_autocomplete(&self) -> Result<(), (String, String)> {
        let a = &self.autocomplete;
        let tokens = [
            ("input_tokens", a.input_tokens, 64, 32_768),
            ("output_tokens", a.output_tokens, 1, 4_096),
            ("suffix_tokens", a.suffix_tokens, 0, a.input_tokens / 2),
            ("repository_tokens", a.repository_tokens, 0, 16_384),
        ];
        check_all("autocomplete", &tokens)?;
        let times = [
            ("budget_ms", a.budget_ms, 50, 10_000),
            ("invoked_budget_ms", a.invoked_budget_ms, 50, 60_000),
            ("prewarm_debounce_ms", a.prewarm_debounce_ms, 0, 10_000),
        ];
        check_all("autocomplete", &times.map(as_usize))?;
        let local = &self.local;
        let engine = [
            ("threads", local.threads, 0, 256),
            ("draft_tokens", local.draft_tokens, 0, 16),
            ("recent_prompts", local.recent_prompts, 0, 16),
        ];
        check_all("local", &engine)?;
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
        Ok(())
    }
}

/// The resilience section's values are in range (its type lives in the
/// resilience crate; what a file may say is the configuration's concern).
fn validate_resilience(resilience: &ResilienceConfig) -> Result<(), (String, String)> {
    let ResilienceConfig {
        state,
        governor,
        breaker,
        backoff: b,
        resume_interval_ms,
        canary_interval_ms,
        primary_canary_ms,
        ..
    } = resilience;
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
    for (key, value) in [
        ("resilience.governor.share", governor.share),
        ("resilience.breaker.error_rate", breaker.error_rate),
    ] {
        if !(value > 0.0 && value <= 1.0) {
            return Err((
                key.to_owned(),
                format!("must be above 0 and at most 1, got {value}"),
            ));
        }
    }
    let ranges = [
        ("breaker.failures", u64::from(breaker.failures), 1, 1_000),
        ("breaker.window_ms", breaker.window_ms, 1_000, 3_600_000),
        ("breaker.cooldown_ms", breaker.cooldown_ms, 100, 86_400_000),
        ("resume_interval_ms", *resume_interval_ms, 50, 3_600_000),
        ("canary_interval_ms", *canary_interval_ms, 50, 3_600_000),
        ("primary_canary_ms", *primary_canary_ms, 0, 86_400_000),
        ("backoff.cap_ms", b.cap_ms, 1, 3_600_000),
        ("backoff.rate_limit_ms", b.rate_limit_ms, 1, b.cap_ms),
        ("backoff.overloaded_ms", b.overloaded_ms, 1, b.cap_ms),
        ("backoff.transient_ms", b.transient_ms, 1, b.cap_ms),
    ];
    check_all("resilience", &ranges.map(as_usize))
}

/// A range of [`check_all`] read as `usize`.
fn as_usize((key, value, least, most): (&str, u64, u64, u64)) -> (&str, usize, usize, usize) {
    (key, value as usize, least as usize, most as usize)
}

/// Checks each `(key, value, least, most)` of the section `prefix`.
fn check_all(prefix: &str, ranges: &[(&str, usize, usize, usize)]) -> Result<(), (String, String)> {
    for &(key, value, least, most) in ranges {
        check(&format!("{prefix}.{key}"), value, least, most)?;
    }
    Ok(())
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
