//! Which documents only the local model may serve: gitignore-syntax rules
//! from a default set, `privacy.local_only_paths` and each workspace root's
//! `.switchyardignore`. A matching document's text never goes into a remote
//! request, whatever the task.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// Files that usually hold credentials. A pattern with a `/` matches at any
/// depth here (and in `privacy.local_only_paths`), unlike in `.switchyardignore`.
pub const DEFAULT_LOCAL_ONLY_PATHS: &[&str] = &[
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    ".npmrc",
    ".pypirc",
    "secrets/**",
    "**/credentials*",
];

/// The file a repository lists its own rules in, at a workspace root.
pub const IGNORE_FILE: &str = ".switchyardignore";

/// A rule that matched: the pattern and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRule {
    pub pattern: String,
    pub source: String,
}

impl std::fmt::Display for PathRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` ({})", self.pattern, self.source)
    }
}

/// The rules in force, checked in order: the configured and default ones,
/// then each root's ignore file (whose `!` lines can take a path back out).
pub struct PathRules {
    everywhere: Gitignore,
    roots: Vec<(PathBuf, Gitignore)>,
    configured: Vec<String>,
}

impl PathRules {
    /// The default set plus `configured`, and the ignore files of `roots`.
    /// Unreadable ignore files and bad patterns are reported, not fatal.
    pub fn new(configured: &[String], roots: &[PathBuf]) -> (PathRules, Vec<String>) {
        let mut problems = Vec::new();
        let mut builder = GitignoreBuilder::new("/");
        for pattern in DEFAULT_LOCAL_ONLY_PATHS
            .iter()
            .copied()
            .chain(configured.iter().map(String::as_str))
        {
            if let Err(e) = builder.add_line(None, &anywhere(pattern)) {
                problems.push(format!("privacy.local_only_paths: `{pattern}`: {e}"));
            }
        }
        let everywhere = builder.build().unwrap_or_else(|e| {
            problems.push(format!("privacy.local_only_paths: {e}"));
            Gitignore::empty()
        });
        let mut per_root = Vec::new();
        for root in roots {
            let file = root.join(IGNORE_FILE);
            if !file.exists() {
                continue;
            }
            let mut builder = GitignoreBuilder::new(root);
            if let Some(e) = builder.add(&file) {
                problems.push(format!("{}: {e}", file.display()));
            }
            match builder.build() {
                Ok(rules) => per_root.push((root.clone(), rules)),
                Err(e) => problems.push(format!("{}: {e}", file.display())),
            }
        }
        let rules = PathRules {
            everywhere,
            roots: per_root,
            configured: configured.to_vec(),
        };
        (rules, problems)
    }

    /// The rule that keeps `path` local, if any.
    pub fn matching(&self, path: &Path) -> Option<PathRule> {
        let mut verdict = None;
        if path.is_absolute()
            && let Match::Ignore(glob) = self.everywhere.matched_path_or_any_parents(path, false)
        {
            let original = glob.original().trim_start_matches("**/").to_owned();
            let source = if self
                .configured
                .iter()
                .any(|c| anywhere(c) == glob.original())
            {
                "privacy.local_only_paths"
            } else {
                "default rules"
            };
            verdict = Some(PathRule {
                pattern: original,
                source: source.into(),
            });
        }
        for (root, rules) in &self.roots {
            if !path.starts_with(root) {
                continue;
            }
            match rules.matched_path_or_any_parents(path, false) {
                Match::Ignore(glob) => {
                    verdict = Some(PathRule {
                        pattern: glob.original().to_owned(),
                        source: root.join(IGNORE_FILE).display().to_string(),
                    });
                }
                Match::Whitelist(_) => verdict = None,
                Match::None => {}
            }
        }
        verdict
    }
}

/// `pattern` as one that matches at any depth: gitignore anchors a pattern
/// with a `/` inside it to the root, which a global rule has none of.
fn anywhere(pattern: &str) -> String {
    let (negated, body) = match pattern.strip_prefix('!') {
        Some(body) => ("!", body),
        None => ("", pattern),
    };
    let trimmed = body.trim_end_matches('/');
    if trimmed.contains('/') && !body.starts_with("**/") {
        format!("{negated}**/{}", body.trim_start_matches('/'))
    } else {
        pattern.to_owned()
    }
}

/// What keeps a document local: the path rules and the local-only
/// workspaces (`privacy.local_only_workspaces`), built when the configuration,
/// the workspace roots or an ignore file change rather than on every request
/// (completion asks on each keystroke).
pub struct LocalOnlyRules {
    paths: PathRules,
    /// `privacy.local_only_workspaces`, `~/` expanded.
    folders: Vec<PathBuf>,
    /// The rule making one of the roots local-only, for the status.
    pub workspace: Option<String>,
}

impl LocalOnlyRules {
    /// The rules of `privacy` for the workspace `roots`; unreadable ignore
    /// files and bad patterns are reported, not fatal.
    pub fn new(
        privacy: &switchyard_config::PrivacyConfig,
        roots: &[PathBuf],
    ) -> (LocalOnlyRules, Vec<String>) {
        let (paths, problems) = PathRules::new(&privacy.local_only_paths, roots);
        let folders = local_only_folders(&privacy.local_only_workspaces);
        let workspace = roots
            .iter()
            .find_map(|root| folders.iter().find(|f| root.starts_with(f)))
            .map(|folder| workspace_rule(folder));
        let rules = LocalOnlyRules {
            paths,
            folders,
            workspace,
        };
        (rules, problems)
    }

    /// Why the document at `path` may be served only by the local model, if
    /// a rule says so.
    pub fn rule_for(&self, path: &Path) -> Option<String> {
        if let Some(folder) = self.folders.iter().find(|f| path.starts_with(f)) {
            return Some(format!("{}: {}", path.display(), workspace_rule(folder)));
        }
        self.paths
            .matching(path)
            .map(|rule| format!("{} matches the local-only path rule {rule}", path.display()))
    }
}

/// The rules in force at one moment: local-only mode (why it is on, where
/// it is) and what keeps documents local. The core puts a new value in
/// force with every change; every remote attempt reads it as it sends.
pub struct InForce {
    /// Why nothing may leave the machine now: the mode is on, or the
    /// configuration failed closed.
    pub local_only: Option<String>,
    pub documents: Arc<LocalOnlyRules>,
}

impl InForce {
    /// The rules `config` sets by itself, before any workspace root's.
    pub fn of(config: &switchyard_config::Config) -> InForce {
        InForce {
            local_only: config.local_only_reason(),
            documents: Arc::new(LocalOnlyRules::new(&config.privacy, &[]).0),
        }
    }

    /// Why a path rule keeps `document` on the machine, if one does.
    pub fn keeps_local(&self, document: Option<&Path>) -> Option<String> {
        self.documents.rule_for(document?)
    }

    /// Why the task about `document` (`None`: no document, as from the
    /// gateway) may not send anything to a remote model now, if a rule says so.
    pub fn forbids(&self, document: Option<&Path>) -> Option<String> {
        self.local_only
            .clone()
            .or_else(|| self.keeps_local(document))
    }
}

/// The one place the rules in force live, shared by the core (which swaps
/// them whole) and everything that sends (which reads them at each send, and
/// whose waits end when they forbid what it waits to send).
#[derive(Clone)]
pub struct RulesInForce(Arc<watch::Sender<Arc<InForce>>>);

impl RulesInForce {
    pub fn new(rules: InForce) -> RulesInForce {
        RulesInForce(Arc::new(watch::Sender::new(Arc::new(rules))))
    }

    /// The rules in force now.
    pub fn now(&self) -> Arc<InForce> {
        self.0.borrow().clone()
    }

    /// Puts rules in force, made from the ones in force now.
    pub fn change(&self, change: impl FnOnce(&InForce) -> InForce) {
        self.0.send_modify(|rules| *rules = Arc::new(change(rules)));
    }

    /// Waits until the rules in force forbid sending anything about
    /// `document`; the rule that does.
    pub async fn forbid(&self, document: Option<&Path>) -> String {
        let mut rules = self.0.subscribe();
        let forbidding = rules.wait_for(|now| now.forbids(document).is_some());
        let rule = forbidding.await.ok().and_then(|now| now.forbids(document));
        match rule {
            Some(rule) => rule,
            // The rules outlive every waiter; were they gone, nothing could change.
            None => std::future::pending().await,
        }
    }
}

impl Default for RulesInForce {
    /// No local-only mode, the default path rules.
    fn default() -> RulesInForce {
        RulesInForce::new(InForce::of(&switchyard_config::Config::default()))
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
fn workspace_rule(folder: &Path) -> String {
    format!(
        "workspace {} is local-only (privacy.local_only_workspaces)",
        folder.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(configured: &[&str], roots: &[PathBuf]) -> PathRules {
        let configured: Vec<String> = configured.iter().map(|s| s.to_string()).collect();
        let (rules, problems) = PathRules::new(&configured, roots);
        assert!(problems.is_empty(), "{problems:?}");
        rules
    }

    #[test]
    fn the_default_set_keeps_credentials_local_at_any_depth() {
        let rules = rules(&[], &[]);
        for path in [
            "/w/.env",
            "/w/app/.env.production",
            "/w/certs/server.pem",
            "/home/u/.ssh/id_rsa.pub",
            "/w/secrets/db/password.txt",
            "/w/config/credentials.json",
            "/w/.npmrc",
        ] {
            assert!(rules.matching(Path::new(path)).is_some(), "{path}");
        }
        for path in [
            "/w/src/main.rs",
            "/w/env.rs",
            "/w/keys.rs",
            "/w/docs/secrets.md",
        ] {
            assert_eq!(rules.matching(Path::new(path)), None, "{path}");
        }
        let rule = rules.matching(Path::new("/w/.env")).unwrap();
        assert_eq!(rule.to_string(), "`.env` (default rules)");
    }

    #[test]
    fn a_repository_adds_rules_and_takes_paths_back_out() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(IGNORE_FILE), "internal/\n!.env.example\n").unwrap();
        let rules = rules(&["*.tfvars"], &[root.path().to_path_buf()]);
        let under = |p: &str| root.path().join(p);
        let internal = rules.matching(&under("internal/billing.rs")).unwrap();
        assert_eq!(internal.pattern, "internal/");
        assert!(internal.source.ends_with(IGNORE_FILE));
        assert_eq!(rules.matching(&under(".env.example")), None);
        let configured = rules.matching(&under("prod.tfvars")).unwrap();
        assert_eq!(configured.source, "privacy.local_only_paths");
    }
}
