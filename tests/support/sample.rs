//! An in-memory key-value store with expiry, used as a completion target.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One stored value and when it stops being valid.
#[derive(Debug, Clone)]
pub struct Entry {
    pub value: String,
    pub expires_at: Option<Instant>,
}

impl Entry {
    pub fn new(value: impl Into<String>, ttl: Option<Duration>) -> Self {
        Entry {
            value: value.into(),
            expires_at: ttl.map(|ttl| Instant::now() + ttl),
        }
    }

    pub fn is_expired(&self, now: Instant) -> bool {
        match self.expires_at {
            Some(deadline) => now >= deadline,
            None => false,
        }
    }
}

#[derive(Debug, Default)]
pub struct Store {
    entries: HashMap<String, Entry>,
    hits: u64,
    misses: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum StoreError {
    KeyTooLong { len: usize, max: usize },
    EmptyKey,
}

pub const MAX_KEY_LEN: usize = 256;

fn validate_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(StoreError::KeyTooLong { len: key.len(), max: MAX_KEY_LEN });
    }
    Ok(())
}

impl Store {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, key: &str, value: &str, ttl: Option<Duration>) -> Result<(), StoreError> {
        validate_key(key)?;
        self.entries.insert(key.to_string(), Entry::new(value, ttl));
        Ok(())
    }

    pub fn get(&mut self, key: &str) -> Option<&str> {
        let now = Instant::now();
        let expired = self.entries.get(key).map(|e| e.is_expired(now));
        match expired {
            Some(false) => {
                self.hits += 1;
                self.entries.get(key).map(|e| e.value.as_str())
            }
            Some(true) => {
                self.entries.remove(key);
                self.misses += 1;
                None
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.entries.remove(key).map(|e| e.value)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops every expired entry and returns how many were dropped.
    pub fn purge_expired(&mut self) -> usize {
        let now = Instant::now();
        let before = self.entries.len();
        self.entries.retain(|_, entry| !entry.is_expired(now));
        before - self.entries.len()
    }

    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            return 0.0;
        }
        self.hits as f64 / total as f64
    }

    pub fn keys_with_prefix(&self, prefix: &str) -> Vec<&str> {
        let mut keys: Vec<&str> = self
            .entries
            .keys()
            .filter(|k| k.starts_with(prefix))
            .map(|k| k.as_str())
            .collect();
        keys.sort_unstable();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_then_get_returns_the_value() {
        let mut store = Store::new();
        store.insert("a", "1", None).unwrap();
        assert_eq!(store.get("a"), Some("1"));
    }

    #[test]
    fn empty_key_is_rejected() {
        let mut store = Store::new();
        assert_eq!(store.insert("", "1", None), Err(StoreError::EmptyKey));
    }

    #[test]
    fn expired_entries_are_purged() {
        let mut store = Store::new();
        store.insert("a", "1", Some(Duration::from_millis(0))).unwrap();
        assert_eq!(store.purge_expired(), 1);
        assert!(store.is_empty());
    }
}
