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

/// Busy loops in other processes (`sh` spinning), killed when dropped: load
/// a process's own CPU accounting does not count as its own, the way a
/// build started beside the editor is not the editor's.
pub struct ProcessHog(Vec<std::process::Child>);

impl ProcessHog {
    pub fn on_cores(cores: usize) -> ProcessHog {
        let spin = || {
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(std::process::Stdio::null())
                .spawn()
                .expect("spawning sh")
        };
        ProcessHog((0..cores).map(|_| spin()).collect())
    }
}

impl Drop for ProcessHog {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
