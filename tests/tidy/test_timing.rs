//! Reading the tests for the two habits that make a suite fail on a slower
//! machine: a measured time compared in an assertion (outside the one helper
//! that scales bounds, `tests/support/timing.rs`), and an editor test that
//! sleeps for a fixed time instead of polling for its effect.
//!
//! Text heuristics, not a parser: string and char literals and comments are
//! blanked first, so a message that prints a time is not taken for a
//! comparison; each heuristic is tried on examples in tidy.rs.

/// The macros whose leading arguments are the condition checked.
const ASSERTIONS: [(&str, usize); 6] = [
    ("assert!", 1),
    ("assert_eq!", 2),
    ("assert_ne!", 2),
    ("debug_assert!", 1),
    ("prop_assert!", 1),
    ("prop_assert_eq!", 2),
];

/// Words that name a measured time in a condition: a clock reading, a time
/// since one, a recorded arrival (`.at`) or the gap between two. A name bound
/// to one of these (`let rescued = ...`) is not followed: the rule catches
/// the habit, not every spelling of it.
const TIME_WORDS: [&str; 8] = [
    "Instant",
    "SystemTime",
    "elapsed",
    "now",
    "now_ms",
    ".at",
    "gap",
    "gaps",
];

/// `text` with the contents of string and char literals and of comments
/// replaced by spaces (newlines kept, so positions and lines still match).
pub fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push_str("  ");
            i += 2;
        } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_before(&chars, i) {
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            out.push_str(&" ".repeat(hashes + 2));
            i += hashes + 2;
            while i < chars.len() && !chars[i..].starts_with(&close) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push_str(&" ".repeat(close.len()));
            i += close.len();
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\'', '\u{..}'), not a lifetime.
            let end = match next {
                Some('\\') => (i + 3..chars.len()).find(|&j| chars[j] == '\''),
                _ => Some(i + 2),
            }
            .unwrap_or(chars.len() - 1);
            out.push_str(&" ".repeat(end + 1 - i));
            i = end + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], at: usize) -> bool {
    at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_')
}

/// Splits `args` at its top-level commas.
fn top_level_arguments(args: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (at, c) in args.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&args[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    out.push(&args[start..]);
    out
}

/// The conditions of each assertion in `code` (already blanked), with the
/// line each assertion starts on (1-based).
pub fn assertion_conditions(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (name, conditions) in ASSERTIONS {
        for (at, _) in code.match_indices(name) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &code[at + name.len()..];
            let Some(open) = rest.find(|c: char| !c.is_whitespace()) else {
                continue;
            };
            if !rest[open..].starts_with('(') {
                continue;
            }
            let body = &rest[open + 1..];
            let mut depth = 1;
            let end = body
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '(' | '[' | '{' => depth += 1,
                        ')' | ']' | '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(body.len(), |(end, _)| end);
            let condition = top_level_arguments(&body[..end])
                .into_iter()
                .take(conditions)
                .collect::<Vec<_>>()
                .join(",");
            out.push((code[..at].matches('\n').count() + 1, condition));
        }
    }
    out.sort();
    out
}

/// Whether `condition` names a measured time. A recorded arrival (`.at`)
/// counts where it is ordered or subtracted, not where stored stamps are
/// compared for equality.
pub fn compares_a_time(condition: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    TIME_WORDS.iter().any(|word| {
        condition.match_indices(word).any(|(at, _)| {
            let (before, after) = (&condition[..at], &condition[at + word.len()..]);
            if after.chars().next().is_some_and(is_ident) {
                return false;
            }
            if *word != ".at" {
                return !before.chars().next_back().is_some_and(is_ident);
            }
            let after = after.trim_start();
            let before = before.trim_end();
            let ordering = ['<', '>', '-'];
            after.starts_with(ordering)
                || after.starts_with(".saturating_duration_since")
                || after.starts_with(".duration_since")
                || before.ends_with(ordering)
                || before.ends_with(">=")
                || before.ends_with("<=")
        })
    })
}

/// Lines (1-based) of the fixed sleeps in an editor test: Rust's
/// `sleep(..)`/`sleep_until(..)`; in Lua a `vim.wait(ms)` with no condition,
/// `uv.sleep`/`loop.sleep` or a shell `sleep`. An editor test waits for an
/// effect (tests/support/poll.rs, `vim.wait(ms, condition)`); a sleep before
/// a check is how a test fails on a slower machine, and a sleep with the
/// check a line further down is the same habit.
pub fn fixed_sleeps(text: &str, lua: bool) -> Vec<usize> {
    let code = if lua {
        text.lines()
            .map(|line| line.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        blank_literals(text)
    };
    code.lines()
        .enumerate()
        .filter(|(_, line)| is_fixed_sleep(line, lua))
        .map(|(n, _)| n + 1)
        .collect()
}

fn is_fixed_sleep(line: &str, lua: bool) -> bool {
    if !lua {
        return line.contains("sleep(") || line.contains("sleep_until(");
    }
    let conditionless_wait = line.match_indices("vim.wait(").any(|(at, call)| {
        let args = &line[at + call.len()..];
        let mut depth = 1;
        for c in args.chars() {
            match c {
                '(' | '{' | '[' => depth += 1,
                ')' | '}' | ']' => depth -= 1,
                ',' if depth == 1 => return false,
                _ => {}
            }
            if depth == 0 {
                return true;
            }
        }
        // The call goes on to the next line: a condition follows.
        false
    });
    conditionless_wait
        || line.contains("uv.sleep(")
        || line.contains("loop.sleep(")
        || line.contains("sleep ")
}
