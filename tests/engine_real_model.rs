//! The local engine on the real test model: cache reuse, deadlines, cancellation, bad files.

mod support;

use std::time::{Duration, Instant};

use support::engine_options as options;
use switchyard_base::cancel::CancelFlag;
use switchyard_engine::*;

/// The sample split inside `hit_rate`, after `let total = `. The prefix is the
/// 500 bytes before the split, so it fits the input budget on slow machines too
/// (a prefix cut to the budget would shift with every keystroke; the editor's
/// window anchoring prevents that, see `context::fim`).
fn sample_text(typed: &str) -> FimText {
    sample_text_with(typed, 500)
}

fn sample_text_with(typed: &str, prefix_bytes: usize) -> FimText {
    let marker = "let total = ";
    let at = support::SAMPLE_RUST.find(marker).unwrap() + marker.len();
    FimText {
        prefix: format!("{}{typed}", &support::SAMPLE_RUST[at - prefix_bytes..at]),
        suffix: support::SAMPLE_RUST[at..].to_owned(),
        ..FimText::default()
    }
}

fn job(text: FimText, deadline: Duration) -> CompletionJob {
    CompletionJob {
        text,
        span: None,
        max_tokens: 32,
        stop: Box::new(|s: &str| s.contains('\n')),
        deadline: Instant::now() + deadline,
        cancel: CancelFlag::default(),
    }
}

/// Two greedy answers to the same prompt, reached through different batch
/// shapes (a warm cache, a fresh context, a verified draft), are the same up
/// to the first near tie either met (the engine's NEAR_TIE): rounding in
/// llama.cpp's kernels differs by shape and may flip such a choice. On the
/// development machine they are the same throughout.
#[track_caller]
fn assert_same_answer(what: &str, one: &Generation, other: &Generation) {
    let longest = one.text.len().max(other.text.len());
    let sure = [one.near_tie_at, other.near_tie_at]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(longest);
    assert_eq!(
        one.text.get(..sure),
        other.text.get(..sure),
        "{what}: {:?} against {:?} (sure up to byte {sure})",
        one.text,
        other.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_re_decodes_only_what_changed() {
    let engine = LocalEngine::spawn(options());
    engine.wait_ready().await.unwrap();
    let cold = engine
        .complete(job(sample_text(""), Duration::from_secs(120)))
        .await
        .unwrap();
    assert_eq!(
        cold.tokens_decoded, cold.prompt_tokens,
        "cold cache decodes everything"
    );
    assert!(!cold.text.is_empty());

    let warm = engine
        .complete(job(sample_text("self"), Duration::from_secs(120)))
        .await
        .unwrap();

    assert!(
        warm.tokens_decoded <= switchyard_engine::reuse::FRESH_SUFFIX_TOKENS + 4,
        "typed token(s) and the middle marker only, got {}",
        warm.tokens_decoded
    );
    assert!(!warm.text.is_empty());
}

/// At a cold place the window is cut to what decodes before the deadline.
/// The next keystroke, as short of time, keeps the start of the window the
/// cache holds, so it decodes what was typed, not a new cut: before, every
/// keystroke of a typing session paid a whole cut (BENCHMARKS.md). Both jobs
/// are sent at once, as keystrokes queue behind an answer; the first
/// generates one token, so the second starts with about as much time left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_on_at_a_cold_place_decodes_only_what_was_typed() {
    let engine = LocalEngine::spawn(options());
    engine.wait_ready().await.unwrap();
    let marker = "let total = ";
    let whole_prefix = support::SAMPLE_RUST.find(marker).unwrap() + marker.len();
    let mut first = job(sample_text_with("", whole_prefix), Duration::from_secs(1));
    first.max_tokens = 1;
    let second = job(
        sample_text_with("self", whole_prefix),
        Duration::from_secs(2),
    );
    let (first, second) = tokio::join!(engine.complete(first), engine.complete(second));
    let (first, second) = (first.unwrap(), second.unwrap());
    // A second window twice as long is a new cut by design (it had the
    // time), and so is a shorter one (a machine so busy that it had less).
    if (first.prompt_tokens..2 * first.prompt_tokens).contains(&second.prompt_tokens) {
        assert!(
            second.tokens_decoded <= switchyard_engine::reuse::FRESH_SUFFIX_TOKENS + 8,
            "the second keystroke decoded {} of {} prompt tokens after a window of {}",
            second.tokens_decoded,
            second.prompt_tokens,
            first.prompt_tokens
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_prompt_deadline_answers_empty_and_the_cache_keeps_filling() {
    let engine = LocalEngine::spawn(options());
    engine.wait_ready().await.unwrap();

    // A deadline already passed: no job of this test ever has time to decode.
    let missed = || job(sample_text(""), Duration::ZERO);
    let late = engine.complete(missed()).await.unwrap();
    assert_eq!(late.stop, StopReason::PromptDeadline);
    assert!(late.text.is_empty());
    assert!(late.tokens_decoded < late.prompt_tokens);

    // Only the fill in the background can bring the prompt into the cache.
    // Each look is another missed deadline: it stops the fill between two
    // chunks, sees what the cache still lacks, and sets it going again.
    let lacking = support::poll::eventually(Duration::from_secs(60), async || {
        let look = engine.complete(missed()).await.unwrap();
        match look.tokens_to_decode {
            // The last token, decoded again for its logits.
            0 | 1 => Ok(()),
            lacking => Err(lacking),
        }
    })
    .await;
    if let Err(lacking) = lacking {
        panic!("the background fill stalled: {lacking} prompt tokens still not cached");
    }
    let next = engine
        .complete(job(sample_text(""), Duration::from_secs(120)))
        .await
        .unwrap();
    assert!(next.tokens_decoded <= 1, "decoded {}", next.tokens_decoded);
    assert!(!next.text.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_is_answered_and_generation_stops_at_the_deadline() {
    let engine = LocalEngine::spawn(options());
    engine.wait_ready().await.unwrap();
    let cancelled = job(sample_text(""), Duration::from_secs(120));
    cancelled.cancel.cancel();
    assert_eq!(
        engine.complete(cancelled).await.unwrap().stop,
        StopReason::Cancelled
    );

    engine
        .complete(job(sample_text(""), Duration::from_secs(120)))
        .await
        .unwrap();
    let mut long = job(sample_text(""), Duration::from_millis(150));
    long.stop = Box::new(|_| false);
    long.max_tokens = 10_000;
    // It stops at the deadline: in generation, or, on a machine too busy to
    // read even the cached prompt in 150 ms, before the first token.
    let cut = engine.complete(long).await.unwrap();
    assert!(
        matches!(
            cut.stop,
            StopReason::Deadline | StopReason::EndOfText | StopReason::PromptDeadline
        ),
        "{:?}",
        cut.stop
    );
}

#[tokio::test]
async fn a_missing_or_foreign_model_file_fails_with_a_clear_reason() {
    let missing = LocalEngine::spawn(EngineOptions {
        model_path: "/nonexistent/model.gguf".into(),
        ..options()
    });
    let err = missing.wait_ready().await.unwrap_err().to_string();
    assert!(
        err.contains("cannot read model file /nonexistent/model.gguf"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake.gguf");
    std::fs::write(&fake, b"PK\x03\x04 not a model at all").unwrap();
    let foreign = LocalEngine::spawn(EngineOptions {
        model_path: fake,
        ..options()
    });
    let err = foreign.wait_ready().await.unwrap_err().to_string();
    assert!(err.contains("is not a GGUF model file"), "{err}");
    let refused = foreign
        .complete(job(sample_text(""), Duration::from_secs(1)))
        .await;
    assert!(matches!(refused, Err(EngineError::Failed(_))));
}

#[tokio::test]
async fn a_truncated_gguf_is_refused_without_crashing() {
    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("truncated.gguf");
    let real = std::fs::File::open(options().model_path).unwrap();
    let mut head = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(real, 1 << 20), &mut head).unwrap();
    std::fs::write(&truncated, head).unwrap();
    let engine = LocalEngine::spawn(EngineOptions {
        model_path: truncated,
        ..options()
    });
    let err = engine.wait_ready().await.unwrap_err().to_string();
    assert!(err.contains("could not load"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_cache_answers_like_a_fresh_context_while_typing() {
    // A prompt below the input budget (see `options`) and a suffix under a
    // quarter of it, so both engines see exactly the same tokens.
    let small = EngineOptions {
        budget: PromptBudget {
            suffix: 48,
            ..options().budget
        },
        ..options()
    };
    let typing = ["s", "se", "sel", "self", "self.", "self.h"];
    let warm = LocalEngine::spawn(small.clone());
    warm.wait_ready().await.unwrap();
    let mut warm_answers = Vec::new();
    for typed in typing {
        warm_answers.push(
            warm.complete(job(sample_text_with(typed, 600), Duration::from_secs(120)))
                .await
                .unwrap(),
        );
    }
    assert!(
        warm_answers[1..]
            .iter()
            .all(|g| g.tokens_decoded < g.prompt_tokens / 2),
        "typing reuses the cache"
    );
    drop(warm);

    let fresh = LocalEngine::spawn(EngineOptions {
        reuse_cache: false,
        ..small
    });
    fresh.wait_ready().await.unwrap();
    for (typed, warm_answer) in typing.into_iter().zip(&warm_answers) {
        let fresh_answer = fresh
            .complete(job(sample_text_with(typed, 600), Duration::from_secs(120)))
            .await
            .unwrap();
        assert_same_answer(
            &format!("after typing {typed:?}"),
            warm_answer,
            &fresh_answer,
        );
    }
}

/// Speculative decoding must not change a greedy answer: multi-line answers at
/// several places in the sample, with n-gram drafting on and off, on the real
/// model (a wrong logits index or a rejected draft left in the cache changes
/// the text at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drafting_keeps_greedy_answers_identical() {
    let places = [
        "let total = ",
        "        self.entries.retain(",
        "    pub fn get(&mut self, key: &str) -> Option<&str> {\n",
        "fn validate_key(",
    ];
    let texts: Vec<FimText> = places
        .iter()
        .map(|marker| {
            let at = support::SAMPLE_RUST
                .find(marker)
                .unwrap_or_else(|| panic!("{marker:?} in the sample"))
                + marker.len();
            FimText {
                // Under the smallest input budget (see `options`), so both
                // engines see the same prompt however fast the machine is.
                prefix: support::SAMPLE_RUST[at.saturating_sub(450)..at].to_owned(),
                suffix: support::SAMPLE_RUST[at..(at + 150).min(support::SAMPLE_RUST.len())]
                    .to_owned(),
                ..FimText::default()
            }
        })
        .collect();
    let answers = |draft_tokens: usize| {
        let texts = texts.clone();
        async move {
            let engine = LocalEngine::spawn(EngineOptions {
                draft_tokens,
                ..options()
            });
            engine.wait_ready().await.unwrap();
            let mut answers = Vec::new();
            for text in texts {
                let mut long = job(text, Duration::from_secs(120));
                long.stop = Box::new(|_| false);
                long.max_tokens = 48;
                answers.push(engine.complete(long).await.unwrap());
            }
            engine.shutdown();
            answers
        }
    };
    let plain = answers(0).await;
    let drafted = answers(8).await;
    for ((place, plain), drafted) in places.iter().zip(&plain).zip(&drafted) {
        assert_eq!(plain.tokens_drafted, 0);
        assert_same_answer(&format!("at {place:?}"), plain, drafted);
    }
    let accepted: usize = drafted.iter().map(|g| g.tokens_accepted).sum();
    assert!(accepted > 0, "lookup drafts were accepted somewhere");
}

/// Switching to another document and back finds the first one's prompt in
/// memory: only the last token is decoded again, where without kept prompts
/// the whole prompt is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_back_to_a_document_is_warm() {
    let other = FimText {
        prefix: "import json\n\n\ndef load_settings(path):\n    with open(path) as f:\n        data = json.load(f)\n    settings = {}\n    for key, value in data.items():\n        if key.startswith('_'):\n            continue\n        settings[key.lower()] = value\n    return ".into(),
        suffix: "\n\n\ndef save_settings(path, settings):\n    with open(path, 'w') as f:\n        json.dump(settings, f)\n".into(),
        ..FimText::default()
    };
    let decoded_on_return = |recent_prompts: usize| {
        let other = other.clone();
        async move {
            let engine = LocalEngine::spawn(EngineOptions {
                recent_prompts,
                ..options()
            });
            engine.wait_ready().await.unwrap();
            let long = Duration::from_secs(120);
            let first = engine.complete(job(sample_text(""), long)).await.unwrap();
            engine.complete(job(other, long)).await.unwrap();
            let back = engine.complete(job(sample_text(""), long)).await.unwrap();
            engine.shutdown();
            assert_same_answer("back in the first document", &first, &back);
            (back.tokens_decoded, back.prompt_tokens)
        }
    };
    let (decoded, prompt) = decoded_on_return(4).await;
    assert!(
        decoded <= 2,
        "decoded {decoded} of {prompt} after switching back"
    );
    let (decoded, prompt) = decoded_on_return(0).await;
    assert!(
        decoded > prompt / 2,
        "without kept prompts: {decoded} of {prompt}"
    );
}

/// Back at a place in a resident document after another file: the prompt
/// that borrowed the document there was saved with what it decoded of its
/// own (its suffix section, the answer), not only the document's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_back_to_a_place_in_a_resident_document_is_warm() {
    let document = &support::SAMPLE_RUST[..720];
    let cursor = document.find("        match ").unwrap() + "        match ".len();
    let place = FimText {
        prefix: document[..cursor].to_owned(),
        suffix: document[cursor..].to_owned(),
        ..FimText::default()
    };
    let engine = LocalEngine::spawn(options());
    engine.wait_ready().await.unwrap();
    engine
        .prewarm_and_wait(Prewarm {
            window: place.clone(),
            span: Some(SpanText {
                window: FimText {
                    spanned: true,
                    ..place.clone()
                },
                document: document.to_owned(),
            }),
            resident: true,
            neighbours: Vec::new(),
            answer: None,
        })
        .await
        .unwrap();
    let long = Duration::from_secs(120);
    // The prewarm filled the place's window from the document: its suffix
    // section is what the document alone lacks there.
    let first = engine.complete(job(place.clone(), long)).await.unwrap();
    let elsewhere = FimText {
        prefix: "def area(width, height):\n    return ".repeat(8),
        suffix: "\n".into(),
        ..FimText::default()
    };
    engine.complete(job(elsewhere, long)).await.unwrap();
    let back = engine.complete(job(place, long)).await.unwrap();
    assert_same_answer("back at the place", &first, &back);
    assert!(
        back.tokens_to_decode <= 2,
        "decoded {} of {} back at the place",
        back.tokens_to_decode,
        back.prompt_tokens
    );
    // The document came back with the place: a new place in it decodes its
    // suffix section (at most 64 tokens and its markers) and little else.
    let cursor = document.find("            value: ").unwrap() + "            value: ".len();
    let another = FimText {
        prefix: document[..cursor].to_owned(),
        suffix: document[cursor..].to_owned(),
        ..FimText::default()
    };
    let there = engine.complete(job(another, long)).await.unwrap();
    engine.shutdown();
    assert!(
        there.tokens_to_decode <= 64 + 8,
        "decoded {} of {} at a new place",
        there.tokens_to_decode,
        there.prompt_tokens
    );
}

/// The open document stays resident: after it is prewarmed, a completion at a
/// new place decodes its suffix section and little else, and typing there
/// goes on reusing it; every answer is the one a fresh context gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_document_serves_new_places_like_a_fresh_context() {
    // The document and every prompt stay under the smallest input budget (see
    // `options`), so both engines see the same tokens however fast the machine is.
    let options = EngineOptions {
        budget: PromptBudget {
            suffix: 48,
            ..options().budget
        },
        ..options()
    };
    let document = &support::SAMPLE_RUST[..720];
    let at = |marker: &str, typed: &str| {
        let cursor = document.find(marker).unwrap() + marker.len();
        FimText {
            prefix: format!("{}{typed}", &document[..cursor]),
            suffix: document[cursor..(cursor + 150).min(document.len())].to_owned(),
            ..FimText::default()
        }
    };
    let places = [
        ("        match ", ""),
        ("            value: ", ""),
        ("        match ", "s"),
        ("        match ", "se"),
        ("        match ", "sel"),
    ];
    let resident = LocalEngine::spawn(options.clone());
    resident.wait_ready().await.unwrap();
    resident
        .prewarm_and_wait(Prewarm {
            window: at("impl Entry {", ""),
            span: Some(SpanText {
                window: FimText {
                    spanned: true,
                    ..at("impl Entry {", "")
                },
                document: document.to_owned(),
            }),
            resident: true,
            neighbours: Vec::new(),
            answer: None,
        })
        .await
        .unwrap();
    let mut answers = Vec::new();
    for (marker, typed) in places {
        let answer = resident
            .complete(job(at(marker, typed), Duration::from_secs(120)))
            .await
            .unwrap();
        // The suffix section (at most 48 tokens and its markers) and the
        // token the cursor splits; the document before the cursor is reused.
        assert!(
            answer.tokens_to_decode <= 48 + 8,
            "at {marker:?} after {typed:?}: {} of {} tokens decoded",
            answer.tokens_to_decode,
            answer.prompt_tokens
        );
        answers.push(answer);
    }
    drop(resident);

    let fresh = LocalEngine::spawn(EngineOptions {
        reuse_cache: false,
        ..options
    });
    fresh.wait_ready().await.unwrap();
    for ((marker, typed), answer) in places.into_iter().zip(&answers) {
        let fresh_answer = fresh
            .complete(job(at(marker, typed), Duration::from_secs(120)))
            .await
            .unwrap();
        assert_same_answer(
            &format!("at {marker:?} after {typed:?}"),
            answer,
            &fresh_answer,
        );
    }
}

/// A request anywhere in a resident span (see `context::span`) decodes only
/// its suffix section: the document up to its cursor is in the cache, from
/// the span's start, far down a long file. The fill then grows outward: once
/// the engine is idle, places in the blocks around it are as warm, and a
/// block further away, not offered, is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_place_in_a_resident_span_decodes_only_its_suffix_section() {
    use switchyard_context::{fim, span};
    const SUFFIX: usize = 48;
    let engine = LocalEngine::spawn(EngineOptions {
        budget: PromptBudget {
            input: 768,
            suffix: SUFFIX,
            repository: 0,
        },
        ..options()
    });
    engine.wait_ready().await.unwrap();
    let rope = ropey::Rope::from_str(&support::SAMPLE_RUST.repeat(4));
    let budget = fim::WindowBudget::for_input(768, SUFFIX);
    let block_chars = budget.prefix_tokens * fim::CHARS_PER_TOKEN / 2;
    let span_at = |cursor: usize| span::at(&rope, cursor, budget, block_chars).unwrap();
    let texts_at = |cursor: usize| {
        let span = span_at(cursor);
        let affordable = fim::window(
            &rope,
            cursor,
            fim::WindowBudget::for_input(256, SUFFIX),
            None,
        );
        let span = SpanText {
            window: span.window,
            document: span.document,
        };
        (affordable.text, span)
    };
    // The middle of a line's text.
    let place = |line: usize| {
        let text = rope.line(line).to_string();
        let code = text.trim();
        let indent = text.len() - text.trim_start().len();
        rope.line_to_char(line) + indent.min(text.trim_end().len()) + code.len() / 2
    };
    let first = place(400);
    let (window, span) = texts_at(first);
    let around = span::around(&rope, first, budget, block_chars, 3);
    assert_eq!(around.len(), 3);
    let neighbours = around[..2]
        .iter()
        .map(|span| SpanText {
            window: span.window.clone(),
            document: span.document.clone(),
        })
        .collect();
    // Done once the neighbours are filled too: no job came meanwhile.
    engine
        .prewarm_and_wait(Prewarm {
            window,
            span: Some(span),
            resident: true,
            neighbours,
            answer: None,
        })
        .await
        .unwrap();
    let start = span_at(first).start_line;
    assert!(start > 300, "a span far down the file, at line {start}");
    // Places served by the span starting at `start`.
    let places_of = |start: usize, count: usize| -> Vec<usize> {
        let places: Vec<usize> = (start..start + 120)
            .map(place)
            .filter(|&cursor| cursor != first && span_at(cursor).start_line == start)
            .step_by(4)
            .take(count)
            .collect();
        assert!(
            !places.is_empty(),
            "places sharing the span at line {start}"
        );
        places
    };
    let decoded_at = async |cursor: usize| {
        let (text, span) = texts_at(cursor);
        let answer = engine
            .complete(CompletionJob {
                span: Some(span),
                ..job(text, Duration::from_secs(120))
            })
            .await
            .unwrap();
        let at = format!(
            "at line {}: {} of {} tokens decoded",
            rope.char_to_line(cursor),
            answer.tokens_to_decode,
            answer.prompt_tokens
        );
        (answer.tokens_to_decode, at)
    };
    let places = places_of(start, 4);
    assert!(places.len() >= 3, "places sharing the span: {places:?}");
    let below = places_of(around[0].start_line, 2);
    let above = places_of(around[1].start_line, 2);
    for cursor in places.into_iter().chain(below).chain(above) {
        let (decoded, at) = decoded_at(cursor).await;
        // The suffix section, its markers, and the tokens the cursor splits.
        assert!(decoded <= SUFFIX + 16, "{at}");
    }
    let (decoded, at) = decoded_at(places_of(around[2].start_line, 1)[0]).await;
    assert!(decoded > SUFFIX + 16, "a span not offered is cold: {at}");
}

/// A start after the first takes the thread choice the first measured (from
/// the state directory) instead of probing again: the speed it reports is
/// the remembered one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_takes_the_remembered_thread_choice() {
    let state = tempfile::tempdir().unwrap();
    let options = EngineOptions {
        thread_memo: Some(state.path().join("threads.json")),
        ..options()
    };
    let first = LocalEngine::spawn(options.clone());
    let measured = first.wait_ready().await.unwrap();
    first.shutdown();
    let second = LocalEngine::spawn(options);
    let recalled = second.wait_ready().await.unwrap();
    // JSON keeps the speed to within a rounding of its last digit; no two
    // measurements come that close.
    let (recalled, measured) = (recalled.prompt_tokens_per_s, measured.prompt_tokens_per_s);
    assert!(
        (recalled - measured).abs() <= measured * 1e-12,
        "remembered, not measured again: {recalled} after {measured}"
    );
}

/// A local chat answer (an explain downshifted to the local model) streams:
/// its text comes in pieces as the engine generates it, then the end, so the
/// first-token limit is met by the first token, not by the whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_chat_answer_streams_as_it_is_generated() {
    use futures::StreamExt;
    use switchyard_providers::local::chat::{EngineSlot, LocalProvider};
    use switchyard_providers::{ChatMessage, ChatRequest, Provider, Role, StreamEvent, Timeouts};

    let engine = LocalEngine::spawn(options());
    engine.wait_ready().await.unwrap();
    let slot = EngineSlot::default();
    slot.set(Some(engine));
    let request = ChatRequest {
        model: "local".into(),
        system: None,
        messages: vec![ChatMessage {
            role: Role::User,
            content: "Explain what a hash map is, in three paragraphs.".into(),
        }],
        max_tokens: 120,
        temperature: None,
    };
    let patient = Duration::from_secs(120);
    let timeouts = Timeouts {
        connect: patient,
        first_byte: patient,
        first_token: patient,
        idle: patient,
    };
    let stream = LocalProvider::new(slot)
        .stream(request, timeouts)
        .await
        .expect("the local model answers");
    let events: Vec<StreamEvent> = stream
        .events
        .map(|event| event.expect("no error in the stream"))
        .collect()
        .await;
    let pieces = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Delta(text) if !text.is_empty()))
        .count();
    assert!(
        pieces > 10,
        "the answer came in {pieces} pieces: {events:?}"
    );
    assert!(
        matches!(events.last(), Some(StreamEvent::End(_))),
        "the end comes last: {events:?}"
    );
}

/// Completion before chat: a completion asked while a local chat answers is
/// answered before the chat ends (more of the chat's text comes after it),
/// and the chat still ends whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_is_answered_while_a_local_chat_goes_on() {
    let engine = LocalEngine::spawn(options());
    engine.wait_ready().await.unwrap();
    let (pieces, mut chat_text) = tokio::sync::mpsc::unbounded_channel();
    let chatting = engine.clone();
    let chat = tokio::spawn(async move {
        chatting
            .chat(ChatJob {
                messages: vec![(
                    "user".into(),
                    "Explain what a hash map is, in three paragraphs.".into(),
                )],
                max_tokens: 200,
                deadline: Instant::now() + Duration::from_secs(600),
                first_token_by: None,
                cancel: CancelFlag::default(),
                pieces: Some(pieces),
            })
            .await
    });
    let mut streamed = chat_text.recv().await.expect("the chat streams");
    let completion = engine
        .complete(job(sample_text(""), Duration::from_secs(120)))
        .await
        .unwrap();
    assert_ne!(completion.stop, StopReason::Cancelled);
    assert!(!completion.text.is_empty(), "{completion:?}");
    assert!(
        !chat.is_finished(),
        "the completion was answered before the chat ended"
    );
    let mut after = 0;
    while let Some(piece) = chat_text.recv().await {
        streamed.push_str(&piece);
        after += 1;
    }
    assert!(
        after > 0,
        "the chat went on after the completion was answered"
    );
    let chat = chat.await.unwrap().unwrap();
    assert!(
        matches!(chat.stop, StopReason::EndOfText | StopReason::MaxTokens),
        "{:?}",
        chat.stop
    );
    assert_eq!(chat.text, streamed, "the pieces are the whole answer");
}

/// A chat whose first piece is already due holds on to its prompt: a
/// completion asked meanwhile is answered after the chat's first piece,
/// not before (a chat past its first-token ceiling fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_whose_first_piece_is_due_keeps_its_prompt() {
    let engine = LocalEngine::spawn(options());
    engine.wait_ready().await.unwrap();
    let (pieces, mut chat_text) = tokio::sync::mpsc::unbounded_channel();
    let chat = engine.chat(ChatJob {
        messages: vec![("user".into(), "Explain what a hash map is.".into())],
        max_tokens: 40,
        deadline: Instant::now() + Duration::from_secs(600),
        first_token_by: Some(Instant::now()),
        cancel: CancelFlag::default(),
        pieces: Some(pieces),
    });
    tokio::pin!(chat);
    // One poll sends the chat to the engine, ahead of the completion.
    assert!(futures::poll!(&mut chat).is_pending());
    let completion = engine
        .complete(job(sample_text(""), Duration::from_secs(120)))
        .await
        .unwrap();
    assert_ne!(completion.stop, StopReason::Cancelled);
    assert!(
        chat_text.try_recv().is_ok(),
        "the chat's first piece came before the completion's answer"
    );
    chat.await.unwrap();
}
