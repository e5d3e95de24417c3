//! `switchyard audit`: what left this machine, from the outbound audit log
//! (every remote request's time, task, front end, provider/model, document or
//! caller, size and redactions; never its text).

use std::path::Path;
use std::process::ExitCode;

use switchyard_base::clock::now_ms;
use switchyard_privacy::audit::{self, AuditRecord};

pub fn run(since: &str, json: bool) -> ExitCode {
    let records = match read_window(since, &audit::default_path(), audit::read_since) {
        Ok(records) => records,
        Err(code) => return code,
    };
    if json {
        for record in &records {
            println!(
                "{}",
                serde_json::to_string(record).expect("records serialise")
            );
        }
    } else {
        print!("{}", human(&records, since));
    }
    ExitCode::SUCCESS
}

/// The records of the log at `path` from `since` ago (`90s`, `15m`, `1h`,
/// `7d`), or the exit code once the reason was said.
pub fn read_window<T>(
    since: &str,
    path: &Path,
    read_since: impl Fn(&Path, u64) -> std::io::Result<Vec<T>>,
) -> Result<Vec<T>, ExitCode> {
    let window_ms = parse_duration_ms(since).map_err(|e| {
        eprintln!("--since {since}: {e}");
        ExitCode::from(2)
    })?;
    read_since(path, now_ms().saturating_sub(window_ms)).map_err(|e| {
        eprintln!("cannot read {}: {e}", path.display());
        ExitCode::from(1)
    })
}

/// `90s`, `15m`, `1h`, `7d`.
fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| "expected a number and a unit: s, m, h or d (e.g. 1h)".to_owned())?;
    let unit_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("the unit must be s, m, h or d (e.g. 1h)".into()),
    };
    Ok(number.saturating_mul(unit_ms))
}

fn human(records: &[AuditRecord], since: &str) -> String {
    if records.is_empty() {
        return format!("Nothing was sent to a remote provider in the last {since}.\n");
    }
    let mut out = String::new();
    let bytes: usize = records.iter().map(|r| r.bytes).sum();
    let redactions: usize = records.iter().map(|r| r.redactions).sum();
    out.push_str(&format!(
        "{} remote requests in the last {since}: {} sent, {redactions} secrets redacted.\n",
        records.len(),
        size(bytes)
    ));
    for r in records {
        let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(r.at_ms) * 1_000_000)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_else(|| r.at_ms.to_string());
        let redacted = match r.redactions {
            0 => String::new(),
            n => format!(", {n} redacted"),
        };
        out.push_str(&format!(
            "{at}  {:<8} {:<7} {}/{}  {} (~{} tokens{redacted})  {}\n",
            r.task,
            r.front_end,
            r.provider,
            r.model,
            size(r.bytes),
            r.estimated_tokens,
            r.subject
        ));
    }
    out
}

fn size(bytes: usize) -> String {
    if bytes < 10_000 {
        format!("{bytes} B")
    } else {
        format!("{:.1} kB", bytes as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_with_their_unit() {
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("15m"), Ok(900_000));
        assert!(parse_duration_ms("1 hour").is_err());
        assert!(parse_duration_ms("h").is_err());
    }
}
