//! switchyard: a language server between code editors and the models that write code.
//!
//! This crate is the front ends (the language server and the gateway) and the
//! log; every layer below is its own crate (ARCHITECTURE.md, "Module map"),
//! re-exported here under its module name so the front ends, the binary and
//! the tests reach them as `switchyard::router`, `switchyard::core`, ...

pub mod gateway;
pub mod logging;
pub mod lsp;

pub use switchyard_base::{cancel, clock, entry, openmp, paths, prompts, task};
pub use switchyard_completion as completion;
pub use switchyard_config as config;
pub use switchyard_config::local_setup;
pub use switchyard_context as context;
pub use switchyard_core as core;
pub use switchyard_engine as engine;
pub use switchyard_models as models;
pub use switchyard_privacy as privacy;
pub use switchyard_probe as probe;
pub use switchyard_providers as providers;
pub use switchyard_resilience as resilience;
pub use switchyard_router as router;
pub use switchyard_state as state;
