//! Load: eight switchyard processes (four language servers, four gateways) on
//! one machine, sharing one fake provider with a quota and a scripted outage,
//! through the shared state (files, then Redis). The fleet must not storm the
//! quota, must let at most one user probe through per cooldown of the outage
//! as it really lasted, must answer every interactive request within its
//! ceiling, and must come back to the primary once a canary finds it healthy.
//! The probes' spacing and the trip's reach in time are checked on the paused
//! clock (crates/router/src/tests/fleet.rs).

mod support;

use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};
use support::fake_provider::{Behaviour, FakeProvider};
use support::poll;
use support::redis_server::RedisServer;
use support::scenario::{Front, Profile, Reply, Rig, Setup};
use tokio::time::Instant;

const FRONTS: [Front; 8] = [
    Front::Lsp,
    Front::Gateway,
    Front::Lsp,
    Front::GatewayStream,
    Front::Lsp,
    Front::Gateway,
    Front::Lsp,
    Front::GatewayStream,
];

async fn every_process_asks(rigs: &mut [Rig], each: usize) -> Vec<Reply> {
    join_all(rigs.iter_mut().map(|rig| rig.ask_concurrently(each)))
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn served_by(replies: &[Reply], model: &str) -> usize {
    replies.iter().filter(|r| r.served().model == model).count()
}

async fn fleet_rides_out_an_outage(state: Value) {
    let profile = Profile::fast();
    let primary = FakeProvider::start().await;
    let secondary = FakeProvider::start().await;
    // 10 requests a second for the account; the fleet learns it from the headers.
    primary.set_quota(600);
    let setup = Setup {
        extra: json!({
            "tasks": {"explain": {"wait_ms": 0}},
            "resilience": {
                "state": state,
                "breaker": {"failures": 3, "cooldown_ms": profile.cooldown.as_millis() as u64},
                "canary_interval_ms": 200
            }
        }),
        ..Setup::default()
    };
    let mut rigs = Vec::new();
    for front in FRONTS {
        rigs.push(Rig::start(front, &profile, setup.clone(), &primary, &secondary).await);
    }

    let healthy = every_process_asks(&mut rigs, 3).await;
    assert_eq!(
        served_by(&healthy, "primary/mid"),
        24,
        "all on the primary while it is healthy"
    );

    // The outage: waves of requests from every process.
    primary.set_default(Behaviour::Unavailable);
    let outage_started = Instant::now();
    let first_outage_request = primary.user_request_count();
    let mut during = Vec::new();
    for wave in 0..6u32 {
        tokio::time::sleep_until(outage_started + profile.outage / 6 * wave).await;
        during.extend(every_process_asks(&mut rigs, 2).await);
    }
    primary.set_default(Behaviour::ok("back"));
    let recovered = Instant::now();
    let outage = recovered - outage_started;
    let outage_requests: Vec<Instant> = primary.user_requests()[first_outage_request..]
        .iter()
        .map(|r| r.at)
        .filter(|at| *at < recovered)
        .collect();

    // A canary finds the primary healthy, and then every process is back on it.
    let back_on_the_primary = async || {
        let after = every_process_asks(&mut rigs, 2).await;
        match served_by(&after, "primary/mid") == after.len() {
            true => Ok(after),
            false => Err(after),
        }
    };
    let after = poll::eventually(Duration::from_secs(30), back_on_the_primary)
        .await
        .unwrap_or_else(|after| {
            let served: Vec<&str> = after.iter().map(|r| r.served().model.as_str()).collect();
            panic!("every process is back on the primary after recovery: {served:?}")
        });

    // Every request answered, none failed (how soon: the task's total
    // ceiling, checked on the paused clock in the router's tests).
    for reply in healthy.iter().chain(&during).chain(&after) {
        reply.served();
    }
    assert_eq!(
        primary.quota_rejections(),
        0,
        "no 429 storm: no request without quota in hand"
    );
    // The first wave is in flight before any failure is known (8 processes x 2);
    // after it the shared verdict and breaker keep users off (canaries, not
    // counted here, test the primary meanwhile); at most one user probe per
    // cooldown of the outage, as long as it really lasted, gets through.
    let first_wave = FRONTS.len() * 2;
    let probes_allowed = (outage.as_millis() / profile.cooldown.as_millis()) as usize + 1;
    assert!(
        outage_requests.len() <= first_wave + probes_allowed,
        "{} requests reached the primary during a {outage:?} outage (allowed {first_wave} + {probes_allowed})",
        outage_requests.len(),
    );
    // Attempts per unit of work stay about one: everything the fleet asked
    // during the outage, against what the primary saw.
    let units = during.len();
    assert!(
        outage_requests.len() * 2 <= units + first_wave,
        "{} primary attempts for {units} requests",
        outage_requests.len()
    );
    // Users stayed off until then: a canary, not a user, was the first to
    // find the primary back.
    let first_after = primary.requests().into_iter().find(|r| r.at >= recovered);
    assert!(
        first_after.as_ref().is_some_and(|r| r.is_canary()),
        "the first request the recovered primary received was a user's"
    );
}

#[tokio::test]
async fn eight_processes_share_breaker_and_quota_through_files() {
    let shared = tempfile::tempdir().unwrap();
    fleet_rides_out_an_outage(json!(format!("file://{}", shared.path().display()))).await;
}

#[tokio::test]
async fn eight_processes_share_breaker_and_quota_through_redis() {
    let redis = RedisServer::start();
    fleet_rides_out_an_outage(json!(redis.url())).await;
}
