//! The VS Code extension (editors/vscode): its node:test suites, built once
//! with tsc. The protocol suite drives this build's server binary with
//! vscode-languageserver-protocol as the extension does; the real workbench
//! (code-server) is tests/editor_code_server.rs. editors/setup.sh installs the
//! npm dependencies.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

fn extension_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("editors/vscode")
}

fn output_text(output: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Compiles the extension once per test run (the suites run in parallel and
/// would otherwise write `out/` at the same time).
fn build() {
    static BUILT: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let result = built.get_or_insert_with(|| {
        let dir = extension_dir();
        if !dir.join("node_modules/.bin/tsc").exists() {
            return Err(format!(
                "{}/node_modules is not installed: run editors/setup.sh",
                dir.display()
            ));
        }
        let output = Command::new("npm")
            .args(["run", "--silent", "build"])
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("cannot run npm ({e}): run editors/setup.sh"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("tsc failed:\n{}", output_text(&output)))
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Runs compiled node:test files and fails with their report unless all pass.
fn node_test(files: &[&str]) {
    build();
    let output = Command::new("node")
        .arg("--test")
        .args(files.iter().map(|f| format!("out/test/{f}")))
        .current_dir(extension_dir())
        .env("SWITCHYARD_BIN", env!("CARGO_BIN_EXE_switchyard"))
        .env("SWITCHYARD_MODEL_DIR", support::model_dir())
        .output()
        .expect("running node (run editors/setup.sh)");
    let report = output_text(&output);
    assert!(
        output.status.success() && report.contains("# fail 0") && !report.contains("# tests 0"),
        "{files:?} failed:\n{report}"
    );
}

#[test]
fn status_formatting_settings_mapping_and_manifest() {
    node_test(&["status.test.js", "settings.test.js", "manifest.test.js"]);
}

#[test]
fn the_extensions_protocol_against_the_real_server() {
    node_test(&["protocol.test.js"]);
}

#[test]
fn vsce_packages_the_extension() {
    node_test(&["package.test.js"]);
}
