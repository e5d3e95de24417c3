//! The API key type. A [`Secret`] can be sent in a header but never printed:
//! its `Debug` and `Display` both write `[redacted]` (ARCHITECTURE.md invariant 11).

use std::fmt;

/// An API key. Read it once from the environment variable the configuration
/// names, then hand it to a provider constructor.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// Reads the key from environment variable `var`; `None` when it is unset or empty.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| Secret(v.trim().to_owned()))
    }

    /// The key itself, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `[redacted]`; the
    /// last line of defence for error text that quotes a request back.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.0, "[redacted]")
        }
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_key() {
        let secret = Secret::new("sk-ant-very-secret");
        assert_eq!(format!("{secret}"), "[redacted]");
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(secret.clone())), "Some([redacted])");
    }

    #[test]
    fn scrub_replaces_every_occurrence() {
        let secret = Secret::new("sk-123");
        assert_eq!(
            secret.scrub("bad key sk-123 (sk-123)"),
            "bad key [redacted] ([redacted])"
        );
    }
}
