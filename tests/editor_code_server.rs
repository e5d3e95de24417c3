//! VS Code for real: code-server (VS Code 1.139 in the browser) with the
//! packaged extension installed, its workbench driven in headless Chromium
//! through chromedriver. The server settings are User settings, as a user of
//! a remote window (code-server, Remote-SSH, WSL) sets them. Screenshots of
//! each step are kept under `target/editor-code-server/`.
//!
//! Needs code-server (`editors/vscode/code-server.sh` installs it on first use,
//! about 4 minutes), Debian's chromium and chromium-driver, and the extension's
//! npm packages (`scripts/test-setup`).

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use support::browser::{Browser, PATIENCE, key, target_dir};
use support::fake_provider::{Behaviour, FakeProvider, two_providers_toml};
use support::{free_port, poll};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

const KEY: &str = "sk-test-code-server-0123456789abcdef";
const ANSWER: &str = "The function adds its two arguments and returns the sum.";
/// How long one ask (or one typed key) is given to show ghost text before
/// the next; scaled.
const ASK: Duration = Duration::from_secs(8);
/// How long a key press in a quick input is given to show before it is
/// pressed again; scaled.
const KEY_PRESS: Duration = Duration::from_secs(5);

/// One workbench at a time: two code-servers, two Chromiums and the model do
/// not fit on two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn shots() -> PathBuf {
    target_dir().join("editor-code-server")
}

fn code_server() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        support::installed_tool("editors/vscode/code-server.sh").expect("code-server installs")
    })
}

/// The extension packaged as users install it (`vsce package`).
fn vsix() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = repo().join("editors/vscode");
        assert!(
            dir.join("node_modules/.bin/vsce").exists(),
            "the extension's npm packages are missing: run scripts/test-setup"
        );
        let out = shots().join("switchyard.vsix");
        std::fs::create_dir_all(shots()).unwrap();
        let status = std::process::Command::new("npx")
            .args(["--no-install", "vsce", "package", "--out"])
            .arg(&out)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .status()
            .expect("npx runs");
        assert!(status.success(), "vsce package failed");
        out
    })
}

/// A PATH with the system's tools and no switchyard on it.
const NO_SWITCHYARD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The VSIX for this machine's platform with the server under test inside,
/// as `scripts/package` makes it for a release.
fn platform_vsix() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = shots().join("package");
        let _ = std::fs::remove_dir_all(&out);
        let status = std::process::Command::new(repo().join("scripts/package"))
            .args(["--binary", env!("CARGO_BIN_EXE_switchyard"), "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .status()
            .expect("scripts/package runs");
        assert!(status.success(), "scripts/package failed");
        std::fs::read_dir(&out)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|path| path.extension().is_some_and(|e| e == "vsix"))
            .expect("a .vsix")
    })
}

/// A running code-server with the extension, a workspace and a browser on it.
struct Workbench {
    _server: Child,
    browser: Browser,
    work: tempfile::TempDir,
    step: std::cell::Cell<u32>,
}

struct Setup<'a> {
    /// config.toml for the switchyard server.
    config: String,
    /// Files in the workspace.
    files: &'a [(&'a str, &'a str)],
    /// The test model's directory, or none (no local model loads).
    models: bool,
    /// User settings besides the ones every test has.
    settings: Value,
    /// Install the platform VSIX `scripts/package` makes, with the server
    /// inside, and leave `switchyard.path` unset and no switchyard on PATH.
    bundled: bool,
}

impl Workbench {
    async fn start(name: &str, setup: Setup<'_>) -> Workbench {
        let work = tempfile::tempdir().unwrap();
        let root = work.path();
        let workspace = root.join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        for (path, text) in setup.files {
            std::fs::write(workspace.join(path), text).unwrap();
        }
        std::fs::write(root.join("config.toml"), &setup.config).unwrap();
        // Only User settings: VS Code ignores machine-scoped User values in a
        // remote window, which code-server's workbench is.
        let mut settings = json!({
            "switchyard.path": env!("CARGO_BIN_EXE_switchyard"),
            "switchyard.configFile": root.join("config.toml"),
            "switchyard.logFile": root.join("switchyard.log"),
            "security.workspace.trust.enabled": false,
            "workbench.startupEditor": "none",
            "workbench.tips.enabled": false,
            "workbench.enableExperiments": false,
            "chat.disableAIFeatures": true,
            "telemetry.telemetryLevel": "off",
            "extensions.autoCheckUpdates": false,
            "extensions.autoUpdate": false,
            "files.autoSave": "afterDelay",
            "files.autoSaveDelay": 100,
            "editor.inlineSuggest.enabled": true,
            "editor.quickSuggestions": {"other": false, "comments": false, "strings": false},
            "editor.suggestOnTriggerCharacters": false,
        });
        for (key, value) in setup.settings.as_object().into_iter().flatten() {
            settings[key] = value.clone();
        }
        if setup.bundled {
            settings.as_object_mut().unwrap().remove("switchyard.path");
        }
        let user = root.join("user-data/User");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(user.join("settings.json"), settings.to_string()).unwrap();

        let common = |command: &mut Command| {
            command
                .arg("--user-data-dir")
                .arg(root.join("user-data"))
                .arg("--extensions-dir")
                .arg(root.join("extensions"))
                .env("XDG_CONFIG_HOME", root.join("xdg-config"))
                .env("XDG_DATA_HOME", root.join("xdg-data"))
                .env("SWITCHYARD_STATE_DIR", root.join("state"))
                .env("SY_FAKE_KEY", KEY)
                .env("SWITCHYARD_LOG", "debug")
                .env(
                    "SWITCHYARD_MODEL_DIR",
                    if setup.models {
                        support::model_dir()
                    } else {
                        root.join("no-models")
                    },
                )
                .kill_on_drop(true);
            if setup.bundled {
                command.env("PATH", NO_SWITCHYARD_PATH);
            }
        };
        let mut install = Command::new(code_server());
        common(&mut install);
        let extension = match setup.bundled {
            true => platform_vsix(),
            false => vsix(),
        };
        let installed = install
            .arg("--install-extension")
            .arg(extension)
            .output()
            .await
            .expect("code-server runs");
        assert!(
            installed.status.success(),
            "installing the extension failed: {}",
            String::from_utf8_lossy(&installed.stderr)
        );

        let port = free_port();
        let mut command = Command::new(code_server());
        common(&mut command);
        command
            .args(["--auth", "none", "--bind-addr"])
            .arg(format!("127.0.0.1:{port}"))
            // Without it an extension host, and its switchyard, outlives the tab for hours.
            .args(["--reconnection-grace-time", "5"])
            .args(["--disable-telemetry", "--disable-update-check"])
            .args([
                "--disable-workspace-trust",
                "--disable-getting-started-override",
            ])
            .arg(&workspace)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(root.join("code-server.log")).unwrap());
        let server = command.spawn().expect("code-server starts");
        let url = format!("http://127.0.0.1:{port}/?folder={}", workspace.display());
        let health = format!("http://127.0.0.1:{port}/healthz");
        poll::eventually(PATIENCE, async || reqwest::get(&health).await.map(drop))
            .await
            .unwrap_or_else(|e| panic!("code-server did not start: {e}"));
        let browser = Browser::start().await;
        browser.goto(&url).await;
        let bench = Workbench {
            _server: server,
            browser,
            work,
            step: std::cell::Cell::new(0),
        };
        bench
            .wait(&format!("{name}: the workbench"), WORKBENCH, |s| {
                s["ready"] == true
            })
            .await;
        bench
    }

    fn root(&self) -> &Path {
        self.work.path()
    }

    fn workspace_file(&self, path: &str) -> PathBuf {
        self.root().join("workspace").join(path)
    }

    /// Waits until `done` holds of `script`'s value; on timeout fails with the
    /// page's state, the server log and a screenshot.
    async fn wait(&self, what: &str, script: &str, done: impl Fn(&Value) -> bool) -> Value {
        match self.browser.eventually(script, done).await {
            Ok(state) => state,
            Err(state) => self.timed_out(what, &state).await,
        }
    }

    /// Fails with the page's state, the server log and a screenshot.
    async fn timed_out(&self, what: &str, state: &Value) -> ! {
        let failed = shots().join(format!("failed-{}.png", what.replace([' ', ':', '/'], "-")));
        self.browser.screenshot(&failed).await;
        panic!(
            "timed out waiting for {what}; the page showed: {state:#}\n{}",
            self.log_tail()
        );
    }

    /// The end of the server's log, newest line first.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.root().join("switchyard.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        format!("server log (newest first):\n{}", tail.join("\n"))
    }

    async fn shot(&self, name: &str) {
        let step = self.step.get() + 1;
        self.step.set(step);
        self.browser
            .screenshot(&shots().join(format!("{name}-{step:02}.png")))
            .await;
    }

    /// The switchyard status bar item's text and accessible label.
    async fn status_item(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let state = self
            .wait(what, STATUS_ITEM, |s| s["text"].as_str().is_some_and(&done))
            .await;
        state["text"].as_str().unwrap().to_owned()
    }

    /// Runs a command from the command palette by its title, as a user does.
    async fn palette(&self, title: &str) {
        let open = |s: &Value| s["value"].as_str().is_some_and(|v| v.starts_with('>'));
        let offered = |s: &Value| s["first"].as_str().is_some_and(|f| f.contains(title));
        self.quick_input(open, Some(key::F1), &format!(">{title}"), offered)
            .await;
    }

    /// Accepts `choice` in the quick pick whose placeholder reads
    /// `placeholder`.
    async fn pick(&self, placeholder: &str, choice: &str) {
        let open = |s: &Value| {
            s["placeholder"]
                .as_str()
                .is_some_and(|p| p.contains(placeholder))
        };
        let offered = |s: &Value| s["first"].as_str().is_some_and(|f| f.contains(choice));
        self.quick_input(open, None, choice, offered).await;
    }

    /// Types `text` into the quick input that `open` tells (opened with
    /// `opener`, or by the command before), and accepts it once its first row
    /// is `offered`. Keys typed while a quick input opens or hands over to
    /// the next are lost, so each step is done again until it shows: the
    /// opener pressed while the input stays shut, the text typed while the
    /// input does not hold it, Enter pressed while it is not taken.
    async fn quick_input(
        &self,
        open: impl Fn(&Value) -> bool,
        opener: Option<&str>,
        text: &str,
        offered: impl Fn(&Value) -> bool,
    ) {
        let shown = |s: &Value| s["visible"] == true && open(s);
        let what = format!("a quick input for {text:?}");
        let opened = poll::retrying(
            PATIENCE,
            KEY_PRESS,
            async |_| {
                let state = self.browser.eval(QUICK_INPUT).await;
                if let (false, Some(opener)) = (shown(&state), opener) {
                    self.browser.keys(&[], opener).await;
                }
            },
            async || self.quick_input_state(&shown).await,
        );
        if let Err(state) = opened.await {
            self.timed_out(&what, &state).await;
        }
        let typed = |s: &Value| shown(s) && s["value"].as_str() == Some(text);
        let ready = poll::retrying(
            PATIENCE,
            KEY_PRESS,
            async |_| {
                if !typed(&self.browser.eval(QUICK_INPUT).await) {
                    self.browser.keys(&[key::CONTROL], "a").await;
                    self.browser.keys(&[], text).await;
                }
            },
            async || self.quick_input_state(|s| typed(s) && offered(s)).await,
        );
        if let Err(state) = ready.await {
            self.timed_out(&format!("{text:?} offered"), &state).await;
        }
        // Taken: the input closed, or went on to the next one.
        let taken = poll::retrying(
            PATIENCE,
            KEY_PRESS,
            async |_| {
                if typed(&self.browser.eval(QUICK_INPUT).await) {
                    self.browser.keys(&[], key::ENTER).await;
                }
            },
            async || self.quick_input_state(|s| !typed(s)).await,
        );
        if let Err(state) = taken.await {
            self.timed_out(&format!("{text:?} taken"), &state).await;
        }
    }

    /// The quick input's state, `Ok` when `done` holds of it.
    async fn quick_input_state(&self, done: impl Fn(&Value) -> bool) -> Result<Value, Value> {
        let state = self.browser.eval(QUICK_INPUT).await;
        if done(&state) { Ok(state) } else { Err(state) }
    }

    /// Opens a workspace file through Quick Open and puts the cursor on `line`
    /// (1-based), at its end.
    async fn open_at(&self, path: &str, line: u32) {
        self.palette("Go to File").await;
        self.pick("Search files by name", path).await;
        self.wait(&format!("{path} open"), EDITOR, |s| {
            s["tab"].as_str() == Some(path) && s["focused"] == true
        })
        .await;
        self.palette("Go to Line/Column").await;
        let at_line = |s: &Value| s["line"] == line && s["focused"] == true;
        let go = |s: &Value| s["value"].as_str().is_some_and(|v| v.starts_with(':'));
        self.quick_input(go, None, &format!(":{line}"), |_| true)
            .await;
        self.wait(&format!("the cursor on line {line}"), EDITOR, at_line)
            .await;
        self.browser.keys(&[], key::END).await;
    }

    /// A new line below the line of `path` that reads `anchor` (End,
    /// Enter), where *Trigger Inline Suggestion* (Alt+\ in a desktop VS Code;
    /// an invoked request) runs from the palette until ghost text shows; the
    /// ghost text.
    async fn suggestion_below(&self, path: &str, anchor: &str) -> String {
        let saved = std::fs::read_to_string(self.workspace_file(path)).unwrap();
        let line = saved
            .lines()
            .position(|l| l == anchor)
            .unwrap_or_else(|| panic!("no line {anchor:?} in {path}"))
            + 1;
        self.open_at(path, line as u32).await;
        self.browser.keys(&[], key::ENTER).await;
        self.ask(anchor).await
    }

    /// Runs *Trigger Inline Suggestion* until ghost text shows at the cursor
    /// (the first ask at a place can be answered empty on a loaded machine).
    async fn ask(&self, anchor: &str) -> String {
        let shown = poll::retrying(
            PATIENCE,
            ASK,
            async |_| self.palette("Trigger Inline Suggestion").await,
            async || ghost_text(&self.browser.eval(EDITOR).await),
        );
        shown.await.unwrap_or_else(|state| {
            panic!(
                "no ghost text below {anchor:?}; the editor showed {state:#}\n{}",
                self.log_tail()
            )
        })
    }

    /// Types `keys` a key at a time, as a user does, until ghost text shows:
    /// an empty answer is on time while the model's cache is cold, and the
    /// model may have nothing to add to a given prefix. On a slow machine the
    /// line may not fit the automatic budget while typing; asking for it
    /// (the palette's trigger) gets the invoked one. What was typed, and the
    /// ghost text.
    async fn type_until_ghost(&self, keys: &str) -> (String, String) {
        let mut typed = String::new();
        for c in keys.chars() {
            self.browser.keys(&[], &c.to_string()).await;
            typed.push(c);
            let ghost = async || ghost_text(&self.browser.eval(EDITOR).await);
            if let Ok(ghost) = poll::eventually(ASK, ghost).await {
                return (typed, ghost);
            }
        }
        let ghost = self.ask(&typed).await;
        (typed, ghost)
    }

    async fn model_ready(&self) {
        poll::file_containing(
            &self.root().join("switchyard.log"),
            "local model ready",
            PATIENCE,
        )
        .await;
    }

    /// Waits until a line of the saved `path` satisfies `done`; that line.
    async fn saved_line(&self, path: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
        let saved = async || {
            let saved = std::fs::read_to_string(self.workspace_file(path)).unwrap();
            match saved.lines().find(|l| done(l)) {
                Some(line) => Ok(line.to_owned()),
                None => Err(saved),
            }
        };
        poll::eventually(PATIENCE, saved)
            .await
            .unwrap_or_else(|saved| panic!("{what}: no such line in\n{saved}"))
    }

    /// Waits until the switchyard config file holds `needle`: the server
    /// tells the status before it saves the file.
    async fn config_holds(&self, needle: &str) {
        poll::file_containing(&self.root().join("config.toml"), needle, PATIENCE).await;
    }

    /// Waits until `switchyard stats` says what `done` wants (`Ok`, or `Err`
    /// with why not); fails with why not and the stats.
    async fn stats_until(&self, done: impl Fn(&Value) -> Result<(), String>) {
        let state = self.root().join("state");
        let counted = async || {
            let stats = support::completion_stats(&state);
            done(&stats).map_err(|why| format!("{why}: {stats}"))
        };
        if let Err(why) = poll::eventually(PATIENCE, counted).await {
            panic!("{why}\n{}", self.log_tail());
        }
    }
}

/// The ghost text in `EDITOR`'s state, when there is some.
fn ghost_text(state: &Value) -> Result<String, Value> {
    match state["ghost"].as_str().filter(|g| !g.trim().is_empty()) {
        Some(ghost) => Ok(ghost.to_owned()),
        None => Err(state.clone()),
    }
}

/// Whether the workbench is up with the switchyard item in its status bar.
const WORKBENCH: &str = r#"
const item = [...document.querySelectorAll(".statusbar-item")].find((e) => (e.textContent || "").includes("switchyard"));
return { ready: !!document.querySelector(".monaco-workbench") && !!item, title: document.title };
"#;

const STATUS_ITEM: &str = r#"
const item = [...document.querySelectorAll(".statusbar-item")].find((e) => (e.textContent || "").includes("switchyard"));
return { text: item ? item.textContent.trim() : null, label: item ? item.getAttribute("aria-label") : null };
"#;

const QUICK_INPUT: &str = r#"
const widget = document.querySelector(".quick-input-widget");
const visible = !!widget && widget.style.display !== "none" && widget.offsetParent !== null;
const row = widget && widget.querySelector(".monaco-list-row");
const input = widget && widget.querySelector("input");
return {
  visible,
  first: row ? (row.getAttribute("aria-label") || row.textContent) : null,
  placeholder: input ? input.getAttribute("placeholder") : null,
  value: input ? input.value : null,
};
"#;

const EDITOR: &str = r#"
const tab = document.querySelector(".tabs-container .tab.active");
const editor = document.querySelector(".editor-instance .monaco-editor");
const lines = editor ? [...editor.querySelectorAll(".view-line")].map((l) => l.textContent.replace(/\u00a0/g, " ")) : [];
// The part on the cursor's line, drawn a piece per token, comes first; the
// lines below sit in a view zone, which comes earlier in the page.
const text = (g) => g.textContent.replace(/\u00a0/g, " ");
const inline = [...document.querySelectorAll(".ghost-text-decoration, .ghost-text-decoration-preview")];
const below = [...document.querySelectorAll(".ghost-text")].filter((g) => !inline.includes(g));
const ghost = [inline.map(text).join(""), ...below.map(text)].filter((t) => t !== "").join("\n");
// The cursor's line as the status bar tells it ("Ln 12, Col 9").
const position = [...document.querySelectorAll(".statusbar-item")]
  .map((e) => /Ln (\d+), Col (\d+)/.exec(e.textContent || ""))
  .find((m) => m);
return {
  tab: tab ? tab.getAttribute("data-resource-name") || tab.textContent.trim() : null,
  focused: !!(editor && editor.classList.contains("focused")),
  line: position ? Number(position[1]) : null,
  lines,
  ghost,
};
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghost_text_from_the_local_model_appears_and_tab_accepts_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (text, line) = support::sample_with_hole();
    let config = "[local]\nauto_pull = false\n\n[autocomplete]\ninput_tokens = 256\n";
    let bench = Workbench::start(
        "ghost",
        Setup {
            config: config.into(),
            files: &[("store.rs", &text)],
            models: true,
            settings: json!({}),
            bundled: false,
        },
    )
    .await;
    bench.model_ready().await;
    bench.open_at("store.rs", line as u32).await;
    let (typed, ghost) = bench.type_until_ghost("self.entries.").await;
    bench.shot("ghost-text").await;
    let first = ghost.lines().next().unwrap().trim().to_owned();

    bench.browser.keys(&[], key::TAB).await;
    let path = bench.workspace_file("store.rs");
    let accepted = async || {
        let saved = std::fs::read_to_string(&path).unwrap();
        let at_cursor = saved.lines().nth(line - 1).unwrap_or("").to_owned();
        match at_cursor.starts_with(&format!("        {typed}")) && at_cursor.contains(&first) {
            true => Ok(()),
            false => Err(at_cursor),
        }
    };
    if let Err(at_cursor) = poll::eventually(PATIENCE, accepted).await {
        panic!(
            "Tab did not put the ghost text {ghost:?} after {typed:?}; line {line} is {at_cursor:?}"
        );
    }
    bench.shot("ghost-text-accepted").await;

    // VS Code ran the item's accept command: the stats count it for this
    // editor (clientInfo), whatever the keystrokes before it showed and left.
    bench
        .stats_until(|stats| {
            let groups = stats["groups"].as_array().cloned().unwrap_or_default();
            let group = groups
                .iter()
                .find(|g| g["accepted"].as_u64().is_some_and(|n| n >= 1))
                .ok_or("no accepted suggestion")?;
            match (&group["editor"], &group["language"]) {
                (editor, language) if editor != "unknown" && language == "rust" => Ok(()),
                _ => Err(format!(
                    "accepted, but not for this editor in rust: {group}"
                )),
            }
        })
        .await;
}

/// Installed as a user installs a release: the platform VSIX that
/// `scripts/package` makes, with no switchyard on PATH and no
/// `switchyard.path`. The extension runs the server it carries (the status
/// item names it and its version) and ghost text appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platform_vsix_runs_the_server_it_carries() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let on_path = std::process::Command::new("sh")
        .args(["-c", "command -v switchyard"])
        .env("PATH", NO_SWITCHYARD_PATH)
        .output()
        .unwrap();
    assert!(
        !on_path.status.success(),
        "a switchyard is on {NO_SWITCHYARD_PATH}"
    );
    let (text, line) = support::sample_with_hole();
    let config = "[local]\nauto_pull = false\n\n[autocomplete]\ninput_tokens = 256\n";
    let bench = Workbench::start(
        "bundled",
        Setup {
            config: config.into(),
            files: &[("store.rs", &text)],
            models: true,
            settings: json!({}),
            bundled: true,
        },
    )
    .await;
    let version = format!(
        "switchyard {} (bundled with the extension)",
        env!("CARGO_PKG_VERSION")
    );
    bench
        .wait(
            "the status item names the bundled server",
            STATUS_ITEM,
            |s| s["label"].as_str().is_some_and(|l| l.contains(&version)),
        )
        .await;
    bench.model_ready().await;
    bench.open_at("store.rs", line as u32).await;
    let (typed, ghost) = bench.type_until_ghost("self.entries.").await;
    assert!(!ghost.trim().is_empty(), "after {typed:?}");
    bench.shot("bundled-ghost-text").await;
}

/// One suggestion accepted with Tab, one a word at a time with VS Code's own
/// accept-word (Ctrl+Right), one ignored by typing something else: the
/// stats count 1, 1 and 1 for this editor and hold none of the text. The
/// automatic budget is the least the server takes (50 ms), so the automatic
/// requests VS Code sends as the user types come back empty (late) and only
/// the suggestions the test asks for are shown. Markdown is off by
/// the extension's setting, and the status item says so there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggestions_accepted_by_tab_by_word_and_ignored_are_counted() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let config =
        "[local]\nauto_pull = false\n\n[autocomplete]\ninput_tokens = 256\nbudget_ms = 50\n";
    let bench = Workbench::start(
        "acceptance",
        Setup {
            config: config.into(),
            files: &[
                ("store.rs", support::SAMPLE_RUST),
                ("notes.md", "# Notes\n\nSome text.\n"),
            ],
            models: true,
            settings: json!({ "switchyard.autocomplete.languages": { "markdown": false } }),
            bundled: false,
        },
    )
    .await;
    bench.model_ready().await;
    let mut shown = Vec::new();

    // 1. Tab: VS Code runs the item's accept command.
    let ghost = bench
        .suggestion_below("store.rs", "        let before = self.entries.len();")
        .await;
    let first = ghost.lines().next().unwrap().trim().to_owned();
    bench.browser.keys(&[], key::TAB).await;
    bench
        .saved_line("store.rs", &format!("the accepted {ghost:?}"), |l| {
            l.trim() == first
        })
        .await;
    bench.shot("accepted").await;
    shown.push(ghost);

    // 2. Ctrl+Right: VS Code inserts the next word itself, with no command;
    // the server sees it typed at the cursor. A suggestion of one word has
    // no part to take: it is ignored (something else typed), and the next
    // line tried.
    let anchor = "        let now = Instant::now();";
    let mut ghost = bench.suggestion_below("store.rs", anchor).await;
    let mut one_word = 0;
    while is_one_word(&ghost) && one_word < 3 {
        one_word += 1;
        bench.browser.keys(&[], &format!("#{}", key::ENTER)).await;
        ghost = bench.ask(anchor).await;
    }
    // The ghost text's pieces as the page draws them, run together.
    let whole: String = ghost.lines().map(str::trim).collect();
    bench.browser.keys(&[key::CONTROL], key::RIGHT).await;
    bench.shot("partly-accepted").await;
    let taken = bench
        .saved_line("store.rs", &format!("one word of {whole:?}"), |l| {
            let typed = l.trim();
            !typed.is_empty() && typed.len() < whole.len() && whole.starts_with(typed)
        })
        .await;
    shown.push(ghost);

    // 3. Something else typed where it shows; asking there settled 2.
    let ghost = bench
        .suggestion_below("store.rs", "        let total = self.hits + self.misses;")
        .await;
    bench
        .browser
        .keys(&[], support::other_than(ghost.trim_start()))
        .await;
    shown.push(ghost);

    bench
        .stats_until(|stats| {
            let sum = |outcome| support::stats_sum(stats, outcome, |g| g["editor"] != "unknown");
            match [sum("accepted"), sum("partial"), sum("ignored")] {
                [1, 1, ignored] if ignored == 1 + one_word => Ok(()),
                counts => Err(format!(
                    "accepted, partial, ignored are {counts:?}, not 1, 1, {} (the word taken: {taken:?})",
                    1 + one_word
                )),
            }
        })
        .await;
    support::assert_no_suggestion_text(&bench.root().join("state"), &shown);

    // The extension's language setting reaches the server: asked in a
    // markdown file, the status item says completions are off here.
    bench.open_at("notes.md", 3).await;
    bench.palette("Trigger Inline Suggestion").await;
    bench
        .status_item("completions off here", |t| t.contains("off here"))
        .await;
    bench.shot("markdown-off").await;
}

/// Whether accepting the next word of `ghost` takes all of it.
fn is_one_word(ghost: &str) -> bool {
    let text = ghost.trim();
    support::first_word(text) == text
}

/// explain served by `primary/mid` (medium); with it down, by `secondary/small`.
fn remote_config(primary: &FakeProvider, secondary: &FakeProvider) -> String {
    format!(
        r#"{}
[tiers]
large = []
medium = ["primary/mid"]
small = ["secondary/small"]

[tasks.explain]
wait_ms = 0

[resilience]
canary_interval_ms = 300
"#,
        two_providers_toml(primary, secondary, "SY_FAKE_KEY"),
    )
}

const ADD: &str = "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n";

/// Selects lines `from..=to` (1-based) and runs the Explain code action from
/// the Source Action menu.
async fn explain(bench: &Workbench) {
    bench.open_at("add.rs", 1).await;
    bench.browser.keys(&[key::SHIFT], "\u{E015}\u{E015}").await; // Shift+Down twice
    bench.palette("Source Action").await;
    bench
        .wait("the switchyard: Explain action", ACTION_MENU, |s| {
            s["explain"] == true
        })
        .await;
    bench
        .browser
        .click(
            "switchyard: Explain",
            r#"return [...document.querySelectorAll(".action-widget .monaco-list-row")].find((r) => r.textContent.includes("switchyard: Explain"));"#,
        )
        .await;
}

const ACTION_MENU: &str = r#"
const rows = [...document.querySelectorAll(".action-widget .monaco-list-row")].map((r) => r.textContent);
return { rows, explain: rows.some((r) => r.includes("switchyard: Explain")) };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_bar_local_only_explain_and_the_downshift_indicator() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let primary = FakeProvider::with_default(Behaviour::ok(ANSWER)).await;
    let secondary = FakeProvider::with_default(Behaviour::ok(ANSWER)).await;
    let bench = Workbench::start(
        "remote",
        Setup {
            config: remote_config(&primary, &secondary),
            files: &[("add.rs", ADD)],
            models: false,
            settings: json!({}),
            bundled: false,
        },
    )
    .await;

    // The item is there, and the server behind it answers.
    bench
        .status_item("the status item", |t| {
            t.contains("switchyard") && !t.contains("starting")
        })
        .await;
    bench.shot("status-item").await;

    // Local-only from the command palette: the item says so and the config
    // file keeps it.
    bench.palette("switchyard: Toggle Local-Only Mode").await;
    bench
        .status_item("the local-only item", |t| t.contains("local-only"))
        .await;
    bench.shot("local-only-on").await;
    bench.config_holds("local_only = true").await;
    bench.palette("switchyard: Toggle Local-Only Mode").await;
    bench
        .status_item("local-only off", |t| !t.contains("local-only"))
        .await;
    bench.config_holds("local_only = false").await;

    // Snooze from the palette: the item says so, and resuming clears it.
    for (choice, done) in [
        ("Snooze for 5 minutes", true),
        ("Resume completions", false),
    ] {
        bench.palette("switchyard: Snooze Completions").await;
        bench.pick("snooze inline completions", choice).await;
        bench
            .status_item(choice, |t| t.contains("completions snoozed") == done)
            .await;
    }

    // Explain opens the markdown answer from the fake provider.
    explain(&bench).await;
    let opened = bench
        .wait("the explanation", EDITOR, |s| {
            s["tab"]
                .as_str()
                .is_some_and(|t| t.starts_with("explain-") && t.ends_with(".md"))
                && s["lines"].as_array().is_some_and(|l| {
                    l.iter()
                        .any(|l| l.as_str().is_some_and(|l| l.contains(ANSWER)))
                })
        })
        .await;
    bench.shot("explain").await;
    assert!(
        opened["lines"]
            .to_string()
            .contains("primary/mid (medium tier)"),
        "{opened:#}"
    );
    bench
        .status_item("the served route", |t| t.contains("primary/mid (medium)"))
        .await;

    // The primary goes down: the next explain downshifts, and the item shows
    // the tier it fell to and why.
    primary.set_default(Behaviour::Overloaded);
    explain(&bench).await;
    let item = bench
        .status_item("the downshift indicator", |t| t.contains("↓ from medium"))
        .await;
    bench.shot("downshifted").await;
    assert!(item.contains("secondary/small (small"), "{item}");
    assert!(item.contains("529") || item.contains("overload"), "{item}");

    // It recovers: the canaries see it, and the indicator clears with no
    // further action from the user.
    primary.set_default(Behaviour::ok(ANSWER));
    let item = bench
        .status_item("the indicator to clear", |t| !t.contains('↓'))
        .await;
    bench.shot("recovered").await;
    assert!(item.contains("primary/mid (medium)"), "{item}");
}
