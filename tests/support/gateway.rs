//! A `switchyard gateway` process for tests: written config, its own state,
//! model and log paths, listening on a free loopback port; killed on drop.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct GatewayProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub home: tempfile::TempDir,
}

impl GatewayProcess {
    /// Starts a gateway with `config` (TOML) and extra environment variables.
    pub async fn start(config: &str, env: &[(&str, &str)]) -> GatewayProcess {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.toml"), config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["gateway", "--listen", "127.0.0.1:0", "--log-file"])
            .arg(home.path().join("gateway.log"))
            .env("SWITCHYARD_CONFIG", home.path().join("config.toml"))
            .env("SWITCHYARD_STATE_DIR", home.path().join("state"))
            .env("SWITCHYARD_MODEL_DIR", home.path().join("models"))
            .env("SWITCHYARD_LOG", "debug")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawning the gateway");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the gateway says where it listens")
            .unwrap()
            .expect("the gateway printed its address");
        let url = first.rsplit(' ').next().unwrap().to_owned();
        // Keep draining stdout so the gateway never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        GatewayProcess { child, url, home }
    }

    /// `None` once it has exited.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// One chat completion on the medium tier asking `question`: the HTTP
    /// status and the body (`null` when it is not JSON).
    pub async fn chat(&self, question: &str) -> (u16, serde_json::Value) {
        let body = serde_json::json!({"model": "switchyard/medium",
            "messages": [{"role": "user", "content": question}]});
        let response = self.post_chat(&body).await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or_default())
    }

    /// `POST /v1/chat/completions` with `body`, the response as it comes.
    pub async fn post_chat(&self, body: &serde_json::Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", self.url))
            .json(body)
            .send()
            .await
            .expect("the gateway answers HTTP")
    }

    /// `GET /status`.
    pub async fn status(&self) -> serde_json::Value {
        reqwest::get(format!("{}/status", self.url))
            .await
            .expect("the gateway answers /status")
            .json()
            .await
            .expect("/status is JSON")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("gateway.log")).unwrap_or_default()
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
