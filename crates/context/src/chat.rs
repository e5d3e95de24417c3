//! Chat prompts for remote-grade tasks (explain, refactor), and reading their
//! answers. Prompts are trimmed to a token
//! budget before anything leaves (ARCHITECTURE.md invariant 8): the selection is kept whole, then
//! the nearest surrounding lines are added, nearest first, while they fit.
//!
//! Token counts here are a conservative estimate, one token per three bytes of
//! text (code averages 3.5-4 bytes per token for the tokenizers in use), so a
//! prompt that fits here fits the provider. The local engine counts exactly.

use std::iter::Peekable;

/// Bytes per token assumed by [`estimate_tokens`].
pub const BYTES_PER_TOKEN: usize = 3;

pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(BYTES_PER_TOKEN)
}

/// The pieces a task prompt is made of.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PromptParts {
    pub language: String,
    pub file_name: String,
    pub before: String,
    pub selection: String,
    pub after: String,
    /// What the user asked, e.g. "Explain this code" or a refactor instruction.
    pub instruction: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {subject} is about {needed} tokens, over the {budget}-token budget for this task; {remedy}"
)]
pub struct OverBudget {
    pub subject: &'static str,
    pub needed: usize,
    pub budget: usize,
    pub remedy: &'static str,
}

impl OverBudget {
    pub fn selection(needed: usize, budget: usize) -> OverBudget {
        OverBudget {
            subject: "selection",
            needed,
            budget,
            remedy: "select less code",
        }
    }

    pub fn conversation(needed: usize, budget: usize) -> OverBudget {
        OverBudget {
            subject: "conversation",
            needed,
            budget,
            remedy: "send fewer or shorter messages",
        }
    }
}

/// The user message for `parts` within `budget` tokens.
pub fn render(parts: &PromptParts, budget: usize) -> Result<String, OverBudget> {
    let frame = |before: &str, after: &str| {
        format!(
            "{instruction}\n\nFile: {file} ({language})\n\nCode before the selection:\n```\n{before}```\n\nSelected code:\n```\n{selection}```\n\nCode after the selection:\n```\n{after}```\n",
            instruction = parts.instruction,
            file = parts.file_name,
            language = parts.language,
            selection = with_newline(&parts.selection),
        )
    };
    let minimal = frame("", "");
    if estimate_tokens(&minimal) > budget {
        return Err(OverBudget::selection(estimate_tokens(&minimal), budget));
    }
    let mut room = budget - estimate_tokens(&minimal);
    let mut before: Vec<&str> = Vec::new();
    let mut after: Vec<&str> = Vec::new();
    let mut above = parts.before.split_inclusive('\n').rev().peekable();
    let mut below = parts.after.split_inclusive('\n').peekable();
    // Alternate sides so the context stays centred on the selection.
    loop {
        let grew_above = take_fitting(&mut above, &mut room, &mut before);
        let grew_below = take_fitting(&mut below, &mut room, &mut after);
        if !(grew_above || grew_below) {
            break;
        }
    }
    before.reverse();
    Ok(frame(
        &with_newline(&before.concat()),
        &with_newline(&after.concat()),
    ))
}

/// Moves the next line into `side` if it fits in `room`.
fn take_fitting<'a>(
    lines: &mut Peekable<impl Iterator<Item = &'a str>>,
    room: &mut usize,
    side: &mut Vec<&'a str>,
) -> bool {
    match lines.next_if(|line| estimate_tokens(line) <= *room) {
        Some(line) => {
            *room -= estimate_tokens(line);
            side.push(line);
            true
        }
        None => false,
    }
}

/// The first fenced code block of an answer, or the whole answer.
pub fn code_block(answer: &str) -> String {
    let Some(open) = answer.find("```") else {
        return answer.to_owned();
    };
    let body_start = answer[open..]
        .find('\n')
        .map_or(answer.len(), |i| open + i + 1);
    let body_end = answer[body_start..]
        .find("```")
        .map_or(answer.len(), |i| body_start + i);
    answer[body_start..body_end].to_owned()
}

fn with_newline(text: &str) -> String {
    if text.is_empty() || text.ends_with('\n') {
        text.to_owned()
    } else {
        format!("{text}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_block_is_taken_from_the_answer() {
        assert_eq!(
            code_block("Here:\n```rust\nfn a() {}\n```\nDone."),
            "fn a() {}\n"
        );
        assert_eq!(code_block("fn a() {}"), "fn a() {}");
    }

    fn parts(before_lines: usize, after_lines: usize) -> PromptParts {
        PromptParts {
            language: "rust".into(),
            file_name: "a.rs".into(),
            before: (0..before_lines)
                .map(|i| format!("// before {i:03}\n"))
                .collect(),
            selection: "fn selected() {}\n".into(),
            after: (0..after_lines)
                .map(|i| format!("// after {i:03}\n"))
                .collect(),
            instruction: "Explain this code.".into(),
        }
    }

    #[test]
    fn small_prompts_are_kept_whole() {
        let text = render(&parts(3, 3), 10_000).unwrap();
        assert!(
            text.contains("// before 000")
                && text.contains("// after 002")
                && text.contains("fn selected()")
        );
    }

    #[test]
    fn trimming_keeps_the_selection_and_the_nearest_lines() {
        let text = render(&parts(200, 200), 250).unwrap();
        assert!(estimate_tokens(&text) <= 250);
        assert!(text.contains("fn selected()"));
        assert!(text.contains("// before 199"), "nearest line above kept");
        assert!(text.contains("// after 000"), "nearest line below kept");
        assert!(
            !text.contains("// before 000"),
            "farthest line above dropped"
        );
    }

    #[test]
    fn a_selection_over_budget_is_refused_with_a_reason() {
        let mut big = parts(0, 0);
        big.selection = "x".repeat(3_000);
        let err = render(&big, 100).unwrap_err();
        assert!(err.needed > 1_000 && err.budget == 100);
        assert!(err.to_string().contains("select less code"));
    }
}
