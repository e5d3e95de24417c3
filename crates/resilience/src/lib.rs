//! Resilience shared by every switchyard process: error classes, backoff and
//! retry budgets, circuit breakers, the quota governor, and checkpoint-and-park
//! for long work. State lives in [`switchyard_state`].

pub mod backoff;
pub mod breaker;
pub mod classify;
pub mod governor;
pub mod park;
pub mod prefill;
mod settings;
pub mod verdict;

use std::sync::Arc;

use backoff::{AccountRetries, BackoffConfig};
use breaker::Breakers;
use governor::Governor;
pub use settings::ResilienceConfig;
use switchyard_state::{SharedState, StateError};

/// The resilience machinery one process uses, over one shared state.
pub struct Resilience {
    pub state: Arc<dyn SharedState>,
    pub breakers: Breakers,
    pub governor: Governor,
    pub backoff: BackoffConfig,
    pub retries: AccountRetries,
    pub verdicts: verdict::Verdicts,
    pub prefills: prefill::Prefills,
}

impl Resilience {
    pub fn new(state: Arc<dyn SharedState>, config: &ResilienceConfig) -> Resilience {
        Resilience {
            breakers: Breakers::new(
                state.clone(),
                config.breaker.clone(),
                config.when_unavailable,
            ),
            governor: Governor::new(
                state.clone(),
                config.governor.clone(),
                config.when_unavailable,
            ),
            backoff: config.backoff.clone(),
            retries: AccountRetries::default(),
            verdicts: verdict::Verdicts::new(state.clone()),
            prefills: prefill::Prefills::new(state.clone()),
            state,
        }
    }

    /// Opens the configured backend.
    pub fn open(config: &ResilienceConfig) -> Result<Resilience, StateError> {
        Ok(Resilience::new(
            switchyard_state::open(&config.state)?,
            config,
        ))
    }

    /// Unshared state in this process (tests, benchmarks).
    pub fn in_memory() -> Resilience {
        Resilience::new(
            Arc::new(switchyard_state::memory::MemoryState::new()),
            &ResilienceConfig::default(),
        )
    }
}
