//! switchyard: a language server between code editors and the models that write code.

pub mod cancel;
pub mod clock;
pub mod completion;
pub mod config;
pub mod context;
pub mod core;
pub mod entry;
pub mod gateway;
pub mod local_setup;
pub mod logging;
pub mod lsp;
pub mod models;
pub mod openmp;
pub mod paths;
pub mod privacy;
pub mod probe;
pub mod prompts;
pub mod providers;
pub mod resilience;
pub mod router;
pub mod state;
pub mod task;
