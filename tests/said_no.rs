//! Nothing leaves after the user says no, through the binary: local-only
//! mode turned on while a task runs stops its every further request, whatever
//! road that request would take (the hedge, a retry after a 429 with
//! retry-after, a failover, a mid-stream rescue, the continuation of a cut
//! answer), through the language server's explain (the command palette's
//! toggle) and the gateway (its config file edited), whole and streamed.
//! Counted where it matters: the requests the fake providers receive after
//! the mode is in force. The user is told why the answer ended.
//!
//! Events are ordered, not timed: the primary's reply is held at a gate
//! until the mode is in force, so its fault (or its late answer) always comes
//! after the user said no, on any machine.

mod support;

use serde_json::json;
use support::actions::command;
use support::fake_provider::{Behaviour, FakeProvider, Gate};
use support::lsp_client::LspClient;
use support::poll::{PATIENCE, eventually};
use support::scenario::{
    Failed, Front, Gateway, Profile, Rig, Served, Setup, explain_params, explain_result,
};

/// An answer in four deltas, so a cut after two leaves half of it.
const ANSWER: &str = "HashMap::entry looks the key up once and hands back an Entry: Occupied when the key is present, Vacant when it is not.";

/// What the task meets on the primary, once the user has said no.
#[derive(Clone, Copy, Debug)]
enum Road {
    /// No first token by the ceiling: the second provider would be raced.
    Hedge,
    /// A 429 that says when to try again.
    RetryAfter,
    /// A 500: the next provider would serve.
    Failover,
    /// Half an answer, then silence: the next provider would continue it.
    Rescue,
    /// Half an answer, then the connection drops.
    Continuation,
}

impl Road {
    const ALL: [Road; 5] = [
        Road::Hedge,
        Road::RetryAfter,
        Road::Failover,
        Road::Rescue,
        Road::Continuation,
    ];

    fn primary(self, profile: &Profile) -> Behaviour {
        match self {
            Road::Hedge => Behaviour::ok(ANSWER),
            Road::RetryAfter => Behaviour::RateLimited {
                retry_after: Some(1),
            },
            Road::Failover => Behaviour::ServerError,
            Road::Rescue => Behaviour::StallMidStream {
                text: ANSWER.into(),
                after_chunks: 2,
                stall: profile.stall,
            },
            Road::Continuation => Behaviour::CutAfter {
                text: ANSWER.into(),
                after_chunks: 2,
            },
        }
    }
}

/// How the task ended, as the user sees it.
fn judge(what: &str, road: Road, result: &Result<Served, Failed>, log: &str) {
    let what = format!("{what}: {result:?}\n{log}");
    match (road, result) {
        // Its request left before the user said no; only the hedge is kept back.
        (Road::Hedge, Ok(served)) => {
            assert!(served.model.starts_with("primary/"), "{what}");
            assert_eq!(served.text, ANSWER, "{what}");
        }
        (_, Err(failed)) => {
            let why = "local-only mode is on (since this task began): nothing more of it was sent";
            assert!(failed.message.contains(why), "{what}");
            let streamed = matches!(road, Road::Rescue | Road::Continuation);
            let said = failed.message.contains("its answer stops after the");
            assert_eq!(said, streamed, "{what}");
        }
        _ => panic!("{what}"),
    }
}

/// Says no as an editor's user does: the command palette's local-only toggle.
async fn say_no_in_the_editor(client: &mut LspClient) {
    let reply = command(client, "switchyard.setLocalOnly", json!([true])).await;
    assert_eq!(reply["result"]["localOnly"], true, "{reply}");
}

/// Says no as a gateway's operator does: `local_only = true` in its config
/// file; waits until the gateway has read it.
async fn say_no_to_the_gateway(gateway: &Gateway) {
    let file = gateway.process.home.path().join("config.toml");
    let toml = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("local_only = true\n{toml}")).unwrap();
    let in_force = eventually(PATIENCE, async || {
        let status = gateway.status().await;
        match status["localOnly"] == true {
            true => Ok(()),
            false => Err(status),
        }
    })
    .await;
    assert!(in_force.is_ok(), "{in_force:?}\n{}", gateway.process.log());
}

/// One road through one front: the task starts, the primary has its
/// request, the user says no, the primary's reply comes; no provider
/// receives anything more (user requests and canaries alike).
async fn road(front: Front, road: Road, profile: Profile) {
    let gate = Gate::default();
    let primary = FakeProvider::with_default(road.primary(&profile).after_gate(&gate)).await;
    let secondary = FakeProvider::with_default(Behaviour::ok(ANSWER)).await;
    let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
    let asked = async || match primary.user_request_count() {
        0 => Err(()),
        _ => Ok(()),
    };
    let sent = || primary.request_count() + secondary.request_count();
    let what = format!("{front:?}, {road:?}");
    let (result, sent_before) = match front {
        Front::Lsp | Front::LspRefactor => {
            let client = rig.lsp();
            let id = client
                .send_request("workspace/executeCommand", explain_params())
                .await;
            assert!(
                eventually(PATIENCE, asked).await.is_ok(),
                "{what}: never asked"
            );
            say_no_in_the_editor(client).await;
            let before = sent();
            gate.open();
            (explain_result(client.response(id).await), before)
        }
        Front::Gateway | Front::GatewayStream => {
            let gateway = rig.gateway();
            tokio::join!(gateway.ask(front == Front::GatewayStream), async {
                assert!(
                    eventually(PATIENCE, asked).await.is_ok(),
                    "{what}: never asked"
                );
                say_no_to_the_gateway(gateway).await;
                let before = sent();
                gate.open();
                before
            })
        }
    };
    let log = rig.log();
    judge(&what, road, &result, &log);
    let after = sent() - sent_before;
    assert_eq!(
        after, 0,
        "{what}: {after} requests after the user said no\n{log}"
    );
    assert_eq!(primary.user_request_count(), 1, "{what}: no retry\n{log}");
}

/// Every road through `front`, each with its own fakes and process.
async fn every_road(front: Front) {
    let profile = Profile::current();
    futures::future::join_all(Road::ALL.map(|r| road(front, r, profile.clone()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_more_leaves_after_local_only_is_turned_on_in_the_editor() {
    every_road(Front::Lsp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_more_leaves_after_the_gateway_is_made_local_only() {
    every_road(Front::Gateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_more_leaves_after_a_streamed_gateway_request_is_made_local_only() {
    every_road(Front::GatewayStream).await;
}
