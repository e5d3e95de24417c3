//! Model providers. `local/` holds the in-process llama.cpp engine.

pub mod local;
