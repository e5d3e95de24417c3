//! A file with a gap, for `switchyard complete demo/complete-me.rs:10:41`.

use std::collections::HashMap;

/// Counts how often each word occurs in `text`, ignoring case.
pub fn word_counts(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for word in text.split_whitespace() {
        let word = word.to_lowercase();
        *counts.entry(word).or_insert(0)
    }
    counts
}

fn main() {
    let counts = word_counts("the cat and the hat");
    println!("{counts:?}");
}
