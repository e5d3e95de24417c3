//! `switchyard doctor`: whether this machine is ready to serve, and for
//! what is not, the command or edit that fixes it. The editors ask the same
//! (Neovim's `:checkhealth switchyard`, VS Code's "Check setup") by running
//! it with `--json`, so every front end says the same thing.

use std::path::{Path, PathBuf};

use serde::Serialize;

use switchyard_base::entry::ChainEntry;
use switchyard_config::local_setup::{self, ResolvedModel};
use switchyard_config::{Config, ConfigError, ConfigLayers};
use switchyard_models::ModelEntry;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    /// Works, but something the user may want to know or change.
    Warn,
    /// Not ready: `fix` says what to do.
    Error,
}

/// One thing checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub level: Level,
    pub detail: String,
    /// What fixes it, where it is not fine.
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            level: Level::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            level: Level::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn error(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            level: Level::Error,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Where this switchyard reads and writes.
pub struct Places {
    /// The config file (`None`: none is configured).
    pub config_file: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub log_file: PathBuf,
    pub model_dir: PathBuf,
}

/// Every check but the engine's: the configuration, the model and its
/// digest, the disk it takes, the state directory, the log, local-only
/// mode and the providers' keys.
pub fn check(places: &Places) -> (Vec<Check>, Config) {
    let (config, mut checks) = configuration(places.config_file.as_deref());
    let model = local_setup::resolve(&config);
    checks.push(model_check(&model, &places.model_dir));
    checks.push(disk(&places.model_dir));
    checks.push(state_dir(&places.state_dir));
    checks.push(Check::ok("log", places.log_file.display().to_string()));
    checks.push(local_only(&config));
    checks.extend(provider_keys(&config));
    (checks, config)
}

/// Whether every check passed (warnings allowed).
pub fn ready(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.level != Level::Error)
}

/// The configuration as the server resolves it, and a check per problem.
fn configuration(file: Option<&Path>) -> (Config, Vec<Check>) {
    // The layers as the server reads them: an unreadable file is an error
    // that fails the configuration closed, as it does there.
    let read = file.map(switchyard_config::read_file).transpose();
    let found = matches!(read, Ok(Some(Some(_))));
    let layers = match read {
        Ok(layer) => ConfigLayers {
            file: layer.flatten(),
            ..Default::default()
        },
        Err(e) => ConfigLayers {
            file_error: Some(e),
            ..Default::default()
        },
    };
    let (config, problems) = layers.resolve();
    // A problem that fails the configuration closed is among these; the
    // local-only check says what it closes.
    let mut checks: Vec<Check> = problems.iter().map(config_problem).collect();
    if checks.is_empty() {
        let read = match (file, found) {
            (None, _) => "defaults (no config file)".to_owned(),
            (Some(f), true) => format!("{} applies", f.display()),
            (Some(f), false) => format!("no file at {}: the defaults apply", f.display()),
        };
        checks.push(Check::ok("config", read));
    }
    (config, checks)
}

/// A key the configuration could not apply, as an error naming the edit.
fn config_problem(problem: &ConfigError) -> Check {
    let fix = match &problem.meant {
        Some(meant) => format!(
            "in {}, write `{meant}` for `{}`",
            problem.origin, problem.key
        ),
        None if problem.ignored => format!("remove `{}` from {}", problem.key, problem.origin),
        None => format!("correct `{}` in {}", problem.key, problem.origin),
    };
    Check::error("config", problem.to_string(), fix)
}

/// The local model: known, present, and its digest checked.
fn model_check(model: &Result<ResolvedModel, local_setup::SetupError>, dir: &Path) -> Check {
    let model = match model {
        Ok(model) => model,
        Err(e) => {
            let fix = "set `local.model` to a name `switchyard models list` shows, or a .gguf path";
            return Check::error("model", e.to_string(), fix);
        }
    };
    let Some(entry) = &model.entry else {
        return match model.path.is_file() {
            true => Check::ok(
                "model",
                format!(
                    "{} (a file given by path: no digest to check)",
                    model.path.display()
                ),
            ),
            false => Check::error(
                "model",
                format!("{} does not exist", model.path.display()),
                "point `local.model` at a .gguf file, or at a name `switchyard models list` shows",
            ),
        };
    };
    digest_check(entry, dir)
}

/// A manifest model in `dir`: verified when downloaded and unchanged
/// since, or hashed now.
fn digest_check(entry: &ModelEntry, dir: &Path) -> Check {
    let how = match switchyard_models::is_present(entry, dir) {
        true => "size and SHA-256 checked, unchanged since",
        false => {
            let files = entry.files();
            let failed = files
                .iter()
                .find_map(|file| switchyard_models::verify(file, &file.path_in(dir)).err());
            if let Some(e) = failed {
                let pull = format!("switchyard models pull {}", entry.name);
                return Check::error("model", e.to_string(), pull);
            }
            "size and SHA-256 checked now"
        }
    };
    let path = entry.path_in(dir);
    Check::ok(
        "model",
        format!("{} at {} ({how})", entry.name, path.display()),
    )
}

/// How much disk the downloaded models take.
fn disk(model_dir: &Path) -> Check {
    let bytes = switchyard_models::disk_use(model_dir);
    Check::ok(
        "disk",
        format!(
            "{:.0} MB of models in {}",
            bytes as f64 / 1e6,
            model_dir.display()
        ),
    )
}

/// The state directory (breakers, quota, parked work, the shared engine's
/// meeting place) can be written, and who else uses it.
fn state_dir(dir: &Path) -> Check {
    let fix = format!(
        "make {} writable, or set SWITCHYARD_STATE_DIR to a folder that is",
        dir.display()
    );
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    let written = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&probe, b"ok"));
    let _ = std::fs::remove_file(&probe);
    if let Err(e) = written {
        return Check::error(
            "state",
            format!("cannot write in {}: {e}", dir.display()),
            fix,
        );
    }
    let hosts = switchyard_engine::engines_hosted_in(dir);
    let shared = match hosts {
        0 => "no other switchyard hosts a local engine here".to_owned(),
        n => format!(
            "{n} local engine(s) hosted here by other switchyard processes, shared with this one"
        ),
    };
    Check::ok("state", format!("{} is writable; {shared}", dir.display()))
}

fn local_only(config: &Config) -> Check {
    match config.local_only_reason() {
        Some(reason) => Check::warn(
            "local-only",
            format!("on: {reason}"),
            "nothing leaves the machine; `local_only = false` (or the editor's toggle) lets remote providers serve",
        ),
        None => Check::ok(
            "local-only",
            "off: remote providers may serve explain and refactor",
        ),
    }
}

/// Each provider the tier chains use, with its key set or not.
fn provider_keys(config: &Config) -> Vec<Check> {
    let used = switchyard_router::plan::chain_entries(config);
    let mut providers: Vec<String> = used
        .into_iter()
        .filter_map(|entry| match entry {
            ChainEntry::Remote(model) => Some(model.provider),
            ChainEntry::Local => None,
        })
        .collect();
    providers.sort();
    providers.dedup();
    if providers.is_empty() {
        return vec![Check::ok(
            "providers",
            "none configured: the local model serves everything",
        )];
    }
    let all = config.all_providers();
    providers
        .into_iter()
        .filter_map(|name| Some((all.get(&name)?.api_key_env.clone()?, name)))
        .map(
            // The router's own test of a key: set and not blank.
            |(env, name)| match switchyard_providers::Secret::from_env(&env).is_some() {
                true => Check::ok("providers", format!("{name}: key set (${env})")),
                false => Check::warn(
                    "providers",
                    format!("{name}: no key in ${env}; its entries are skipped"),
                    format!("export {env}=... where switchyard starts"),
                ),
            },
        )
        .collect()
}

/// Loads the local model as the server would (meeting the other windows'
/// engine where one runs) and says what it computes on, with how many
/// threads, and how fast it reads a prompt.
pub async fn engine(config: &Config) -> Check {
    let Ok(model) = local_setup::resolve(config) else {
        return Check::warn("engine", "not started: no model", "fix the model first");
    };
    if !model.path.is_file() {
        return Check::warn("engine", "not started: no model", "fix the model first");
    }
    let engine = local_setup::start_engine(&model, &model.path, config);
    let ready = engine.wait_ready().await;
    let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
    match ready {
        Ok(info) => Check::ok(
            "engine",
            format!(
                "{} on {}, {} thread(s), prompt {:.0} tokens/s, loaded in {} ms",
                info.name,
                switchyard_engine::BACKEND,
                info.threads,
                info.prompt_tokens_per_s,
                info.load_ms
            ),
        ),
        Err(e) => Check::error(
            "engine",
            format!("the model does not load: {e}"),
            format!(
                "switchyard models pull {} (the file may be damaged)",
                model.name
            ),
        ),
    }
}
