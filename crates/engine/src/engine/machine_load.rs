//! How much of the machine other processes take: the share of every core
//! busy between two readings, less this process's own CPU time. Read
//! through `sysinfo` (Linux's `/proc`, macOS's host statistics, Windows'
//! system times), cheap enough to take between decode chunks and while the
//! engine waits for a job. Where `sysinfo` reads nothing there is no
//! reading, and the engine measures thread counts against each other when
//! quiet instead (`threads`).
//!
//! On Linux the counters are the host's processors; in a container limited
//! to fewer, the busy share of the host still says how crowded its cores are.

use std::time::{Duration, Instant};

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

/// Readings closer together than this say too little: the counters move in
/// ticks of 10 ms (and `sysinfo` wants 200 ms between CPU readings).
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Readings of the machine's load, each against the one before.
pub(super) struct MachineLoad {
    counters: Option<Counters>,
}

/// The platform's counters, and when they were last read.
struct Counters {
    system: System,
    own: Pid,
    /// This process's CPU time at the last reading, in ms.
    own_ms: u64,
    at: Instant,
}

impl MachineLoad {
    pub(super) fn new() -> MachineLoad {
        MachineLoad {
            counters: Counters::open(),
        }
    }

    /// Whether this platform has the counters at all.
    pub(super) fn available(&self) -> bool {
        self.counters.is_some()
    }

    /// Whether a new reading would say something ([`SAMPLE_EVERY`] passed).
    pub(super) fn due(&self) -> bool {
        self.counters
            .as_ref()
            .is_some_and(|counters| counters.at.elapsed() >= SAMPLE_EVERY)
    }

    /// The cores other processes kept busy since the last reading, and the
    /// processors counted; `None` where nothing can be read.
    pub(super) fn sample(&mut self) -> Option<Busy> {
        self.counters.as_mut()?.sample()
    }
}

impl Counters {
    /// The counters, read once; `None` where the platform has none.
    fn open() -> Option<Counters> {
        let mut system = System::new().ok()?;
        let own = sysinfo::get_current_pid().ok()?;
        system.refresh_cpu_usage();
        let own_ms = own_cpu_ms(&mut system, own)?;
        Some(Counters {
            system,
            own,
            own_ms,
            at: Instant::now(),
        })
    }

    fn sample(&mut self) -> Option<Busy> {
        let elapsed = self.at.elapsed();
        self.system.refresh_cpu_usage();
        let own_ms = own_cpu_ms(&mut self.system, self.own)?;
        self.at = Instant::now();
        let own = own_ms.saturating_sub(std::mem::replace(&mut self.own_ms, own_ms));
        let processors = self.system.cpus().len();
        others_busy(
            f64::from(self.system.global_cpu_usage()) / 100.0,
            Duration::from_millis(own),
            elapsed,
            processors,
        )
    }
}

/// This process's CPU time so far, every thread's, in ms (the process's
/// own counters hold its threads': no need to read each thread's).
fn own_cpu_ms(system: &mut System, own: Pid) -> Option<u64> {
    let cpu_only = ProcessRefreshKind::nothing().with_cpu().without_tasks();
    system.refresh_processes_specifics(ProcessesToUpdate::Some(&[own]), false, cpu_only);
    Some(system.process(own)?.accumulated_cpu_time())
}

/// What a reading says of the cores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Busy {
    /// Cores' worth of work other processes did.
    pub others: f64,
    pub processors: usize,
}

impl Busy {
    /// Cores left for this process.
    pub(super) fn free_cores(&self) -> f64 {
        (self.processors as f64 - self.others).max(0.0)
    }
}

/// Other processes' share over `elapsed`, in cores: every core's busy
/// `share` (0 to 1), less this process's `own` CPU time over the same time.
fn others_busy(share: f64, own: Duration, elapsed: Duration, processors: usize) -> Option<Busy> {
    if elapsed.is_zero() || processors == 0 || !share.is_finite() {
        return None;
    }
    let own_cores = own.as_secs_f64() / elapsed.as_secs_f64();
    Some(Busy {
        others: (share.clamp(0.0, 1.0) * processors as f64 - own_cores).max(0.0),
        processors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_are_the_busy_time_less_our_own() {
        let second = Duration::from_secs(1);
        // One second on two cores: a build kept one core busy and the
        // engine the other.
        let busy = others_busy(1.0, second, second, 2).unwrap();
        assert_eq!(busy.others, 1.0);
        assert_eq!(busy.free_cores(), 1.0);
        // The engine alone, on one and a half cores.
        let alone = others_busy(0.75, second.mul_f64(1.5), second, 2).unwrap();
        assert_eq!(alone.others, 0.0);
        assert_eq!(alone.free_cores(), 2.0);
        // Counted a moment apart, our own time can exceed the share seen.
        let ahead = others_busy(0.5, second.mul_f64(1.2), second, 2).unwrap();
        assert_eq!(ahead.others, 0.0);
        assert_eq!(
            others_busy(0.5, second, Duration::ZERO, 2),
            None,
            "no time passed"
        );
        assert_eq!(others_busy(f64::NAN, second, second, 2), None);
    }

    /// On every target the release workflow builds (Linux, macOS, Windows).
    #[test]
    fn this_machine_can_be_read() {
        let mut load = MachineLoad::new();
        assert!(load.available(), "no load counters on this platform");
        let spin = Instant::now();
        while spin.elapsed() < sysinfo::MINIMUM_CPU_UPDATE_INTERVAL + Duration::from_millis(50) {
            std::hint::black_box(0u64);
        }
        let busy = load.sample().expect("a second reading");
        assert!(busy.processors >= 1);
        assert!(
            (0.0..=busy.processors as f64).contains(&busy.others),
            "{busy:?}"
        );
    }
}
