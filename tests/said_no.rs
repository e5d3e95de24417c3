//! Nothing leaves after the user says no, through the binary: local-only
//! mode turned on while a task runs stops its every further request, whatever
//! road that request would take (the hedge, a retry after a 429 or a 529
//! with retry-after, a failover, a mid-stream rescue, the continuation of a cut
//! answer), through the language server's explain (the command palette's
//! toggle) and the gateway (its config file edited), whole and streamed.
//! Counted where it matters: the requests the fake providers receive after
//! the mode is in force. The user is told why the answer ended. Resumes of
//! parked work, remote autocomplete and canaries are held to the same.
//!
//! Events are ordered, not timed: the primary's reply is held at a gate
//! until the mode is in force (on the hedge road, until the hedge's turn has
//! come too), so its fault or its late answer always comes after the user
//! said no, on any machine.

mod support;

use serde_json::json;
use support::actions::{command, whole_function};
use support::fake_provider::{Behaviour, FakeProvider, Gate};
use support::lsp_client::LspClient;
use support::poll::{PATIENCE, eventually};
use support::scenario::{
    Failed, Front, Gateway, Profile, Rig, Served, Setup, URI, explain_params, explain_result,
};

/// An answer in four deltas, so a cut after two leaves half of it.
const ANSWER: &str = "HashMap::entry looks the key up once and hands back an Entry: Occupied when the key is present, Vacant when it is not.";

/// What the log says when the hedge's turn comes (the primary's reply is
/// held until then on the hedge road, so the hedge is really asked for).
const HEDGING: &str = "hedging with";

/// What the task meets on the primary, once the user has said no.
#[derive(Clone, Copy, Debug)]
enum Road {
    /// No first token by the ceiling: the second provider would be raced.
    Hedge,
    /// A 429 that says when to try again.
    RetryAfter,
    /// A 529 (overloaded) that says when to try again.
    OverloadedRetryAfter,
    /// A 500: the next provider would serve.
    Failover,
    /// Half an answer, then silence: the next provider would continue it.
    Rescue,
    /// Half an answer, then the connection drops.
    Continuation,
}

impl Road {
    const ALL: [Road; 6] = [
        Road::Hedge,
        Road::RetryAfter,
        Road::OverloadedRetryAfter,
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
            Road::OverloadedRetryAfter => Behaviour::OverloadedFor { retry_after: 1 },
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

/// Whether the editor's status comes to show parked task `id` waiting for
/// local-only mode to end (`Err` with the last status when it never does).
async fn waits_for_local_only(client: &mut LspClient, id: &str) -> Result<(), serde_json::Value> {
    eventually(PATIENCE, async || {
        let status = command(client, "switchyard.status", json!([])).await;
        let parked = status["result"]["parked"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let waits = |p: &serde_json::Value| {
            p["id"] == id
                && p["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("local-only mode is on"))
        };
        match parked.iter().any(waits) {
            true => Ok(()),
            false => Err(status),
        }
    })
    .await
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
            if let Road::Hedge = road {
                client.wait_for_log(HEDGING).await;
            }
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
                if let Road::Hedge = road {
                    let log = || gateway.process.log();
                    let hedged = eventually(PATIENCE, async || {
                        log().contains(HEDGING).then_some(()).ok_or(())
                    })
                    .await;
                    assert!(hedged.is_ok(), "{what}: never hedged\n{}", log());
                }
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

/// A language server whose completions and canaries go to the two fakes.
async fn editor(extra: serde_json::Value, primary: &FakeProvider, secondary: &FakeProvider) -> Rig {
    let setup = Setup {
        extra,
        ..Setup::default()
    };
    Rig::start(Front::Lsp, &Profile::current(), setup, primary, secondary).await
}

/// Remote autocomplete: the first remote entry fails once the user said no;
/// the second is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_completion_asks_no_other_remote_after_the_user_says_no() {
    let gate = Gate::default();
    let primary = FakeProvider::with_default(Behaviour::ServerError.after_gate(&gate)).await;
    let secondary = FakeProvider::with_default(Behaviour::ok("map.len()")).await;
    // The longest budget, so the first entry's attempt is still under way
    // when the user says no: the question is what comes after it.
    let chain = json!({"autocomplete": {
        "chain": ["primary/fim", "secondary/fim", "local"],
        "budget_ms": 10_000
    }});
    let mut rig = editor(chain, &primary, &secondary).await;
    let client = rig.lsp();
    let at = json!({"textDocument": {"uri": support::scenario::URI}, "position": {"line": 7, "character": 4}});
    let id = client.send_request("textDocument/completion", at).await;
    let asked = async || match primary.user_request_count() {
        0 => Err(()),
        _ => Ok(()),
    };
    assert!(eventually(PATIENCE, asked).await.is_ok(), "never asked");
    say_no_in_the_editor(client).await;
    let before = primary.request_count() + secondary.request_count();
    gate.open();
    let response = client.response(id).await;
    let log = client.log();
    assert!(response.get("error").is_none(), "{response}\n{log}");
    let after = primary.request_count() + secondary.request_count() - before;
    assert_eq!(after, 0, "{after} requests after the user said no\n{log}");
    assert_eq!(secondary.user_request_count(), 0, "{log}");
}

/// Canaries: a round under way when the user says no sends no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_round_sends_nothing_more_after_the_user_says_no() {
    let gate = Gate::default();
    let primary = FakeProvider::with_default(Behaviour::ok(ANSWER).after_gate(&gate)).await;
    let secondary = FakeProvider::with_default(Behaviour::ok(ANSWER)).await;
    // The primaries of the large and the medium tier are both on `primary`:
    // one round watches both, one after the other.
    let watch = json!({"resilience": {"primary_canary_ms": 100}});
    let mut rig = editor(watch, &primary, &secondary).await;
    let asked = async || match primary.request_count() {
        0 => Err(()),
        _ => Ok(()),
    };
    assert!(eventually(PATIENCE, asked).await.is_ok(), "no canary came");
    let client = rig.lsp();
    say_no_in_the_editor(client).await;
    let before = primary.request_count() + secondary.request_count();
    gate.open();
    // The held canary ends; the round and those after it would send next.
    client.wait_for_log("canary to primary/").await;
    let every = Profile::current().canary;
    tokio::time::sleep(support::timing::scaled(every * 5)).await;
    let log = client.log();
    let after = primary.request_count() + secondary.request_count() - before;
    assert_eq!(after, 0, "{after} canaries after the user said no\n{log}");
}

/// Resume of parked work: a refactor parked while both providers were rate
/// limited is resumed by the window; its resumed request is held at the
/// provider until the user has said no, then fails as a failover would
/// follow. Nothing more is sent, and the user is told why it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_parked_refactor_sends_nothing_more_after_the_user_says_no() {
    let limited = Behaviour::RateLimited {
        retry_after: Some(1),
    };
    let primary = FakeProvider::with_default(limited.clone()).await;
    let secondary = FakeProvider::with_default(limited).await;
    let profile = Profile::current();
    let setup = Setup {
        extra: json!({"resilience": {"resume_interval_ms": 200}}),
        ..Setup::default()
    }
    .refactor_on_medium(&profile);
    let mut rig = Rig::start(Front::LspRefactor, &profile, setup, &primary, &secondary).await;
    let client = rig.lsp();
    let arguments = json!([URI, whole_function(), "Simplify this code."]);
    let parked = command(client, "switchyard.refactor", arguments).await;
    assert!(
        parked["result"]["parked"].is_string(),
        "{parked}\n{}",
        client.log()
    );

    let gate = Gate::default();
    for fake in [&primary, &secondary] {
        fake.set_default(Behaviour::ServerError.after_gate(&gate));
    }
    let users = || primary.user_request_count() + secondary.user_request_count();
    let before_resume = users();
    let resumed = async || match users() > before_resume {
        true => Ok(()),
        false => Err(()),
    };
    let log = client.log();
    assert!(
        eventually(PATIENCE, resumed).await.is_ok(),
        "never resumed\n{log}"
    );
    say_no_in_the_editor(client).await;
    let before = primary.request_count() + secondary.request_count();
    gate.open();
    // It stops, and waits parked for the mode to end (its work is kept).
    let id = parked["result"]["parked"].as_str().unwrap().to_owned();
    let waiting = waits_for_local_only(client, &id).await;
    let log = client.log();
    assert!(waiting.is_ok(), "not parked, waiting: {waiting:?}\n{log}");
    let after = primary.request_count() + secondary.request_count() - before;
    assert_eq!(after, 0, "{after} requests after the user said no\n{log}");
}

/// Found by the soak: windows of one workspace share its parked work, and
/// a window in local-only mode took another's parked refactor to resume it;
/// the rule ended it for good and the refactor was lost. A window that may
/// send nothing leaves parked work parked and says why; the work is
/// resumed and applied once the mode is off, and nothing left meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_in_local_only_mode_leaves_parked_work_parked() {
    use support::actions::{REWRITE, rewritten};
    use support::lsp_client::ServerOptions;
    use support::scenario::{DOC, KEY, apply_edits};

    let limited = Behaviour::RateLimited {
        retry_after: Some(1),
    };
    let primary = FakeProvider::with_default(limited.clone()).await;
    let secondary = FakeProvider::with_default(limited).await;
    let task = json!({"tier": "medium", "total_ms": 10_000, "wait_ms": 0, "hedge": false});
    let config = |local_only: bool| {
        json!({
            "local_only": local_only,
            "local": {"auto_pull": false},
            "providers": {
                "primary": {"kind": "anthropic", "base_url": primary.anthropic_url(), "api_key_env": "SY_FAULTS_KEY"},
                "secondary": {"kind": "openai", "base_url": secondary.openai_url(), "api_key_env": "SY_FAULTS_KEY"}
            },
            "tiers": {"large": [], "medium": ["primary/mid", "secondary/backup"], "small": []},
            "tasks": {"refactor": task},
            "resilience": {"resume_interval_ms": 200}
        })
    };
    let state = tempfile::tempdir().unwrap();
    let window = async |local_only: bool| {
        let options = ServerOptions {
            model_dir: state.path().join("no-models"),
            env: vec![
                ("SY_FAULTS_KEY".into(), KEY.into()),
                (
                    "SWITCHYARD_STATE_DIR".into(),
                    state.path().display().to_string(),
                ),
            ],
            ..Default::default()
        };
        let mut client = LspClient::spawn(options).await;
        client.initialize(json!({}), config(local_only)).await;
        client.open(URI, DOC).await;
        client
    };

    // The first window parks a refactor, and is closed.
    let mut first = window(false).await;
    let arguments = json!([URI, whole_function(), "Simplify this code."]);
    let parked = command(&mut first, "switchyard.refactor", arguments).await;
    let id = parked["result"]["parked"]
        .as_str()
        .unwrap_or_else(|| panic!("{parked}"))
        .to_owned();
    first.kill().await;
    for fake in [&primary, &secondary] {
        fake.set_default(Behaviour::ok(REWRITE));
    }
    let sent = || primary.request_count() + secondary.request_count();
    let before = sent();

    // A window in local-only mode finds it, and leaves it parked, saying why.
    let mut second = window(true).await;
    let waiting = waits_for_local_only(&mut second, &id).await;
    let log = second.log();
    assert!(
        waiting.is_ok(),
        "the parked refactor does not say it waits: {waiting:?}\n{log}"
    );
    assert!(
        !second.seen.iter().any(|m| m["params"]["message"]
            .as_str()
            .is_some_and(|t| t.contains("parked refactor failed"))),
        "the parked refactor was ended\n{log}"
    );
    assert_eq!(sent(), before, "sent while local-only was on\n{log}");

    // The mode off, the same window resumes it and applies the rewrite.
    let reply = command(&mut second, "switchyard.setLocalOnly", json!([false])).await;
    assert_eq!(reply["result"]["localOnly"], false, "{reply}");
    let applied = second.server_request("workspace/applyEdit").await;
    let edits = applied["params"]["edit"]["documentChanges"][0]["edits"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(apply_edits(DOC, &edits), rewritten());
}
