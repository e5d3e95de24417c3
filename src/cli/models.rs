//! `switchyard models list|pull|verify`.

use std::process::ExitCode;

use clap::Subcommand;

use switchyard_models::{Manifest, ModelEntry, TerminalProgress};

#[derive(Subcommand)]
pub enum ModelsAction {
    /// List the models in the manifest, which is the default here, and which are downloaded.
    List,
    /// Download a model (default: this machine's default), resuming and verifying it.
    Pull { name: Option<String> },
    /// Check a downloaded model's size and SHA-256.
    Verify { name: Option<String> },
}

fn entry(name: Option<&str>) -> Result<&'static ModelEntry, String> {
    let manifest = Manifest::embedded();
    match name {
        None => Ok(manifest.default_model()),
        Some(name) => manifest.get(name).ok_or_else(|| {
            format!("unknown model `{name}`: run `switchyard models list` for the names")
        }),
    }
}

pub async fn run(action: ModelsAction) -> ExitCode {
    let dir = switchyard_models::model_dir();
    let result = match action {
        ModelsAction::List => {
            let manifest = Manifest::embedded();
            let default = &manifest.default_model().name;
            for m in &manifest.models {
                let state = if switchyard_models::is_present(m, &dir) {
                    "downloaded"
                } else {
                    "not downloaded"
                };
                let size = m.files().iter().map(|file| file.size).sum::<Option<u64>>();
                let size = size.map_or("size unknown".to_owned(), |s| {
                    format!("{:.0} MB", s as f64 / 1e6)
                });
                let mark = if &m.name == default {
                    " (default here)"
                } else {
                    ""
                };
                println!(
                    "{}{mark}\n    {} | {size} | {state}\n    {}",
                    m.name,
                    m.description,
                    m.path_in(&dir).display()
                );
            }
            Ok(())
        }
        ModelsAction::Pull { name } => match entry(name.as_deref()) {
            Ok(entry) => switchyard_models::pull(entry, &dir, &TerminalProgress)
                .await
                .map(|path| println!("{}", path.display()))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        },
        ModelsAction::Verify { name } => entry(name.as_deref()).and_then(|entry| {
            for file in entry.files() {
                let path = file.path_in(&dir);
                switchyard_models::verify(&file, &path).map_err(|e| e.to_string())?;
                println!("{}: OK", path.display());
            }
            Ok(())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchyard: {message}");
            ExitCode::FAILURE
        }
    }
}
