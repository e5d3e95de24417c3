//! The local engine as a provider: the engine itself is the crate below
//! (`switchyard-engine`), and `chat` makes it a chat
//! [`Provider`](crate::Provider) the router walks like any other entry.

pub mod chat;
