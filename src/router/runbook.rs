//! The runbook view for `switchyard status`: for each task kind, which entry
//! serves now and which is next, judged by what every process shares (breakers,
//! quota) and what this configuration can reach (keys).

use serde::Serialize;

use super::Router;
use super::status::StatusReport;
use crate::probe::history::{self, ProbeRecord};
use crate::resilience::breaker;
use crate::task::{TaskKind, Tier};

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRunbook {
    pub kind: TaskKind,
    pub tier: Tier,
    /// `provider/model (tier)` that would serve now.
    pub now: Option<String>,
    pub next: Option<String>,
    /// Entries passed over, and why.
    pub skipped: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Runbook {
    pub shared_state: String,
    /// Who serves each task kind now and next (`tasks` is the status report's).
    pub routes: Vec<TaskRunbook>,
    /// The latest `switchyard probe` result of each entry on this machine.
    pub last_probes: Vec<ProbeRecord>,
    #[serde(flatten)]
    pub status: StatusReport,
}

impl Router {
    /// Reads the shared state and says who serves what now.
    pub async fn runbook(&self) -> Runbook {
        self.refresh_shared().await;
        let status = self.status();
        let routes = [TaskKind::Explain, TaskKind::Refactor]
            .into_iter()
            .map(|kind| {
                let profile = self.config().tasks.get(kind);
                let mut usable = Vec::new();
                let mut skipped = Vec::new();
                let mut tier = Some(profile.tier);
                while let Some(current) = tier {
                    for (provider, model) in self.chain(current, kind) {
                        let entry = format!("{provider}/{model} ({current})");
                        let key = breaker::key(&self.account(&provider), &provider, &model);
                        let open = status
                            .breakers
                            .iter()
                            .find(|b| format!("breaker/{}", b.key) == key && b.phase != "closed");
                        if let Some(var) = self.missing_keys().get(&provider) {
                            skipped.push(format!("{entry}: no API key in ${var}"));
                        } else if let Some(b) = open {
                            skipped.push(format!("{entry}: breaker {} ({})", b.phase, b.reason));
                        } else if self.local_only()
                            && provider != crate::providers::local::chat::LOCAL
                        {
                            skipped.push(format!("{entry}: local-only mode"));
                        } else {
                            usable.push(entry);
                        }
                    }
                    tier = current.smaller();
                }
                let mut usable = usable.into_iter();
                TaskRunbook {
                    kind,
                    tier: profile.tier,
                    now: usable.next(),
                    next: usable.next(),
                    skipped,
                }
            })
            .collect();
        let last_probes = history::recent_by_entry(&history::default_path(), 1)
            .unwrap_or_default()
            .into_values()
            .flatten()
            .collect();
        Runbook {
            shared_state: self.resilience().state.describe(),
            routes,
            last_probes,
            status,
        }
    }
}
