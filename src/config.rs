//! Configuration: built-in defaults, overridden by the TOML file in the platform
//! config directory, then by the editor's `initializationOptions`, then by
//! `workspace/configuration`. Each layer is validated on its own so an error names
//! the layer (file, key, reason); a rejected layer leaves the last good config in force.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub local: LocalConfig,
    pub autocomplete: AutocompleteConfig,
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
}

impl Default for AutocompleteConfig {
    fn default() -> Self {
        AutocompleteConfig {
            enabled: true,
            budget_ms: 1000,
            input_tokens: 2000,
            output_tokens: 200,
            suffix_tokens: 256,
            prewarm_debounce_ms: 150,
            precompute_next: true,
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
    pub initialization_options: Option<Value>,
    pub workspace: Option<Value>,
}

impl ConfigLayers {
    /// Merges the layers in order. A layer that fails validation is reported and
    /// skipped, so the result is always usable: the last good config plus the errors.
    pub fn resolve(&self) -> (Config, Vec<ConfigError>) {
        let mut merged = serde_json::to_value(Config::default()).expect("defaults serialize");
        let mut config = Config::default();
        let mut errors = Vec::new();
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
            merge(&mut candidate, layer);
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

fn parse(value: &Value) -> Result<Config, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        (key, e.into_inner().to_string())
    })
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
    fn validate(&self) -> Result<(), (String, String)> {
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
        Ok(())
    }
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
    fn missing_file_is_no_layer() {
        assert_eq!(
            read_file(Path::new("/nonexistent/switchyard.toml")).unwrap(),
            None
        );
    }
}
