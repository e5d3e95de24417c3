//! Documents that never leave the machine: the path rules (default set,
//! `privacy.local_only_paths`, each workspace root's `.switchyardignore`) and
//! the local-only workspaces (`privacy.local_only_workspaces`) applied to the
//! editor's documents.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tower_lsp_server::ls_types::{
    DidChangeWatchedFilesParams, DidChangeWatchedFilesRegistrationOptions, FileSystemWatcher,
    GlobPattern, InitializeParams, Registration, Uri,
};

use super::server::Backend;
use super::wire::StatusParams;
use crate::privacy::rules::{IGNORE_FILE, PathRules};
use crate::router::status::StatusReport;

/// The status as this editor sees it: the router's, and the workspace's rule.
pub(super) fn status_params(report: &StatusReport, rules: &SharedLocalOnlyRules) -> StatusParams {
    StatusParams {
        local_only_rule: rules.read().expect("path rules lock").workspace.clone(),
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

/// What keeps a document local, built at `initialize` and when the
/// configuration or an ignore file changes rather than on every request (completion asks on each keystroke).
pub(super) struct LocalOnlyRules {
    paths: PathRules,
    /// `privacy.local_only_workspaces`, `~/` expanded.
    folders: Vec<PathBuf>,
    /// The rule making the editor's workspace local-only, for the status.
    workspace: Option<String>,
}

/// The rules in force, shared by the editor's requests and the parked work
/// that resumes later (rules added since it parked apply to it too).
pub(super) type SharedLocalOnlyRules = Arc<RwLock<Arc<LocalOnlyRules>>>;

impl LocalOnlyRules {
    /// The default set and `configured` only, before the editor names its roots.
    pub(super) fn before_initialize(configured: &[String]) -> SharedLocalOnlyRules {
        Arc::new(RwLock::new(Arc::new(LocalOnlyRules {
            paths: PathRules::new(configured, &[]).0,
            folders: Vec::new(),
            workspace: None,
        })))
    }

    /// Why `uri` may be served only by the local model, if a rule says so.
    pub(super) fn rule_for(&self, uri: &Uri) -> Option<String> {
        let path = uri.to_file_path()?;
        if let Some(folder) = self.folders.iter().find(|f| path.starts_with(f)) {
            return Some(format!("{}: {}", path.display(), workspace_rule(folder)));
        }
        self.paths
            .matching(&path)
            .map(|rule| format!("{} matches the local-only path rule {rule}", path.display()))
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
        let workspace = roots
            .iter()
            .find_map(|root| folders.iter().find(|f| root.starts_with(f)))
            .map(|folder| workspace_rule(folder));
        *self.path_rules.write().expect("path rules lock") = Arc::new(LocalOnlyRules {
            paths: rules,
            folders,
            workspace,
        });
    }

    /// Why `uri` may be served only by the local model, if a rule says so.
    pub(super) fn kept_local(&self, uri: &Uri) -> Option<String> {
        let rules = self.path_rules.read().expect("path rules lock").clone();
        rules.rule_for(uri)
    }

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
            self.refresh_path_rules();
        }
    }
}
