//! `switchyard probe`: synthetic health checks for cron. Probes each configured
//! remote `provider/model` (or, with `--local`, the local fallback), records
//! the results in the probe history, prints a table or one JSON object, and
//! exits 0 (healthy), 1 (a failure, a wrong answer, or a p95 over the ceiling)
//! or 2 (the configuration cannot be probed).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use switchyard_config::{Config, ConfigLayers};
use switchyard_probe::history::P95_WINDOW;
use switchyard_probe::local::{self, LocalProbeError};
use switchyard_probe::report::{self, Judged, RemoteReport};
use switchyard_probe::{Ceiling, Verdict};

/// Errors in tables are cut to this many characters; `--json` has them whole.
const TABLE_ERROR_CHARS: usize = 60;

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// Probe only this provider's entries.
    #[arg(long, conflicts_with = "local")]
    provider: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Check the local fallback instead: the model is present, loads, and
    /// completes within the autocomplete budget.
    #[arg(long)]
    local: bool,
    /// Ceiling on the p95 total latency (default: `tasks.explain.total_ms`).
    #[arg(long, value_name = "MS")]
    ceiling_ms: Option<u64>,
    /// Ceiling on the p95 time to first token (default: `tasks.explain.first_token_ms`).
    #[arg(long, value_name = "MS")]
    ttft_ceiling_ms: Option<u64>,
}

/// Why nothing was probed: exit 2.
struct Unprobeable(String);

pub async fn run(config_file: Option<PathBuf>, args: ProbeArgs) -> ExitCode {
    let outcome = match load_config(config_file) {
        Err(problem) => Err(problem),
        Ok(config) if args.local => probe_local(&config, args.json).await,
        Ok(config) => probe_remote(&config, &args).await,
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Unprobeable(message)) => {
            eprintln!("switchyard probe: {message}");
            if args.json {
                println!("{}", json!({"results": [], "ok": false, "error": message}));
            }
            ExitCode::from(2)
        }
    }
}

/// The configuration, strictly: unlike the server, a probe refuses a file
/// with a value it cannot apply (or that cannot be read) instead of carrying
/// on, so cron hears about it. Ignored keys are said on stderr.
fn load_config(file: Option<PathBuf>) -> Result<Config, Unprobeable> {
    let layer = match file {
        Some(path) => {
            switchyard_config::read_file(&path).map_err(|e| Unprobeable(e.to_string()))?
        }
        None => None,
    };
    let (config, problems) = ConfigLayers {
        file: layer,
        ..Default::default()
    }
    .resolve();
    let (ignored, rejected): (Vec<_>, Vec<_>) = problems.iter().partition(|p| p.ignored);
    for warning in ignored {
        eprintln!("switchyard: {warning}");
    }
    if let (true, Some(reason)) = (rejected.is_empty(), &config.fail_closed) {
        // Nothing may leave the machine until the configuration can be read.
        return Err(Unprobeable(reason.clone()));
    }
    match rejected.is_empty() {
        true => Ok(config),
        false => Err(Unprobeable(
            rejected
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )),
    }
}

async fn probe_remote(config: &Config, args: &ProbeArgs) -> Result<bool, Unprobeable> {
    let ceiling = ceiling(config, args);
    let report = report::probe_remote(config, args.provider.as_deref(), ceiling)
        .await
        .map_err(Unprobeable)?;
    for problem in &report.history_problems {
        eprintln!("switchyard probe: {problem}");
    }
    if args.json {
        println!("{}", remote_json(&report, ceiling));
    } else {
        print!("{}", remote_table(&report, ceiling));
    }
    Ok(report.healthy())
}

fn ceiling(config: &Config, args: &ProbeArgs) -> Ceiling {
    let configured = Ceiling::from_config(config);
    Ceiling {
        first_token: args
            .ttft_ceiling_ms
            .map_or(configured.first_token, Duration::from_millis),
        total: args
            .ceiling_ms
            .map_or(configured.total, Duration::from_millis),
    }
}

fn ms(duration: Option<Duration>) -> Option<u128> {
    duration.map(|d| d.as_millis())
}

fn result_text(verdict: &Verdict) -> String {
    verdict.problem().unwrap_or_else(|| "ok".to_owned())
}

fn status_word(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Ok => "ok",
        Verdict::WrongAnswer(_) => "wrong_answer",
        Verdict::Failed(_) => "error",
    }
}

fn remote_json(report: &RemoteReport, ceiling: Ceiling) -> Value {
    let probed = report.judged.iter().map(|row| {
        json!({
            "entry": row.entry(),
            "provider": row.result.provider,
            "model": row.result.model,
            "status": status_word(&row.result.verdict),
            "ok": row.healthy(),
            "error": row.result.verdict.problem(),
            "ttft_ms": ms(row.result.ttft),
            "total_ms": row.result.total.as_millis(),
            "p95_ttft_ms": row.p95.ttft_ms,
            "p95_total_ms": row.p95.total_ms,
            "p95_samples": row.p95.samples,
            "over_ceiling": row.over_ceiling,
        })
    });
    let skipped = report.skipped.iter().map(|s| {
        json!({
            "entry": format!("{}/{}", s.provider, s.model),
            "provider": s.provider,
            "model": s.model,
            "status": "skipped",
            "reason": s.reason(),
        })
    });
    json!({
        "results": probed.chain(skipped).collect::<Vec<_>>(),
        "ok": report.healthy(),
        "ceiling": {
            "first_token_ms": ceiling.first_token.as_millis(),
            "total_ms": ceiling.total.as_millis(),
        },
    })
}

/// `text` cut to fit a table cell. Errors read "kind: context: root cause",
/// so the kind and the end (the cause) are kept and the middle is dropped.
fn short(text: &str) -> String {
    let chars = text.chars().count();
    if chars <= TABLE_ERROR_CHARS {
        return text.to_owned();
    }
    let head = text.split(": ").next().unwrap_or_default();
    let head_chars = head.chars().count();
    if head_chars + 3 >= TABLE_ERROR_CHARS / 2 {
        let cut = text
            .char_indices()
            .nth(TABLE_ERROR_CHARS)
            .map_or(text.len(), |(i, _)| i);
        return format!("{}…", &text[..cut]);
    }
    let tail_chars = TABLE_ERROR_CHARS - head_chars - 3;
    let tail: String = text.chars().skip(chars - tail_chars).collect();
    format!("{head}: …{tail}")
}

fn remote_table(report: &RemoteReport, ceiling: Ceiling) -> String {
    let dash = || "-".to_owned();
    let header = [
        "ENTRY".to_owned(),
        "RESULT".to_owned(),
        "TTFT ms".to_owned(),
        "total ms".to_owned(),
        format!("p95 TTFT/total (last {P95_WINDOW})"),
    ];
    let mut lines = vec![header];
    for row in &report.judged {
        let p95 = match (row.p95.ttft_ms, row.p95.total_ms) {
            (Some(ttft), Some(total)) => format!("{ttft} / {total}"),
            _ => dash(),
        };
        lines.push([
            row.entry(),
            short(&result_text(&row.result.verdict)),
            ms(row.result.ttft).map_or_else(dash, |ms| ms.to_string()),
            row.result.total.as_millis().to_string(),
            p95,
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|col| {
            lines
                .iter()
                .map(|l| l[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(col, (cell, width))| match col {
                2 | 3 => format!("{cell:>width$}"),
                _ => format!("{cell:<width$}"),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for s in &report.skipped {
        out.push_str(&format!(
            "skipped: {}/{}: {}\n",
            s.provider,
            s.model,
            s.reason()
        ));
    }
    out.push_str(&final_line(&report.judged, ceiling));
    out.push('\n');
    out
}

fn final_line(rows: &[Judged], ceiling: Ceiling) -> String {
    let problems: Vec<String> = rows
        .iter()
        .flat_map(|row| {
            let failure = row
                .result
                .verdict
                .problem()
                .map(|p| format!("{}: {}", row.entry(), short(&p)));
            let slow = row
                .over_ceiling
                .iter()
                .map(|over| format!("{}: {over}", row.entry()));
            failure.into_iter().chain(slow).collect::<Vec<_>>()
        })
        .collect();
    match problems.is_empty() {
        true => format!(
            "healthy: {} of {} probed entries ok, p95 within {} ms TTFT / {} ms total",
            rows.len(),
            rows.len(),
            ceiling.first_token.as_millis(),
            ceiling.total.as_millis()
        ),
        false => format!("UNHEALTHY: {}", problems.join("; ")),
    }
}

async fn probe_local(config: &Config, json: bool) -> Result<bool, Unprobeable> {
    let report = match local::probe_local(config).await {
        Ok(report) => report,
        Err(LocalProbeError::Setup(e)) => return Err(Unprobeable(e.to_string())),
        Err(LocalProbeError::Engine(reason)) => {
            let message = format!("the local engine failed: {reason}");
            if json {
                let result = json!({"entry": "local", "ok": false, "error": message});
                println!("{}", json!({"results": [result], "ok": false}));
            } else {
                println!("UNHEALTHY: {message}");
            }
            return Ok(false);
        }
    };
    let problem = report.problem();
    let healthy = problem.is_none();
    if let Err(e) = report.record() {
        eprintln!("switchyard probe: {e}");
    }
    if json {
        let value = json!({
            "results": [{
                "entry": format!("local/{}", report.model),
                "provider": "local",
                "model": report.model,
                "ok": healthy,
                "error": problem,
                "load_ms": report.load_ms,
                "warm_up_ms": report.warm_up_ms,
                "latency_ms": report.latency_ms,
                "budget_ms": report.budget_ms,
                "completion": report.completion.as_ref().ok(),
            }],
            "ok": healthy,
        });
        println!("{value}");
    } else {
        let completion = match &report.completion {
            Ok(text) => format!("{text:?}"),
            Err(reason) => format!("(no suggestion: {reason})"),
        };
        println!(
            "local model {}: loaded in {} ms, cache warm-up {} ms, completion {} ms (budget {} ms): {completion}",
            report.model, report.load_ms, report.warm_up_ms, report.latency_ms, report.budget_ms
        );
        match &problem {
            None => println!("healthy: the local fallback completes within its budget"),
            Some(problem) => println!("UNHEALTHY: {problem}"),
        }
    }
    Ok(healthy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_error_keeps_its_kind_and_its_cause() {
        let error = format!(
            "connect: could not connect: {}: Connection refused (os error 111)",
            "x".repeat(100)
        );
        let cell = short(&error);
        assert_eq!(cell.chars().count(), TABLE_ERROR_CHARS, "{cell}");
        assert!(cell.starts_with("connect: …"), "{cell}");
        assert!(
            cell.ends_with("Connection refused (os error 111)"),
            "{cell}"
        );
        assert_eq!(short("HTTP 503: unavailable"), "HTTP 503: unavailable");
        let no_kind = "y".repeat(100);
        assert_eq!(short(&no_kind).chars().count(), TABLE_ERROR_CHARS + 1);
    }
}
