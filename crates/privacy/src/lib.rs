//! What leaves the machine: documents only the local model may serve
//! (`rules`), secrets replaced in every outgoing prompt (`redact`), and a log
//! of every remote request without its text (`audit`).

pub mod audit;
pub mod redact;
pub mod rules;
