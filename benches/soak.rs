//! The soak for as long as asked (issue 52): four language servers as
//! editor windows, a gateway client, one `redis-server` behind a proxy, two
//! fake providers, one seeded fault per phase (`tests/support/soak/` says
//! what runs and what is counted). Exits 1 when a promise broke, naming it.
//!
//! Run: `cargo bench --bench soak` (`SOAK_MINUTES=3`, `SOAK_PHASE_S=20`,
//! `SOAK_SEED=1`). Needs `redis-server` (scripts/test-setup).

#[path = "../tests/support/mod.rs"]
mod support;

use support::soak::{Settings, run};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let report = run(Settings::from_env(3, 20, 1)).await;
    let failures = report.failures();
    for failure in &failures {
        println!("FAILED: {failure}");
    }
    // Returning drops every process the soak started (each is killed on drop).
    match failures.is_empty() {
        true => std::process::ExitCode::SUCCESS,
        false => std::process::ExitCode::FAILURE,
    }
}
