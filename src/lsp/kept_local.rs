//! The editor's side of the documents that never leave the machine: the
//! workspace roots the core's local-only rules are relative to, and the
//! watch on `.switchyardignore` files. The router judges the rules for each
//! document, at every remote attempt.

use std::path::PathBuf;

use tower_lsp_server::ls_types::{
    DidChangeWatchedFilesParams, DidChangeWatchedFilesRegistrationOptions, FileSystemWatcher,
    GlobPattern, InitializeParams, Registration,
};

use super::backend::Backend;
use switchyard_privacy::rules::IGNORE_FILE;

/// The workspace roots the editor named (folders, else the root URI).
#[allow(deprecated)] // root_uri: older clients send only it.
pub(super) fn workspace_roots(params: &InitializeParams) -> Vec<PathBuf> {
    let folders = params.workspace_folders.iter().flatten().map(|f| &f.uri);
    let roots: Vec<PathBuf> = folders
        .filter_map(|uri| uri.to_file_path().map(|p| p.into_owned()))
        .collect();
    if !roots.is_empty() {
        return roots;
    }
    params
        .root_uri
        .iter()
        .filter_map(|uri| uri.to_file_path().map(|p| p.into_owned()))
        .collect()
}

impl Backend {
    /// Asks the client to say when a `.switchyardignore` changes, where it
    /// can watch files; without that, the files are read again only when
    /// the configuration changes.
    pub(super) async fn watch_ignore_files(&self, dynamic_registration: bool) {
        if !dynamic_registration {
            return;
        }
        let options = DidChangeWatchedFilesRegistrationOptions {
            watchers: vec![FileSystemWatcher {
                glob_pattern: GlobPattern::String(format!("**/{IGNORE_FILE}")),
                kind: None,
            }],
        };
        let registration = Registration {
            id: "switchyard/ignore-files".into(),
            method: "workspace/didChangeWatchedFiles".into(),
            register_options: serde_json::to_value(options).ok(),
        };
        if let Err(error) = self.client.register_capability(vec![registration]).await {
            tracing::warn!("the editor will not report changes to {IGNORE_FILE}: {error}");
        }
    }

    /// A watched `.switchyardignore` changed: its rules apply from the next request.
    pub(super) fn ignore_files_changed(&self, params: &DidChangeWatchedFilesParams) {
        let suffix = format!("/{IGNORE_FILE}");
        if params
            .changes
            .iter()
            .any(|change| change.uri.as_str().ends_with(&suffix))
        {
            self.core().refresh_path_rules();
        }
    }
}
