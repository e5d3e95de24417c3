//! What a front end asks the router for, and what it gets back.

use crate::context::chat::{OverBudget, PromptParts};
use crate::entry::ModelRef;
use crate::providers::{ChatMessage, Usage};
use crate::task::{TaskKind, Tier};

use super::status::Route;

/// A remote-grade task as a front end asked it.
#[derive(Clone, Debug)]
pub struct TaskRequest {
    pub kind: TaskKind,
    pub system: String,
    pub parts: PromptParts,
    /// An answer already begun (a resumed checkpoint): continued, not restarted.
    pub continuation: String,
    /// A conversation as the caller wrote it (the gateway): sent as it is,
    /// within the input budget, instead of a prompt rendered from `parts`.
    pub messages: Option<Vec<ChatMessage>>,
    /// Serve from this tier or entry rather than the task's own tier.
    pub pin: Option<Pin>,
    /// The caller's output limit, within the task's.
    pub max_tokens: Option<u32>,
}

impl TaskRequest {
    pub fn new(kind: TaskKind, system: impl Into<String>, parts: PromptParts) -> TaskRequest {
        TaskRequest {
            kind,
            system: system.into(),
            parts,
            continuation: String::new(),
            messages: None,
            pin: None,
            max_tokens: None,
        }
    }
}

/// Where a request asked to be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pin {
    /// This tier first, downshifting below it as usual.
    Tier(Tier),
    /// Only this entry: no failover, no downshift.
    Entry(ModelRef),
}

/// One entry of a chain that was tried or skipped, and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub entry: ModelRef,
    pub tier: Tier,
    pub outcome: String,
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.entry, self.tier, self.outcome)
    }
}

#[derive(Clone, Debug)]
pub struct Answer {
    pub text: String,
    pub route: Route,
    pub usage: Usage,
    pub attempts: Vec<Attempt>,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    #[error(
        "local-only mode is on and {0} needs a remote model; turn it off with the switchyard.toggleLocalOnly command"
    )]
    LocalOnly(&'static str),
    #[error("no healthy model could serve {kind}; tried: {}", list(.tried))]
    NothingHealthy {
        kind: &'static str,
        tried: Vec<Attempt>,
        /// Only temporary obstacles (open breakers, empty quota, spent wait
        /// budget): the task can be parked and resumed.
        retry_later: bool,
        /// Output streamed before the last failure.
        partial: String,
    },
    #[error("{by} refused: {reason}")]
    Refused { by: String, reason: String },
    #[error("cancelled")]
    Cancelled,
}

fn list(tried: &[Attempt]) -> String {
    if tried.is_empty() {
        return "nothing (no chain entries are configured)".into();
    }
    tried
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the router is doing, for `$/progress` and streaming front ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    Trying {
        entry: ModelRef,
        tier: Tier,
    },
    Received {
        chars: usize,
    },
    /// Text as it streams in (front ends that forward it). A continued
    /// answer's deltas carry on from the text already forwarded.
    Delta(String),
}

/// How a front end hears of [`Progress`].
pub type OnProgress<'a> = &'a (dyn Fn(Progress) + Send + Sync);
