//! Task kinds: what each asks of a model, at which tier, within which budgets
//! and latency ceilings. Ceilings belong to the task kind, not to a provider.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    Autocomplete,
    Explain,
    Refactor,
}

impl TaskKind {
    pub const ALL: [TaskKind; 3] = [
        TaskKind::Autocomplete,
        TaskKind::Explain,
        TaskKind::Refactor,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Autocomplete => "autocomplete",
            TaskKind::Explain => "explain",
            TaskKind::Refactor => "refactor",
        }
    }
}

/// Model size classes. A task that finds no healthy model at its tier downshifts
/// to the next smaller one instead of failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Small,
    Medium,
    Large,
}

impl Tier {
    pub fn smaller(self) -> Option<Tier> {
        match self {
            Tier::Large => Some(Tier::Medium),
            Tier::Medium => Some(Tier::Small),
            Tier::Small => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Small => "small",
            Tier::Medium => "medium",
            Tier::Large => "large",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a task kind is served; every field is configurable under `[tasks.<kind>]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskProfile {
    pub tier: Tier,
    pub input_tokens: usize,
    pub output_tokens: usize,
    /// Time-to-first-token ceiling; an attempt past it is abandoned for the next entry.
    pub first_token_ms: u64,
    /// Ceiling on the whole answer.
    pub total_ms: u64,
    /// Longest silence between two stream events once text flows: a stream
    /// quiet for longer has stalled and fails over.
    pub idle_ms: u64,
    /// Time this task may spend waiting to retry (backoff, quota) on top of its
    /// attempts. A wait that would exceed it is not taken: the task fails over,
    /// downshifts or parks. Autocomplete has none: it goes local at once.
    pub wait_ms: u64,
    /// When the first token is late, race the next healthy entry (at most one
    /// hedge per request) instead of abandoning the slow one.
    pub hedge: bool,
}

impl TaskProfile {
    pub fn default_for(kind: TaskKind) -> TaskProfile {
        match kind {
            TaskKind::Autocomplete => TaskProfile {
                tier: Tier::Small,
                input_tokens: 2_000,
                output_tokens: 200,
                first_token_ms: 1_000,
                total_ms: 1_000,
                idle_ms: 30_000,
                wait_ms: 0,
                hedge: false,
            },
            TaskKind::Explain => TaskProfile {
                tier: Tier::Medium,
                input_tokens: 8_000,
                output_tokens: 800,
                first_token_ms: 10_000,
                total_ms: 60_000,
                idle_ms: 30_000,
                wait_ms: 30_000,
                hedge: true,
            },
            TaskKind::Refactor => TaskProfile {
                tier: Tier::Large,
                input_tokens: 16_000,
                output_tokens: 4_000,
                first_token_ms: 20_000,
                total_ms: 300_000,
                idle_ms: 30_000,
                wait_ms: 480_000,
                hedge: false,
            },
        }
    }

    pub fn first_token_ceiling(&self) -> Duration {
        Duration::from_millis(self.first_token_ms)
    }

    pub fn total_ceiling(&self) -> Duration {
        Duration::from_millis(self.total_ms)
    }

    pub fn idle_ceiling(&self) -> Duration {
        Duration::from_millis(self.idle_ms)
    }

    pub fn wait_budget(&self) -> Duration {
        Duration::from_millis(self.wait_ms)
    }
}

impl Default for TaskProfile {
    fn default() -> Self {
        TaskProfile::default_for(TaskKind::Explain)
    }
}

/// Profiles for the remote-grade task kinds (autocomplete is configured under `[autocomplete]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskProfiles {
    pub explain: TaskProfile,
    pub refactor: TaskProfile,
}

impl Default for TaskProfiles {
    fn default() -> Self {
        TaskProfiles {
            explain: TaskProfile::default_for(TaskKind::Explain),
            refactor: TaskProfile::default_for(TaskKind::Refactor),
        }
    }
}

impl TaskProfiles {
    pub fn get(&self, kind: TaskKind) -> TaskProfile {
        match kind {
            TaskKind::Explain => self.explain.clone(),
            TaskKind::Refactor => self.refactor.clone(),
            TaskKind::Autocomplete => TaskProfile::default_for(TaskKind::Autocomplete),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_downshift_large_to_medium_to_small() {
        assert_eq!(Tier::Large.smaller(), Some(Tier::Medium));
        assert_eq!(Tier::Medium.smaller(), Some(Tier::Small));
        assert_eq!(Tier::Small.smaller(), None);
    }

    #[test]
    fn defaults_follow_the_task_kinds() {
        let refactor = TaskProfile::default_for(TaskKind::Refactor);
        assert_eq!(
            (refactor.tier, refactor.input_tokens, refactor.output_tokens),
            (Tier::Large, 16_000, 4_000)
        );
        let explain = TaskProfile::default_for(TaskKind::Explain);
        assert_eq!(
            (explain.tier, explain.input_tokens, explain.output_tokens),
            (Tier::Medium, 8_000, 800)
        );
    }
}
