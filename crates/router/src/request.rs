//! What a front end asks the router for, and what it gets back.

use std::path::PathBuf;

use switchyard_base::entry::ModelRef;
use switchyard_base::task::{TaskKind, Tier};
use switchyard_context::chat::{OverBudget, PromptParts};
use switchyard_providers::{ChatMessage, Usage};

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
    /// Who asked, for the outbound audit.
    pub origin: Origin,
    /// Replace secrets before the prompt leaves for a remote entry, and put
    /// them back in the answer.
    pub redact: bool,
    /// The caller is shown the text as it streams, so text already shown
    /// cannot be taken back: a continuation that cannot be joined to it ends
    /// the task instead of being replaced by a whole answer.
    pub streamed: bool,
}

/// Who asked for a task: the front end, and the document (or gateway
/// caller). The router judges the rules in force for the document's path at
/// every attempt; a request carries no rule of its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    pub front_end: &'static str,
    /// As the outbound audit names it.
    pub subject: String,
    /// The document's path, which path rules are judged by.
    pub document: Option<PathBuf>,
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
            origin: Origin::default(),
            redact: true,
            streamed: false,
        }
    }

    /// Every text of the request a secret could be in (the answer's
    /// placeholders come from these).
    pub fn sources(&self) -> Vec<&str> {
        let mut sources = vec![
            self.parts.before.as_str(),
            self.parts.selection.as_str(),
            self.parts.after.as_str(),
            self.parts.instruction.as_str(),
            self.continuation.as_str(),
        ];
        for message in self.messages.iter().flatten() {
            sources.push(message.content.as_str());
        }
        sources
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
    #[error(
        "{rule}: only the local model may serve this document, and it could not{}; nothing was sent",
        could_not(.tried)
    )]
    KeptLocal { rule: String, tried: Vec<Attempt> },
    /// A rule put in force after the task began (local-only mode turned on,
    /// a path rule added) stopped it before its next remote attempt.
    #[error(
        "{rule} (since this task began): nothing more of it was sent to a remote model{}",
        stopped_at(.partial)
    )]
    StoppedByRule {
        rule: String,
        tried: Vec<Attempt>,
        /// Output streamed before it stopped.
        partial: String,
    },
    #[error("cancelled")]
    Cancelled,
}

fn stopped_at(partial: &str) -> String {
    match partial.chars().count() {
        0 => String::new(),
        n => format!(", and its answer stops after the {n} characters that had come"),
    }
}

fn could_not(tried: &[Attempt]) -> String {
    if tried.is_empty() {
        " (no local model is configured)".into()
    } else {
        format!(" ({})", list(tried))
    }
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

/// Where a task kind was last served (or would be served next).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub provider: String,
    pub model: String,
    pub tier: Tier,
    pub downshifted_from: Option<Tier>,
    /// Why the task downshifted.
    pub reason: Option<String>,
}
