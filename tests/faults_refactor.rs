//! The sixteen provider faults through the language server's Refactor
//! (`tests/faults.rs` runs them through Explain and the gateway, with each
//! fault's own conduct): each fault on the primary while the secondary is
//! healthy. The verdict is the gateway's: the whole rewrite applied, or a
//! clean error and the document left as it was, never a garbled rewrite.
//! And the outbound audit is true: one refactor line per request each fake
//! received, naming that provider.

mod support;

use std::path::Path;
use std::time::Duration;

use support::actions::{REWRITE, rewritten};
use support::fake_provider::{Behaviour, FakeProvider};
use support::scenario::{Front, Profile, Rig, Setup};

/// One fault: what the primary does (in order, then for good), and the
/// secondary where it is not the healthy default.
struct Fault {
    name: &'static str,
    first: Vec<Behaviour>,
    then: Behaviour,
    secondary: Option<Behaviour>,
}

fn fault(name: &'static str, first: Vec<Behaviour>, then: Behaviour) -> Fault {
    Fault {
        name,
        first,
        then,
        secondary: None,
    }
}

fn faults(profile: &Profile) -> Vec<Fault> {
    let ok = || Behaviour::ok(REWRITE);
    let late = profile.first_token * 3;
    vec![
        fault(
            "a 429 with retry-after",
            vec![Behaviour::RateLimited {
                retry_after: Some(1),
            }],
            ok(),
        ),
        fault(
            "a persistent 429 without it",
            vec![],
            Behaviour::RateLimited { retry_after: None },
        ),
        fault(
            "a 500 once, then healthy",
            vec![Behaviour::ServerError],
            ok(),
        ),
        fault("a persistent 503", vec![], Behaviour::Unavailable),
        fault(
            "a reset before the headers",
            vec![Behaviour::ResetBeforeHeaders],
            ok(),
        ),
        fault(
            "no response at all",
            vec![],
            Behaviour::LatencyBeforeHeaders {
                delay: Duration::from_secs(3600),
                then: Box::new(ok()),
            },
        ),
        fault(
            "a slow first token",
            vec![Behaviour::SlowFirstToken {
                delay: late,
                text: REWRITE.into(),
            }],
            ok(),
        ),
        fault(
            "a stream cut mid-answer",
            vec![Behaviour::CutAfter {
                text: REWRITE.into(),
                after_chunks: 2,
            }],
            ok(),
        ),
        fault(
            "a stream that stalls",
            vec![Behaviour::StallMidStream {
                text: REWRITE.into(),
                after_chunks: 1,
                stall: profile.stall,
            }],
            ok(),
        ),
        fault(
            "a malformed chunk",
            vec![Behaviour::MalformedChunk {
                text: REWRITE.into(),
                after_chunks: 1,
            }],
            ok(),
        ),
        fault(
            "a stream without its end marker",
            vec![Behaviour::MissingTerminal {
                text: REWRITE.into(),
            }],
            ok(),
        ),
        fault("context length exceeded", vec![], Behaviour::ContextLength),
        fault(
            "a content-filter refusal",
            vec![Behaviour::Refusal {
                text: "I can't help with that.".into(),
            }],
            ok(),
        ),
        Fault {
            secondary: Some(Behaviour::rejects_prefill(REWRITE)),
            ..fault(
                "a fallback that rejects a prefill",
                vec![Behaviour::CutAfter {
                    text: REWRITE.into(),
                    after_chunks: 2,
                }],
                ok(),
            )
        },
        fault(
            "a primary that flaps down and back",
            vec![Behaviour::Unavailable, ok(), Behaviour::Unavailable],
            ok(),
        ),
        fault("a failover's accounting", vec![], Behaviour::ServerError),
    ]
}

/// The providers the outbound audit's refactor lines name.
fn audited(state: &Path) -> Vec<String> {
    let path = state.join("outbound.jsonl");
    let records = switchyard_privacy::audit::read_since(&path, 0).unwrap_or_default();
    records
        .into_iter()
        .filter(|record| record.task == "refactor")
        .map(|record| record.provider)
        .collect()
}

async fn refactor_through(fault: Fault, profile: Profile) {
    let what = fault.name;
    let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
    for behaviour in fault.first {
        primary.push(behaviour);
    }
    primary.set_default(fault.then);
    secondary.set_default(
        fault
            .secondary
            .unwrap_or_else(|| Behaviour::continues(REWRITE)),
    );
    let setup = Setup::default().refactor_on_medium(&profile);
    let mut rig = Rig::start(Front::LspRefactor, &profile, setup, &primary, &secondary).await;
    let reply = rig.ask().await;
    let client = rig.lsp();
    let applied = client
        .seen
        .iter()
        .any(|m| m["method"] == "workspace/applyEdit");
    let log = client.log();
    match &reply.result {
        Ok(served) => assert_eq!(served.text, rewritten(), "{what}: a garbled rewrite\n{log}"),
        Err(failed) => {
            assert!(
                !failed.message.trim().is_empty(),
                "{what}: an error without a reason"
            );
            assert!(
                !applied,
                "{what}: failed, yet an edit was applied: {failed:?}\n{log}"
            );
        }
    }
    let lines = audited(&client.state_dir());
    for (name, fake) in [("primary", &primary), ("secondary", &secondary)] {
        let audited = lines.iter().filter(|p| *p == name).count();
        assert_eq!(
            audited,
            fake.user_request_count(),
            "{what}: {name} received {} refactor requests, the audit says {audited}\n{log}",
            fake.user_request_count()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_ends_a_refactor_whole_or_cleanly_and_the_audit_is_true() {
    let profile = Profile::current();
    // Four language servers at a time: each is its own process and fakes.
    let all = faults(&profile);
    assert_eq!(all.len(), 16);
    let mut all = all.into_iter().peekable();
    while all.peek().is_some() {
        let batch: Vec<Fault> = all.by_ref().take(4).collect();
        futures::future::join_all(
            batch
                .into_iter()
                .map(|f| refactor_through(f, profile.clone())),
        )
        .await;
    }
}
