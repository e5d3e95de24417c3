//! A minimal W3C WebDriver client over chromedriver, driving Debian's headless
//! Chromium: the dashboard test and the VS Code (code-server) test use it.
//! Needs `chromium` and `chromium-driver` (`scripts/test` installs them).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{free_port, poll};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long a page is given to show something (two cores share Chromium,
/// the server under test and the compiler's leftovers).
pub use super::poll::PATIENCE;

/// WebDriver's codes for keys that are not characters.
pub mod key {
    pub const ENTER: &str = "\u{E007}";
    pub const ESCAPE: &str = "\u{E00C}";
    pub const TAB: &str = "\u{E004}";
    pub const CONTROL: &str = "\u{E009}";
    pub const RIGHT: &str = "\u{E014}";
    pub const SHIFT: &str = "\u{E008}";
    pub const END: &str = "\u{E010}";
    pub const F1: &str = "\u{E031}";
}

pub fn require_chromium() {
    for binary in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(binary).exists(),
            "{binary} is missing: run scripts/test-setup (installs Debian's chromium and chromium-driver)"
        );
    }
}

/// `target/`, wherever the build puts it.
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is target/tmp")
        .to_path_buf()
}

/// Chromedriver and its session; dropping it ends both, even when a test panics.
struct Driver {
    child: Child,
    port: u16,
    session: Option<String>,
    profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Deleting the session is what makes chromedriver close Chromium; a blocking
        // request, because Drop cannot await.
        if let Some(session) = &self.session
            && let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port))
        {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
            let request = format!(
                "DELETE /session/{session} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            );
            if stream.write_all(request.as_bytes()).is_ok() {
                let _ = stream.read_to_end(&mut Vec::new());
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Browser {
    http: reqwest::Client,
    base: String,
    driver: Driver,
}

impl Browser {
    pub async fn start() -> Browser {
        require_chromium();
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Browser {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(90))
                .build()
                .unwrap(),
            base: format!("http://127.0.0.1:{port}"),
            driver: Driver {
                child,
                port,
                session: None,
                profile,
            },
        };
        let ready = async || {
            let response = browser
                .http
                .get(format!("{}/status", browser.base))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status: Value = response.json().await.map_err(|e| e.to_string())?;
            match status["value"]["ready"] == true {
                true => Ok(()),
                false => Err(status.to_string()),
            }
        };
        poll::eventually(PATIENCE, ready)
            .await
            .unwrap_or_else(|seen| panic!("chromedriver did not start: {seen}"));
        let user_data = format!(
            "--user-data-dir={}",
            browser.driver.profile.path().display()
        );
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            user_data.as_str(),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let created = browser.command("POST", "/session", capabilities).await;
        let session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        browser.driver.session = Some(session);
        browser
    }

    /// One WebDriver command; its `value`.
    pub async fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let session = self.driver.session.as_deref().unwrap_or("");
        let path = path.replace("{session}", session);
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body),
        };
        let response = request.send().await.expect("chromedriver answers");
        let status = response.status();
        let reply: Value = response.json().await.expect("chromedriver answers JSON");
        assert!(status.is_success(), "{method} {path}: {status} {reply}");
        reply["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.command("POST", "/session/{session}/url", json!({"url": url}))
            .await;
    }

    pub async fn eval(&self, script: &str) -> Value {
        let body = json!({"script": script, "args": []});
        self.command("POST", "/session/{session}/execute/sync", body)
            .await
    }

    /// Types `text` into whatever has the focus, as real key presses; key codes
    /// from [`key`] may be mixed in. Keys listed in `held` stay down for the
    /// whole text (a chord such as Ctrl+S).
    pub async fn keys(&self, held: &[&str], text: &str) {
        let mut actions = Vec::new();
        for k in held {
            actions.push(json!({"type": "keyDown", "value": k}));
        }
        for c in text.chars() {
            let c = c.to_string();
            actions.push(json!({"type": "keyDown", "value": c}));
            actions.push(json!({"type": "keyUp", "value": c}));
        }
        for k in held.iter().rev() {
            actions.push(json!({"type": "keyUp", "value": k}));
        }
        let body = json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]});
        self.command("POST", "/session/{session}/actions", body)
            .await;
        self.command("DELETE", "/session/{session}/actions", Value::Null)
            .await;
    }

    /// Clicks the first element that `script` returns (a real pointer click).
    pub async fn click(&self, what: &str, script: &str) {
        let element = self.eval(script).await;
        let id = element
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element for {what}: {element}"))
            .to_owned();
        self.command(
            "POST",
            &format!("/session/{{session}}/element/{id}/click"),
            json!({}),
        )
        .await;
    }

    /// A full-page PNG: the window is grown until the page fits in it.
    pub async fn screenshot(&self, path: &Path) {
        for _ in 0..3 {
            let sizes = self
                .eval("return [document.documentElement.scrollHeight, window.innerHeight, window.outerHeight];")
                .await;
            let size = |i: usize| sizes[i].as_u64().unwrap_or(900);
            let (page, inner, outer) = (size(0), size(1), size(2));
            if page <= inner {
                break;
            }
            // The window's height includes whatever chrome it has around the page.
            let height = (page + outer.saturating_sub(inner)).min(6000);
            let rect = json!({"width": 1280, "height": height});
            self.command("POST", "/session/{session}/window/rect", rect)
                .await;
        }
        let png = self
            .command("GET", "/session/{session}/screenshot", Value::Null)
            .await;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, base64_decode(png.as_str().expect("base64 PNG"))).unwrap();
        println!("screenshot: {}", path.display());
    }

    /// Evaluates `script` until `done` holds of its value, for up to
    /// [`PATIENCE`] (scaled): that value, or the last one seen.
    pub async fn eventually(
        &self,
        script: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, Value> {
        poll::eventually(PATIENCE, async || {
            let state = self.eval(script).await;
            if done(&state) { Ok(state) } else { Err(state) }
        })
        .await
    }

    /// Evaluates `script` until `done` holds of its value; on timeout keeps a
    /// screenshot at `failed_shot` and fails with what the page showed.
    pub async fn wait_until(
        &self,
        what: &str,
        script: &str,
        failed_shot: &Path,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        match self.eventually(script, done).await {
            Ok(state) => state,
            Err(state) => {
                self.screenshot(failed_shot).await;
                panic!("timed out waiting for {what}; the page showed: {state:#}");
            }
        }
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .map(value)
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, d)| n | (u32::from(*d) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}
