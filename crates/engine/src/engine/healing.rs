//! Token healing. A prefix that ends inside a word (`def _`, `delimn`)
//! ends on a token the model would rarely have produced there, and the
//! model then goes on badly: a lost `l`, a repeated ` raise`. The prefix's
//! last token is taken back, and the answer's first tokens are chosen,
//! greedily, among those that spell its text again (` __init__` for ` _`),
//! so the model picks the token the whole word wants; the answer leaves out
//! the text the prefix already had.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// Every token's text, to find the tokens that spell a taken-back one.
pub(super) struct Pieces {
    /// The texts one after another; token `t`'s ends at `ends[t]`.
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Pieces {
    /// The texts of `model`'s tokens; a control or end token has none, so
    /// it never spells anything.
    pub(super) fn of(model: &LlamaModel) -> Pieces {
        let vocab = model.vocab();
        let mut pieces = Pieces {
            bytes: Vec::new(),
            ends: Vec::new(),
        };
        for id in 0..vocab.n_tokens() {
            let token = LlamaToken(id);
            if !(vocab.is_control(token) || vocab.is_eog(token)) {
                pieces
                    .bytes
                    .extend(vocab.token_to_piece(token, false, None));
            }
            pieces.ends.push(pieces.bytes.len());
        }
        pieces
    }

    fn piece(&self, token: usize) -> &[u8] {
        let start = token.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.bytes[start..self.ends[token]]
    }

    /// How many of `tokens` (the prefix's, `prefix` tokenized) stay when the
    /// prefix ends inside a word, and the text of the one taken back; `None`
    /// where nothing is taken back.
    pub(super) fn take_back(&self, prefix: &str, tokens: &[i32]) -> Option<(usize, Vec<u8>)> {
        if !prefix.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let last = *tokens.last()?;
        let piece = self.piece(
            usize::try_from(last)
                .ok()
                .filter(|&t| t < self.ends.len())?,
        );
        (!piece.is_empty() && prefix.as_bytes().ends_with(piece))
            .then(|| (tokens.len() - 1, piece.to_vec()))
    }

    /// The token that `logits` rank highest among those whose text agrees
    /// with `left`, the rest of the text taken back (it starts with `left`,
    /// or is a start of it), and how far ahead of the next such token it is.
    pub(super) fn best_agreeing(&self, logits: &[f32], left: &[u8]) -> Option<(LlamaToken, f32)> {
        let mut best: Option<(usize, f32)> = None;
        let mut runner_up = f32::NEG_INFINITY;
        for (token, &logit) in logits.iter().enumerate().take(self.ends.len()) {
            if !agrees(self.piece(token), left) {
                continue;
            }
            match best {
                Some((_, top)) if logit <= top => runner_up = runner_up.max(logit),
                _ => {
                    runner_up = best.map_or(runner_up, |(_, top)| top);
                    best = Some((token, logit));
                }
            }
        }
        let (token, top) = best?;
        Some((LlamaToken(i32::try_from(token).ok()?), top - runner_up))
    }
}

/// Whether a token's `piece` can come next while `left` is still to be
/// spelled.
fn agrees(piece: &[u8], left: &[u8]) -> bool {
    !piece.is_empty() && (piece.starts_with(left) || left.starts_with(piece))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(texts: &[&str]) -> Pieces {
        let mut pieces = Pieces {
            bytes: Vec::new(),
            ends: Vec::new(),
        };
        for text in texts {
            pieces.bytes.extend(text.as_bytes());
            pieces.ends.push(pieces.bytes.len());
        }
        pieces
    }

    #[test]
    fn a_prefix_ending_inside_a_word_gives_back_its_last_token() {
        // Token 3 is a control token: it has no text.
        let vocab = pieces(&["def", " _", "_init", "", " x"]);
        assert_eq!(vocab.take_back("def _", &[0, 1]), Some((1, b" _".to_vec())));
        assert_eq!(vocab.take_back("def", &[0]), Some((0, b"def".to_vec())));
        // Not inside a word: nothing taken back.
        assert_eq!(vocab.take_back("def ", &[0, 4]), None);
        assert_eq!(vocab.take_back("x = (", &[4]), None);
        // A last token whose text is not the prefix's end, or has none.
        assert_eq!(vocab.take_back("def _", &[0, 4]), None);
        assert_eq!(vocab.take_back("def", &[3]), None);
        assert_eq!(vocab.take_back("def", &[]), None);
        assert_eq!(vocab.take_back("def", &[99]), None);
    }

    #[test]
    fn the_first_tokens_spell_what_was_taken_back() {
        let vocab = pieces(&[" __init__", " _", " ", "_", "x", " raise", ""]);
        // (logits, what is left to spell, the token chosen, its margin)
        let cases: [(&[f32], &[u8], Option<(i32, f32)>); 5] = [
            // The best token overall ("x") does not agree: the best that does.
            (&[5.0, 1.0, 0.0, 0.0, 9.0, 0.0, 0.0], b" _", Some((0, 4.0))),
            // A start of what is left agrees too.
            (&[1.0, 2.0, 3.0, 0.0, 9.0, 0.0, 0.0], b" _", Some((2, 1.0))),
            // Then the rest: `_` (and tokens that go on from it).
            (
                &[1.0, 2.0, 3.0, 4.0, 9.0, 0.0, 0.0],
                b"_",
                Some((3, f32::INFINITY)),
            ),
            // Nothing agrees.
            (&[1.0; 7], b"q", None),
            // A token without text never agrees.
            (&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0], b" ", Some((0, 0.0))),
        ];
        for (logits, left, expected) in cases {
            let chosen = vocab.best_agreeing(logits, left).map(|(t, m)| (t.0, m));
            assert_eq!(chosen, expected, "{:?}", String::from_utf8_lossy(left));
        }
    }
}
