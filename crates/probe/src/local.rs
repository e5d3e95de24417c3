//! `switchyard probe --local`: the local fallback end to end, the way the
//! language server uses it: the configured model is present, loads, and
//! completes a known snippet within the autocomplete budget.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ropey::Rope;

use switchyard_base::cancel::CancelFlag;
use switchyard_completion::{CompletionRequest, CompletionService};
use switchyard_config::Config;
use switchyard_config::local_setup::SetupError;
use switchyard_engine::LocalEngine;
use switchyard_models::NoProgress;

use super::history::{self, ProbeRecord};
use super::{ProbeResult, Verdict};

/// A small file with an obvious next token at the end of `or_insert(0)`.
const SNIPPET: &str = r#"use std::collections::HashMap;

/// Counts how often each word occurs in `text`.
pub fn word_counts(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for word in text.split_whitespace() {
        *counts.entry(word.to_owned()).or_insert(0)
    }
    counts
}
"#;
const SNIPPET_CURSOR_AFTER: &str = ".or_insert(0)";
const SNIPPET_DOC: &str = "switchyard-probe:///word_counts.rs";

/// What the local check measured.
#[derive(Clone, Debug)]
pub struct LocalReport {
    pub model: String,
    pub load_ms: u64,
    /// Filling the cache for the snippet, as an editor does when a file opens.
    pub warm_up_ms: u64,
    /// The completion itself, which must fit in the budget.
    pub latency_ms: u64,
    pub budget_ms: u64,
    /// The suggestion, or why there was none.
    pub completion: Result<String, String>,
}

impl LocalReport {
    /// Why the fallback is not fit to serve, if it is not: no suggestion, an
    /// empty one, or one over the budget.
    pub fn problem(&self) -> Option<String> {
        match &self.completion {
            Err(reason) => Some(format!("no suggestion: {reason}")),
            Ok(text) if text.trim().is_empty() => Some("the suggestion was empty".to_owned()),
            Ok(_) if self.latency_ms > self.budget_ms => Some(format!(
                "completion took {} ms, over the {} ms autocomplete budget",
                self.latency_ms, self.budget_ms
            )),
            Ok(_) => None,
        }
    }

    pub fn is_healthy(&self) -> bool {
        self.problem().is_none()
    }

    /// Joins the probe history too, so status shows when the fallback was
    /// last seen working. A local completion does not stream: no TTFT.
    pub fn record(&self) -> Result<(), String> {
        let result = ProbeResult {
            provider: "local".to_owned(),
            model: self.model.clone(),
            verdict: self.problem().map_or(Verdict::Ok, Verdict::Failed),
            ttft: None,
            total: Duration::from_millis(self.latency_ms),
        };
        let path = history::default_path();
        history::append(&path, &[ProbeRecord::new(&result, SystemTime::now())])
            .map_err(|e| format!("cannot record in {}: {e}", path.display()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LocalProbeError {
    /// The configuration names no usable model (not downloaded, no such file):
    /// a setup step is missing, and the message says which.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The model is there but the engine could not load it or answer.
    #[error("{0}")]
    Engine(String),
}

pub async fn probe_local(config: &Config) -> Result<LocalReport, LocalProbeError> {
    let model = switchyard_config::local_setup::resolve(config)?;
    // A probe never downloads: it reports a missing model rather than fetching
    // hundreds of megabytes from cron.
    let path = switchyard_config::local_setup::ensure_present(&model, false, &NoProgress).await?;
    let engine = LocalEngine::spawn(switchyard_config::local_setup::engine_options(
        &model, &path, config,
    ));
    let report = complete_snippet(&engine, config).await;
    engine.shutdown();
    report
}

async fn complete_snippet(
    engine: &LocalEngine,
    config: &Config,
) -> Result<LocalReport, LocalProbeError> {
    let info = engine
        .wait_ready()
        .await
        .map_err(|e| LocalProbeError::Engine(e.to_string()))?;
    let service = CompletionService::new(local_only(config));
    service.set_engine(Some(Arc::new(engine.clone())));
    let rope = Rope::from_str(SNIPPET);
    let cursor = snippet_cursor();

    let warm_started = Instant::now();
    service
        .warm(SNIPPET_DOC, &rope, cursor)
        .await
        .map_err(|e| LocalProbeError::Engine(e.to_string()))?;
    let warm_up = warm_started.elapsed();

    let budget = Duration::from_millis(config.autocomplete.budget_ms);
    let outcome = service
        .complete(CompletionRequest {
            trigger: Default::default(),
            language: None,
            doc: SNIPPET_DOC.to_owned(),
            rope,
            cursor,
            deadline: tokio::time::Instant::now() + budget,
            cancel: CancelFlag::default(),
            document: None,
        })
        .await;
    Ok(LocalReport {
        model: info.name,
        load_ms: info.load_ms,
        warm_up_ms: millis(warm_up),
        latency_ms: millis(outcome.elapsed),
        budget_ms: config.autocomplete.budget_ms,
        completion: outcome
            .result
            .map(|s| s.text)
            .map_err(|reason| reason.to_string()),
    })
}

/// The autocomplete settings with only the local engine in the chain: the
/// probe checks the fallback, not whichever remote entry answers first.
fn local_only(config: &Config) -> switchyard_config::AutocompleteConfig {
    let mut autocomplete = config.autocomplete.clone();
    autocomplete.enabled = true;
    autocomplete.chain = vec![switchyard_base::entry::ChainEntry::Local];
    autocomplete
}

/// Char index just after `or_insert(0)` in the snippet.
fn snippet_cursor() -> usize {
    let byte = SNIPPET.find(SNIPPET_CURSOR_AFTER).unwrap_or(0) + SNIPPET_CURSOR_AFTER.len();
    SNIPPET[..byte].chars().count()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_sits_after_the_insert_call() {
        let cursor = snippet_cursor();
        let before: String = SNIPPET.chars().take(cursor).collect();
        assert!(before.ends_with(".or_insert(0)"), "{before}");
    }

    #[test]
    fn a_report_is_healthy_only_with_text_within_budget() {
        let report = |latency_ms, completion: Result<&str, &str>| LocalReport {
            model: "m".into(),
            load_ms: 1,
            warm_up_ms: 1,
            latency_ms,
            budget_ms: 1000,
            completion: completion.map(str::to_owned).map_err(str::to_owned),
        };
        assert!(report(400, Ok(" += 1;")).is_healthy());
        let slow = report(1400, Ok(" += 1;"));
        assert!(
            slow.problem().unwrap().contains("over the 1000 ms"),
            "{slow:?}"
        );
        assert!(!report(400, Ok("  ")).is_healthy());
        assert!(!report(400, Err("the model suggested nothing useful")).is_healthy());
    }
}
