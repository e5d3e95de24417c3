//! Remote autocomplete: the plan's autocomplete candidates (the remote
//! entries `autocomplete.chain` puts before `local`), each tried through the
//! same pipeline within a share of the completion budget, never waiting to
//! retry.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Router;
use super::attempt::Failure;
use super::plan::Ask;
use super::request::{Origin, TaskRequest};
use super::run_state::{Lane, RunState};
use switchyard_base::entry::ModelRef;
use switchyard_base::task::TaskKind;
use switchyard_context::chat::PromptParts;
use switchyard_engine::FimText;
use switchyard_privacy::redact;

impl Router {
    /// Autocomplete from the remote entries before `local` in
    /// `autocomplete.chain`, as the plan clears and orders them for the
    /// document (`doc` as the audit names it, its path as the rules in force
    /// judge it), each tried until `deadline`. `None` when none answered: the local engine then serves
    /// this request, and the next ones while the remote's beacon stays over
    /// the budget.
    pub async fn autocomplete_remote(
        &self,
        text: &FimText,
        (doc, document): (&str, Option<&Path>),
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Option<(String, ModelRef)> {
        let kept_local = self.rules.now().keeps_local(document);
        let ask = Ask::task(TaskKind::Autocomplete).kept_local(kept_local.as_deref());
        // A verdict only makes an entry a last resort, which autocomplete does
        // not use: a plan with nothing cleared stays so after a refresh.
        self.plan(ask).now()?;
        self.resilience.verdicts.refresh().await;
        let plan = self.plan(ask);
        let profile = self.profile(TaskKind::Autocomplete);
        let request = fim_request(text, doc, document);
        for candidate in plan.order() {
            // No waiting: a miss goes to the next entry or the local engine at once.
            let mut run = RunState::new(deadline, Duration::ZERO, String::new(), true);
            let lane = Lane::alone(cancel, &|_| {});
            match self
                .serve_entry(candidate, &request, &profile, &mut run, lane)
                .await
            {
                Ok((text, _)) => {
                    // A placeholder the model copied from the prompt is the user's secret again.
                    let text = redact::restore(&text, &request.sources());
                    return Some((text, candidate.entry.clone()));
                }
                Err(Failure::Failed(failed)) => {
                    tracing::debug!(
                        "autocomplete by {} missed: {}",
                        candidate.entry,
                        failed.reason
                    )
                }
                Err(_) => return None,
            }
        }
        None
    }
}

/// The fill-in-the-middle request for the text around the cursor.
fn fim_request(text: &FimText, doc: &str, document: Option<&Path>) -> TaskRequest {
    let parts = PromptParts {
        before: text.prefix.clone(),
        after: text.suffix.clone(),
        instruction: switchyard_base::prompts::FIM_INSTRUCTION.into(),
        ..PromptParts::default()
    };
    TaskRequest {
        origin: Origin {
            front_end: "lsp",
            subject: doc.to_owned(),
            document: document.map(Path::to_path_buf),
        },
        ..TaskRequest::new(
            TaskKind::Autocomplete,
            switchyard_base::prompts::FIM_SYSTEM,
            parts,
        )
    }
}
