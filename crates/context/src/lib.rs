//! Building prompts from documents.

pub mod chat;
pub mod fim;
pub mod repository;
pub mod span;
