//! Three minutes of the soak (`tests/support/soak/`, which `benches/soak.rs`
//! runs for an hour): every fault once, in a seeded order, between calm
//! phases, across four language servers, a gateway and Redis; every count
//! that marks a broken promise at zero.

mod support;

use support::soak::{Settings, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_minutes_of_faults_garble_lose_and_leak_nothing() {
    // Sixteen faults and the calm phases between them, 6 s each.
    let settings = Settings {
        phases: 33,
        phase: std::time::Duration::from_secs(6),
        seed: 52,
    };
    let report = run(settings).await;
    let failures = report.failures();
    assert!(
        failures.is_empty(),
        "the soak broke promises:\n{}",
        failures.join("\n")
    );
    assert!(
        !report.parked.is_empty() && report.total(|p| p.answered) > 100,
        "the soak did too little to prove anything: {} parked, {} answered",
        report.parked.len(),
        report.total(|p| p.answered)
    );
}
