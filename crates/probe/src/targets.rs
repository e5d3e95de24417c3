//! What `switchyard probe` probes: every distinct remote `provider/model` of the
//! tier chains, built the way the router builds it, or skipped when its API key
//! variable is unset.

use std::sync::Arc;

use switchyard_router::{Direct, Router};

/// One chain entry to probe: sent to as the router lets it (the rules in
/// force asked, the outbound audit told).
pub struct Target {
    pub provider: Arc<Direct>,
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
    #[error("local-only mode is on: nothing leaves the machine, probes included")]
    LocalOnly,
}

/// The entries to probe, limited to `only` (a provider name) when given: those
/// the router's probe plan clears (ARCHITECTURE.md invariant 7).
pub fn select(router: &Router, only: Option<&str>) -> Result<Targets, TargetError> {
    let providers = router.config().all_providers();
    if let Some(name) = only
        && !providers.contains_key(name)
    {
        return Err(TargetError::UnknownProvider {
            name: name.to_owned(),
            known: providers.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    }
    let roster = router.probe_roster(only);
    if !roster.chained {
        return Err(match only {
            Some(name) => TargetError::NotInChains(name.to_owned()),
            None => TargetError::NothingConfigured,
        });
    }
    if roster.local_only {
        return Err(TargetError::LocalOnly);
    }
    let probe = roster
        .targets
        .into_iter()
        .map(|direct| Target {
            model: direct.entry().model.clone(),
            provider: Arc::new(direct),
        })
        .collect();
    let skipped = roster
        .missing_keys
        .into_iter()
        .map(|(entry, key_env)| Skipped {
            provider: entry.provider,
            model: entry.model,
            key_env,
        })
        .collect();
    Ok(Targets { probe, skipped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_config::{Config, ProviderConfig, TierChains};

    fn config(large: &[&str], medium: &[&str]) -> Config {
        let list = |entries: &[&str]| {
            entries
                .iter()
                .map(|e| switchyard_base::entry::ChainEntry::try_from(e.to_string()).unwrap())
                .collect()
        };
        Config {
            tiers: TierChains {
                large: list(large),
                medium: list(medium),
                small: vec![switchyard_base::entry::ChainEntry::Local],
            },
            ..Config::default()
        }
    }

    fn entries(targets: &Targets) -> Vec<String> {
        let probed = targets.probe.iter().map(|t| t.model.clone());
        probed
            .chain(targets.skipped.iter().map(|s| s.model.clone()))
            .collect()
    }

    #[test]
    fn entries_are_distinct_remote_and_in_chain_order() {
        let config = config(
            &["anthropic/big", "openai/gpt"],
            &["anthropic/big", "openrouter/x/y"],
        );
        let targets = select(&Router::standalone(&config), None).unwrap();
        assert_eq!(entries(&targets), ["big", "gpt", "x/y"]);
    }

    #[test]
    fn local_only_mode_probes_nothing() {
        let mut config = config(&["anthropic/big"], &[]);
        config.local_only = true;
        assert_eq!(
            select(&Router::standalone(&config), None).err(),
            Some(TargetError::LocalOnly)
        );
    }

    #[test]
    fn an_unknown_or_unchained_provider_is_an_error() {
        let config = config(&["anthropic/big"], &[]);
        let router = Router::standalone(&config);
        assert!(matches!(
            select(&router, Some("nope")),
            Err(TargetError::UnknownProvider { .. })
        ));
        assert_eq!(
            select(&router, Some("openai")).err(),
            Some(TargetError::NotInChains("openai".into()))
        );
        assert_eq!(
            select(&Router::standalone(&self::config(&[], &[])), None).err(),
            Some(TargetError::NothingConfigured)
        );
    }
    #[test]
    fn a_provider_without_a_key_variable_is_probed() {
        let mut config = config(&["ollama/qwen"], &[]);
        config.providers.insert(
            "ollama".into(),
            ProviderConfig {
                kind: switchyard_providers::ProviderKind::Openai,
                base_url: "http://127.0.0.1:11434/v1".into(),
                api_key_env: None,
                headers: Default::default(),
                account: None,
                quota: Default::default(),
            },
        );
        let targets = select(&Router::standalone(&config), None).unwrap();
        assert_eq!(targets.probe.len(), 1);
        assert!(targets.skipped.is_empty());
    }
}
