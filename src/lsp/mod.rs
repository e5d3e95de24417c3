//! The language server front end: documents, completion handlers, model loading
//! with `$/progress`, and configuration from the editor. The custom protocol
//! (notifications, command results) is [`wire`], documented in docs/lsp-extensions.md.

mod actions;
mod backend;
pub mod documents;
mod edits;
mod framing;
mod handlers;
mod kept_local;
mod loader;
mod parked;
pub mod position;
mod progress;
mod server;
pub mod wire;

pub use backend::Backend;
pub use server::serve_stdio;
