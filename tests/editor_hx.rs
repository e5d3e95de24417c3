//! Helix for real: `hx` built from source (`editors/helix/build.sh`, cached
//! outside the repository by the source's digest, built on first use), with
//! the documented `editors/helix/languages.toml` as its languages.toml and
//! `switchyard` on PATH, driven in tmux (send-keys, capture-pane) as a user
//! types. tests/editor_helix.rs covers the same ground at the protocol level.
//!
//! No other language server takes part: the snippet's lists name each
//! language's usual server next to switchyard, and a machine may have one
//! that fails (rustup's `rust-analyzer` proxy without its component makes
//! Helix report "Language server exited"), so the tests keep switchyard
//! alone in each list. Each editor action is repeated until its effect shows
//! on the screen, never assumed to land in a fixed time.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use support::fake_provider::{Behaviour, FakeProvider};
use support::poll::{self, PATIENCE};
use tokio::sync::Mutex;

const KEY: &str = "sk-test-helix-0123456789abcdef";
/// How long one ask (C-x) is given to open the menu before the next; scaled.
const ASK: Duration = Duration::from_secs(6);

/// One editor at a time: the model's test and two more servers do not fit on
/// two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The cached `hx`, built now when the cache is missing; `None` when there is
/// no Helix source to build from (it lives outside the repository).
fn hx() -> Option<&'static Path> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| support::installed_tool("editors/helix/build.sh"))
        .as_deref()
}

/// `hx`, or a loud note that this machine has no Helix source and the test
/// did not run.
fn hx_or_say_why(test: &str) -> Option<&'static Path> {
    let hx = hx();
    if hx.is_none() {
        eprintln!("NOT RUN: {test}: no Helix source (see editors/helix/build.sh)");
    }
    hx
}

/// `hx` in a tmux session of its own; dropping it ends both.
struct Helix {
    socket: String,
    work: tempfile::TempDir,
}

impl Drop for Helix {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

struct Setup<'a> {
    /// The switchyard config file's text.
    config: &'a str,
    files: &'a [(&'a str, &'a str)],
    /// Whether the test model is there to load.
    models: bool,
    /// What `hx` opens, `path[:line[:column]]`.
    open: &'a str,
    /// `display-progress-messages`, as the snippet suggests. Helix shows one
    /// message at a time, so progress replaces what came before it.
    show_progress: bool,
    /// Added to the snippet's `languages.toml`.
    more_languages: &'a str,
    /// In place of the snippet's `autocomplete = ...` server setting.
    autocomplete: Option<&'a str>,
}

impl Helix {
    fn start(hx: &Path, setup: Setup<'_>) -> Helix {
        let work = tempfile::tempdir().unwrap();
        let root = work.path().to_path_buf();
        let root = root.as_path();
        let workspace = root.join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        for (path, text) in setup.files {
            std::fs::write(workspace.join(path), text).unwrap();
        }
        std::fs::write(root.join("config.toml"), setup.config).unwrap();
        // The snippet as documented: it runs `switchyard` from PATH.
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_switchyard"), bin.join("switchyard"))
            .unwrap();
        let helix_config = root.join("config/helix");
        std::fs::create_dir_all(&helix_config).unwrap();
        let mut snippet = switchyard_alone(
            &std::fs::read_to_string(repo().join("editors/helix/languages.toml")).unwrap(),
        );
        if let Some(autocomplete) = setup.autocomplete {
            let documented = snippet
                .lines()
                .find(|l| l.starts_with("autocomplete = "))
                .expect("the snippet sets autocomplete")
                .to_owned();
            snippet = snippet.replace(&documented, &format!("autocomplete = {autocomplete}"));
        }
        std::fs::write(
            helix_config.join("languages.toml"),
            format!("{snippet}\n{}", setup.more_languages),
        )
        .unwrap();
        std::fs::write(
            helix_config.join("config.toml"),
            // The menu opens on C-x only, as for a user who turned the
            // automatic one off: every suggestion shown is one the test asked for.
            format!(
                "[editor]\nauto-completion = false\n\n[editor.lsp]\ndisplay-progress-messages = {}\n",
                setup.show_progress
            ),
        )
        .unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let runtime = hx.parent().unwrap().join("src/helix/runtime");
        let models = if setup.models {
            support::model_dir()
        } else {
            root.join("no-models")
        };
        let helix = Helix {
            socket: format!("switchyard-hx-{}", std::process::id())
                + &root.file_name().unwrap().to_string_lossy(),
            work,
        };
        // The tmux server starts with this environment, and its pane (hx,
        // then switchyard) inherits it.
        let started = Command::new("tmux")
            .args(["-L", &helix.socket, "-f", "/dev/null"])
            .args(["new-session", "-d", "-x", "120", "-y", "32", "-c"])
            .arg(&workspace)
            .arg(hx)
            .arg(setup.open)
            .env("PATH", path)
            .env("HOME", root)
            .env("XDG_CONFIG_HOME", root.join("config"))
            .env("XDG_CACHE_HOME", root.join("cache"))
            .env("HELIX_RUNTIME", runtime)
            .env("SWITCHYARD_CONFIG", root.join("config.toml"))
            .env("SWITCHYARD_STATE_DIR", root.join("state"))
            .env("SWITCHYARD_MODEL_DIR", models)
            .env("SWITCHYARD_LOG", "debug")
            .env("SY_FAKE_KEY", KEY)
            .env("TERM", "xterm-256color")
            .output()
            .expect("tmux runs");
        assert!(started.status.success(), "tmux: {}", text(&started));
        helix
    }

    /// Waits for the editor, and for its switchyard server to be up.
    async fn ready(&self) {
        self.wait_screen("hx", |s| s.contains(" NOR ")).await;
        poll::file_containing(&self.log_file(), "language server starting", PATIENCE).await;
    }

    /// Waits until the server's log says the model loaded `times` times
    /// (each server started in this editor appends to it).
    async fn model_loaded(&self, times: usize) {
        let loaded = async || match self.log().matches("local model ready").count() {
            n if n >= times => Ok(()),
            n => Err(n),
        };
        if let Err(n) = poll::eventually(PATIENCE, loaded).await {
            panic!(
                "the local model loaded {n} times, not {times}\n{}",
                self.log_tail()
            );
        }
    }

    fn log_file(&self) -> PathBuf {
        self.root().join("state/switchyard.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_file()).unwrap_or_default()
    }

    fn root(&self) -> &Path {
        self.work.path()
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs")
    }

    /// Keys by tmux's names (`Enter`, `Escape`, `C-x`, `Down`).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Text typed as it is.
    fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "0", "-l", text]);
    }

    /// A command line (`:...`), typed and entered.
    fn command(&self, line: &str) {
        self.type_text(line);
        self.keys(&["Enter"]);
    }

    fn screen(&self) -> String {
        text(&self.tmux(&["capture-pane", "-p", "-t", "0"]))
    }

    /// Does `act` until the screen satisfies `done`, giving each try `every`
    /// (scaled) to show, and closing whatever it opened before the next try;
    /// fails with the screen and the server's log after [`PATIENCE`].
    async fn until_shown(
        &self,
        what: &str,
        every: Duration,
        act: impl Fn(&Helix),
        done: impl Fn(&str) -> bool,
    ) -> String {
        let act = async |tries| {
            if tries > 0 {
                self.keys(&["Escape"]);
                self.normal_mode().await;
            }
            act(self);
        };
        let shown = poll::retrying(PATIENCE, every, act, async || self.screen_if(&done));
        shown
            .await
            .unwrap_or_else(|screen| self.timed_out(what, &screen))
    }

    /// Asks for completions (C-x) in insert mode until the menu shows (an
    /// empty answer is on time while the model's cache is cold); the first
    /// item's label and the screen.
    async fn menu(&self) -> (String, String) {
        let before = self
            .wait_screen("insert mode", |s| s.contains(" INS "))
            .await;
        // A new row holding the item's kind after its label:
        // "  102           self.hits = 0; text entry| ...", or with nothing
        // after the kind.
        let kind = |l: &str| {
            l.find(" text ")
                .or_else(|| l.ends_with(" text").then(|| l.len() - 5))
        };
        let item = |screen: &str| {
            let (row, at) = screen
                .lines()
                .filter(|l| !before.contains(*l))
                .find_map(|l| kind(l).map(|at| (l, at)))?;
            let label = row[..at].trim_start().split_once(' ')?.1.trim();
            (!label.is_empty()).then(|| label.to_owned())
        };
        let shown = async || {
            let screen = self.screen();
            match item(&screen) {
                Some(label) => Ok((label, screen)),
                None => Err(screen),
            }
        };
        let asked = poll::retrying(PATIENCE, ASK, async |_| self.keys(&["C-x"]), shown);
        asked
            .await
            .unwrap_or_else(|screen| self.timed_out("the completion menu", &screen))
    }

    /// From normal mode, opens a line below the one of `saved` that reads
    /// `anchor` (`<n>G`, then `o`).
    fn open_below(&self, saved: &str, anchor: &str) {
        let n = saved
            .lines()
            .position(|l| l == anchor)
            .unwrap_or_else(|| panic!("no line {anchor:?} in\n{saved}"))
            + 1;
        self.type_text(&format!("{n}G"));
        self.keys(&["o"]);
    }

    /// Waits until the screen satisfies `done`; fails with the screen and the
    /// server's log otherwise.
    async fn wait_screen(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        poll::eventually(PATIENCE, async || self.screen_if(&done))
            .await
            .unwrap_or_else(|screen| self.timed_out(what, &screen))
    }

    /// The screen, `Ok` when `done` holds of it.
    fn screen_if(&self, done: impl Fn(&str) -> bool) -> Result<String, String> {
        let screen = self.screen();
        if done(&screen) {
            Ok(screen)
        } else {
            Err(screen)
        }
    }

    fn timed_out(&self, what: &str, screen: &str) -> ! {
        panic!(
            "timed out waiting for {what}; the screen:\n{screen}\n{}",
            self.log_tail()
        )
    }

    /// Presses Escape until hx is in normal mode: it closes a menu first,
    /// then leaves insert mode. Keys typed next come after the mode shows
    /// (an Escape and a key straight after it would reach hx as Alt and
    /// the key).
    async fn normal_mode(&self) {
        let normal = |s: &str| s.contains(" NOR ");
        let escaped = poll::retrying(
            PATIENCE,
            Duration::from_millis(300),
            async |tries| {
                if tries > 0 || !normal(&self.screen()) {
                    self.keys(&["Escape"]);
                }
            },
            async || self.screen_if(normal),
        );
        if let Err(screen) = escaped.await {
            self.timed_out("normal mode", &screen);
        }
    }

    /// Writes the buffer and reads the file back.
    async fn saved(&self, path: &str) -> String {
        self.normal_mode().await;
        self.command(":w");
        self.wait_screen("the write", |s| s.contains("written"))
            .await;
        std::fs::read_to_string(self.root().join("workspace").join(path)).unwrap()
    }

    /// Waits until `switchyard stats` counts each outcome in `want` for
    /// Helix as often as it says; fails with the stats, the stats file and
    /// `shown`.
    async fn stats_count(&self, want: &[(&str, u64)], shown: &[String]) {
        let state = self.root().join("state");
        let counted = async || {
            let stats = support::completion_stats(&state);
            let counts: Vec<(&str, u64)> = want
                .iter()
                .map(|(outcome, _)| {
                    let n = support::stats_sum(&stats, outcome, |g| g["editor"] == "helix");
                    (*outcome, n)
                })
                .collect();
            if counts == want {
                Ok(())
            } else {
                Err((counts, stats))
            }
        };
        if let Err((counts, stats)) = poll::eventually(PATIENCE, counted).await {
            let records = std::fs::read_to_string(state.join("completions.jsonl"));
            panic!(
                "counted {counts:?}, not {want:?}: {stats}\n{records:?}\n{shown:?}\n{}",
                self.log_tail()
            );
        }
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let tail: Vec<&str> = log
            .lines()
            .rev()
            .filter(|l| !l.contains("llama-cpp-2"))
            .take(30)
            .collect();
        format!("server log (newest first):\n{}", tail.join("\n"))
    }
}

/// The documented snippet with switchyard alone in each language's list of
/// servers (see the module's note).
fn switchyard_alone(snippet: &str) -> String {
    snippet
        .lines()
        .map(|line| match line.starts_with("language-servers") {
            true => r#"language-servers = ["switchyard"]"#,
            false => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_completion_menu_offers_the_suggestion_and_the_stats_count_what_became_of_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some(hx) = hx_or_say_why(
        "the_completion_menu_offers_the_suggestion_and_the_stats_count_what_became_of_it",
    ) else {
        return;
    };
    let (document, line) = support::sample_with_hole();
    let helix = Helix::start(
        hx,
        Setup {
            config: "[local]\nauto_pull = false\n\n[autocomplete]\ninput_tokens = 256\n",
            files: &[
                ("store.rs", &document),
                ("notes.md", "# Notes\n\nSome text.\n"),
            ],
            models: true,
            open: &format!("store.rs:{line}"),
            show_progress: true,
            more_languages: "[[language]]\nname = \"markdown\"\nlanguage-servers = [\"switchyard\"]\n",
            // A budget that lets the model end its line (not the deadline),
            // so a suggestion is seldom a single word.
            autocomplete: Some(
                "{ enabled = true, budget_ms = 3000, languages = { markdown = false } }",
            ),
        },
    );
    helix.ready().await;
    helix.model_loaded(1).await;
    // 1. Accepted: append at the end of the indented line, ask (C-x), Tab.
    helix.keys(&["A"]);
    let (label, screen) = helix.menu().await;
    // Tab selects the item, which puts it in the buffer.
    helix.keys(&["Tab"]);
    let saved = helix.saved("store.rs").await;
    let lines: Vec<&str> = saved.lines().collect();
    assert!(
        lines[line - 1].starts_with(&format!("        {}", label.trim_end_matches('…'))),
        "line {line} is {:?}, the item was {label:?}\n{screen}",
        lines[line - 1]
    );
    // A multi-line suggestion keeps the model's indentation: Helix re-indents
    // snippets (adding the cursor line's 8 spaces to every further line), and
    // the item must not be one. The model's own lines may nest deeper, but
    // some line goes on at the block's level (8) or closes it.
    let inserted = lines.len() - document.lines().count();
    let least_indent = lines[line..line + inserted]
        .iter()
        .filter(|extra| !extra.trim().is_empty())
        .map(|extra| extra.len() - extra.trim_start().len())
        .min();
    assert!(
        least_indent.is_none_or(|indent| indent < 16),
        "re-indented (every further line at 16 or more):\n{saved}"
    );
    let mut shown = vec![label];

    // 2. Partly accepted: its first word typed, then something else. A
    // suggestion of one word has no part to take: it is ignored, and the
    // next line tried.
    helix.open_below(&saved, "        let now = Instant::now();");
    let mut one_word = 0;
    loop {
        let (label, _) = helix.menu().await;
        // Typed into the open menu (an Escape and a letter straight after
        // it would reach Helix as Alt and the letter).
        let word = support::first_word(&label);
        if word == label && one_word < 3 {
            one_word += 1;
            helix.type_text(support::other_than(&label));
            helix.keys(&["Enter"]);
            continue;
        }
        helix.type_text(&word);
        helix.type_text(support::other_than(&label[word.len()..]));
        shown.push(label);
        break;
    }

    // 3. Ignored: something else typed where it showed.
    let saved = helix.saved("store.rs").await;
    helix.open_below(&saved, "        let total = self.hits + self.misses;");
    let (label, _) = helix.menu().await;
    helix.type_text(support::other_than(&label));
    shown.push(label);
    helix.saved("store.rs").await;

    // Each was settled from the edits Helix sent, for the editor it names.
    helix
        .stats_count(
            &[("accepted", 1), ("partial", 1), ("ignored", 1 + one_word)],
            &shown,
        )
        .await;
    support::assert_no_suggestion_text(&helix.root().join("state"), &shown);

    // Markdown is off by the server's settings in languages.toml: asking
    // there shows the state in the status line (a progress message).
    helix.command(":open notes.md");
    helix
        .until_shown(
            "completions off for markdown",
            Duration::from_secs(5),
            |h| h.keys(&["A", "C-x"]),
            |s| s.contains("completions ⋅ off: completions are off for markdown"),
        )
        .await;
    helix.saved("notes.md").await;

    // Snoozed from the workspace command, told in the status line; a
    // restarted server still snoozes: resuming it is a change it tells.
    helix.command(":lsp-workspace-command switchyard.snooze");
    helix
        .wait_screen("the snooze", |s| {
            s.contains("completions ⋅ snoozed for 30 more min")
        })
        .await;
    helix.command(":lsp-restart");
    helix.model_loaded(2).await;
    helix.command(":lsp-workspace-command switchyard.resumeCompletions");
    helix
        .wait_screen("the resume", |s| s.contains("completions ⋅ ready"))
        .await;
}

const ADD: &str =
    "// Arithmetic.\nfn add(a: i32, b: i32) -> i32 {\n    let sum = a + b;\n    return sum;\n}\n";
const REWRITE: &str = "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}";

fn remote_config(provider: &FakeProvider) -> String {
    format!(
        "[local]\nauto_pull = false\n\n[providers.fake]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"SY_FAKE_KEY\"\n\n[tiers]\nlarge = [\"fake/big-model\"]\nmedium = [\"fake/mid-model\"]\nsmall = [\"local\"]\n",
        provider.anthropic_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_action_applies_and_the_local_only_toggle_shows_its_message() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some(hx) =
        hx_or_say_why("a_code_action_applies_and_the_local_only_toggle_shows_its_message")
    else {
        return;
    };
    let provider =
        FakeProvider::with_default(Behaviour::ok(&format!("```rust\n{REWRITE}\n```"))).await;
    let config = remote_config(&provider);
    let helix = Helix::start(
        hx,
        Setup {
            config: &config,
            files: &[("add.rs", ADD)],
            models: false,
            open: "add.rs:3",
            show_progress: true,
            more_languages: "",
            autocomplete: None,
        },
    );
    helix.ready().await;
    // Space-a lists the code actions at the cursor; Down then Enter picks.
    let screen = helix
        .until_shown(
            "the code actions",
            Duration::from_secs(10),
            |h| h.keys(&["Space", "a"]),
            |s| s.contains("switchyard: Simplify"),
        )
        .await;
    let rows: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("switchyard: "))
        .collect();
    let index = rows
        .iter()
        .position(|r| r.contains("switchyard: Simplify"))
        .unwrap();
    for _ in 0..=index {
        helix.keys(&["Down"]);
    }
    helix.keys(&["Enter"]);
    helix
        .wait_screen("the rewrite in the buffer", |s| s.contains("    a + b"))
        .await;
    let saved = helix.saved("add.rs").await;
    assert_eq!(saved, format!("// Arithmetic.\n{REWRITE}\n"));

    // Once: a second toggle would turn it off again.
    helix.command(":lsp-workspace-command switchyard.toggleLocalOnly");
    helix
        .wait_screen("the local-only message", |s| {
            s.contains("switchyard: local-only mode on")
        })
        .await;
    // The server tells the change before it saves the file.
    poll::file_containing(
        &helix.root().join("config.toml"),
        "local_only = true",
        PATIENCE,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_is_reported_in_the_editor() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some(hx) = hx_or_say_why("a_broken_config_is_reported_in_the_editor") else {
        return;
    };
    let helix = Helix::start(
        hx,
        Setup {
            // The rest stays valid: no model download starts, whose
            // messages would take the status line.
            config: "[local]\nauto_pull = false\n\n[autocomplete]\nbudget_ms = \"soon\"\n",
            // Markdown, which the snippet does not list.
            files: &[("notes.md", "# Notes\n\nSome text.\n")],
            models: true,
            open: "notes.md",
            // The model's loading progress would follow the error at once.
            show_progress: false,
            more_languages: "[[language]]\nname = \"markdown\"\nlanguage-servers = [\"switchyard\"]\n",
            autocomplete: None,
        },
    );
    helix.ready().await;
    // The error names the key and the file it is in.
    helix
        .wait_screen("the config error", |s| {
            s.contains("budget_ms") && s.contains("config.toml")
        })
        .await;
}
