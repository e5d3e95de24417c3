//! `switchyard doctor`: the checks of `switchyard_probe::doctor`, printed
//! for a person or, with `--json`, for an editor's health check.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;

use switchyard_probe::doctor::{self, Check, Level, Places};

pub async fn run(
    config_file: Option<PathBuf>,
    log_file: &Path,
    json: bool,
    no_engine: bool,
) -> ExitCode {
    let places = Places {
        config_file,
        state_dir: switchyard_base::paths::state_dir(),
        log_file: log_file.to_owned(),
        model_dir: switchyard_models::model_dir(),
    };
    let (mut checks, config) = doctor::check(&places);
    let model_fine = checks
        .iter()
        .any(|c| c.name == "model" && c.level == Level::Ok);
    if !no_engine && model_fine {
        checks.push(doctor::engine(&config).await);
    }
    let ready = doctor::ready(&checks);
    if json {
        let version = env!("CARGO_PKG_VERSION");
        println!(
            "{}",
            json!({"version": version, "ready": ready, "checks": checks})
        );
    } else {
        print!("{}", human(&checks, ready));
    }
    match ready {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

fn human(checks: &[Check], ready: bool) -> String {
    let mut out = format!("switchyard {}\n", env!("CARGO_PKG_VERSION"));
    for check in checks {
        let mark = match check.level {
            Level::Ok => "ok   ",
            Level::Warn => "WARN ",
            Level::Error => "ERROR",
        };
        out += &format!("{mark} {:<10} {}\n", check.name, check.detail);
        if let (Some(fix), false) = (&check.fix, check.level == Level::Ok) {
            out += &format!("      {:<10} fix: {fix}\n", "");
        }
    }
    out += match ready {
        true => "ready\n",
        false => "NOT READY: fix the errors above\n",
    };
    out
}
