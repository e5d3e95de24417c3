//! What `switchyard probe` probes: every distinct remote `provider/model` of the
//! tier chains, built the way the router builds it, or skipped when its API key
//! variable is unset.

use std::sync::Arc;

use crate::config::Config;
use crate::providers::Provider;

/// One chain entry to probe.
pub struct Target {
    pub provider: Arc<dyn Provider>,
    pub model: String,
}

/// A chain entry left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub provider: String,
    pub model: String,
    /// The unset variable that holds the provider's API key.
    pub key_env: String,
}

impl Skipped {
    pub fn reason(&self) -> String {
        format!("no API key in ${}", self.key_env)
    }
}

/// The probe plan for a configuration.
pub struct Targets {
    pub probe: Vec<Target>,
    pub skipped: Vec<Skipped>,
}

/// What cannot be probed because the request makes no sense for the config.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("no provider named `{name}` is configured (known: {known})")]
    UnknownProvider { name: String, known: String },
    #[error(
        "provider `{0}` appears in no tier chain (`[tiers]`), so there is nothing of it to probe"
    )]
    NotInChains(String),
    #[error("no remote `provider/model` entries in the tier chains (`[tiers]`): nothing to probe")]
    NothingConfigured,
}

/// The distinct remote entries of the tier chains, large to small, in chain
/// order (the router's plan lists them the same way).
fn chain_entries(config: &Config) -> Vec<(String, String)> {
    crate::router::plan::chain_entries(config)
        .into_iter()
        .filter_map(|entry| {
            entry
                .remote()
                .map(|m| (m.provider.clone(), m.model.clone()))
        })
        .collect()
}

/// The entries to probe, limited to `only` (a provider name) when given.
pub fn select(config: &Config, only: Option<&str>) -> Result<Targets, TargetError> {
    let providers = config.all_providers();
    if let Some(name) = only
        && !providers.contains_key(name)
    {
        return Err(TargetError::UnknownProvider {
            name: name.to_owned(),
            known: providers.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    }
    let entries: Vec<_> = chain_entries(config)
        .into_iter()
        .filter(|(provider, _)| only.is_none_or(|name| name == provider))
        .collect();
    if entries.is_empty() {
        return Err(match only {
            Some(name) => TargetError::NotInChains(name.to_owned()),
            None => TargetError::NothingConfigured,
        });
    }
    let mut targets = Targets {
        probe: Vec::new(),
        skipped: Vec::new(),
    };
    for (name, model) in entries {
        let Some(settings) = providers.get(&name) else {
            continue;
        };
        match settings.build(&name) {
            Ok(provider) => targets.probe.push(Target { provider, model }),
            Err(key_env) => targets.skipped.push(Skipped {
                provider: name,
                model,
                key_env,
            }),
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ProviderConfig, TierChains};

    fn config(large: &[&str], medium: &[&str]) -> Config {
        let list = |entries: &[&str]| {
            entries
                .iter()
                .map(|e| crate::entry::ChainEntry::try_from(e.to_string()).unwrap())
                .collect()
        };
        Config {
            tiers: TierChains {
                large: list(large),
                medium: list(medium),
                small: vec![crate::entry::ChainEntry::Local],
            },
            ..Config::default()
        }
    }

    #[test]
    fn entries_are_distinct_remote_and_in_chain_order() {
        let config = config(
            &["anthropic/big", "openai/gpt"],
            &["anthropic/big", "openrouter/x/y"],
        );
        assert_eq!(
            chain_entries(&config),
            vec![
                ("anthropic".to_owned(), "big".to_owned()),
                ("openai".to_owned(), "gpt".to_owned()),
                ("openrouter".to_owned(), "x/y".to_owned()),
            ]
        );
    }

    #[test]
    fn an_unknown_or_unchained_provider_is_an_error() {
        let config = config(&["anthropic/big"], &[]);
        assert!(matches!(
            select(&config, Some("nope")),
            Err(TargetError::UnknownProvider { .. })
        ));
        assert_eq!(
            select(&config, Some("openai")).err(),
            Some(TargetError::NotInChains("openai".into()))
        );
        assert_eq!(
            select(&self::config(&[], &[]), None).err(),
            Some(TargetError::NothingConfigured)
        );
    }

    #[test]
    fn a_provider_without_a_key_variable_is_probed() {
        let mut config = config(&["ollama/qwen"], &[]);
        config.providers.insert(
            "ollama".into(),
            ProviderConfig {
                kind: crate::providers::ProviderKind::Openai,
                base_url: "http://127.0.0.1:11434/v1".into(),
                api_key_env: None,
                headers: Default::default(),
                account: None,
                quota: Default::default(),
            },
        );
        let targets = select(&config, None).unwrap();
        assert_eq!(targets.probe.len(), 1);
        assert!(targets.skipped.is_empty());
    }
}
