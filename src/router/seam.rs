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

/// The streamed side of [`join`]: holds the first bytes of a restated
/// continuation until it can tell how much of them repeats.
pub(super) struct Seam {
    before: String,
    pending: String,
    decided: bool,
}

impl Seam {
    /// `before` is the text being continued; `None` when nothing repeats it.
    pub fn new(before: &str, restated: bool) -> Seam {
        let start = before.len().saturating_sub(TAIL);
        let start = (start..=before.len())
            .find(|&i| before.is_char_boundary(i))
            .unwrap_or(before.len());
        Seam {
            before: before[start..].to_owned(),
            pending: String::new(),
            decided: !restated || before.is_empty(),
        }
    }

    /// What of `delta` may be shown now.
    pub fn push(&mut self, delta: String) -> Option<String> {
        if self.decided {
            return Some(delta);
        }
        self.pending.push_str(&delta);
        (self.pending.len() >= self.before.len()).then(|| self.release())
    }

    /// What was held back, at the end of the stream.
    pub fn finish(&mut self) -> Option<String> {
        (!self.decided)
            .then(|| self.release())
            .filter(|s| !s.is_empty())
    }

    fn release(&mut self) -> String {
        self.decided = true;
        let cut = overlap(&self.before, &self.pending);
        self.pending.split_off(cut)
    }
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
        let mut seam = Seam::new(before, true);
        let mut shown = String::new();
        for piece in ["let to", "tal = com", "pute(a, ", "b); }"] {
            shown.extend(seam.push(piece.to_owned()));
        }
        shown.extend(seam.finish());
        assert_eq!(format!("{before}{shown}"), join(before, next, true));
        assert_eq!(shown, "a, b); }");
    }
}
