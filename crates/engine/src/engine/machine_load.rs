//! How much of the machine other processes take: the CPU time every core
//! spent busy between two readings, less this process's own. Two small reads
//! of `/proc`, cheap enough to take between decode chunks and while the
//! engine waits for a job. Where the platform has no such counters (not
//! Linux) there is no reading, and the engine measures thread counts
//! against each other when quiet instead (`threads`).
//!
//! `/proc/stat` counts the host's processors; in a container limited to
//! fewer, the busy share of the host still says how crowded its cores are.

use std::time::{Duration, Instant};

/// Readings closer together than this say too little: the counters move in
/// ticks of 10 ms.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Counters at one moment, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reading {
    /// Every core's busy time (steal included: another guest had the core).
    busy: u64,
    /// Every core's time, busy or idle.
    total: u64,
    /// This process's own CPU time, every thread's.
    own: u64,
    processors: usize,
}

/// Readings of the machine's load, each against the one before.
pub(super) struct MachineLoad {
    last: Option<(Instant, Reading)>,
}

impl MachineLoad {
    pub(super) fn new() -> MachineLoad {
        MachineLoad {
            last: read().map(|reading| (Instant::now(), reading)),
        }
    }

    /// Whether this platform has the counters at all.
    pub(super) fn available(&self) -> bool {
        self.last.is_some()
    }

    /// Whether a new reading would say something ([`SAMPLE_EVERY`] passed).
    pub(super) fn due(&self) -> bool {
        self.last
            .is_some_and(|(at, _)| at.elapsed() >= SAMPLE_EVERY)
    }

    /// The cores other processes kept busy since the last reading, and the
    /// processors counted; `None` where nothing can be read.
    pub(super) fn sample(&mut self) -> Option<Busy> {
        let now = read()?;
        let (_, before) = self.last.replace((Instant::now(), now))?;
        others_busy(&before, &now)
    }
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

/// Other processes' share between two readings, in cores.
fn others_busy(before: &Reading, now: &Reading) -> Option<Busy> {
    let total = now.total.checked_sub(before.total).filter(|&t| t > 0)?;
    let busy = now.busy.saturating_sub(before.busy);
    let own = now.own.saturating_sub(before.own);
    let share = busy.saturating_sub(own) as f64 / total as f64;
    Some(Busy {
        others: share * now.processors as f64,
        processors: now.processors,
    })
}

#[cfg(target_os = "linux")]
fn read() -> Option<Reading> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (busy, total) = stat.lines().next().and_then(cpu_times)?;
    let processors = stat
        .lines()
        .filter(|line| {
            line.starts_with("cpu") && line.as_bytes().get(3).is_some_and(u8::is_ascii_digit)
        })
        .count();
    Some(Reading {
        busy,
        total,
        own: own_ticks(&own)?,
        processors: processors.max(1),
    })
}

#[cfg(not(target_os = "linux"))]
fn read() -> Option<Reading> {
    None
}

/// Busy and total ticks from `/proc/stat`'s first line: user, nice,
/// system, idle, iowait, irq, softirq, steal (guest time is already in
/// user and nice).
fn cpu_times(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.strip_prefix("cpu ")?.split_whitespace();
    let mut next = || fields.next()?.parse::<u64>().ok();
    let [user, nice, system, idle] = [next()?, next()?, next()?, next()?];
    let [iowait, irq, softirq, steal] = [next(), next(), next(), next()].map(|t| t.unwrap_or(0));
    let busy = user + nice + system + irq + softirq + steal;
    Some((busy, busy + idle + iowait))
}

/// This process's user and system ticks from `/proc/self/stat`: fields 14
/// and 15, counted after the command name (which may hold spaces).
fn own_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_are_parsed_from_their_lines() {
        assert_eq!(
            cpu_times("cpu  80288 0 8163 16270 237 0 55 135 0 0"),
            Some((
                80288 + 8163 + 55 + 135,
                80288 + 8163 + 55 + 135 + 16270 + 237
            ))
        );
        assert_eq!(cpu_times("cpu0 1 2 3 4"), None, "a single core's line");
        assert_eq!(cpu_times("cpu  1 2"), None);
        let stat = "12533 (my (odd) name) R 12528 12528 1148 0 -1 4194304 101 0 1 0 7 3 0 0 20 0";
        assert_eq!(own_ticks(stat), Some(10));
        assert_eq!(own_ticks("12533 (cut"), None);
    }

    fn reading(busy: u64, total: u64, own: u64) -> Reading {
        Reading {
            busy,
            total,
            own,
            processors: 2,
        }
    }

    #[test]
    fn others_are_the_busy_time_less_our_own() {
        // One second on two cores (200 ticks): a build kept one core busy
        // and the engine the other.
        let busy = others_busy(&reading(0, 0, 0), &reading(200, 200, 100)).unwrap();
        assert_eq!(busy.others, 1.0);
        assert_eq!(busy.free_cores(), 1.0);
        // The engine alone.
        let alone = others_busy(&reading(0, 0, 0), &reading(150, 200, 150)).unwrap();
        assert_eq!(alone.others, 0.0);
        assert_eq!(alone.free_cores(), 2.0);
        assert_eq!(
            others_busy(&reading(5, 10, 0), &reading(5, 10, 0)),
            None,
            "no time passed"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_can_be_read() {
        let mut load = MachineLoad::new();
        assert!(load.available());
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(120) {
            std::hint::black_box(0u64);
        }
        let busy = load.sample().expect("a second reading");
        assert!(busy.processors >= 1);
        assert!(busy.others >= 0.0);
    }
}
