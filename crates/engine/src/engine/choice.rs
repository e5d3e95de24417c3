//! Which window a request brings into its cache, as pure functions of
//! what each candidate costs (the prompt tokens the cache lacks for it) and
//! what decodes before the deadline; the engine builds the candidates,
//! costs them against what its cache and saved states hold, and applies the
//! choice (`window`). ARCHITECTURE.md invariant 20.

/// Whether a request (or a prewarm, with no `decodable`) takes its span's
/// window: where what the cache holds makes it no dearer than the
/// affordable one, or it still decodes before the deadline with a line of
/// answer left (`decodable`).
pub(super) fn takes_span(
    span_cost: usize,
    affordable_cost: usize,
    decodable: Option<usize>,
) -> bool {
    decodable.is_some_and(|line| span_cost <= line) || span_cost <= affordable_cost
}

/// A cut of the affordable window: its length and what the cache lacks of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CutWindow {
    pub len: usize,
    pub cost: usize,
}

/// What a request whose wanted window does not decode in time brings in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Window {
    /// The window it wanted: answered empty if it is late, its fill goes on.
    Wanted,
    /// The cut that starts where the window the cache holds starts.
    Held,
    /// The cut to what decodes in time, from the affordable window.
    Fresh,
}

/// The window for a request whose wanted window lacks `wanted_cost` tokens,
/// more than decode with a line left. The cut starting where the cache's
/// window starts (`held`) where it is at least half as long as the `fresh`
/// cut and leaves the start of a line (typing on at a cold place then
/// decodes only what was typed), else the fresh cut; taken only where it
/// buys the answer time ([`takes_cut`]).
pub(super) fn cut_for(
    wanted_cost: usize,
    held: Option<CutWindow>,
    fresh: CutWindow,
    affordable: Affordable,
) -> Window {
    let held = held.filter(|held| 2 * held.len >= fresh.len && held.cost <= affordable.line_start);
    let (window, cut) = match held {
        Some(held) => (Window::Held, held),
        None => (Window::Fresh, fresh),
    };
    match takes_cut(wanted_cost, cut.cost, affordable) {
        true => window,
        false => Window::Wanted,
    }
}

/// What a request can afford before its deadline, in prompt tokens.
#[derive(Clone, Copy, Debug)]
pub(super) struct Affordable {
    /// Decodable with a line of answer left.
    pub line: usize,
    /// Decodable with the start of a line left.
    pub line_start: usize,
    /// Prompt tokens that decode in the time of one generated token.
    pub per_answer_token: usize,
}

/// Whether a request takes the `cut` window over the one it wanted, which
/// lacks more than leaves a line of answer: where the cut leaves the start
/// of a line and buys the answer at least a token more. A cut keeps only a
/// few lines of the window, so it must buy time: on a busy machine a
/// resident window lacks about what the shortest cut does (its suffix
/// section, 33 tokens against 31, where a generated token costs 7), and
/// cutting there threw the prefix away for nothing. What the cache holds
/// decides.
fn takes_cut(wanted_cost: usize, cut_cost: usize, affordable: Affordable) -> bool {
    let buys_a_token = wanted_cost >= cut_cost + affordable.per_answer_token.max(1);
    buys_a_token && cut_cost <= affordable.line_start
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Idle: a generated token 45 ms, a prompt token 7.6 ms.
    const IDLE: Affordable = Affordable {
        line: 26,
        line_start: 109,
        per_answer_token: 6,
    };
    /// One core busy: a generated token 84 ms, a prompt token 12 ms; no
    /// line fits at all.
    const BUSY: Affordable = Affordable {
        line: 0,
        line_start: 58,
        per_answer_token: 7,
    };

    #[test]
    fn a_window_the_cache_holds_is_kept_over_a_cut_that_decodes_more() {
        // The span's window lacks one token; the shortest cut lacks 31.
        assert!(!takes_cut(1, 31, BUSY));
        assert!(!takes_cut(31, 31, BUSY));
    }

    #[test]
    fn a_cut_that_buys_the_answer_less_than_a_token_keeps_the_window() {
        // The resident window lacks its suffix section (33), the shortest
        // cut 31: two prompt tokens, a third of a generated one.
        assert!(!takes_cut(33, 31, BUSY));
        assert!(takes_cut(59, 31, IDLE), "28 tokens buy four generated ones");
    }

    #[test]
    fn a_cold_window_is_cut_to_what_leaves_the_start_of_a_line() {
        assert!(takes_cut(210, 31, BUSY));
        assert!(
            !takes_cut(210, 59, BUSY),
            "the cut leaves no time to answer"
        );
    }

    fn cut(len: usize, cost: usize) -> CutWindow {
        CutWindow { len, cost }
    }

    #[test]
    fn the_span_s_window_where_the_cache_makes_it_no_dearer_or_it_decodes_in_time() {
        // (span cost, affordable cost, decodable with a line left) -> span?
        let table = [
            ((1, 300, Some(26)), true),
            ((40, 40, None), true),
            ((300, 40, Some(400)), true),
            ((300, 40, Some(26)), false),
            ((300, 40, None), false),
        ];
        for ((span, affordable, decodable), expected) in table {
            assert_eq!(
                takes_span(span, affordable, decodable),
                expected,
                "span {span}, affordable {affordable}, decodable {decodable:?}"
            );
        }
    }

    #[test]
    fn a_cut_starts_where_the_cache_s_window_does_where_that_is_long_enough() {
        // (wanted cost, held cut, fresh cut, what decodes) -> window
        let table = [
            // Typing on at a cold place: the held window lacks what was typed.
            ((210, Some(cut(40, 3)), cut(60, 60), IDLE), Window::Held),
            // Held, but under half the fresh cut's length.
            ((210, Some(cut(20, 3)), cut(60, 60), IDLE), Window::Fresh),
            // Held, but it leaves no start of a line.
            ((210, Some(cut(200, 150)), cut(60, 60), IDLE), Window::Fresh),
            ((210, None, cut(31, 31), BUSY), Window::Fresh),
            // No cut buys a token: the wanted window stays.
            ((33, None, cut(31, 31), BUSY), Window::Wanted),
            ((210, None, cut(59, 59), BUSY), Window::Wanted),
        ];
        for ((wanted, held, fresh, affordable), expected) in table {
            assert_eq!(
                cut_for(wanted, held, fresh, affordable),
                expected,
                "wanted {wanted}, held {held:?}, fresh {fresh:?}, {affordable:?}"
            );
        }
    }
}
