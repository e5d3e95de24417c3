//! Building prompts from documents.

// The crates below, by the module names their paths use (`crate::config::…`).
use switchyard_providers as providers;

pub mod chat;
pub mod fim;
pub mod repository;
pub mod span;
