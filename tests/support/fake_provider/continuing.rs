//! How the fake's continuing models read a conversation (a fresh question,
//! a prefill to extend, or their own cut turn and the instruction to go on)
//! and what they answer: as real models do, not always what was asked.

use serde_json::Value;

use super::CONTINUE_INSTRUCTION;

/// How a model asked to continue a cut answer answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Manner {
    /// It goes on where the text stopped: after a prefill with the rest;
    /// after the instruction with the last two words of its turn, then the
    /// rest, as the instruction asks.
    GoesOn,
    /// It answers the question again from the beginning.
    StartsOver,
    /// It answers again from the beginning in its own layout: the answer so
    /// far with other line breaks and Markdown, then the rest.
    StartsOverReformatted,
    /// It restates the sentence it stopped in, then goes on.
    RestatesSentence,
    /// It says something else entirely.
    Unrelated(String),
}

/// A message's text: a string, or the concatenated text blocks of an array.
fn text(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

fn messages(body: &Value) -> &[Value] {
    body["messages"].as_array().map_or(&[], Vec::as_slice)
}

/// The conversation ends with an assistant message: a prefill.
pub(super) fn ends_with_assistant(body: &Value) -> bool {
    messages(body)
        .last()
        .is_some_and(|last| last["role"] == "assistant")
}

/// The answer so far that `body` asks to continue, and whether as a prefill.
fn continued(body: &Value) -> Option<(String, bool)> {
    match messages(body) {
        [.., last] if last["role"] == "assistant" => Some((text(last), true)),
        [.., turn, ask]
            if turn["role"] == "assistant"
                && ask["role"] == "user"
                && text(ask) == CONTINUE_INSTRUCTION =>
        {
            Some((text(turn), false))
        }
        _ => None,
    }
}

/// What a model whose whole answer is `full` says to `body`.
pub(super) fn answer(full: &str, manner: &Manner, body: &Value) -> String {
    let Some((partial, prefill)) = continued(body) else {
        return full.to_owned();
    };
    let Some(rest) = full.strip_prefix(&partial) else {
        return full.to_owned();
    };
    match manner {
        Manner::GoesOn if prefill => rest.to_owned(),
        Manner::GoesOn => format!("{}{rest}", last_words(&partial, 2)),
        Manner::StartsOver => full.to_owned(),
        Manner::StartsOverReformatted => format!("{}{rest}", reformatted(&partial)),
        Manner::RestatesSentence => format!("{}{rest}", last_sentence(&partial)),
        Manner::Unrelated(other) => other.clone(),
    }
}

/// The last `n` words of `text` and what follows them (its trailing whitespace).
fn last_words(text: &str, n: usize) -> &str {
    let trimmed = text.trim_end();
    let (mut start, mut words, mut in_word) = (trimmed.len(), 0, false);
    for (i, c) in trimmed.char_indices().rev() {
        if c.is_whitespace() {
            if in_word {
                words += 1;
                in_word = false;
                if words == n {
                    break;
                }
            }
        } else {
            in_word = true;
            start = i;
        }
    }
    &text[start..]
}

/// The sentence (or line) `text` ends in, from its first word.
fn last_sentence(text: &str) -> &str {
    let trimmed = text.trim_end();
    let start = trimmed
        .rfind(". ")
        .map(|i| i + 2)
        .into_iter()
        .chain(trimmed.rfind('\n').map(|i| i + 1))
        .max()
        .unwrap_or(0);
    &text[start..]
}

/// `text` laid out again: names in backticks, a blank line after each
/// sentence, other line breaks. The last word stays as it is (it may be cut).
fn reformatted(text: &str) -> String {
    let trimmed = text.trim_end();
    let last = trimmed.rfind(char::is_whitespace).map_or(0, |i| i + 1);
    let mut out = String::new();
    for (i, word) in trimmed[..last].split(' ').enumerate() {
        if i > 0 {
            out.push(if i % 7 == 0 { '\n' } else { ' ' });
        }
        let bare = word.trim_end_matches(['.', ',', ';', ':']);
        if bare.contains("::") || bare.contains('(') {
            out += &format!("`{bare}`{}", &word[bare.len()..]);
        } else {
            out += word;
        }
        if word.ends_with('.') {
            out.push('\n');
        }
    }
    out + &text[last..]
}
