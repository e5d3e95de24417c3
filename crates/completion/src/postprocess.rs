//! Deciding when to complete and shaping what the model wrote.
//!
//! The same boundary rule ([`Situation::boundary`]) stops generation early in the
//! engine and cuts the final text, so the two never disagree.

/// The cursor's surroundings on its own line, and the next lines after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Situation {
    pub line_before: String,
    pub line_after: String,
    /// The first non-blank line after the cursor's line, if any.
    pub next_line: Option<String>,
    pub single_line: bool,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn indent_width(line: &str) -> usize {
    line.chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

const OPENERS: [char; 4] = ['{', '(', '[', ':'];
/// Characters a line does not end on when it is whole: operators,
/// separators, a dot.
const DANGLING: &str = "+-*/%=<>!&|^~,.@\\";
const MAX_LINES: usize = 40;

impl Situation {
    /// `suffix` is the document text after the cursor.
    pub fn new(line_before: &str, suffix: &str) -> Situation {
        let mut rest = suffix.split('\n');
        let line_after = rest.next().unwrap_or("").trim_end_matches('\r').to_owned();
        let next_line = rest
            .map(|l| l.trim_end_matches('\r'))
            .find(|l| !l.trim().is_empty())
            .map(str::to_owned);
        let before = line_before.trim_end();
        let single_line =
            !line_after.trim().is_empty() || !(before.is_empty() || before.ends_with(OPENERS));
        Situation {
            line_before: line_before.to_owned(),
            line_after,
            next_line,
            single_line,
        }
    }

    /// Why no completion should be offered here, if so.
    pub fn skip_reason(&self) -> Option<&'static str> {
        let mid_word = self.line_before.chars().last().is_some_and(is_word_char)
            && self.line_after.chars().next().is_some_and(is_word_char);
        mid_word.then_some("cursor is inside a word")
    }

    /// Byte index where the completion ends, once the generated text shows it:
    /// end of line in single-line situations; in multi-line ones the line that
    /// dedents below the code after the cursor (a closing bracket line is
    /// kept), a line the document already has next, or the line limit.
    pub fn boundary(&self, text: &str) -> Option<usize> {
        if self.single_line {
            return text.find('\n');
        }
        let base_indent = self.scope_indent(text)?;
        // The completion may close the scopes it opens or sits in down to the
        // indentation of the code after it (the hole spans them), but never
        // reach the top level, where a model runs on into new definitions.
        let floor = match &self.next_line {
            Some(next) => base_indent.min(indent_width(next).max(1)),
            None => base_indent.min(1),
        };
        let mut offset = 0;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if !line.ends_with('\n') {
                break; // not complete yet
            }
            let content = line.trim_end();
            let is_first = i == 0;
            // An instruct model closes its code block in Markdown after the code.
            if !is_first && content.trim_start().starts_with("```") {
                return Some(offset);
            }
            if !is_first && !content.trim().is_empty() {
                if self
                    .next_line
                    .as_deref()
                    .is_some_and(|next| next.trim() == content.trim())
                {
                    return Some(offset);
                }
                if indent_width(content) < floor {
                    let closes = content.trim().chars().all(|c| "}])>;,".contains(c));
                    return Some(if closes { offset + line.len() } else { offset });
                }
            }
            if i + 1 >= MAX_LINES {
                return Some(offset + line.len());
            }
            offset += line.len();
        }
        None
    }

    /// Indentation of the scope the completion fills, once the text shows it.
    fn scope_indent(&self, text: &str) -> Option<usize> {
        let mut lines = text.split_inclusive('\n');
        let first = lines.next()?;
        if self.line_before.trim().is_empty() && !first.trim().is_empty() {
            // The first line starts at the cursor, after the line's own indentation.
            return Some(indent_width(&self.line_before) + indent_width(first));
        }
        // The first line continues the cursor's line; the scope shows on the next one.
        lines
            .find(|l| l.ends_with('\n') && !l.trim().is_empty())
            .map(indent_width)
    }

    /// The suggestion to show, or `None` when nothing useful remains.
    /// `truncated` says generation was cut short (deadline or token limit), so a
    /// trailing partial line is dropped when complete lines precede it, and a
    /// first line cut short is shown up to its last sure boundary
    /// ([`usable_start`]).
    pub fn finish(&self, text: &str, truncated: bool) -> Option<String> {
        let line_ended = text.contains('\n');
        let mut text = match self.boundary(text) {
            Some(end) => &text[..end],
            None if truncated && !line_ended => usable_start(text)?,
            None if truncated && !self.single_line => {
                without_dangling_openers(text.rfind('\n').map_or(text, |end| &text[..end]))
            }
            None => text,
        };
        if self.single_line {
            text = text.split('\n').next().unwrap_or("");
            text = strip_suffix_overlap(text, self.line_after.trim_end());
        } else if let (Some(next), Some(last_start)) =
            (&self.next_line, text.trim_end().rfind('\n'))
        {
            // The closing line the document already has.
            if text[last_start..].trim() == next.trim() {
                text = &text[..last_start];
            }
        }
        let text = text.trim_end();
        (!text.trim().is_empty()).then(|| text.to_owned())
    }
}

/// What of a line cut short (by the deadline or the token limit) to show:
/// all of it where it reads as complete (`    return`, as before); else up
/// to its last word that something followed, without a dangling operator
/// or separator (`for i in range(2, int(l**0` shows `for i in range(2,
/// int(l`: the last word may be half of one, and `**` is no start). `None`
/// where no word is left. Tokens are whole, so nothing is cut inside one.
fn usable_start(line: &str) -> Option<&str> {
    if reads_complete(line) {
        return Some(line);
    }
    let start = line
        .trim_end_matches(is_word_char)
        .trim_end_matches(|c: char| c.is_whitespace() || DANGLING.contains(c));
    start.contains(char::is_alphanumeric).then_some(start)
}

/// A cut multi-line answer without its last lines that open a block (`if x:`,
/// `fn f() {`): their body never came. The first line stays, since a hole
/// may be just such a line.
fn without_dangling_openers(text: &str) -> &str {
    let mut text = text;
    while let Some(last_start) = text.trim_end().rfind('\n') {
        if !text.trim_end().ends_with(OPENERS) {
            break;
        }
        text = &text[..last_start];
    }
    text
}

/// Whether a line cut short still reads as a whole: its brackets and quotes
/// are closed and it does not end in an operator, a separator or a dot.
fn reads_complete(line: &str) -> bool {
    let mut open = Vec::new();
    let mut quote = None;
    let mut escaped = false;
    let mut previous = ' ';
    for c in line.chars() {
        // An apostrophe in a word (`don't`) or a Rust lifetime (`&'a`, `<'a>`)
        // opens no quote.
        let apostrophe = c == '\'' && (previous.is_alphanumeric() || "&<".contains(previous));
        previous = c;
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' | '`' if !apostrophe => quote = Some(c),
                '(' | '[' | '{' => open.push(c),
                ')' | ']' | '}' => {
                    let expected = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    if open.pop() != Some(expected) {
                        return false;
                    }
                }
                _ => {}
            },
        }
    }
    let ends_dangling = line
        .trim_end()
        .chars()
        .last()
        .is_none_or(|c| DANGLING.contains(c));
    quote.is_none() && open.is_empty() && !ends_dangling
}

/// Removes the tail of `text` that the line already has after the cursor, so
/// inserting at the cursor does not duplicate `)` or `);`.
fn strip_suffix_overlap<'a>(text: &'a str, after: &str) -> &'a str {
    if after.is_empty() {
        return text;
    }
    if let Some(stripped) = text.strip_suffix(after) {
        return stripped;
    }
    if let Some(at) = text.rfind(after)
        && text[at + after.len()..].chars().all(|c| ";,".contains(c))
    {
        return &text[..at];
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mid_word_with_text_to_the_right_is_skipped() {
        assert!(
            Situation::new("    let val", "ue = 1;\n")
                .skip_reason()
                .is_some()
        );
        assert!(Situation::new("    let val", "\n").skip_reason().is_none());
        assert!(Situation::new("    foo(", "bar)\n").skip_reason().is_none());
    }

    #[test]
    fn text_to_the_right_or_a_started_statement_is_single_line() {
        assert!(Situation::new("    let x = ", "\n").single_line);
        assert!(Situation::new("    foo(", ")\n").single_line);
        assert!(!Situation::new("    ", "\n}").single_line);
        assert!(!Situation::new("fn main() {", "\n}").single_line);
    }

    #[test]
    fn single_line_stops_at_end_of_line_and_strips_what_the_line_already_has() {
        let s = Situation::new("    foo(", ")\n");
        assert_eq!(s.boundary("a, b)\nlet"), Some(5));
        assert_eq!(s.finish("a, b)\nlet y", false).as_deref(), Some("a, b"));
        assert_eq!(s.finish("a, b);", false).as_deref(), Some("a, b"));
    }

    #[test]
    fn multi_line_stops_when_leaving_the_indentation_scope() {
        let s = Situation::new("fn main() {", "\n");
        let text = "\n    let x = 1;\n    x + 1\n}\n\nfn other() {\n";
        assert_eq!(
            s.finish(text, false).as_deref(),
            Some("\n    let x = 1;\n    x + 1\n}")
        );
    }

    #[test]
    fn multi_line_may_close_inner_scopes_down_to_the_code_after_it() {
        // A hole inside a loop, before the function's last line.
        let s = Situation::new("", "\n    return total\n");
        let text = "        total += x\n    total *= 2\n    return total\n";
        assert_eq!(
            s.finish(text, false).as_deref(),
            Some("        total += x\n    total *= 2")
        );
        // With no code after it, the top level still ends it.
        let s = Situation::new("", "\n");
        let text = "        total += x\n    return total\n\ndef other():\n";
        assert_eq!(
            s.finish(text, false).as_deref(),
            Some("        total += x\n    return total")
        );
    }

    #[test]
    fn multi_line_drops_a_closing_line_the_document_already_has() {
        let s = Situation::new("fn main() {", "\n}\n");
        let text = "\n    run();\n}\n";
        assert_eq!(s.finish(text, false).as_deref(), Some("\n    run();"));
    }

    #[test]
    fn a_cut_multi_line_answer_does_not_end_by_opening_a_block() {
        let s = Situation::new("", "\n    return True\n");
        assert_eq!(
            s.finish("        return False\n    if n == 2:\n        ret", true)
                .as_deref(),
            Some("        return False")
        );
        assert_eq!(
            s.finish("        if n < 2:\n            ret", true)
                .as_deref(),
            Some("        if n < 2:"),
            "a hole may be just the opening line"
        );
    }

    #[test]
    fn truncated_multi_line_keeps_only_complete_lines() {
        let s = Situation::new("    ", "\n");
        assert_eq!(
            s.finish("let a = 1;\n    let b = fo", true).as_deref(),
            Some("let a = 1;")
        );
    }

    #[test]
    fn a_line_cut_by_the_deadline_shows_what_of_it_is_sure() {
        let s = Situation::new("    ", "\n");
        let s = Situation {
            single_line: true,
            ..s
        };
        // (what the model had written when the deadline came, what is shown)
        let cases = [
            (
                "for i in range(2, int(l**0",
                Some("for i in range(2, int(l"),
            ),
            (
                "for i in range(len(word) - 2, -1, -1",
                Some("for i in range(len(word) - 2, -1"),
            ),
            ("return a +", Some("return a")),
            ("x = 'abc", Some("x = '")),
            (
                "raise NotImplementedError(\"NotImpl",
                Some("raise NotImplementedError(\""),
            ),
            (" %s)' % (", Some(" %s)' % (")),
            ("return ", Some("return")),
            // Reads as complete: all of it, as before cuts showed anything.
            ("return len(xs)", Some("return len(xs)")),
            ("    return", Some("    return")),
            ("mented", Some("mented")),
            (
                "fn f<'a>(v: &'a str) -> &'a str",
                Some("fn f<'a>(v: &'a str) -> &'a str"),
            ),
            // No word that something followed: nothing sure.
            ("  (", None),
            ("((", None),
            ("", None),
        ];
        for (written, shown) in cases {
            assert_eq!(s.finish(written, true).as_deref(), shown, "{written:?}");
        }
        // Not cut: the line as the model ended it.
        assert_eq!(
            s.finish("for i in range(2, n", false).as_deref(),
            Some("for i in range(2, n")
        );
        // Cut after the line ended: the line is whole.
        assert_eq!(
            s.finish("return a +\nb", true).as_deref(),
            Some("return a +")
        );
    }

    #[test]
    fn a_first_line_of_many_cut_by_the_deadline_shows_what_of_it_is_sure() {
        let s = Situation::new("", "\n    return True\n");
        assert!(!s.single_line);
        assert_eq!(
            s.finish("    if (n < lim", true).as_deref(),
            Some("    if (n"),
            "`n` is a whole word, `lim` may not be, and `<` is no end"
        );
    }

    #[test]
    fn a_markdown_fence_after_the_code_ends_it() {
        let s = Situation::new("    ", "\n");
        assert_eq!(
            s.finish("return x\n```\n\nThis function", false).as_deref(),
            Some("return x")
        );
    }

    #[test]
    fn blank_results_are_no_suggestion() {
        let s = Situation::new("    let x = ", "\n");
        assert_eq!(s.finish("   \n", false), None);
        assert_eq!(s.finish("", false), None);
    }

    #[test]
    fn boundary_waits_for_complete_lines() {
        let s = Situation::new("fn main() {", "\n");
        assert_eq!(s.boundary("\n    let x"), None);
    }
}
