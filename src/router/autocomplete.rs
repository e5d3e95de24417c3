//! Remote autocomplete: the remote entries that `autocomplete.chain` puts
//! before `local`, each tried through the same pipeline within a share of the
//! completion budget, never waiting to retry.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Router;
use super::attempt::Failure;
use super::plan::Candidate;
use super::request::{Origin, TaskRequest};
use super::run_state::{Lane, RunState};
use crate::context::chat::PromptParts;
use crate::entry::{ChainEntry, ModelRef};
use crate::privacy::redact;
use crate::prompts;
use crate::providers::local::FimText;
use crate::task::{TaskKind, TaskProfile, Tier};

impl Router {
    /// Autocomplete from the remote entries before `local` in `autocomplete.chain`,
    /// each healthy one tried until `deadline`. `None` when none answered: the
    /// local engine then serves this request, and the next ones while the
    /// remote's beacon stays over the budget.
    pub async fn autocomplete_remote(
        &self,
        text: &FimText,
        doc: &str,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Option<(String, ModelRef)> {
        if self.local_only() {
            return None;
        }
        if let Some(window) = &self.config.autocomplete.local_first
            && window.is_open_now()
        {
            return None;
        }
        self.resilience.verdicts.refresh().await;
        let autocomplete = &self.config.autocomplete;
        // The ceilings are the completion budget, the same for every request,
        // so a slow verdict on an entry holds for the next keystroke; each
        // attempt is still cut at `deadline`, this request's share of it.
        let budget_ms = autocomplete.budget_ms;
        let profile = TaskProfile {
            tier: Tier::Small,
            input_tokens: autocomplete.input_tokens,
            output_tokens: autocomplete.output_tokens,
            first_token_ms: budget_ms,
            total_ms: budget_ms,
            idle_ms: budget_ms,
            wait_ms: 0,
            hedge: false,
        };
        let parts = PromptParts {
            before: text.prefix.clone(),
            after: text.suffix.clone(),
            instruction: prompts::FIM_INSTRUCTION.into(),
            ..PromptParts::default()
        };
        let request = TaskRequest {
            origin: Origin {
                front_end: "lsp",
                subject: doc.to_owned(),
            },
            ..TaskRequest::new(TaskKind::Autocomplete, prompts::FIM_SYSTEM, parts)
        };
        let remotes = autocomplete
            .chain
            .iter()
            .take_while(|entry| !entry.is_local())
            .filter_map(ChainEntry::remote);
        for entry in remotes {
            let candidate = Candidate {
                entry: entry.clone(),
                tier: Tier::Small,
                skip: None,
            };
            if self.skip(entry, &profile, true).is_some() {
                continue;
            }
            // No waiting: a miss goes to the next entry or the local engine at once.
            let mut run = RunState::new(deadline, Duration::ZERO, String::new(), true);
            match self
                .serve_entry(
                    &candidate,
                    &request,
                    &profile,
                    &mut run,
                    Lane::alone(cancel, &|_| {}),
                )
                .await
            {
                Ok((text, _)) => {
                    // A placeholder the model copied from the prompt is the user's secret again.
                    let text = redact::restore(&text, &request.sources());
                    return Some((text, entry.clone()));
                }
                Err(Failure::Failed(failed)) => {
                    tracing::debug!("autocomplete by {entry} missed: {}", failed.reason)
                }
                Err(_) => return None,
            }
        }
        None
    }
}
