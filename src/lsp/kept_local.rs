//! Documents that never leave the machine: the path rules (default set,
//! `privacy.local_only_paths`, each workspace root's `.switchyardignore`)
//! applied to the editor's documents.

use std::path::PathBuf;
use std::sync::Arc;

use tower_lsp_server::ls_types::{InitializeParams, Uri};

use super::server::Backend;
use crate::privacy::rules::PathRules;

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
    /// Rebuilds the rules from the configuration and the roots' ignore files.
    pub(super) fn refresh_path_rules(&self) {
        let configured = self.config().privacy.local_only_paths;
        let roots = self.roots.read().expect("roots lock").clone();
        let (rules, problems) = PathRules::new(&configured, &roots);
        for problem in problems {
            tracing::warn!("path rules: {problem}");
        }
        *self.path_rules.write().expect("path rules lock") = Arc::new(rules);
    }

    /// Why `uri` may be served only by the local model, if a rule says so.
    pub(super) fn kept_local(&self, uri: &Uri) -> Option<String> {
        let path = uri.to_file_path()?;
        let rules = self.path_rules.read().expect("path rules lock").clone();
        rules
            .matching(&path)
            .map(|rule| format!("{} matches the local-only path rule {rule}", path.display()))
    }
}
