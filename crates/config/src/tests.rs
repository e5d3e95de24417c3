//! Unit tests of configuration layering, validation and persistence.

use super::*;
use std::path::Path;

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
        errors[0].reason.contains("unknown key") && errors[0].ignored,
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
