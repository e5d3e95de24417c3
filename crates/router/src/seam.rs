//! Joining a continued answer to the text it continues, or refusing to.
//!
//! A model asked to go on with a cut answer may do so, but it may also
//! restate its last words or sentence, start over from the top (often with
//! its own whitespace and Markdown), or answer something else. The seam holds
//! the first part of the continuation until it knows which: a restatement
//! (any tail of the answer so far that starts a word, the whole answer being
//! a restart) is cut; text that goes on after a prefill is joined as it is;
//! anything else is [`Unjoinable`], and the router serves a whole answer
//! from one entry alone or ends a stream with an error. A garbled success is
//! never the result of a guess here (ARCHITECTURE.md invariant 18).

/// Restatements shorter than this (in characters that count, see
/// [`counts`]) are not told apart from chance: "to" + "town" is no repeat.
/// A genuine continuation almost never begins by repeating the words it
/// follows, so three is enough.
const MIN_RESTATEMENT: usize = 3;
/// Distinctive words of a continuation's new text read before it is
/// joined: enough to tell an answer that starts over in other words from
/// one that goes on.
const WORDS_TO_JUDGE: usize = 8;
/// Distinctive words, in order, that a continuation shares with the
/// beginning of the answer for it to count as that answer started over.
const RESEMBLANCE: usize = 4;

/// How the model was asked to go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// A fresh answer: nothing to join.
    Fresh,
    /// The answer so far was the model's own message, to extend (a prefill).
    Prefill,
    /// The answer so far was shown as the model's earlier turn, followed by
    /// the instruction to begin with its last words and go on.
    Restated,
}

/// Why a continuation cannot be joined to the text it was asked to continue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unjoinable(pub String);

/// The streamed side of a join: what of each delta the caller may be shown.
pub(super) struct Seam {
    form: Form,
    /// The answer so far as the model was shown it (trailing whitespace cut).
    before: String,
    /// Whitespace after `before` that the caller already has.
    shown: String,
    /// The tails of `before` a restatement may be, worked out once.
    tails: Tails,
    /// Continuation text not yet released.
    pending: String,
    stage: Stage,
    /// Continuation text released to the caller so far.
    released: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Stage {
    /// Telling a restatement, a continuation and something else apart.
    Deciding,
    /// The seam is known; dropping whitespace the caller already has.
    Whitespace,
    Open,
    Refused(Unjoinable),
}

impl Seam {
    /// `before` is the answer so far as the model was shown it, `shown` the
    /// whitespace after it that the caller already has.
    pub fn new(form: Form, before: &str, shown: &str) -> Seam {
        let stage = match form {
            Form::Fresh => Stage::Open,
            _ if before.is_empty() => Stage::Whitespace,
            _ => Stage::Deciding,
        };
        let tails = match stage {
            Stage::Deciding => Tails::of(before),
            _ => Tails::default(),
        };
        Seam {
            form,
            before: before.to_owned(),
            shown: shown.to_owned(),
            tails,
            pending: String::new(),
            stage,
            released: String::new(),
        }
    }

    /// What of `delta` may be shown now.
    pub fn push(&mut self, delta: &str) -> Result<Option<String>, Unjoinable> {
        self.pending.push_str(delta);
        self.advance(false)
    }

    /// What was held back, at the end of the stream.
    pub fn finish(&mut self) -> Result<Option<String>, Unjoinable> {
        self.advance(true)
    }

    /// The whole answer: the text continued, then what was released of the
    /// continuation (so far, when the stream died).
    pub fn joined(&self) -> String {
        format!("{}{}{}", self.before, self.shown, self.released)
    }

    fn advance(&mut self, end: bool) -> Result<Option<String>, Unjoinable> {
        loop {
            match &self.stage {
                Stage::Refused(why) => return Err(why.clone()),
                Stage::Deciding => match self.decide(end) {
                    None => return Ok(None),
                    Some(Ok(cut)) => {
                        self.pending.drain(..cut);
                        self.stage = Stage::Whitespace;
                    }
                    Some(Err(why)) => self.stage = Stage::Refused(why),
                },
                Stage::Whitespace => {
                    if !end
                        && self.pending.len() < self.shown.len()
                        && self.shown.starts_with(&self.pending)
                    {
                        return Ok(None);
                    }
                    let common = common_prefix(&self.pending, &self.shown);
                    self.pending.drain(..common);
                    self.stage = Stage::Open;
                }
                Stage::Open => {
                    if self.pending.is_empty() {
                        return Ok(None);
                    }
                    let text = std::mem::take(&mut self.pending);
                    self.released.push_str(&text);
                    return Ok(Some(text));
                }
            }
        }
    }

    /// Where the new text of the continuation starts (bytes of `pending` to
    /// drop), `None` while it cannot be told yet, or why it never will be.
    fn decide(&self, end: bool) -> Option<Result<usize, Unjoinable>> {
        let (cut, restated) = match self.tails.restated_in(&self.pending, end) {
            Restatement::Undecided => return None,
            Restatement::Cut(cut) => (cut, true),
            Restatement::StoppedInside => {
                return Some(Err(Unjoinable(
                    "it restated part of the answer so far and stopped there".into(),
                )));
            }
            Restatement::None if self.form == Form::Restated => {
                return Some(Err(Unjoinable(
                    "it neither began with the words the answer stopped at nor started over with the same text, so where it goes on cannot be told"
                        .into(),
                )));
            }
            Restatement::None => (0, false),
        };
        let rest = &self.pending[cut..];
        if !end && distinctive_words(rest, WORDS_TO_JUDGE).len() < WORDS_TO_JUDGE {
            return None;
        }
        let why = if resembles_opening(&self.before, rest) {
            Some("it started the answer over in other words".to_owned())
        } else if restated {
            None
        } else {
            opens_anew(&self.before, &self.shown, rest)
        };
        Some(why.map_or(Ok(cut), |why| Err(Unjoinable(why))))
    }
}

/// Characters that count when texts are compared: whitespace and Markdown
/// emphasis, code and heading marks differ between a text and its restatement.
fn counts(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '*' | '_' | '`' | '#' | '>' | '~')
}

/// The characters of `text` that count, with the byte just after each.
fn counted(text: &str) -> Vec<(char, usize)> {
    text.char_indices()
        .filter(|(_, c)| counts(*c))
        .map(|(i, c)| (c, i + c.len_utf8()))
        .collect()
}

enum Restatement {
    /// The continuation begins with a tail of the answer so far; the new text
    /// starts at this byte.
    Cut(usize),
    /// It might yet: what came so far begins such a tail.
    Undecided,
    /// It ended inside a restated tail.
    StoppedInside,
    None,
}

/// What a restatement of the answer so far may be: its characters that
/// count, and where the tails it may begin with start (see [`tail_starts`]).
#[derive(Default)]
struct Tails {
    counted: Vec<char>,
    starts: Vec<usize>,
}

impl Tails {
    fn of(before: &str) -> Tails {
        Tails {
            counted: counted(before).into_iter().map(|(c, _)| c).collect(),
            starts: tail_starts(before),
        }
    }

    /// Whether `next` begins by restating a tail of the answer so far that
    /// starts a word (the whole of it when the model started over),
    /// comparing only the characters that count. The longest such tail wins.
    fn restated_in(&self, next: &str, end: bool) -> Restatement {
        let next_counted = counted(next);
        let mut longest_possible = false;
        for &start in &self.starts {
            let tail = &self.counted[start..];
            let shared = tail.len().min(next_counted.len());
            if tail[..shared]
                .iter()
                .zip(&next_counted[..shared])
                .any(|(a, (b, _))| a != b)
            {
                continue;
            }
            if next_counted.len() >= tail.len() {
                let cut = next_counted[tail.len() - 1].1;
                return Restatement::Cut(close_marks(next, cut));
            }
            // A longer tail is still possible: wait for it, unless the stream ended.
            if !end {
                return Restatement::Undecided;
            }
            longest_possible = true;
        }
        if longest_possible {
            Restatement::StoppedInside
        } else {
            Restatement::None
        }
    }
}

/// Where the tails of `before` that a restatement may begin with start (as
/// indices into its counted characters), longest first: each start of a
/// word or of a run of text after whitespace (`// a comment`), whose tail is
/// long enough to tell.
fn tail_starts(before: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut index = 0;
    let mut previous: Option<char> = None;
    for c in before.chars() {
        if counts(c) {
            let after = |p: char| !counts(p) || (is_word(c) && !is_word(p));
            if previous.is_none_or(after) {
                starts.push(index);
            }
            index += 1;
        }
        previous = Some(c);
    }
    starts.retain(|&start| index - start >= MIN_RESTATEMENT);
    starts
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Past the end of a restated tail, the marks that close what the
/// restatement opened inside it (`` `Entry` ``, `**Occupied**`) belong to it.
fn close_marks(next: &str, cut: usize) -> usize {
    let mut end = cut;
    for mark in ['`', '*', '_', '~'] {
        let opened = next[..cut].matches(mark).count() % 2 == 1;
        if opened {
            end += next[end..].chars().take_while(|&c| c == mark).count();
        }
    }
    end
}

/// Whether the new text of a continuation resembles how the answer began:
/// the answer started over in other words.
fn resembles_opening(before: &str, next: &str) -> bool {
    let opening = distinctive_words(before, 2 * WORDS_TO_JUDGE);
    let start = distinctive_words(next, WORDS_TO_JUDGE);
    common_subsequence(&opening, &start) >= RESEMBLANCE
}

/// Why `next`, after a prefill of `before` that it does not restate, reads
/// as a new answer rather than its continuation: it opens as answers do, or
/// it opens a sentence on the line where `before` was in the middle of one
/// (outside code).
fn opens_anew(before: &str, shown: &str, next: &str) -> Option<String> {
    let first = next.trim_start_matches(|c: char| !counts(c));
    if OPENERS.iter().any(|opener| first.starts_with(opener)) {
        return Some("it began a new answer instead of going on".into());
    }
    let same_line = !shown.contains('\n') && !next[..next.len() - first.len()].contains('\n');
    let mid_sentence = !before.ends_with(['.', '!', '?', ':', ';']);
    let in_code = before.matches("```").count() % 2 == 1;
    let capital = first.chars().next().is_some_and(char::is_uppercase) && !first.starts_with("I ");
    (same_line && mid_sentence && !in_code && capital)
        .then(|| "it opened a new sentence where the answer was in the middle of one".to_owned())
}

/// How answers open that do not go on with anything.
const OPENERS: &[&str] = &[
    "Sure",
    "Certainly",
    "Of course",
    "Here is",
    "Here's",
    "Here are",
    "I apologize",
    "Apologies",
    "As an AI",
    "Continuing",
];

/// The first `most` words of `text` that carry meaning for a resemblance, lowercased.
fn distinctive_words(text: &str, most: usize) -> Vec<String> {
    text.split(|c: char| !is_word(c) && c != ':')
        .map(str::to_lowercase)
        .filter(|w| distinctive(w))
        .take(most)
        .collect()
}

fn distinctive(word: &str) -> bool {
    const COMMON: &[&str] = &[
        "the", "and", "for", "are", "was", "that", "this", "with", "you", "its", "not", "but",
        "when", "then", "than", "from", "into", "one", "has", "have", "can", "will", "which",
    ];
    word.chars().filter(|c| c.is_alphanumeric()).count() >= 3 && !COMMON.contains(&word)
}

/// The length of the longest common subsequence of two short word lists.
fn common_subsequence(a: &[String], b: &[String]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The length of the longest common prefix of `a` and `b`, on a char boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
}

#[cfg(test)]
mod tests;
