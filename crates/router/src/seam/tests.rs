use super::*;

const FULL: &str = "HashMap::entry looks the key up once and hands back an Entry. The entry is Occupied when the key is present and Vacant when it is not. Calling or_insert(0) fills a vacant entry with zero and returns a mutable reference either way, so counting words is one line per word.";

/// What the primary had sent when it died: up to `at`, trailing whitespace
/// cut as the router cuts it.
fn cut(at: usize) -> (&'static str, &'static str) {
    let partial = &FULL[..at];
    let before = partial.trim_end();
    (before, &partial[before.len()..])
}

/// Streams `deltas` through a seam; the caller's whole text, or the refusal.
fn stream(
    form: Form,
    (before, shown): (&str, &str),
    deltas: &[&str],
) -> Result<String, Unjoinable> {
    let mut seam = Seam::new(form, before, shown);
    let mut caller = format!("{before}{shown}");
    for delta in deltas {
        caller.extend(seam.push(delta)?);
    }
    caller.extend(seam.finish()?);
    assert_eq!(
        caller,
        seam.joined(),
        "what the caller was streamed is the answer"
    );
    Ok(caller)
}

/// `text` in pieces of `size` characters, as a stream would bring it.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn each_chunking(
    form: Form,
    at: usize,
    next: &str,
    check: impl Fn(Result<String, Unjoinable>, usize),
) {
    for size in [1, 3, 7, 40, 1000] {
        let deltas = pieces(next, size);
        let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
        check(stream(form, cut(at), &deltas), size);
    }
}

fn joins_to_full(form: Form, at: usize, next: &str) {
    each_chunking(form, at, next, |result, size| {
        assert_eq!(
            result.as_deref(),
            Ok(FULL),
            "{form:?}, cut at {at}, pieces of {size}: {next:?}"
        );
    });
}

fn refused(form: Form, at: usize, next: &str) {
    each_chunking(form, at, next, |result, size| {
        assert!(
            result.is_err(),
            "{form:?}, cut at {at}, pieces of {size}: joined {result:?}"
        );
    });
}

/// Where the cuts land: mid-word, after a word, after a sentence.
const CUTS: [usize; 4] = [70, 95, 131, 190];

#[test]
fn a_prefill_continuation_that_goes_on_is_joined_as_it_is() {
    for at in CUTS {
        let (before, _) = cut(at);
        joins_to_full(Form::Prefill, at, &FULL[before.len()..]);
    }
}

#[test]
fn a_continuation_that_begins_with_the_last_words_is_joined_once() {
    for at in CUTS {
        let (before, _) = cut(at);
        let last_two = before.rsplitn(3, ' ').take(2).collect::<Vec<_>>();
        let from = before.len() - last_two[0].len() - last_two[1].len() - 1;
        for form in [Form::Restated, Form::Prefill] {
            joins_to_full(form, at, &FULL[from..]);
        }
    }
}

#[test]
fn a_restart_from_the_top_is_cut() {
    for at in CUTS {
        for form in [Form::Restated, Form::Prefill] {
            joins_to_full(form, at, FULL);
            joins_to_full(form, at, &format!("\n\n{FULL}"));
        }
    }
}

#[test]
fn a_restart_with_other_whitespace_and_markdown_is_cut() {
    for at in CUTS {
        let (before, _) = cut(at);
        let restated = before
            .replace("HashMap::entry", "`HashMap::entry`")
            .replace("Occupied", "**Occupied**")
            .replace(". ", ".\n\n")
            .replace(" the key", "\nthe  key");
        let next = format!("{restated}{}", &FULL[before.len()..]);
        for form in [Form::Restated, Form::Prefill] {
            joins_to_full(form, at, &next);
        }
    }
}

#[test]
fn marks_that_close_a_restated_span_are_cut_with_it() {
    let before = "hands back an Entry";
    let next = "hands back an `Entry`: Occupied or Vacant.";
    assert_eq!(
        stream(Form::Restated, (before, ""), &[next]).unwrap(),
        "hands back an Entry: Occupied or Vacant."
    );
}

#[test]
fn a_restated_last_sentence_is_cut() {
    for at in [160, 190, 240] {
        let (before, _) = cut(at);
        let sentence = before.rfind(". ").map_or(0, |i| i + 2);
        for form in [Form::Restated, Form::Prefill] {
            joins_to_full(form, at, &FULL[sentence..]);
        }
    }
}

#[test]
fn a_continuation_request_answered_without_the_last_words_is_refused() {
    for at in CUTS {
        let (before, _) = cut(at);
        // The right words, but no anchor to show where they go.
        refused(Form::Restated, at, &FULL[before.len()..]);
        refused(
            Form::Restated,
            at,
            "Use a BTreeMap instead when the keys must stay in order.",
        );
    }
}

#[test]
fn a_prefill_answered_with_a_new_answer_is_refused() {
    // Mid-sentence, a capitalised sentence on the same line.
    refused(
        Form::Prefill,
        70,
        "Use a BTreeMap instead when the keys must stay in order; it costs a logarithmic lookup.",
    );
    // An opener, wherever the cut.
    for at in CUTS {
        refused(
            Form::Prefill,
            at,
            " Sure! Here is what the code does: it counts words in a map.",
        );
        // The same answer started over in other words.
        refused(
            Form::Prefill,
            at,
            "\n\nThe entry method of HashMap looks the key up once and hands you back an Entry value.",
        );
    }
}

#[test]
fn a_capitalised_name_in_code_or_after_a_sentence_goes_on() {
    let before = "```rust\nfn count(words: &[&str]) -> HashMap<String, usize> {\n    let mut map =";
    let next = " HashMap::new();\n    for w in words {\n        *map.entry(w.to_string()).or_insert(0) += 1;\n    }\n    map\n}\n```";
    assert_eq!(
        stream(Form::Prefill, (before, ""), &[next]).unwrap(),
        format!("{before}{next}")
    );
    let (before, _) = cut(61);
    assert!(before.ends_with('.'), "{before:?}");
    joins_to_full(Form::Prefill, 61, &FULL[before.len()..]);
}

#[test]
fn a_stream_that_ends_inside_a_restatement_is_refused() {
    let (before, shown) = cut(131);
    assert!(stream(Form::Restated, (before, shown), &[&FULL[..40]]).is_err());
    assert!(stream(Form::Prefill, (before, shown), &[&FULL[..40]]).is_err());
}

#[test]
fn nothing_is_released_before_the_seam_is_known() {
    let (before, shown) = cut(131);
    let mut seam = Seam::new(Form::Restated, before, shown);
    for piece in pieces(&FULL[..120], 10) {
        assert_eq!(
            seam.push(&piece),
            Ok(None),
            "held while it may be a restart"
        );
    }
    assert_eq!(seam.joined(), format!("{before}{shown}"));
    let rest: String = pieces(&FULL[120..], 10)
        .iter()
        .filter_map(|p| seam.push(p).unwrap())
        .collect();
    assert_eq!(format!("{before}{shown}{rest}"), FULL);
}

#[test]
fn short_or_mid_word_overlaps_are_not_restatements() {
    assert_eq!(
        stream(Form::Prefill, ("we went to", ""), &["town"]).unwrap(),
        "we went totown"
    );
    assert_eq!(
        stream(Form::Prefill, ("we renumber", ""), &["number them all"]).unwrap(),
        "we renumbernumber them all"
    );
    assert_eq!(
        stream(
            Form::Restated,
            ("a big number", ""),
            &["big number of them"]
        )
        .unwrap(),
        "a big number of them"
    );
    assert!(stream(Form::Restated, ("we went to", ""), &["town"]).is_err());
}

#[test]
fn whitespace_the_caller_already_has_is_not_shown_twice() {
    assert_eq!(
        stream(Form::Prefill, ("t01 t02", " "), &[" ", "t03", " t04"]).unwrap(),
        "t01 t02 t03 t04"
    );
    // Cut between two newlines: the prefill continues with both.
    assert_eq!(
        stream(Form::Prefill, ("is not.", "\n"), &["\n", "\nor_insert it"]).unwrap(),
        "is not.\n\nor_insert it"
    );
    // A restating model repeats the words, then the break the caller has.
    assert_eq!(
        stream(
            Form::Restated,
            ("it is not.", "\n\n"),
            &["is no", "t.\n", "\nor_insert"]
        )
        .unwrap(),
        "it is not.\n\nor_insert"
    );
}

#[test]
fn a_fresh_answer_passes_through() {
    assert_eq!(
        stream(Form::Fresh, ("", ""), &["Sure", ", it counts."]).unwrap(),
        "Sure, it counts."
    );
}
