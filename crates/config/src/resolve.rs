//! Resolving the layers key by key, failing closed.
//!
//! Each layer is applied over the ones before it. What cannot be applied is
//! taken out of the layer, one key at a time, and the rest applies: an
//! unknown or removed key is ignored with a warning that names it (and the
//! key it was probably meant to be); a value that cannot be applied keeps the
//! last good value of that key (of its section, where the trouble is a rule
//! between keys). Settings that decide what leaves the machine (local-only,
//! path rules, redaction, providers, chains) fail closed instead: when one of
//! them cannot be read, or the file cannot be read at all, only the local
//! model serves until it can, and the configuration says why
//! ([`Config::fail_closed`]; ARCHITECTURE.md invariant 18).

use serde_json::Value;

use super::Config;
use super::layers::{ConfigError, ConfigLayers, ConfigOrigin};

/// Keys an earlier release had, and what became of them.
const REMOVED: &[(&str, &str)] = &[(
    "resilience.breaker.max_cooldown_ms",
    "breakers no longer double their cooldown: canaries test an open breaker every `resilience.canary_interval_ms` and close it once it answers",
)];

/// The settings that decide what leaves the machine, by key prefix.
const DECIDE_WHAT_LEAVES: &[&str] = &[
    "local_only",
    "privacy",
    "providers",
    "tiers",
    "autocomplete.chain",
];

impl ConfigLayers {
    /// Merges the layers in order, key by key. The result is always usable:
    /// the configuration in force and what could not be applied.
    pub fn resolve(&self) -> (Config, Vec<ConfigError>) {
        let mut merged = serde_json::to_value(Config::default()).expect("defaults serialize");
        let mut config = Config::default();
        let mut problems: Vec<ConfigError> = self.file_error.iter().cloned().collect();
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
            let mut layer = super::layers::editor_spelling(layer);
            loop {
                let mut candidate = merged.clone();
                super::layers::merge(&mut candidate, &layer);
                match super::layers::parse(&candidate).and_then(|c| c.validate().map(|()| c)) {
                    Ok(valid) => {
                        merged = candidate;
                        config = valid;
                        break;
                    }
                    Err((key, reason)) => {
                        let taken_out = take_out(&mut layer, &key);
                        problems.push(problem(origin.clone(), key, reason));
                        if !taken_out {
                            // Nothing in the layer to blame: it cannot apply at all.
                            break;
                        }
                    }
                }
            }
        }
        if let Some(on) = self.local_only {
            config.local_only = on;
        }
        let closed: Vec<String> = problems
            .iter()
            .filter(|p| p.decides_what_leaves())
            .map(ToString::to_string)
            .collect();
        config.fail_closed = (!closed.is_empty()).then(|| closed.join("; "));
        (config, problems)
    }
}

impl ConfigError {
    /// Whether this is about a setting that decides what leaves the machine
    /// (or the key it was probably meant to be), or the whole file: the
    /// configuration fails closed.
    pub fn decides_what_leaves(&self) -> bool {
        let deciding = |key: &str| {
            DECIDE_WHAT_LEAVES.iter().any(|prefix| {
                key == *prefix
                    || key.starts_with(&format!("{prefix}."))
                    || key.starts_with(&format!("{prefix}["))
            })
        };
        self.key == "(file)"
            || self.key.starts_with("line ")
            || deciding(&self.key)
            || self.meant.as_deref().is_some_and(deciding)
    }
}

/// The problem `reason` at `key` is: an unknown key to ignore (with what it
/// became, or the key it was probably meant to be) or a value to reject.
fn problem(origin: ConfigOrigin, key: String, reason: String) -> ConfigError {
    if let Some((_, became)) = REMOVED.iter().find(|(removed, _)| *removed == key) {
        return ConfigError::ignored(
            origin,
            key,
            format!("removed in an earlier release ({became})"),
            None,
        );
    }
    let Some(rest) = reason.strip_prefix("unknown field `") else {
        return ConfigError::invalid(origin, key, reason);
    };
    let field = rest.split('`').next().unwrap_or_default();
    let known: Vec<&str> = rest
        .split_once("expected")
        .map(|(_, list)| list.split('`').skip(1).step_by(2).collect())
        .unwrap_or_default();
    let meant = closest(field, &known);
    let why = match meant {
        Some(meant) => format!("unknown key (did you mean `{meant}`?)"),
        None => "unknown key".to_owned(),
    };
    let section = key.strip_suffix(field).unwrap_or_default();
    let meant = meant.map(|m| format!("{section}{m}"));
    ConfigError::ignored(origin, key, why, meant)
}

/// The known key nearest to `field` by edit distance, if it is near enough
/// to be a slip.
fn closest<'a>(field: &str, known: &[&'a str]) -> Option<&'a str> {
    let most = (field.chars().count() / 3).max(2);
    known
        .iter()
        .map(|k| (edit_distance(field, k), *k))
        .filter(|(d, _)| *d <= most)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance, over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(x != *y))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Takes `key` (`a.b[2].c`) out of `layer`: the key itself where the layer
/// sets it (an array element's whole array), else the deepest section of it
/// the layer sets. `false` when the layer sets none of it.
fn take_out(layer: &mut Value, key: &str) -> bool {
    let segments: Vec<&str> = key
        .split('.')
        .map(|s| s.split('[').next().unwrap_or(s))
        .filter(|s| !s.is_empty())
        .collect();
    let mut node = layer;
    for (i, segment) in segments.iter().enumerate() {
        let Value::Object(map) = node else {
            return false;
        };
        let last = i + 1 == segments.len();
        let deeper = !last
            && map
                .get(*segment)
                .is_some_and(|child| child.get(segments[i + 1]).is_some());
        if !deeper {
            return map.remove(*segment).is_some();
        }
        node = map.get_mut(*segment).expect("checked above");
    }
    false
}

#[cfg(test)]
mod tests;
