//! Documents that never leave the machine: the path rules (default set,
//! `privacy.local_only_paths`, each workspace root's `.switchyardignore`) and
//! the local-only workspaces (`privacy.local_only_workspaces`) applied to the
//! editor's documents.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tower_lsp_server::ls_types::{InitializeParams, Uri};

use super::server::Backend;
use super::wire::StatusParams;
use crate::privacy::rules::PathRules;
use crate::router::status::StatusReport;

/// The status as this editor sees it: the router's, and the workspace's rule.
pub(super) fn status_params(
    report: &StatusReport,
    workspace_rule: &RwLock<Option<String>>,
) -> StatusParams {
    StatusParams {
        local_only_rule: workspace_rule.read().expect("workspace rule lock").clone(),
        ..StatusParams::from(report)
    }
}

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

/// What keeps a document local, built when the configuration or the roots
/// change rather than on every request (completion asks on each keystroke).
pub(super) struct LocalOnlyRules {
    paths: PathRules,
    /// `privacy.local_only_workspaces`, `~/` expanded.
    folders: Vec<PathBuf>,
}

impl LocalOnlyRules {
    /// The default set and `configured` only, before the editor names its roots.
    pub(super) fn before_initialize(configured: &[String]) -> LocalOnlyRules {
        LocalOnlyRules {
            paths: PathRules::new(configured, &[]).0,
            folders: Vec::new(),
        }
    }
}

/// The configured local-only folders, `~/` expanded.
fn local_only_folders(configured: &[String]) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    configured
        .iter()
        .map(|folder| match (folder.strip_prefix("~/"), &home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => PathBuf::from(folder),
        })
        .collect()
}

/// The rule that makes a workspace folder local-only, as the status names it.
fn workspace_rule(folder: &std::path::Path) -> String {
    format!(
        "workspace {} is local-only (privacy.local_only_workspaces)",
        folder.display()
    )
}

impl Backend {
    /// Rebuilds the rules from the configuration and the roots' ignore files,
    /// and says which rule makes this workspace local-only, if one does.
    pub(super) fn refresh_path_rules(&self) {
        let privacy = self.config().privacy;
        let roots = self.roots.read().expect("roots lock").clone();
        let (rules, problems) = PathRules::new(&privacy.local_only_paths, &roots);
        for problem in problems {
            tracing::warn!("path rules: {problem}");
        }
        let folders = local_only_folders(&privacy.local_only_workspaces);
        let in_force = roots
            .iter()
            .find_map(|root| folders.iter().find(|f| root.starts_with(f)))
            .map(|folder| workspace_rule(folder));
        *self.workspace_rule.write().expect("workspace rule lock") = in_force;
        *self.path_rules.write().expect("path rules lock") = Arc::new(LocalOnlyRules {
            paths: rules,
            folders,
        });
    }

    /// Why `uri` may be served only by the local model, if a rule says so.
    pub(super) fn kept_local(&self, uri: &Uri) -> Option<String> {
        let path = uri.to_file_path()?;
        let rules = self.path_rules.read().expect("path rules lock").clone();
        if let Some(folder) = rules.folders.iter().find(|f| path.starts_with(f)) {
            return Some(format!("{}: {}", path.display(), workspace_rule(folder)));
        }
        rules
            .paths
            .matching(&path)
            .map(|rule| format!("{} matches the local-only path rule {rule}", path.display()))
    }
}
