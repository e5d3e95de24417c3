//! `switchyard status`: the one-paragraph runbook, live. Reads the shared
//! state every switchyard process writes (breakers, quota, parked tasks).

use std::path::PathBuf;
use std::process::ExitCode;

use switchyard::config;
use switchyard::core::runbook::Runbook;
use switchyard::gateway::wire::StatusResponse;
use switchyard::providers::local::chat::EngineSlot;
use switchyard::resilience::park::ParkingLot;
use switchyard::router::status::ParkedStatus;

pub async fn run(config_file: Option<PathBuf>, json: bool) -> ExitCode {
    let core = super::open_core(config_file, EngineSlot::default());
    let parked = ParkingLot::open(switchyard::paths::state_dir().join("parked"))
        .map(|lot| lot.list())
        .unwrap_or_default()
        .into_iter()
        .map(ParkedStatus::from)
        .collect();
    *core.parked().lock().expect("parked lock") = parked;
    let runbook = switchyard::core::runbook::runbook(&core.router()).await;
    if json {
        // The same documented JSON as the gateway's `GET /status`.
        let wire = StatusResponse::from(&runbook);
        println!(
            "{}",
            serde_json::to_string_pretty(&wire).expect("runbook serialises")
        );
    } else {
        print!("{}", human(&runbook));
    }
    ExitCode::SUCCESS
}

fn human(runbook: &Runbook) -> String {
    let mut out = format!(
        "switchyard status (shared state: {})\n",
        runbook.shared_state
    );
    match (&runbook.status.local_only_reason, runbook.status.local_only) {
        (Some(reason), _) => out += &format!("{}\n", config::failed_closed_notice(reason)),
        (None, true) => out += "local-only mode is on: only the local model serves\n",
        (None, false) => {}
    }
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
    out += "breakers:\n";
    if runbook.status.breakers.is_empty() {
        out += "  none recorded\n";
    }
    for b in &runbook.status.breakers {
        out += &format!(
            "  {:<48} {:<9} trips {}, recoveries {}",
            b.key, b.phase, b.trips, b.recoveries
        );
        if b.phase != switchyard::resilience::breaker::Phase::Closed {
            out += &format!(
                ", open {:.0} s more: {}",
                b.open_for_ms as f64 / 1000.0,
                b.reason
            );
        }
        out += "\n";
    }
    out += "quota:\n";
    if runbook.status.quota.is_empty() {
        out += "  nothing governed yet (limits are learned from the first response)\n";
    }
    for q in &runbook.status.quota {
        out += &format!(
            "  {:<48} {:<14} {:>10.0} of {} available\n",
            q.key, q.meter, q.available, q.limit
        );
    }
    out += "last probes (switchyard probe):\n";
    if runbook.last_probes.is_empty() {
        out += "  none recorded\n";
    }
    for p in &runbook.last_probes {
        let result = match (&p.error, p.ok) {
            (Some(error), _) => error.clone(),
            (None, true) => format!("ok in {} ms", p.total_ms),
            (None, false) => "wrong answer".into(),
        };
        out += &format!("  {:<48} {result}\n", p.entry());
    }
    out += "canaries:\n";
    if runbook.status.canaries.is_empty() {
        out += "  none sent\n";
    }
    for c in runbook.status.canaries.iter().rev().take(5) {
        let result = c
            .error
            .clone()
            .unwrap_or_else(|| format!("ok in {} ms", c.latency_ms));
        out += &format!("  {}/{} ({}): {result}\n", c.provider, c.model, c.reason);
    }
    out += "parked:\n";
    if runbook.status.parked.is_empty() {
        out += "  none\n";
    }
    for p in &runbook.status.parked {
        out += &format!("  {} {}: {}\n", p.id, p.kind.as_str(), p.note);
    }
    out
}
