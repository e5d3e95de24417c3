//! Joining a continued answer to the text it continues. A model asked to go
//! on from a restated partial answer (no prefill) often starts by repeating
//! its last words; the repeat is cut at the seam, in the final text and in
//! the streamed deltas alike, so the caller never reads a word twice.

/// How much of the end of the earlier text a repeat is looked for in.
const TAIL: usize = 64;
/// Shorter overlaps are left alone: "to" + "town" is not a repeat.
const MIN_OVERLAP: usize = 6;

/// How many leading bytes of `next` repeat the end of `before`: the longest
/// overlap of at least [`MIN_OVERLAP`] bytes that starts a word in `before`.
pub(super) fn overlap(before: &str, next: &str) -> usize {
    let most = before.len().min(next.len()).min(TAIL);
    (MIN_OVERLAP..=most)
        .rev()
        .filter(|&k| next.is_char_boundary(k))
        .find(|&k| {
            let start = before.len() - k;
            before.ends_with(&next[..k])
                && before[..start]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !c.is_alphanumeric() && c != '_')
        })
        .unwrap_or(0)
}

/// `before` followed by `next`, the repeat cut when the model restated.
pub(super) fn join(before: &str, next: &str, restated: bool) -> String {
    let cut = if restated { overlap(before, next) } else { 0 };
    format!("{before}{}", &next[cut..])
}

/// The streamed side of [`join`]: holds the first bytes of a continuation
/// until it can tell how much of them the caller already has: a restated
/// ending, then whitespace the caller was streamed but the model was not
/// shown (it continues the partial answer trimmed).
pub(super) struct Seam {
    before: String,
    shown: String,
    pending: String,
    stage: Stage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Overlap,
    Whitespace,
    Open,
}

impl Seam {
    /// `before` is the text being continued, as the model was shown it;
    /// `shown` the whitespace after it that the caller already has.
    pub fn new(before: &str, restated: bool, shown: &str) -> Seam {
        let start = before.len().saturating_sub(TAIL);
        let start = (start..=before.len())
            .find(|&i| before.is_char_boundary(i))
            .unwrap_or(before.len());
        let stage = match (restated && !before.is_empty(), shown.is_empty()) {
            (true, _) => Stage::Overlap,
            (false, false) => Stage::Whitespace,
            (false, true) => Stage::Open,
        };
        Seam {
            before: before[start..].to_owned(),
            shown: shown.to_owned(),
            pending: String::new(),
            stage,
        }
    }

    /// What of `delta` may be shown now.
    pub fn push(&mut self, delta: String) -> Option<String> {
        if self.stage == Stage::Open {
            return Some(delta);
        }
        self.pending.push_str(&delta);
        self.advance(false)
    }

    /// What was held back, at the end of the stream.
    pub fn finish(&mut self) -> Option<String> {
        self.advance(true)
    }

    fn advance(&mut self, end: bool) -> Option<String> {
        loop {
            match self.stage {
                Stage::Overlap if end || self.pending.len() >= self.before.len() => {
                    let cut = overlap(&self.before, &self.pending);
                    self.pending.drain(..cut);
                    self.stage = Stage::Whitespace;
                }
                Stage::Whitespace
                    if end
                        || self.pending.len() >= self.shown.len()
                        || !self.shown.starts_with(&self.pending) =>
                {
                    let common = common_prefix(&self.pending, &self.shown);
                    self.pending.drain(..common);
                    self.stage = Stage::Open;
                }
                Stage::Open => {
                    return (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending));
                }
                _ => return None,
            }
        }
    }
}

/// The length of the longest common prefix of `a` and `b`, on a char boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restated_ending_is_cut_once() {
        let before = "The function adds two numbers and";
        let next = "two numbers and returns their sum.";
        assert_eq!(
            join(before, next, true),
            "The function adds two numbers and returns their sum."
        );
        assert_eq!(
            join(before, " returns it.", true),
            format!("{before} returns it.")
        );
    }

    #[test]
    fn short_or_mid_word_overlaps_are_not_repeats() {
        assert_eq!(join("we went to", "town", true), "we went totown");
        assert_eq!(
            join("we renumber", "number them", true),
            "we renumbernumber them"
        );
        assert_eq!(join("a big number", "number of", true), "a big number of");
        assert_eq!(join("x", "anything", false), "xanything");
    }

    #[test]
    fn the_stream_shows_what_the_final_text_holds() {
        let before = "fn main() { let total = compute(";
        let next = "let total = compute(a, b); }";
        let mut seam = Seam::new(before, true, "");
        let mut shown = String::new();
        for piece in ["let to", "tal = com", "pute(a, ", "b); }"] {
            shown.extend(seam.push(piece.to_owned()));
        }
        shown.extend(seam.finish());
        assert_eq!(format!("{before}{shown}"), join(before, next, true));
        assert_eq!(shown, "a, b); }");
    }

    fn stream(seam: &mut Seam, deltas: &[&str]) -> String {
        let mut shown: String = deltas
            .iter()
            .filter_map(|d| seam.push((*d).to_owned()))
            .collect();
        shown.extend(seam.finish());
        shown
    }

    #[test]
    fn whitespace_the_caller_already_has_is_not_shown_twice() {
        let mut seam = Seam::new("t01 t02", false, " ");
        assert_eq!(stream(&mut seam, &[" ", "t03", " t04"]), "t03 t04");
        // Cut between two newlines: the prefill continues with both.
        let mut seam = Seam::new("is not.", false, "\n");
        assert_eq!(
            format!("is not.\n{}", stream(&mut seam, &["\n", "\nor_insert"])),
            "is not.\n\nor_insert"
        );
        // A restating model repeats the words, then the break the caller has.
        let mut seam = Seam::new("it is not.", true, "\n\n");
        let shown = stream(&mut seam, &["is no", "t.\n", "\nor_insert"]);
        assert_eq!(format!("it is not.\n\n{shown}"), "it is not.\n\nor_insert");
    }
}
