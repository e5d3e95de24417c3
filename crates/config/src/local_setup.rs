//! From configuration to a local engine's options: resolve which model and
//! fetch it when allowed (`core::loading` starts the engine from them).

use std::path::{Path, PathBuf};

use crate::Config;
use switchyard_engine::{EngineOptions, LocalEngine, PromptBudget};
use switchyard_models::{Manifest, ModelEntry, PullProgress};

/// The model a configuration asks for.
#[derive(Clone, Debug)]
pub struct ResolvedModel {
    pub name: String,
    pub path: PathBuf,
    /// Manifest entry, when the model comes from the manifest (and can be pulled).
    pub entry: Option<ModelEntry>,
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "unknown model `{0}` in `local.model`: run `switchyard models list` for the names, or give a path to a .gguf file"
    )]
    UnknownModel(String),
    #[error("model file {0} does not exist (from `local.model`)")]
    MissingFile(PathBuf),
    #[error(
        "the local model {name} is not downloaded yet: run `switchyard models pull {name}` (or set `local.auto_pull = true`)"
    )]
    NotDownloaded { name: String },
    #[error("downloading {name} failed: {reason}")]
    Pull { name: String, reason: String },
}

/// A `local.model` value naming a file rather than a manifest entry.
fn is_path(model: &str) -> bool {
    model.ends_with(".gguf") || model.contains(std::path::MAIN_SEPARATOR) || model.contains('/')
}

pub fn resolve(config: &Config) -> Result<ResolvedModel, SetupError> {
    let model = config.local.model.trim();
    if is_path(model) {
        let path = PathBuf::from(model);
        let name = path
            .file_stem()
            .map_or_else(|| model.to_owned(), |s| s.to_string_lossy().into_owned());
        return Ok(ResolvedModel {
            name,
            path,
            entry: None,
        });
    }
    let manifest = Manifest::embedded();
    let entry = if model.is_empty() {
        manifest.default_model()
    } else {
        manifest
            .get(model)
            .ok_or_else(|| SetupError::UnknownModel(model.to_owned()))?
    };
    Ok(ResolvedModel {
        name: entry.name.clone(),
        path: entry.path_in(&switchyard_models::model_dir()),
        entry: Some(entry.clone()),
    })
}

/// Makes sure the model file is there, downloading a manifest model if `pull` allows.
pub async fn ensure_present(
    model: &ResolvedModel,
    pull: bool,
    progress: &dyn PullProgress,
) -> Result<PathBuf, SetupError> {
    let Some(entry) = &model.entry else {
        return if model.path.is_file() {
            Ok(model.path.clone())
        } else {
            Err(SetupError::MissingFile(model.path.clone()))
        };
    };
    let dir = switchyard_models::model_dir();
    if switchyard_models::is_present(entry, &dir) {
        return Ok(model.path.clone());
    }
    if !pull {
        return Err(SetupError::NotDownloaded {
            name: entry.name.clone(),
        });
    }
    switchyard_models::pull(entry, &dir, progress)
        .await
        .map_err(|e| SetupError::Pull {
            name: entry.name.clone(),
            reason: e.to_string(),
        })
}

/// Starts the engine `config` asks for: shared with the other windows
/// running the same one (meeting in the state directory), or this window's own.
pub fn start_engine(model: &ResolvedModel, path: &Path, config: &Config) -> LocalEngine {
    let options = engine_options(model, path, config);
    if config.local.share_engine {
        LocalEngine::shared(options, &switchyard_base::paths::state_dir())
    } else {
        LocalEngine::spawn(options)
    }
}

pub fn engine_options(model: &ResolvedModel, path: &Path, config: &Config) -> EngineOptions {
    let autocomplete = &config.autocomplete;
    EngineOptions {
        model_name: model.name.clone(),
        model_path: path.to_owned(),
        threads: config.local.threads,
        budget: PromptBudget {
            input: autocomplete.input_tokens,
            suffix: autocomplete.suffix_tokens,
            repository: autocomplete.repository_tokens,
        },
        max_output_tokens: autocomplete.output_tokens,
        reuse_cache: true,
        draft_tokens: config.local.draft_tokens,
        recent_prompts: config.local.recent_prompts,
        thread_memo: Some(switchyard_base::paths::state_dir().join("threads.json")),
    }
}
