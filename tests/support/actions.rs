//! The document code-action tests work on, and the command call they make.

use serde_json::{Value, json};

use super::lsp_client::LspClient;

pub const URI: &str = "file:///work/store.rs";
pub const DOC: &str = "use std::collections::HashMap;\n\nfn count(words: &[&str]) -> HashMap<String, usize> {\n    let mut map = HashMap::new();\n    for w in words {\n        *map.entry(w.to_string()).or_insert(0) += 1;\n    }\n    map\n}\n";

/// The range of `count` in [`DOC`].
pub fn whole_function() -> Value {
    json!({"start": {"line": 2, "character": 0}, "end": {"line": 9, "character": 0}})
}

/// `workspace/executeCommand`, the whole response.
pub async fn command(client: &mut LspClient, name: &str, arguments: Value) -> Value {
    client
        .request(
            "workspace/executeCommand",
            json!({"command": name, "arguments": arguments}),
        )
        .await
}
