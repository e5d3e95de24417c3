//! A CPU hog for benchmarks: busy loops at normal priority on every core, the
//! way a build or an indexer holds a user's machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Busy loops on every core until dropped.
pub struct CpuHog(Arc<AtomicBool>);

impl CpuHog {
    pub fn start() -> CpuHog {
        CpuHog::on_cores(std::thread::available_parallelism().map_or(2, |n| n.get()))
    }

    /// Busy loops on `cores` cores only (one: a single spinning process).
    pub fn on_cores(cores: usize) -> CpuHog {
        let stop = Arc::new(AtomicBool::new(false));
        for _ in 0..cores {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            });
        }
        CpuHog(stop)
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
