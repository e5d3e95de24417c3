//! The document code-action tests work on, and the command call they make.

use serde_json::{Value, json};

use super::lsp_client::LspClient;

pub const URI: &str = "file:///work/store.rs";
pub const DOC: &str = "use std::collections::HashMap;\n\nfn count(words: &[&str]) -> HashMap<String, usize> {\n    let mut map = HashMap::new();\n    for w in words {\n        *map.entry(w.to_string()).or_insert(0) += 1;\n    }\n    map\n}\n";

/// A refactor of `count` as a model writes it: a fenced block (its deltas
/// end after a comment line, where a cut leaves a seam).
pub const REWRITE: &str = "```rust\nfn count(words: &[&str]) -> HashMap<String, usize> {\n    let mut map = HashMap::new();\n    for w in words {\n        // One lookup per word: entry() finds the slot or makes it.\n        *map.entry(w.to_string()).or_insert(0) += 1;\n    }\n    map\n}\n```";

/// [`DOC`] once [`REWRITE`] is applied to `count`.
pub fn rewritten() -> String {
    let code = REWRITE
        .trim_start_matches("```rust\n")
        .trim_end_matches("```");
    let start = DOC.find("fn count").unwrap();
    format!("{}{code}", &DOC[..start])
}

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
