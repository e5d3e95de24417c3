//! `switchyard complete FILE:LINE:COL`: one completion from the terminal through
//! the editor's path, printing the text, the model and the latency.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ropey::Rope;
use serde_json::json;

use switchyard_base::cancel::CancelFlag;
use switchyard_completion::{CompletionRequest, Origin, Outcome, Suggestion};
use switchyard_engine::{Generation, ModelInfo};
use switchyard_models::TerminalProgress;

/// `path:line:col`, 1-based, columns in characters.
fn parse_location(location: &str) -> Result<(PathBuf, usize, usize), String> {
    let mut parts = location.rsplitn(3, ':');
    let (col, line, file) = (parts.next(), parts.next(), parts.next());
    match (
        file,
        line.and_then(|l| l.parse().ok()),
        col.and_then(|c| c.parse().ok()),
    ) {
        (Some(file), Some(line), Some(col)) if line >= 1 && col >= 1 => {
            Ok((PathBuf::from(file), line, col))
        }
        _ => Err(format!(
            "expected FILE:LINE:COL with 1-based LINE and COL, got `{location}`"
        )),
    }
}

fn cursor_in(rope: &Rope, path: &Path, line: usize, col: usize) -> Result<usize, String> {
    if line > rope.len_lines() {
        return Err(format!(
            "{}: line {line} is past the end ({} lines)",
            path.display(),
            rope.len_lines()
        ));
    }
    let start = rope.line_to_char(line - 1);
    let line_len = rope
        .line(line - 1)
        .chars()
        .take_while(|c| *c != '\n' && *c != '\r')
        .count();
    if col - 1 > line_len {
        return Err(format!(
            "{}:{line}: column {col} is past the end of the line ({line_len} chars)",
            path.display()
        ));
    }
    Ok(start + col - 1)
}

pub async fn run(config_file: Option<PathBuf>, location: &str, json: bool, cold: bool) -> ExitCode {
    match complete(config_file, location, json, cold).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("switchyard: {message}");
            ExitCode::from(2)
        }
    }
}

async fn complete(
    config_file: Option<PathBuf>,
    location: &str,
    json: bool,
    cold: bool,
) -> Result<ExitCode, String> {
    let (path, line, col) = parse_location(location)?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let rope = Rope::from_str(&text);
    let cursor = cursor_in(&rope, &path, line, col)?;
    // The editor's path: the session's configuration, remote entries of
    // `autocomplete.chain` through its router, its path rules for the file.
    let session = super::open_session(config_file, Arc::new(TerminalProgress));
    let (core, service) = (session.core(), session.completion());
    let config = core.config();
    if let Ok(cwd) = std::env::current_dir() {
        core.set_roots(vec![cwd]);
    }
    let document = std::path::absolute(&path).ok();
    let info = session.load_engine().await?;
    let doc = format!("file://{}", path.display());

    let warm_ms = match cold {
        true => None,
        false => {
            let started = Instant::now();
            let warmed = service.warm(&doc, &rope, cursor).await;
            warmed.map_err(|e| e.to_string())?;
            Some(started.elapsed().as_secs_f64() * 1e3)
        }
    };
    let budget = Duration::from_millis(config.autocomplete.budget_ms);
    let request = CompletionRequest {
        doc,
        rope,
        cursor,
        deadline: tokio::time::Instant::now() + budget,
        cancel: CancelFlag::default(),
        document,
        trigger: Default::default(),
        language: None,
    };
    let outcome = service.complete(request).await;
    let report = Report {
        budget,
        warm_ms,
        info: &info,
    };
    match json {
        true => println!("{}", report.json(&outcome)),
        false => report.print(&outcome),
    }
    session.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// What is said about a completion beside its outcome.
struct Report<'a> {
    budget: Duration,
    warm_ms: Option<f64>,
    info: &'a ModelInfo,
}

impl Report<'_> {
    /// Who answered: a remote entry of the chain, or the local model.
    fn answered_by(&self, outcome: &Outcome) -> String {
        match outcome.result.as_ref().map(|s| &s.origin) {
            Ok(Origin::Remote { provider, model }) => format!("{provider}/{model}"),
            _ => self.info.name.clone(),
        }
    }

    fn json(&self, outcome: &Outcome) -> serde_json::Value {
        let generation = generation(outcome);
        json!({
            "text": outcome.result.as_ref().ok().map(|s| s.text.clone()),
            "reason": outcome.result.as_ref().err().map(|e| e.to_string()),
            "model": self.answered_by(outcome),
            "latency_ms": outcome.elapsed.as_secs_f64() * 1e3,
            "budget_ms": self.budget.as_millis() as u64,
            "warm_up_ms": self.warm_ms,
            "model_load_ms": self.info.load_ms,
            "prompt_tokens": generation.map(|g| g.prompt_tokens),
            "tokens_decoded": generation.map(|g| g.tokens_decoded),
            "tokens_generated": generation.map(|g| g.tokens_generated),
        })
    }

    fn print(&self, outcome: &Outcome) {
        match &outcome.result {
            Ok(suggestion) => println!("{}", suggestion.text),
            Err(reason) => println!("(no suggestion: {reason})"),
        }
        let detail = generation(outcome).map_or(String::new(), |g| {
            format!(
                ", prompt {} tokens of which {} decoded, {} generated",
                g.prompt_tokens, g.tokens_decoded, g.tokens_generated
            )
        });
        let warm = self.warm_ms.map_or("no warm-up (--cold)".to_owned(), |ms| {
            format!("cache warm-up {ms:.0} ms before the request")
        });
        println!(
            "--- model {} | latency {:.0} ms (budget {} ms){detail} | {warm} | model load {} ms",
            self.answered_by(outcome),
            outcome.elapsed.as_secs_f64() * 1e3,
            self.budget.as_millis(),
            self.info.load_ms
        );
    }
}

/// The local model's generation, where it answered.
fn generation(outcome: &Outcome) -> Option<&Generation> {
    match &outcome.result {
        Ok(Suggestion {
            origin: Origin::Model(generation),
            ..
        }) => Some(generation),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_allows_colons_in_the_path() {
        assert_eq!(
            parse_location("C:/src/a.rs:3:7").unwrap(),
            (PathBuf::from("C:/src/a.rs"), 3, 7)
        );
        assert!(parse_location("a.rs:0:1").is_err());
        assert!(parse_location("a.rs:3").is_err());
    }

    #[test]
    fn cursor_past_the_line_is_an_error() {
        let rope = Rope::from_str("ab\ncd\n");
        assert_eq!(cursor_in(&rope, Path::new("x"), 2, 3).unwrap(), 5);
        assert!(cursor_in(&rope, Path::new("x"), 2, 4).is_err());
        assert!(cursor_in(&rope, Path::new("x"), 9, 1).is_err());
    }
}
