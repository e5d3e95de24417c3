//! `switchyard status`: the one-paragraph runbook, live. Reads the shared
//! state every switchyard process writes (breakers, quota, parked tasks).

use std::path::PathBuf;
use std::process::ExitCode;

use switchyard::gateway::wire::StatusResponse;
use switchyard_config::failed_closed_notice;
use switchyard_core::runbook::Runbook;
use switchyard_providers::local::chat::EngineSlot;
use switchyard_resilience::breaker::{BreakerView, Phase};
use switchyard_resilience::park::ParkingLot;
use switchyard_router::status::ParkedStatus;

pub async fn run(config_file: Option<PathBuf>, json: bool) -> ExitCode {
    let core = super::open_core(config_file, EngineSlot::default());
    let parked = ParkingLot::open(switchyard_base::paths::state_dir().join("parked"))
        .map(|lot| lot.list())
        .unwrap_or_default()
        .into_iter()
        .map(ParkedStatus::from)
        .collect();
    *core.parked().lock().expect("parked lock") = parked;
    let runbook = switchyard_core::runbook::runbook(&core.router()).await;
    if json {
        // The same documented JSON as the gateway's `GET /status`.
        let wire = StatusResponse::from(&runbook);
        println!(
            "{}",
            serde_json::to_string_pretty(&wire).expect("runbook serialises")
        );
    } else {
        print!("{}", human(&runbook));
        let models = switchyard_models::model_dir();
        let used = switchyard_models::disk_use(&models) as f64 / 1e6;
        println!("models: {used:.0} MB in {}", models.display());
    }
    ExitCode::SUCCESS
}

fn human(runbook: &Runbook) -> String {
    let mut out = format!(
        "switchyard status (shared state: {})\n",
        runbook.shared_state
    );
    match (&runbook.status.local_only_reason, runbook.status.local_only) {
        (Some(reason), _) => out += &format!("{}\n", failed_closed_notice(reason)),
        (None, true) => out += "local-only mode is on: only the local model serves\n",
        (None, false) => {}
    }
    out += &routes(runbook);
    let status = &runbook.status;
    out += &section(
        "breakers",
        "none recorded",
        status.breakers.iter().map(breaker),
    );
    out += &section(
        "quota",
        "nothing governed yet (limits are learned from the first response)",
        status.quota.iter().map(|q| {
            format!(
                "{:<48} {:<14} {:>10.0} of {} available",
                q.key, q.meter, q.available, q.limit
            )
        }),
    );
    out += &section(
        "last probes (switchyard probe)",
        "none recorded",
        runbook.last_probes.iter().map(|p| {
            let result = match (&p.error, p.ok) {
                (Some(error), _) => error.clone(),
                (None, true) => format!("ok in {} ms", p.total_ms),
                (None, false) => "wrong answer".into(),
            };
            format!("{:<48} {result}", p.entry())
        }),
    );
    out += &section(
        "canaries",
        "none sent",
        status.canaries.iter().rev().take(5).map(|c| {
            let result = c
                .error
                .clone()
                .unwrap_or_else(|| format!("ok in {} ms", c.latency_ms));
            format!("{}/{} ({}): {result}", c.provider, c.model, c.reason)
        }),
    );
    out += &section(
        "parked",
        "none",
        status
            .parked
            .iter()
            .map(|p| format!("{} {}: {}", p.id, p.kind.as_str(), p.note)),
    );
    out
}

/// Each task's tier, what serves it now and next, and what was skipped.
fn routes(runbook: &Runbook) -> String {
    let mut out = String::new();
    for task in &runbook.routes {
        out += &format!(
            "{:<9} {} tier: now {}, next {}\n",
            task.kind.as_str(),
            task.tier,
            task.now
                .as_deref()
                .unwrap_or("nothing (the task fails or parks)"),
            task.next.as_deref().unwrap_or("none"),
        );
        for skipped in &task.skipped {
            out += &format!("          skipped {skipped}\n");
        }
    }
    out
}

fn breaker(b: &BreakerView) -> String {
    let mut line = format!(
        "{:<48} {:<9} trips {}, recoveries {}",
        b.key, b.phase, b.trips, b.recoveries
    );
    if b.phase != Phase::Closed {
        line += &format!(
            ", open {:.0} s more: {}",
            b.open_for_ms as f64 / 1000.0,
            b.reason
        );
    }
    line
}

/// `title:` and its lines indented, or `empty` where it has none.
fn section(title: &str, empty: &str, lines: impl Iterator<Item = String>) -> String {
    let mut out = format!("{title}:\n");
    let mut any = false;
    for line in lines {
        any = true;
        out += &format!("  {line}\n");
    }
    if !any {
        out += &format!("  {empty}\n");
    }
    out
}
