//! The language server front end: documents, completion handlers, model loading
//! with `$/progress`, and configuration from the editor.

mod actions;
pub mod documents;
mod edits;
mod framing;
mod handlers;
mod loader;
mod parked;
pub mod position;
mod server;

pub use server::{Backend, serve_stdio};
