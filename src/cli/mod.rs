//! Subcommands other than the language server itself.

pub mod audit;
pub mod complete;
pub mod gateway;
pub mod models;
pub mod probe;
pub mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use switchyard::config::{self, ConfigLayers};

/// Reads the config file layer; a broken file is reported and skipped.
pub fn file_layers(file: Option<PathBuf>) -> ConfigLayers {
    match file.map(|path| config::read_file(&path)) {
        Some(Err(e)) => {
            tracing::error!("{e}");
            eprintln!("switchyard: {e}");
            ConfigLayers {
                file_error: Some(e),
                ..Default::default()
            }
        }
        Some(Ok(file)) => ConfigLayers {
            file,
            ..Default::default()
        },
        None => ConfigLayers::default(),
    }
}

pub async fn serve(config_file: Option<PathBuf>) -> ExitCode {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "switchyard language server starting"
    );
    switchyard::lsp::serve_stdio(file_layers(config_file.clone()), config_file).await;
    ExitCode::SUCCESS
}

/// `switchyard config check`: exit 0 and the effective config, or exit 2 and the errors.
pub fn check_config(file: Option<PathBuf>) -> ExitCode {
    let Some(path) = file else {
        eprintln!("no config file given and no platform config directory; nothing to check");
        return ExitCode::from(2);
    };
    let layer = match config::read_file(&path) {
        Ok(Some(layer)) => layer,
        Ok(None) => {
            eprintln!("{}: no such file", path.display());
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let (effective, errors) = ConfigLayers {
        file: Some(layer),
        ..Default::default()
    }
    .resolve();
    if !errors.is_empty() {
        for e in errors {
            eprintln!("{e}");
        }
        return ExitCode::from(2);
    }
    println!("# {} is valid; effective configuration:", path.display());
    print!(
        "{}",
        toml::to_string_pretty(&effective).expect("config serializes")
    );
    ExitCode::SUCCESS
}
