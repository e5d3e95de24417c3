//! `switchyard stats`: whether the suggestions are worth having, from the
//! completion stats on this machine: how many were shown, accepted whole or
//! in part, or ignored, the characters accepted, latency (p50, p95), and the
//! share of answers that came back empty or late, by editor, language and
//! model.

use std::process::ExitCode;

use switchyard_completion::stats::{self, Totals};

use super::audit::read_window;

pub fn run(since: &str, json: bool) -> ExitCode {
    let records = match read_window(since, &stats::default_path(), stats::read_since) {
        Ok(records) => records,
        Err(code) => return code,
    };
    let totals = stats::totals(&records);
    if json {
        let json = serde_json::json!({ "since": since, "groups": totals });
        println!("{json}");
    } else {
        print!("{}", human(&totals, since));
    }
    ExitCode::SUCCESS
}

fn human(totals: &[Totals], since: &str) -> String {
    if totals.is_empty() {
        return format!("No completions were asked for in the last {since}.\n");
    }
    let mut out = format!("Completions in the last {since}:\n");
    for t in totals {
        let percent = |n: usize| match t.requests {
            0 => 0.0,
            all => 100.0 * n as f64 / all as f64,
        };
        let rate = t
            .acceptance_rate
            .map_or("-".to_owned(), |r| format!("{:.0} %", 100.0 * r));
        let ms = |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{v} ms"));
        out.push_str(&format!(
            "  {} · {} · {}: {} shown, {} accepted, {} partly, {} ignored ({} accepted, {} chars); \
             p50 {}, p95 {}; empty {:.0} % (late {:.0} %) of {} requests\n",
            t.editor,
            t.language,
            t.model,
            t.shown,
            t.accepted,
            t.partial,
            t.ignored,
            rate,
            t.accepted_chars,
            ms(t.p50_ms),
            ms(t.p95_ms),
            percent(t.empty),
            percent(t.late),
            t.requests
        ));
    }
    out
}
