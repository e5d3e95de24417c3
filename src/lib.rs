//! switchyard: a language server between code editors and the models that write code.

pub mod cancel;
pub mod providers;
