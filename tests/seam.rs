//! Rescued answers are whole answers or clean errors, never garbled ones.
//!
//! The primary's stream dies part-way (cut three quarters in, or stalled a
//! quarter in); the fallback, asked to go on, answers as real models do: it
//! (a) goes on, (b) starts over from the beginning, (c) starts over with its
//! own line breaks and Markdown, (d) restates the sentence it stopped in, or
//! (e) says something unrelated. Through every way in (the gateway whole and
//! streamed, the language server's explain and refactor) and every kind of
//! fallback (prefill, no prefill, prefill refused): for (a)-(d) the caller
//! gets exactly the whole answer; for (e) never a success that holds both
//! texts: a whole answer from the fallback alone, or, where the caller was
//! already streamed the start, an in-band error that names the cause and
//! what was tried.

mod support;

use serde_json::Value;
use support::actions::{REWRITE, rewritten};
use support::fake_provider::{Behaviour, FakeProvider, Manner, deltas};
use support::scenario::{Fallback, Front, PRIMARY, Profile, Rig, SECONDARY, Setup, prefill};

/// The explanation the primary is cut in (67 words; three of its four
/// deltas end mid-sentence, "…the loop adds one to ").
const ANSWER: &str = "HashMap::entry looks the key up once and hands back an Entry, which is Occupied when the key is present and Vacant when it is not. Calling or_insert(0) on it fills a vacant entry with zero and returns a mutable reference to the count either way. So the loop adds one to each word with a single lookup, where get followed by insert would hash every word twice.";

/// What a fallback that does not continue says instead.
const UNRELATED_PROSE: &str = "Use a BTreeMap instead when the keys must stay in order; a lookup then costs a logarithm of the map's size.";
const UNRELATED_CODE: &str = "Here is a shorter version:\n```rust\nfn count(words: &[&str]) -> HashMap<&str, usize> {\n    words.iter().fold(HashMap::new(), |mut m, w| { *m.entry(*w).or_default() += 1; m })\n}\n```";

/// How the primary's stream dies.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// The connection closes after three of four deltas.
    Cut,
    /// Silence past the idle ceiling after one of four deltas.
    Stall,
}

impl Death {
    fn after(self) -> usize {
        match self {
            Death::Cut => 3,
            Death::Stall => 1,
        }
    }

    fn behaviour(self, full: &str, profile: &Profile) -> Behaviour {
        match self {
            Death::Cut => Behaviour::CutAfter {
                text: full.into(),
                after_chunks: 3,
            },
            Death::Stall => Behaviour::StallMidStream {
                text: full.into(),
                after_chunks: 1,
                stall: profile.stall,
            },
        }
    }
}

/// The whole answer for a way in, and what the caller should end up with.
fn answer_for(front: Front) -> (&'static str, String) {
    match front {
        Front::LspRefactor => (REWRITE, rewritten()),
        _ => (ANSWER, ANSWER.to_owned()),
    }
}

fn unrelated(front: Front) -> &'static str {
    match front {
        Front::LspRefactor => UNRELATED_CODE,
        _ => UNRELATED_PROSE,
    }
}

/// Whether a request continues an answer (a prefill or a continuation
/// turn) rather than asking afresh.
fn continues(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "assistant"))
}

async fn rescue(front: Front, profile: &Profile, death: Death, fallback: Fallback, manner: Manner) {
    let case = format!("{front:?}, {death:?} primary, {fallback:?} fallback that {manner:?}");
    let (full, whole) = answer_for(front);
    let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
    primary.push(death.behaviour(full, profile));
    let manner = match manner {
        Manner::Unrelated(_) => Manner::Unrelated(unrelated(front).into()),
        other => other,
    };
    secondary.set_default(fallback.behaviour(full, manner.clone()));
    let setup = Setup {
        primary: fallback.wire().other(),
        secondary: fallback.wire(),
        ..Setup::default()
    }
    .refactor_on_medium(profile);
    let mut rig = Rig::start(front, profile, setup, &primary, &secondary).await;
    let reply = rig.ask().await;
    let asked = secondary.user_requests();
    let continuations = asked.iter().filter(|r| continues(&r.body)).count();
    // The prefill refused, asked again as a continuation request.
    let tries = if fallback == Fallback::RejectsPrefill {
        2
    } else {
        1
    };
    assert_eq!(
        primary.user_request_count(),
        1,
        "{case}: no retry mid-answer"
    );
    assert_eq!(
        continuations, tries,
        "{case}: the fallback was asked to go on"
    );

    let joinable = !matches!(manner, Manner::Unrelated(_));
    match (&reply.result, joinable) {
        (Ok(served), true) => {
            assert_eq!(served.model, SECONDARY, "{case}");
            assert_eq!(
                served.text, whole,
                "{case}: the whole answer, nothing twice"
            );
            assert_eq!(asked.len(), tries, "{case}: {asked:?}");
        }
        (Ok(served), false) => {
            assert!(
                front != Front::GatewayStream,
                "{case}: a success after a stream that could not be joined: {served:?}"
            );
            assert_eq!(served.model, SECONDARY, "{case}");
            assert_eq!(
                served.text, whole,
                "{case}: a whole answer from the fallback alone"
            );
            assert_eq!(asked.len(), tries + 1, "{case}: then asked afresh");
            assert!(
                !continues(&asked[tries].body),
                "{case}: afresh, with nothing to continue"
            );
            assert!(prefill(&asked[tries].body).is_none(), "{case}");
        }
        (Err(failed), false) if front == Front::GatewayStream => {
            assert_eq!(failed.status, Some(200), "{case}: an in-band error");
            let streamed: String = deltas(full, 4)[..death.after()].concat();
            assert_eq!(
                failed.streamed, streamed,
                "{case}: the text already sent, once, nothing after it"
            );
            for named in [PRIMARY, SECONDARY, "could not be joined"] {
                assert!(
                    failed.message.contains(named),
                    "{case}: the error names {named:?}: {}",
                    failed.message
                );
            }
            assert_eq!(
                asked.len(),
                tries,
                "{case}: nothing else can replace what was shown"
            );
        }
        (Err(failed), _) => panic!(
            "{case}: expected the whole answer, got {failed:?}\n{}",
            rig.log()
        ),
    }
}

/// Every manner, through `front`, with each kind of fallback.
async fn every_manner(front: Front, profile: Profile, death: Death) {
    let manners = [
        Manner::GoesOn,
        Manner::StartsOver,
        Manner::StartsOverReformatted,
        Manner::RestatesSentence,
        Manner::Unrelated(String::new()),
    ];
    for fallback in Fallback::ALL {
        for manner in manners.clone() {
            rescue(front, &profile, death, fallback, manner).await;
        }
    }
}

/// Runs `death` through the four ways in at once.
async fn each_way_in(death: Death) {
    let profile = Profile::current();
    let fronts = [
        Front::Gateway,
        Front::GatewayStream,
        Front::Lsp,
        Front::LspRefactor,
    ];
    futures::future::join_all(fronts.map(|front| every_manner(front, profile.clone(), death)))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_answer_continued_in_any_manner_is_whole_or_a_clean_error() {
    each_way_in(Death::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_answer_continued_in_any_manner_is_whole_or_a_clean_error() {
    each_way_in(Death::Stall).await;
}
