//! Building prompts from documents.

pub mod fim;
