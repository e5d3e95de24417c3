//! How the fake's continuing models read a conversation: what was asked of
//! them (a fresh answer, the rest after a prefill, or the rest after their own
//! cut turn and the instruction to go on) and what they answer.

use serde_json::Value;

use super::CONTINUE_INSTRUCTION;

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

/// What a model whose whole answer is `full` says to `body`.
pub(super) fn answer(full: &str, body: &Value) -> String {
    let messages = messages(body);
    let rest = |partial: &str| full.strip_prefix(partial).map(str::to_owned);
    match messages {
        [.., last] if last["role"] == "assistant" => rest(&text(last)),
        [.., turn, ask]
            if turn["role"] == "assistant"
                && ask["role"] == "user"
                && text(ask) == CONTINUE_INSTRUCTION =>
        {
            let partial = text(turn);
            rest(&partial).map(|rest| format!("{}{rest}", last_words(&partial, 2)))
        }
        _ => None,
    }
    .unwrap_or_else(|| full.to_owned())
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
