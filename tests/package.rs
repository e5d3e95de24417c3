//! Release artifacts: `scripts/package` makes this machine's archive with
//! the binary, licences, README, Neovim plugin and Helix snippet, whose
//! `.sha256` verifies and is listed in SHA256SUMS; the release workflow
//! builds the four targets. (The platform VSIX is installed and used in
//! `tests/editor_code_server.rs`.)

use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_archive_holds_what_a_user_installs_and_its_digest_verifies() {
    let out = tempfile::tempdir().unwrap();
    let packaged = Command::new(repo().join("scripts/package"))
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_switchyard"),
            "--no-vsix",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&packaged.stdout).into_owned();
    assert!(
        packaged.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&packaged.stderr)
    );
    let archive = Path::new(said.lines().last().unwrap());
    let name = archive.file_name().unwrap().to_string_lossy();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        name.starts_with(&format!("switchyard-{version}-")),
        "{name}"
    );

    let checked = Command::new("sha256sum")
        .args(["--check", "SHA256SUMS"])
        .current_dir(out.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{report}");
    assert!(report.contains(&format!("{name}: OK")), "{report}");

    let listed = Command::new("tar")
        .arg("-tzf")
        .arg(archive)
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&listed.stdout);
    let top = name.trim_end_matches(".tar.gz");
    for file in [
        "switchyard",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "README.md",
        "editors/nvim/lua/switchyard/init.lua",
        "editors/nvim/lua/switchyard/health.lua",
        "editors/helix/languages.toml",
    ] {
        assert!(
            files.contains(&format!("{top}/{file}")),
            "{file} missing:\n{files}"
        );
    }
}

#[test]
fn the_release_workflow_builds_the_four_targets() {
    let workflow = std::fs::read_to_string(repo().join(".github/workflows/release.yml")).unwrap();
    for target in [
        "aarch64-apple-darwin",
        "x86_64-unknown-linux-gnu",
        "aarch64-unknown-linux-gnu",
        "x86_64-pc-windows-msvc",
    ] {
        assert!(workflow.contains(&format!("target: {target}")), "{target}");
    }
    assert!(workflow.contains("scripts/package --target"));
}
