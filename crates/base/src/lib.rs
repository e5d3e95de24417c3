//! The vocabulary every layer shares, and nothing that knows a layer:
//! cancellation, the clock, chain entries, task kinds and tiers, the state and
//! config paths, prompt texts, and the OpenMP wait policy.

pub mod cancel;
pub mod clock;
pub mod entry;
pub mod openmp;
pub mod paths;
pub mod prompts;
pub mod task;
