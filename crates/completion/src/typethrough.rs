//! Type-through: while the user types characters that match the suggestion on
//! screen, the rest of that suggestion is the answer, with no model call.

use dashmap::DashMap;

#[derive(Clone, Debug)]
struct Shown {
    line: usize,
    line_count: usize,
    line_before: String,
    line_after: String,
    text: String,
}

/// Where a request is, as far as type-through cares.
#[derive(Clone, Copy, Debug)]
pub struct Spot<'a> {
    pub line: usize,
    pub line_count: usize,
    pub line_before: &'a str,
    pub line_after: &'a str,
}

#[derive(Debug, Default)]
pub struct TypeThrough {
    shown: DashMap<String, Shown>,
}

impl TypeThrough {
    pub fn remember(&self, doc: &str, spot: Spot, text: &str) {
        let shown = Shown {
            line: spot.line,
            line_count: spot.line_count,
            line_before: spot.line_before.to_owned(),
            line_after: spot.line_after.to_owned(),
            text: text.to_owned(),
        };
        self.shown.insert(doc.to_owned(), shown);
    }

    pub fn forget(&self, doc: &str) {
        self.shown.remove(doc);
    }

    /// The rest of the shown suggestion, if the user has typed a proper prefix of it
    /// and nothing else in the document around it changed.
    pub fn lookup(&self, doc: &str, spot: Spot) -> Option<String> {
        let shown = self.shown.get(doc)?;
        if shown.line != spot.line
            || shown.line_count != spot.line_count
            || shown.line_after != spot.line_after
        {
            return None;
        }
        let typed = spot.line_before.strip_prefix(shown.line_before.as_str())?;
        let rest = shown.text.strip_prefix(typed)?;
        (!rest.trim().is_empty()).then(|| rest.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spot(before: &str) -> Spot<'_> {
        Spot {
            line: 3,
            line_count: 10,
            line_before: before,
            line_after: "",
        }
    }

    #[test]
    fn typing_the_suggestion_answers_with_its_rest() {
        let cache = TypeThrough::default();
        cache.remember("a.rs", spot("let x = "), "compute(1, 2);");
        assert_eq!(
            cache.lookup("a.rs", spot("let x = comp")).as_deref(),
            Some("ute(1, 2);")
        );
    }

    #[test]
    fn diverging_or_moving_misses() {
        let cache = TypeThrough::default();
        cache.remember("a.rs", spot("let x = "), "compute(1, 2);");
        assert_eq!(cache.lookup("a.rs", spot("let x = cx")), None);
        assert_eq!(cache.lookup("a.rs", spot("let x")), None);
        let other_line = Spot {
            line: 4,
            ..spot("let x = c")
        };
        assert_eq!(cache.lookup("a.rs", other_line), None);
        assert_eq!(cache.lookup("b.rs", spot("let x = c")), None);
    }

    #[test]
    fn fully_typed_suggestion_is_spent() {
        let cache = TypeThrough::default();
        cache.remember("a.rs", spot("x = "), "1;");
        assert_eq!(cache.lookup("a.rs", spot("x = 1;")), None);
    }
}
