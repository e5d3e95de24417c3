//! Subcommands other than the language server itself.

pub mod audit;
pub mod complete;
pub mod doctor;
pub mod gateway;
pub mod models;
pub mod probe;
pub mod stats;
pub mod status;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use switchyard_completion::controls::Snooze;
use switchyard_config::{Config, ConfigLayers};
use switchyard_core::Core;
use switchyard_core::loading::LoadReport;
use switchyard_core::session::{Parts, Session};
use switchyard_providers::local::chat::EngineSlot;

/// Reads the config file layer; a file that cannot be read is said on
/// stderr (an editor's server log) and kept as the error it is, which makes
/// the configuration fail closed.
pub fn file_layers(file: Option<PathBuf>) -> ConfigLayers {
    match file.map(|path| switchyard_config::read_file(&path)) {
        Some(Err(e)) => {
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

/// The routing core over the config file, as every front end opens it: what
/// could not be applied is said on stderr (and logged), and the rest applies;
/// when it failed closed, that is said too.
pub fn open_core(file: Option<PathBuf>, local: EngineSlot) -> Core {
    let layers = file_layers(file.clone());
    let file_error = layers.file_error.clone();
    let core = Core::open(layers, local, file);
    say_problems(&core.problems(), file_error.as_ref(), &core.config());
    core
}

/// The session over [`open_core`]'s core, as a front end outside an editor
/// opens it: no editor's documents, the snooze in memory, `report` told of
/// model loads.
pub fn open_session(file: Option<PathBuf>, report: Arc<dyn LoadReport>) -> Arc<Session> {
    let core = Arc::new(open_core(file, EngineSlot::default()));
    let parts = Parts {
        report,
        snooze: Arc::new(Snooze::in_memory()),
        open_documents: None,
    };
    Session::open(core, parts)
}

/// The configuration in force from the config file, said as [`open_core`] says it.
pub fn file_config(file: Option<PathBuf>) -> (Config, Vec<switchyard_config::ConfigError>) {
    let layers = file_layers(file);
    let (config, problems) = layers.resolve();
    say_problems(&problems, layers.file_error.as_ref(), &config);
    (config, problems)
}

/// What could not be applied, on stderr and in the log (the file's own error
/// was said as it was read), and why only the local model serves, if so.
fn say_problems(
    problems: &[switchyard_config::ConfigError],
    said: Option<&switchyard_config::ConfigError>,
    config: &Config,
) {
    for e in problems.iter().filter(|e| Some(*e) != said) {
        tracing::warn!("{e}");
        eprintln!("switchyard: {e}");
    }
    if let Some(reason) = &config.fail_closed {
        eprintln!(
            "switchyard: {}",
            switchyard_config::failed_closed_notice(reason)
        );
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

/// `switchyard config check`: the effective configuration, with what could
/// not be applied on stderr; exit 2 when a value was rejected or the file
/// cannot be read, 0 otherwise (ignored keys are warnings).
pub fn check_config(file: Option<PathBuf>) -> ExitCode {
    let Some(path) = file else {
        eprintln!("no config file given and no platform config directory; nothing to check");
        return ExitCode::from(2);
    };
    if !path.exists() {
        eprintln!("{}: no such file", path.display());
        return ExitCode::from(2);
    }
    let (effective, problems) = file_config(Some(path.clone()));
    if problems.iter().any(|p| !p.ignored) {
        return ExitCode::from(2);
    }
    let warnings = match problems.len() {
        0 => String::new(),
        n => format!(" ({n} ignored key{})", if n == 1 { "" } else { "s" }),
    };
    println!(
        "# {} is valid{warnings}; effective configuration:",
        path.display()
    );
    print!(
        "{}",
        toml::to_string_pretty(&effective).expect("config serializes")
    );
    ExitCode::SUCCESS
}
