//! switchyard: a language server between code editors and the models that write code.
//!
//! This crate is the front ends and nothing else: the language server, the
//! gateway and the log (the binary is `main.rs`). Every layer below is a crate
//! of its own under `crates/` (ARCHITECTURE.md, "Module map"), named by its
//! crate path (`switchyard_router::Router`), never re-exported here.

pub mod gateway;
pub mod logging;
pub mod lsp;
