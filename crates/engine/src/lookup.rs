//! Drafts for speculative decoding by n-gram lookup: code repeats its own
//! identifiers and phrases, so the tokens that followed the last few tokens the
//! previous time they appeared are a good guess for what follows now.
//!
//! Pure functions over token slices; the engine verifies a draft in one batch
//! and keeps only what greedy sampling would have produced anyway
//! (ARCHITECTURE.md invariant 15).
//!
//! A draft token is not free: on a CPU, each one adds most of a prompt token's
//! cost to the step (measured on the 2-core box: a step of 1 token 37 ms, of 9
//! tokens 170 ms). So the draft is only as long as it is expected to pay, from
//! the measured acceptance and the measured costs.

use std::time::Duration;

/// Longest and shortest n-gram looked up. Single tokens repeat too often to
/// predict anything (`.`, `(`, a space).
const LONGEST_NGRAM: usize = 4;
const SHORTEST_NGRAM: usize = 2;

/// The tokens that followed the most recent earlier occurrence of the longest
/// n-gram ending `history`, at most `max` of them. Empty when nothing matches.
pub fn draft(history: &[i32], max: usize) -> &[i32] {
    if max == 0 {
        return &[];
    }
    for n in (SHORTEST_NGRAM..=LONGEST_NGRAM).rev() {
        if history.len() <= n {
            continue;
        }
        let key = &history[history.len() - n..];
        // Most recent first: nearby text predicts best. The occurrence must end
        // before the key itself, so at least one token follows it.
        let found = (0..history.len() - n)
            .rev()
            .find(|&start| &history[start..start + n] == key);
        if let Some(start) = found {
            let from = start + n;
            return &history[from..(from + max).min(history.len())];
        }
    }
    &[]
}

/// How often draft tokens are accepted: a geometric model (each draft token
/// stands with probability `p` until the first one that does not), from
/// decayed counts so it follows what the user is writing now.
#[derive(Clone, Debug)]
pub struct Acceptance {
    accepted: f64,
    rejections: f64,
    steps_without: u32,
}

/// Weight of older steps per new one.
const DECAY: f64 = 0.9;
/// While drafting does not pay, one step in this many still drafts a token,
/// so the estimate can see the text become repetitive again.
const EXPLORE_EVERY: u32 = 8;

impl Default for Acceptance {
    /// An even prior worth a few steps: drafting starts, and stops quickly if
    /// drafts are rejected.
    fn default() -> Acceptance {
        Acceptance {
            accepted: 2.0,
            rejections: 2.0,
            steps_without: 0,
        }
    }
}

impl Acceptance {
    /// The chance that the next draft token stands.
    pub fn rate(&self) -> f64 {
        self.accepted / (self.accepted + self.rejections)
    }

    /// Draft tokens worth verifying: the k-th pays while the chance it stands,
    /// times the cost of a step it saves, exceeds what it adds to this step.
    pub fn worth(&self, token_cost: Duration, draft_token_cost: Duration) -> usize {
        let p = self.rate();
        let ratio = draft_token_cost.as_secs_f64() / token_cost.as_secs_f64().max(1e-9);
        if ratio <= 0.0 || p >= 1.0 {
            return usize::MAX;
        }
        if p <= 0.0 || ratio >= 1.0 || p <= ratio {
            return 0;
        }
        (ratio.ln() / p.ln()).floor() as usize
    }

    /// Whether this step should draft one token although it does not pay.
    pub fn explore(&mut self) -> bool {
        self.steps_without += 1;
        self.steps_without.is_multiple_of(EXPLORE_EVERY)
    }

    pub fn note(&mut self, drafted: usize, accepted: usize) {
        self.steps_without = 0;
        self.accepted = self.accepted * DECAY + accepted as f64;
        self.rejections = self.rejections * DECAY + f64::from(u8::from(accepted < drafted));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tokens_after_the_last_occurrence_are_drafted() {
        // "a b c d e ... a b" → drafts "c d e"
        let history = [1, 2, 3, 4, 5, 9, 1, 2];
        assert_eq!(draft(&history, 3), &[3, 4, 5]);
        assert_eq!(draft(&history, 10), &[3, 4, 5, 9, 1, 2]);
    }

    #[test]
    fn the_longest_matching_ngram_wins_over_a_more_recent_shorter_one() {
        // ends "7 1 2": the 3-gram matched at the start, the 2-gram "1 2" later too.
        let history = [7, 1, 2, 30, 31, 1, 2, 40, 7, 1, 2];
        assert_eq!(draft(&history, 2), &[30, 31]);
    }

    #[test]
    fn the_most_recent_occurrence_wins() {
        let history = [1, 2, 10, 1, 2, 20, 1, 2];
        assert_eq!(draft(&history, 1), &[20]);
    }

    #[test]
    fn no_match_or_no_room_drafts_nothing() {
        assert!(draft(&[1, 2, 3, 4], 8).is_empty());
        assert!(draft(&[1, 2, 1, 2], 0).is_empty());
        assert!(draft(&[], 8).is_empty());
        // a single repeated token is not enough
        assert!(draft(&[5, 1, 6, 1], 8).is_empty());
    }

    const TOKEN: Duration = Duration::from_millis(37);
    const DRAFT_TOKEN: Duration = Duration::from_millis(17);

    #[test]
    fn drafts_are_as_long_as_they_pay() {
        let mut acceptance = Acceptance::default();
        assert_eq!(
            acceptance.worth(TOKEN, DRAFT_TOKEN),
            1,
            "the prior drafts a token"
        );
        for _ in 0..20 {
            acceptance.note(4, 4);
        }
        assert!(
            acceptance.worth(TOKEN, DRAFT_TOKEN) >= 4,
            "{}",
            acceptance.rate()
        );
        for _ in 0..20 {
            acceptance.note(4, 0);
        }
        assert_eq!(
            acceptance.worth(TOKEN, DRAFT_TOKEN),
            0,
            "{}",
            acceptance.rate()
        );
        // free draft tokens are always worth it; ones as dear as a step never
        assert_eq!(acceptance.worth(TOKEN, Duration::ZERO), usize::MAX);
        assert_eq!(acceptance.worth(TOKEN, TOKEN), 0);
    }

    #[test]
    fn drafting_that_does_not_pay_still_explores_now_and_then() {
        let mut acceptance = Acceptance::default();
        let explored = (0..EXPLORE_EVERY * 3)
            .filter(|_| acceptance.explore())
            .count();
        assert_eq!(explored, 3);
    }

    #[test]
    fn a_run_of_one_token_drafts_more_of_it() {
        let history = [3, 3, 3, 3];
        assert_eq!(draft(&history, 8), &[3]);
    }
}
