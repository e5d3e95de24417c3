//! `switchyard models list|pull|verify|rm|du`.

use std::path::Path;
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
    /// Remove a downloaded model (and any download of it in progress).
    Rm { name: String },
    /// Show the disk each model takes, and all of them together.
    Du,
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
            list(&dir);
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
        ModelsAction::Rm { name } => remove(&name, &dir),
        ModelsAction::Du => {
            disk_use(&dir);
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchyard: {message}");
            ExitCode::FAILURE
        }
    }
}

fn megabytes(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1e6)
}

fn list(dir: &Path) {
    let manifest = Manifest::embedded();
    let default = &manifest.default_model().name;
    for m in &manifest.models {
        let state = if switchyard_models::is_present(m, dir) {
            "downloaded"
        } else {
            "not downloaded"
        };
        let size = m.files().iter().map(|file| file.size).sum::<Option<u64>>();
        let size = size.map_or("size unknown".to_owned(), megabytes);
        let mark = if &m.name == default {
            " (default here)"
        } else {
            ""
        };
        println!(
            "{}{mark}\n    {} | {size} | {state}\n    {}",
            m.name,
            m.description,
            m.path_in(dir).display()
        );
    }
}

fn remove(name: &str, dir: &Path) -> Result<(), String> {
    let entry = entry(Some(name))?;
    let freed = switchyard_models::remove(entry, dir)
        .map_err(|e| format!("cannot remove {name} from {}: {e}", dir.display()))?;
    match freed {
        0 => println!("{name} is not downloaded in {}", dir.display()),
        bytes => println!("removed {name}: {} freed", megabytes(bytes)),
    }
    Ok(())
}

fn disk_use(dir: &Path) {
    for m in &Manifest::embedded().models {
        let used = switchyard_models::used_by(m, dir);
        if used > 0 {
            println!("{:>10}  {}", megabytes(used), m.name);
        }
    }
    let total = switchyard_models::disk_use(dir);
    println!("{:>10}  total in {}", megabytes(total), dir.display());
}
