use super::*;
use serde_json::json;

fn file(layer: Value) -> ConfigLayers {
    ConfigLayers {
        file: Some(("/home/u/.config/switchyard/config.toml".into(), layer)),
        ..Default::default()
    }
}

/// A user's privacy settings and a proxy in front of a provider.
fn private_settings() -> Value {
    json!({
        "local_only": true,
        "privacy": {"local_only_paths": ["billing/**"]},
        "providers": {"anthropic": {"kind": "anthropic", "base_url": "http://127.0.0.1:9999/proxy"}},
        "autocomplete": {"budget_ms": 800}
    })
}

fn with(mut base: Value, extra: Value) -> Value {
    super::super::layers::merge(&mut base, &extra);
    base
}

fn assert_private_settings_kept(config: &Config) {
    assert!(config.local_only);
    assert_eq!(config.privacy.local_only_paths, ["billing/**"]);
    assert_eq!(
        config.all_providers()["anthropic"].base_url,
        "http://127.0.0.1:9999/proxy"
    );
}

#[test]
fn a_removed_key_in_an_unrelated_section_is_ignored_and_the_rest_applies() {
    let layer = with(
        private_settings(),
        json!({"resilience": {"breaker": {"max_cooldown_ms": 600000, "failures": 4}}}),
    );
    let (config, problems) = file(layer).resolve();
    assert_private_settings_kept(&config);
    assert_eq!(
        config.resilience.breaker.failures, 4,
        "its section's other keys apply"
    );
    assert_eq!(config.autocomplete.budget_ms, 800);
    assert_eq!(config.fail_closed, None);
    assert_eq!(problems.len(), 1, "{problems:?}");
    let message = problems[0].to_string();
    assert!(problems[0].ignored);
    assert!(
        message.contains("`resilience.breaker.max_cooldown_ms`"),
        "{message}"
    );
    assert!(message.contains("removed"), "{message}");
    assert!(message.contains("config.toml"), "{message}");
}

#[test]
fn an_unknown_key_says_what_it_was_probably_meant_to_be() {
    let layer = with(
        private_settings(),
        json!({"autocomplete": {"budjet_ms": 500}}),
    );
    let (config, problems) = file(layer).resolve();
    assert_private_settings_kept(&config);
    assert_eq!(config.autocomplete.budget_ms, 800);
    assert_eq!(config.fail_closed, None);
    assert_eq!(problems[0].key, "autocomplete.budjet_ms");
    assert_eq!(problems[0].meant.as_deref(), Some("autocomplete.budget_ms"));
    assert!(
        problems[0]
            .to_string()
            .contains("did you mean `budget_ms`?"),
        "{}",
        problems[0]
    );
    let (_, problems) = file(json!({"autocomplete": {"zzz": 1}})).resolve();
    assert_eq!(problems[0].meant, None, "nothing near it");
}

#[test]
fn a_value_that_cannot_be_applied_keeps_the_last_good_value_of_that_key_only() {
    let layers = ConfigLayers {
        initialization_options: Some(
            json!({"autocomplete": {"budget_ms": 5, "output_tokens": 64}}),
        ),
        ..file(private_settings())
    };
    let (config, problems) = layers.resolve();
    assert_eq!(config.autocomplete.budget_ms, 800, "the file's value stays");
    assert_eq!(
        config.autocomplete.output_tokens, 64,
        "the layer's other keys apply"
    );
    assert_private_settings_kept(&config);
    assert_eq!(config.fail_closed, None);
    assert_eq!(problems.len(), 1);
    assert!(!problems[0].ignored);
    assert_eq!(problems[0].key, "autocomplete.budget_ms");
}

#[test]
fn a_rule_between_keys_keeps_the_sections_last_good_values() {
    // 128 suffix tokens do not fit half of 100 input tokens.
    let (config, problems) = file(json!({
        "autocomplete": {"input_tokens": 100},
        "local": {"threads": 1}
    }))
    .resolve();
    assert_eq!(problems[0].key, "autocomplete.suffix_tokens");
    assert_eq!(config.autocomplete.input_tokens, 2000);
    assert_eq!(config.local.threads, 1);
    assert_eq!(config.fail_closed, None);
}

#[test]
fn settings_that_decide_what_leaves_fail_closed_when_they_cannot_be_read() {
    let cases = [
        json!({"privacy": {"local_only_paths": "billing/**"}}),
        json!({"privacy": {"local_only_path": ["billing/**"]}}),
        json!({"local_onyl": true}),
        json!({"providers": {"anthropic": {"kind": "anthropic", "base_url": "ftp://proxy"}}}),
        json!({"providers": {"proxy": {"kind": "openai", "base_uri": "http://127.0.0.1:1/v1"}}}),
        json!({"tiers": {"large": ["nowhere/model"]}}),
    ];
    for layer in cases {
        let (config, problems) = file(layer.clone()).resolve();
        let why = config
            .fail_closed
            .as_deref()
            .unwrap_or_else(|| panic!("{layer}: {problems:?}"));
        assert!(why.contains(&problems[0].key), "{layer}: {why}");
    }
}

#[test]
fn a_file_that_cannot_be_read_fails_closed() {
    let layers = ConfigLayers {
        file_error: Some(ConfigError::invalid(
            ConfigOrigin::File("/etc/sy.toml".into()),
            "line 2",
            "expected `=`",
        )),
        ..Default::default()
    };
    let (config, problems) = layers.resolve();
    assert_eq!(problems.len(), 1);
    let why = config.fail_closed.expect("fails closed");
    assert!(
        why.contains("/etc/sy.toml") && why.contains("line 2"),
        "{why}"
    );
}

#[test]
fn a_layer_that_is_not_a_table_is_left_out_whole() {
    let layers = ConfigLayers {
        workspace: Some(json!("fast please")),
        ..file(private_settings())
    };
    let (config, problems) = layers.resolve();
    assert_private_settings_kept(&config);
    assert_eq!(problems.len(), 1, "{problems:?}");
}
