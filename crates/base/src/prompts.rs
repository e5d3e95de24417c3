//! Prompt texts for remote-grade tasks, shared by every front end.
//!
//! Owns the system prompts and instructions for explain, refactor (with its
//! presets), fixing reported diagnostics and remote fill-in-the-middle
//! completion, so the LSP server and the HTTP gateway ask models the same
//! things. Plain data only: front ends translate their own types into it.

/// System prompt for explaining code.
pub const EXPLAIN_SYSTEM: &str = "You are a senior engineer explaining code to a colleague. Be concise and concrete; use Markdown.";

/// Instruction for explaining the selected code.
pub const EXPLAIN_INSTRUCTION: &str =
    "Explain what the selected code does and anything surprising about it.";

/// System prompt for rewriting a selection as instructed.
pub const REFACTOR_SYSTEM: &str = "You rewrite code as instructed. Answer with the complete rewritten selection in a single fenced code block and nothing else. Keep the surrounding indentation.";

/// Ready-made refactors: `(title, instruction)`.
pub const PRESETS: [(&str, &str); 3] = [
    (
        "Simplify",
        "Simplify this code without changing its behaviour.",
    ),
    (
        "Add error handling",
        "Add error handling to this code: handle failures explicitly instead of panicking or ignoring them.",
    ),
    (
        "Add docs",
        "Add documentation comments to this code, in the language's conventional style.",
    ),
];

/// System prompt for remote fill-in-the-middle completion.
pub const FIM_SYSTEM: &str = "You are a code completion engine. Reply with only the code that belongs at the empty selection: no explanation, no code fences.";

/// Instruction for remote fill-in-the-middle completion.
pub const FIM_INSTRUCTION: &str =
    "Write the code that goes at the empty selection, continuing the code before it.";

/// Asks a model that cannot take a prefill to go on with a cut answer, given
/// as its own previous turn. The last words it is asked to begin with show
/// where its text joins the answer (`router/seam.rs`): without them, where it
/// goes on cannot be told.
pub const CONTINUE_INSTRUCTION: &str = "Your previous answer was cut off. Continue it from exactly where it stopped: begin your reply with the last few words of your previous answer, exactly as written, then go on from there. Do not start over and do not comment on the interruption.";

/// The refactor instruction that fixes reported problems, given as
/// `(zero-based line, message)` pairs; lines are shown one-based.
pub fn fix_diagnostics_instruction<'a>(
    problems: impl IntoIterator<Item = (u32, &'a str)>,
) -> String {
    let problems: Vec<String> = problems
        .into_iter()
        .map(|(line, message)| format!("line {}: {message}", u64::from(line) + 1))
        .collect();
    format!(
        "Fix these problems reported in this code:\n{}",
        problems.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fix_instruction_lists_problems_one_based() {
        let text = fix_diagnostics_instruction([(0, "unused variable `x`"), (41, "missing `;`")]);
        assert_eq!(
            text,
            "Fix these problems reported in this code:\nline 1: unused variable `x`\nline 42: missing `;`"
        );
    }

    #[test]
    fn fix_instruction_does_not_overflow_on_the_last_line() {
        let text = fix_diagnostics_instruction([(u32::MAX, "end")]);
        assert!(text.ends_with("line 4294967296: end"), "{text}");
    }
}
