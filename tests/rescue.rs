//! Rescuing an answer in flight, and the conduct around it: a stream that dies
//! part-way (cut, stalled, three malformed events in a row) is continued by the
//! next entry whatever its kind, with nothing lost or said twice at the seam;
//! when nothing can continue it the error says why; no empty system message
//! is sent; retries of one entry wait at least half their backoff; a hedge
//! that wins stops the primary at once; canaries never move the route.
//!
//! As in `faults.rs`, each scenario runs through the three front ends (the
//! gateway whole and streamed, the language server's explain) against fake
//! providers, and asserts the outcome the caller sees AND the conduct the fake
//! saw. The fallbacks are the fake's continuing models
//! ([`Behaviour::Continues`]): given the cut answer as a prefill they go on
//! from it; given it as their own turn plus the instruction to continue they
//! restate its last two words first, as real models do.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::fake_provider::{
    Behaviour, CONTINUE_INSTRUCTION, FakeProvider, Manner, RecordedRequest, deltas,
};
use support::gateway::GatewayProcess;
use support::lsp_client::{LspClient, ServerOptions};
use support::scenario::{
    DOC, Fallback, Front, KEY, PRIMARY, Profile, Rig, SECONDARY, Served, Setup, URI, Upstream,
    Wire, each_front, merge, prefill, sse_outcome,
};
use support::timing;
use tokio::time::Instant;

/// A whole answer whose four deltas end mid-word ("…an Entry: Occ",
/// "…or_insert p"), so a cut after one or two of them splits a word.
const ANSWER: &str = "HashMap::entry looks the key up once and hands back an Entry: Occupied when the key is present, Vacant when it is not. or_insert puts the default in a vacant entry and returns a mutable reference to the value either way, so counting words is one line per word.";

/// A whole answer whose first two deltas are exactly its first paragraph,
/// ending in a blank line: a cut after them leaves trailing whitespace.
const PARAGRAPHS: &str = "entry(key) hashes the key once and returns an Entry, which is Occupied when the key is already in the map and Vacant when it is not.\n\nor_insert(0) then fills a vacant entry with zero and hands back a mutable reference either way, so a word count is one line in a loop.";

/// A whole answer whose first two deltas end between the two newlines of
/// its paragraph break: the cut leaves half the break behind it.
const HALF_BREAK: &str = "entry(key) hashes the key once and returns an Entry, which is Occupied when the key is already in the map, and Vacant when it is not.\n\nor_insert(0) then fills a vacant entry with zero and hands back a mutable reference either way, so a word count is a line in a loop.";

/// The primary's stream dies after this many of its four deltas.
const AFTER: usize = 2;

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The nominal length of one short wait ("at once") on an idle machine,
/// before `timing` scales it to this one.
fn tolerance(profile: &Profile) -> Duration {
    if profile.full {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(600)
    }
}

fn between(earlier: &RecordedRequest, later: &RecordedRequest) -> Duration {
    later.at.saturating_duration_since(earlier.at)
}

/// What the primary had streamed when it died.
fn partial(text: &str) -> String {
    deltas(text, 4)[..AFTER].concat()
}

/// A message's text (a string, or text blocks).
fn content(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn messages(request: &RecordedRequest) -> Vec<Value> {
    request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// How the primary's stream dies mid-answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Death {
    /// The connection drops in the middle of the body.
    Cut,
    /// The stream goes silent for far longer than the explain task's idle_ms.
    Stall,
    /// Three events of garbage in a row.
    Malformed,
}

impl Death {
    const ALL: [Death; 3] = [Death::Cut, Death::Stall, Death::Malformed];

    fn behaviour(self, text: &str, profile: &Profile) -> Behaviour {
        let text = text.to_owned();
        match self {
            Death::Cut => Behaviour::CutAfter {
                text,
                after_chunks: AFTER,
            },
            Death::Stall => Behaviour::StallMidStream {
                text,
                after_chunks: AFTER,
                stall: profile.stall,
            },
            Death::Malformed => Behaviour::MalformedRun {
                text,
                after_chunks: AFTER,
                count: 3,
            },
        }
    }

    /// How the server's errors name it.
    fn cause(self) -> &'static str {
        match self {
            Death::Cut => "the stream was cut",
            Death::Stall => "the stream stalled",
            Death::Malformed => "the stream was malformed",
        }
    }
}

/// The reply's answer, or a panic naming the case.
fn served<'a>(reply: &'a support::scenario::Reply, case: &str) -> &'a Served {
    match &reply.result {
        Ok(served) => served,
        Err(failed) => panic!("{case}: expected an answer, got {failed:?}"),
    }
}

/// Asserts that `request` continues `continues` as a prefill.
fn assert_prefilled(request: &RecordedRequest, continues: &str, case: &str) {
    assert_eq!(
        prefill(&request.body).as_deref(),
        Some(continues),
        "{case}: the prefill is the partial answer, trailing whitespace trimmed"
    );
}

/// Asserts that `request` continues `continues` as the model's own turn
/// followed by the instruction to go on.
fn assert_continuation_request(request: &RecordedRequest, continues: &str, case: &str) {
    let messages = messages(request);
    let n = messages.len();
    assert!(n >= 3, "{case}: {messages:?}");
    assert_eq!(messages[n - 1]["role"], "user", "{case}: {messages:?}");
    assert_eq!(
        content(&messages[n - 1]),
        CONTINUE_INSTRUCTION,
        "{case}: the instruction to go on comes last"
    );
    assert_eq!(messages[n - 2]["role"], "assistant", "{case}");
    assert_eq!(
        content(&messages[n - 2]),
        continues,
        "{case}: the partial answer as the model's own turn"
    );
}

/// One rescue: the primary (the other wire) dies after [`AFTER`] deltas of
/// `full`; `fallback` continues. The caller gets exactly `full`.
async fn rescue(front: Front, profile: &Profile, death: Death, fallback: Fallback, full: &str) {
    let case = format!("{front:?}, {death:?} primary, {fallback:?} fallback");
    let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
    primary.push(death.behaviour(full, profile));
    secondary.set_default(fallback.behaviour(full, Manner::GoesOn));
    let setup = Setup {
        primary: fallback.wire().other(),
        secondary: fallback.wire(),
        ..Setup::default()
    };
    let mut rig = Rig::start(front, profile, setup, &primary, &secondary).await;
    let reply = rig.ask().await;
    let served = served(&reply, &case);
    assert_eq!(served.model, SECONDARY, "{case}");
    assert_eq!(
        served.text, full,
        "{case}: the caller's text is the whole answer, nothing lost or repeated at the seam"
    );
    if front == Front::GatewayStream {
        assert_eq!(served.chunk_models.first().unwrap(), PRIMARY, "{case}");
        assert_eq!(served.chunk_models.last().unwrap(), SECONDARY, "{case}");
    }

    // Conduct: one attempt on the primary (no retry mid-answer), the
    // continuation on the fallback in the form its kind takes, at once
    // (or, for a stall, once the idle ceiling has passed).
    assert_eq!(
        primary.user_request_count(),
        1,
        "{case}: no retry mid-answer"
    );
    let continues = partial(full).trim_end().to_owned();
    let asked = secondary.user_requests();
    match fallback {
        Fallback::Prefill => {
            assert_eq!(asked.len(), 1, "{case}");
            assert_prefilled(&asked[0], &continues, &case);
        }
        Fallback::NoPrefill => {
            assert_eq!(asked.len(), 1, "{case}");
            assert_continuation_request(&asked[0], &continues, &case);
        }
        Fallback::RejectsPrefill => {
            assert_eq!(
                asked.len(),
                2,
                "{case}: the prefill, refused, then a continuation request"
            );
            assert_prefilled(&asked[0], &continues, &case);
            assert_continuation_request(&asked[1], &continues, &case);
            timing::assert_within(
                &format!("{case}: asked again as a continuation"),
                between(&asked[0], &asked[1]),
                tolerance(profile),
            );
        }
    }
    let rescued = between(&primary.user_requests()[0], &asked[0]);
    match death {
        Death::Stall => {
            let what = format!("{case}: the stall rescued after the primary started");
            timing::assert_at_least(&what, rescued, profile.idle);
            timing::assert_within(&what, rescued, profile.idle + tolerance(profile));
        }
        Death::Cut | Death::Malformed => {
            timing::assert_within(&format!("{case}: rescued"), rescued, tolerance(profile))
        }
    }
}

// 1. A cut stream is continued by the next entry whatever its kind: as a
// prefill, as a continuation request (the restated words cut), or as a
// continuation request after the model refused the prefill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_answer_is_continued_exactly_by_the_next_entry_of_any_kind() {
    each_front(|front, profile| async move {
        for fallback in Fallback::ALL {
            rescue(front, &profile, Death::Cut, fallback, ANSWER).await;
        }
    })
    .await;
}

// 2. A stream silent past idle_ms mid-answer is continued by the next entry,
// about idle_ms after the primary started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_answer_is_continued_exactly_by_the_next_entry_within_the_idle_ceiling() {
    each_front(|front, profile| async move {
        for fallback in Fallback::ALL {
            rescue(front, &profile, Death::Stall, fallback, ANSWER).await;
        }
    })
    .await;
}

// 1. Three garbage events in a row end the stream; the next entry continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_malformed_events_in_a_row_end_the_stream_and_the_next_entry_continues_it_exactly() {
    each_front(|front, profile| async move {
        for fallback in Fallback::ALL {
            rescue(front, &profile, Death::Malformed, fallback, ANSWER).await;
        }
    })
    .await;
}

// Fewer than three garbage events in a row are skipped: the same entry
// finishes the answer, nobody else is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_malformed_events_in_a_row_are_skipped_and_the_same_entry_finishes_the_answer() {
    each_front(|front, profile| async move {
        for wire in [Wire::Anthropic, Wire::OpenAi] {
            let case = format!("{front:?} {wire:?}");
            let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
            primary.push(Behaviour::MalformedRun {
                text: ANSWER.into(),
                after_chunks: AFTER,
                count: 2,
            });
            secondary.set_default(Behaviour::continues(ANSWER));
            let setup = Setup {
                primary: wire,
                ..Setup::default()
            };
            let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
            let reply = rig.ask().await;
            let served = served(&reply, &case);
            assert_eq!(served.model, PRIMARY, "{case}");
            assert_eq!(served.text, ANSWER, "{case}");
            assert_eq!(primary.user_request_count(), 1, "{case}");
            assert_eq!(secondary.user_request_count(), 0, "{case}");
        }
    })
    .await;
}

// A cut right after a paragraph break (or between its two newlines): the
// prefill drops the trailing whitespace (providers reject it) and the model
// writes it again; the caller gets the break once, neither twice nor half,
// streamed or whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_at_a_paragraph_break_is_continued_by_a_prefill_with_the_break_once() {
    assert!(
        partial(PARAGRAPHS).ends_with(".\n\n"),
        "the cut lands after the break"
    );
    assert!(
        partial(HALF_BREAK).ends_with(".\n"),
        "the cut lands inside the break"
    );
    each_front(|front, profile| async move {
        for full in [PARAGRAPHS, HALF_BREAK] {
            rescue(front, &profile, Death::Cut, Fallback::Prefill, full).await;
        }
    })
    .await;
}

// The same with a model that takes no prefill: it restates "is not." and
// writes the break again after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_at_a_paragraph_break_is_continued_by_a_restating_model_with_the_break_once() {
    each_front(|front, profile| async move {
        for full in [PARAGRAPHS, HALF_BREAK] {
            rescue(front, &profile, Death::Cut, Fallback::NoPrefill, full).await;
        }
    })
    .await;
}

// 3. When nothing can continue the answer, the error names the real cause
// (cut, stalled, malformed) and every entry tried; the streamed gateway says
// so in-band, after the text it already sent, and never sends [DONE].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_nothing_can_continue_the_error_names_the_real_cause_and_the_entries_tried() {
    each_front(|front, profile| async move {
        for death in Death::ALL {
            let case = format!("{front:?}, {death:?} primary, unavailable fallback");
            let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
            primary.push(death.behaviour(ANSWER, &profile));
            secondary.set_default(Behaviour::Unavailable);
            let mut rig = Rig::start(front, &profile, Setup::default(), &primary, &secondary).await;
            let reply = rig.ask().await;
            let failed = match &reply.result {
                Err(failed) => failed,
                Ok(served) => panic!("{case}: expected a failure, got {served:?}"),
            };
            let message = &failed.message;
            assert!(
                message.contains(death.cause()),
                "{case}: the real cause ({}) is named: {message}",
                death.cause()
            );
            assert!(
                message.contains(PRIMARY) && message.contains(SECONDARY),
                "{case}: every entry tried is named: {message}"
            );
            let cause = message.find(death.cause()).unwrap();
            let unavailable = message.find("503").unwrap_or(usize::MAX);
            assert!(
                cause < unavailable,
                "{case}: the cause first, then what stopped the continuation: {message}"
            );
            match front {
                Front::GatewayStream => {
                    assert_eq!(failed.status, Some(200), "{case}: an in-band error");
                    assert!(failed.code.is_some(), "{case}: {failed:?}");
                    assert_eq!(
                        failed.streamed,
                        partial(ANSWER),
                        "{case}: the text already sent, once"
                    );
                }
                Front::Gateway => assert_eq!(failed.status, Some(503), "{case}: {failed:?}"),
                Front::Lsp | Front::LspRefactor => {}
            }
            assert_eq!(primary.user_request_count(), 1, "{case}");
            // The continuation was tried: the fallback was asked for it.
            let asked = secondary.user_requests();
            assert!(!asked.is_empty(), "{case}: the fallback was never asked");
            assert_continuation_request(&asked[0], partial(ANSWER).trim_end(), &case);
        }
    })
    .await;
}

/// The configuration of a scenario rig, for the tests that drive the
/// processes themselves (same shape as `scenario`'s).
fn config(
    profile: &Profile,
    (primary_wire, primary): (Wire, &dyn Upstream),
    (secondary_wire, secondary): (Wire, &dyn Upstream),
    extra: Value,
) -> Value {
    let provider = |wire: Wire, fake: &dyn Upstream| match wire {
        Wire::Anthropic => {
            json!({"kind": "anthropic", "base_url": fake.anthropic_url(), "api_key_env": "SY_FAULTS_KEY"})
        }
        Wire::OpenAi => {
            json!({"kind": "openai", "base_url": fake.openai_url(), "api_key_env": "SY_FAULTS_KEY"})
        }
    };
    let mut config = json!({
        "local": {"auto_pull": false},
        "providers": {
            "primary": provider(primary_wire, primary),
            "secondary": provider(secondary_wire, secondary),
        },
        "tiers": {"large": ["primary/big"], "medium": [PRIMARY, SECONDARY], "small": []},
        "tasks": {"explain": {
            "first_token_ms": ms(profile.first_token),
            "total_ms": ms(profile.total),
            "idle_ms": ms(profile.idle),
            "wait_ms": ms(profile.wait),
            "hedge": true
        }},
        "resilience": {
            "backoff": {
                "rate_limit_ms": ms(profile.rate_limit_base),
                "overloaded_ms": ms(profile.overloaded_base),
                "transient_ms": ms(profile.transient_base),
                "cap_ms": ms(profile.backoff_cap)
            },
            "canary_interval_ms": ms(profile.canary)
        }
    });
    merge(&mut config, extra);
    config
}

async fn gateway(config: &Value) -> GatewayProcess {
    let toml = toml::to_string(config).expect("the configuration as TOML");
    GatewayProcess::start(&toml, &[("SY_FAULTS_KEY", KEY)]).await
}

/// One chat completion through the gateway: the answer or the error.
async fn complete(
    gateway: &GatewayProcess,
    messages: Value,
    stream: bool,
    task: Option<&str>,
) -> Result<Served, String> {
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .timeout(Duration::from_secs(120))
        .json(&json!({"model": "switchyard/medium", "stream": stream, "messages": messages}));
    if let Some(task) = task {
        request = request.header("x-switchyard-task", task);
    }
    let response = request.send().await.expect("the gateway answers HTTP");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    if status != 200 {
        return Err(format!("HTTP {status}: {text}"));
    }
    if stream {
        return sse_outcome(&text).map_err(|failed| format!("{failed:?}"));
    }
    let body: Value = serde_json::from_str(&text).expect("a JSON completion");
    Ok(Served {
        model: body["model"].as_str().unwrap_or_default().into(),
        text: body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .into(),
        usage: Some(body["usage"].clone()),
        chunk_models: Vec::new(),
    })
}

/// Asserts that a provider request carries no system prompt at all.
fn assert_no_system(request: &RecordedRequest, wire: Wire, case: &str) {
    match wire {
        Wire::Anthropic => assert!(
            request.body.get("system").is_none(),
            "{case}: `system` sent: {}",
            request.body
        ),
        Wire::OpenAi => assert!(
            messages(request).iter().all(|m| m["role"] != "system"),
            "{case}: a system message sent: {}",
            request.body
        ),
    }
}

// 4. A conversation without a system message (or with an empty one) goes out
// with no system prompt at all, never an empty one: on both wire formats,
// whole and streamed, and in the continuation of a cut answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_without_a_system_message_is_sent_without_one() {
    let profile = Profile::current();
    let scenarios = [Wire::Anthropic, Wire::OpenAi].map(|wire| {
        let profile = profile.clone();
        async move {
            let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
            let config = config(
                &profile,
                (wire, &primary),
                (wire.other(), &secondary),
                json!({}),
            );
            let gateway = gateway(&config).await;
            let question = json!({"role": "user", "content": "What does HashMap::entry do?"});
            let conversations = [
                json!([question]),
                json!([{"role": "system", "content": ""}, question]),
            ];
            let mut asked = 0;
            for conversation in &conversations {
                for stream in [false, true] {
                    let case = format!("{wire:?} stream={stream} {conversation}");
                    let answer = complete(&gateway, conversation.clone(), stream, None).await;
                    assert_eq!(answer.unwrap().model, PRIMARY, "{case}");
                    asked += 1;
                    let requests = primary.user_requests();
                    assert_eq!(requests.len(), asked, "{case}");
                    assert_no_system(requests.last().unwrap(), wire, &case);
                }
            }
            // The continuation of a cut answer (on the other wire) has none either.
            primary.push(Behaviour::CutAfter {
                text: ANSWER.into(),
                after_chunks: AFTER,
            });
            secondary.set_default(Behaviour::continues(ANSWER));
            let case = format!("{wire:?} primary cut, continued on {:?}", wire.other());
            let answer = complete(&gateway, conversations[0].clone(), true, None).await;
            let answer = answer.unwrap_or_else(|e| panic!("{case}: {e}\n{}", gateway.log()));
            assert_eq!(answer.model, SECONDARY, "{case}");
            assert_eq!(answer.text, ANSWER, "{case}");
            let rescue = secondary.user_requests();
            assert_eq!(rescue.len(), 1, "{case}");
            assert_no_system(&rescue[0], wire.other(), &case);
        }
    });
    futures::future::join_all(scenarios).await;
}

// 5. Equal jitter, interactive: the one retry of an explain after a 500 waits
// at least half the transient backoff base, never about nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explain_retrying_a_transient_error_waits_at_least_half_the_backoff_base() {
    each_front(|front, profile| async move {
        // A base long enough that "at once" and "half of it" are far apart.
        let base = profile.transient_base.max(Duration::from_millis(400));
        for attempt in 0..2 {
            let case = format!("{front:?} #{attempt}");
            let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
            primary.push(Behaviour::ServerError);
            let setup = Setup {
                extra: json!({"resilience": {"backoff": {"transient_ms": ms(base)}}}),
                ..Setup::default()
            };
            let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
            let reply = rig.ask().await;
            assert_eq!(served(&reply, &case).model, PRIMARY, "{case}");
            assert_eq!(primary.user_request_count(), 2, "{case}: one retry");
            assert_eq!(secondary.user_request_count(), 0, "{case}");
            let gap = primary.gaps()[0];
            let what = format!("{case}: the retry after a {base:?} base");
            timing::assert_at_least(&what, gap, base / 2);
            timing::assert_within(&what, gap, base + tolerance(&profile));
        }
    })
    .await;
}

// 5. Equal jitter, patient: a refactor (the gateway's task header) retries
// the same entry through 500s and 503s; every wait is at least half its
// exponential ceiling (transient base for 500, overloaded base for 503) and
// at most the ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refactor_retrying_one_entry_waits_at_least_half_of_every_backoff_ceiling() {
    let profile = Profile::current();
    let transient = Duration::from_millis(200);
    let overloaded = Duration::from_millis(300);
    let cases = [
        (Behaviour::ServerError, 4usize, transient, "500"),
        (Behaviour::Unavailable, 3, overloaded, "503"),
    ];
    let scenarios = cases.map(|(fault, times, base, name)| {
        let profile = profile.clone();
        async move {
            let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
            for _ in 0..times {
                primary.push(fault.clone());
            }
            let extra = json!({
                "tasks": {"refactor": {"wait_ms": 30_000}},
                "resilience": {
                    "backoff": {"transient_ms": ms(transient), "overloaded_ms": ms(overloaded), "cap_ms": 10_000},
                    "breaker": {"failures": 50}
                }
            });
            let config = config(
                &profile,
                (Wire::Anthropic, &primary),
                (Wire::OpenAi, &secondary),
                extra,
            );
            let gateway = gateway(&config).await;
            let conversation = json!([{"role": "user", "content": "Rename x to count."}]);
            let answer = complete(&gateway, conversation, false, Some("refactor")).await;
            let answer = answer.unwrap_or_else(|e| panic!("{name}: {e}\n{}", gateway.log()));
            assert_eq!(answer.model, PRIMARY, "{name}: the same entry, patiently");
            assert_eq!(primary.user_request_count(), times + 1, "{name}");
            assert_eq!(secondary.user_request_count(), 0, "{name}");
            let gaps = primary.gaps();
            for (i, gap) in gaps.iter().enumerate() {
                let ceiling = base * (1 << i);
                let what = format!("{name}: wait {i} of {gaps:?}, ceiling {ceiling:?}");
                timing::assert_at_least(&what, *gap, ceiling / 2);
                timing::assert_within(&what, *gap, ceiling + tolerance(&profile));
            }
        }
    });
    futures::future::join_all(scenarios).await;
}

// 6. A decided race cancels the other side: once the hedge's first token is
// in, the primary gets no further attempt, neither a retry it was about to
// send nor one after the backoff it was sleeping through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedge_that_wins_stops_the_primary_at_its_first_token() {
    each_front(|front, profile| async move {
        // The hedge answers 200 ms after it is asked and streams for a while,
        // so the primary's retry would fall before the hedge is done.
        let hedge_latency = Duration::from_millis(200);
        // (when the primary's 500 comes, after the ceiling; transient base)
        let variants = [
            (
                "retry due while the hedge streams",
                Duration::from_millis(500),
                Duration::from_millis(100),
            ),
            (
                "backoff under way at the hedge's first token",
                Duration::from_millis(50),
                Duration::from_millis(1_000),
            ),
        ];
        for (variant, fails_after, base) in variants {
            let case = format!("{front:?}, {variant}");
            let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
            primary.push(Behaviour::ServerError.after_latency(profile.first_token + fails_after));
            secondary.set_default(
                Behaviour::Ok {
                    text: "Hello from the fake".into(),
                    chunks: 6,
                    delay: Duration::from_millis(200),
                }
                .after_latency(hedge_latency),
            );
            let setup = Setup {
                extra: json!({"resilience": {"backoff": {"transient_ms": ms(base)}}}),
                ..Setup::default()
            };
            let mut rig = Rig::start(front, &profile, setup, &primary, &secondary).await;
            let reply = rig.ask().await;
            let served = served(&reply, &case);
            assert_eq!(served.model, SECONDARY, "{case}");
            assert_eq!(served.text, "Hello from the fake", "{case}");
            // Whatever the primary would have done next has had time to happen.
            tokio::time::sleep(timing::scaled(base + tolerance(&profile))).await;
            let hedge = secondary.user_requests();
            assert_eq!(hedge.len(), 1, "{case}");
            let first_token = hedge[0].at + hedge_latency;
            let attempts: Vec<Duration> = primary
                .user_requests()
                .iter()
                .map(|r| r.at.saturating_duration_since(reply.sent))
                .collect();
            assert_eq!(
                attempts.len(),
                1,
                "{case}: the primary was tried again at {attempts:?} (hedge's first token at {:?})",
                first_token.saturating_duration_since(reply.sent)
            );
            timing::assert_in_order(
                &format!("{case}: the primary's one attempt, then the hedge's first token"),
                primary.user_requests()[0].at,
                first_token,
            );
        }
    })
    .await;
}

fn explain_params() -> Value {
    let range = json!({"start": {"line": 2, "character": 0}, "end": {"line": 9, "character": 0}});
    json!({"command": "switchyard.explain", "arguments": [URI, range]})
}

/// `provider/model` that answered an explain.
async fn explain(client: &mut LspClient) -> String {
    let response = client
        .request("workspace/executeCommand", explain_params())
        .await;
    let result = &response["result"];
    match result["provider"].as_str() {
        Some(provider) => format!(
            "{provider}/{}",
            result["model"].as_str().unwrap_or_default()
        ),
        None => panic!("explain failed: {response}"),
    }
}

// 7. Canaries never change the route or the messages: with the primary watch
// on and the primary judged slow, the second entry serves; canaries test the
// primary all along (slow, then healthy) and the editor hears of each real
// switch once, with nothing in between: no flapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_never_move_the_route_and_each_real_switch_is_told_once() {
    let profile = Profile::current();
    let (primary, secondary) = (FakeProvider::start().await, FakeProvider::start().await);
    // Slow for users and canaries alike.
    primary.set_default(Behaviour::SlowFirstToken {
        delay: profile.slow_first_token,
        text: "Hello from the primary".into(),
    });
    secondary.set_default(Behaviour::ok("Hello from the secondary"));
    let first_token = if profile.full {
        profile.first_token
    } else {
        Duration::from_millis(1_000)
    };
    let canary = if profile.full {
        profile.canary
    } else {
        Duration::from_millis(200)
    };
    let extra = json!({
        "tasks": {"explain": {"first_token_ms": ms(first_token)}},
        "resilience": {"canary_interval_ms": ms(canary), "primary_canary_ms": ms(canary)}
    });
    let config = config(
        &profile,
        (Wire::Anthropic, &primary),
        (Wire::OpenAi, &secondary),
        extra,
    );
    let options = ServerOptions {
        model_dir: tempfile::tempdir().unwrap().keep(),
        env: vec![("SY_FAULTS_KEY".into(), KEY.into())],
        ..Default::default()
    };
    let mut client = LspClient::spawn(options).await;
    // No `statusNotifications`: status changes come as window/showMessage.
    client.initialize(json!({}), config).await;
    client.open(URI, DOC).await;

    let start = Instant::now();
    let mut served = Vec::new();
    // The primary is slow: the first request is hedged, then it is skipped
    // while canaries keep finding it slow.
    let slow_phase = first_token + canary * 12;
    while start.elapsed() < slow_phase {
        served.push(explain(&mut client).await);
        tokio::time::sleep(canary).await;
    }
    assert!(
        served.iter().all(|m| m == SECONDARY),
        "the second entry serves while the primary is slow: {served:?}"
    );
    // Healthy again: a canary brings it back and users follow.
    primary.set_default(Behaviour::ok("Hello from the primary"));
    let recovered = Instant::now();
    while served.last().map(String::as_str) != Some(PRIMARY)
        && recovered.elapsed() < first_token * 4 + canary * 20
    {
        served.push(explain(&mut client).await);
        tokio::time::sleep(canary).await;
    }
    // Then it stays there, canaries and all.
    let back = Instant::now();
    while back.elapsed() < canary * 10 {
        served.push(explain(&mut client).await);
        tokio::time::sleep(canary).await;
    }
    assert_eq!(
        served.last().map(String::as_str),
        Some(PRIMARY),
        "back on the primary after a canary found it healthy: {served:?}"
    );
    tokio::time::sleep(canary * 3).await;
    // A round trip: every message sent before its answer has been read.
    client
        .request(
            "workspace/executeCommand",
            json!({"command": "switchyard.status", "arguments": []}),
        )
        .await;

    let switches: Vec<&String> = served
        .iter()
        .enumerate()
        .filter(|(i, m)| *i == 0 || served[i - 1] != **m)
        .map(|(_, m)| m)
        .collect();
    let told: Vec<String> = client
        .seen
        .iter()
        .filter(|m| m["method"] == "window/showMessage")
        .filter_map(|m| m["params"]["message"].as_str())
        .filter(|m| m.contains("explain"))
        .map(str::to_owned)
        .collect();
    eprintln!("served: {served:?}\ntold: {told:#?}");
    let canaries = primary.request_count() - primary.user_request_count();
    assert!(
        canaries >= 4,
        "the primary was watched by canaries ({canaries})"
    );
    assert_eq!(
        told.len(),
        switches.len(),
        "one message per real switch ({switches:?}), got {told:#?}; served {served:?}"
    );
    for (message, model) in told.iter().zip(&switches) {
        assert!(
            message.contains(model.as_str()),
            "{message:?} should name {model}"
        );
    }
}
