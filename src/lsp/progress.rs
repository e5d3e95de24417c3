//! `$/progress` the server shows without a cancel button: a fresh token,
//! created with the client, then begun.

use std::sync::atomic::{AtomicU64, Ordering};

use tower_lsp_server::ls_types::NumberOrString;
use tower_lsp_server::{Client, NotCancellable, OngoingProgress, Unbounded};

pub type Progress = OngoingProgress<Unbounded, NotCancellable>;

/// `switchyard/<kind>/<n>`, with `n` new for every token of the process.
pub fn numbered_token(kind: &str) -> NumberOrString {
    static TOKENS: AtomicU64 = AtomicU64::new(0);
    let n = TOKENS.fetch_add(1, Ordering::Relaxed);
    NumberOrString::String(format!("switchyard/{kind}/{n}"))
}

/// Creates `token` with the client and begins a progress titled `title`;
/// `None` if the client refuses the token.
pub async fn begin(client: &Client, token: NumberOrString, title: String) -> Option<Progress> {
    client.create_work_done_progress(token.clone()).await.ok()?;
    Some(client.progress(token, title).begin().await)
}
