//! What the soak counts, per phase and in all, and which counts break a
//! promise.

use super::*;

/// What happened in one phase.
#[derive(Default)]
pub(super) struct Counts {
    pub(super) sent: AtomicUsize,
    pub(super) answered: AtomicUsize,
    pub(super) errors: AtomicUsize,
    pub(super) garbled: AtomicUsize,
    pub(super) lost: AtomicUsize,
    pub(super) exited: AtomicUsize,
    pub(super) parked: AtomicUsize,
    /// Status notifications naming another route than the one that served.
    pub(super) untrue_status: AtomicUsize,
    pub(super) longest_ms: AtomicU64,
}

impl Counts {
    pub(super) fn add(&self, counter: impl Fn(&Counts) -> &AtomicUsize) {
        counter(self).fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn took(&self, started: Instant) {
        let ms = started.elapsed().as_millis() as u64;
        self.longest_ms.fetch_max(ms, Ordering::Relaxed);
    }
}

/// Each phase's outcome, as the report prints it.
#[derive(Clone, Debug, Default)]
pub struct PhaseReport {
    pub fault: String,
    pub sent: usize,
    pub answered: usize,
    pub errors: usize,
    pub garbled: usize,
    pub lost: usize,
    pub exited: usize,
    pub parked: usize,
    /// Explains after which the status named another route (or none).
    pub untrue_status: usize,
    pub longest_ms: u64,
    /// Requests that reached a provider while a `retry-after` it sent ran.
    pub early: usize,
    /// Requests the primary's quota turned away.
    pub quota_429s: usize,
    /// Requests of the local-only window that reached a provider while the mode was on.
    pub leaked: usize,
    /// The most user requests the primary got in one half-open window.
    pub probes_per_window: usize,
    pub rss_mb: u64,
    pub fds: usize,
    /// The most live tasks any window had over its own first count, as the
    /// phase ended.
    pub task_growth: usize,
    /// The most open files any process had over its own first count, as
    /// the phase ended (between its requests).
    pub fd_growth: usize,
}

impl PhaseReport {
    pub const HEADER: &'static str = "phase fault                  sent answered errors garbled lost exited parked status longest_ms early 429s leaked probes/window rss_MB fds";

    pub fn line(&self, phase: usize) -> String {
        format!(
            "{phase:>5} {:<22} {:>4} {:>8} {:>6} {:>7} {:>4} {:>6} {:>6} {:>6} {:>10} {:>5} {:>4} {:>6} {:>13} {:>6} {:>3}",
            self.fault,
            self.sent,
            self.answered,
            self.errors,
            self.garbled,
            self.lost,
            self.exited,
            self.parked,
            self.untrue_status,
            self.longest_ms,
            self.early,
            self.quota_429s,
            self.leaked,
            self.probes_per_window,
            self.rss_mb,
            self.fds
        )
    }
}

/// The whole run.
pub struct Report {
    pub schedule: Vec<Fault>,
    pub phases: Vec<PhaseReport>,
    /// Parked refactors, each by how many times it was resumed and finished.
    pub parked: Vec<(String, usize)>,
    /// Parked refactors whose resume failed for good (said to the user).
    pub resumes_failed: usize,
    /// Driver tasks that stopped (a panic in the harness is a failure too).
    pub drivers_stopped: usize,
    /// Requests of the local-only window the fakes got (with the mode off).
    pub private_seen: usize,
}

impl Report {
    /// What broke a promise, one line each; empty when none did.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for (i, p) in self.phases.iter().enumerate() {
            let mut check = |what: &str, n: usize, most: usize| {
                if n > most {
                    failures.push(format!("phase {i} ({}): {n} {what}", p.fault));
                }
            };
            check("garbled", p.garbled, 0);
            check("lost", p.lost, 0);
            check("unexpected exits", p.exited, 0);
            check(
                "status notifications naming another route",
                p.untrue_status,
                0,
            );
            check("sent before retry-after ended", p.early, 0);
            check("429s from the governed quota", p.quota_429s, 0);
            check("sent while local-only was on", p.leaked, 0);
            check("probes in one half-open window", p.probes_per_window, 1);
            check("tasks over a window's first count", p.task_growth, 2);
            check("open files over a process's first count", p.fd_growth, 2);
        }
        let not_once: Vec<&(String, usize)> = self.parked.iter().filter(|(_, n)| *n != 1).collect();
        if !not_once.is_empty() {
            failures.push(format!(
                "{} of {} parked refactors were not resumed and finished exactly once: {:?}",
                not_once.len(),
                self.parked.len(),
                &not_once[..not_once.len().min(5)]
            ));
        }
        if self.private_seen == 0 {
            failures.push("no request of the local-only window reached a provider: the leak count saw nothing".into());
        }
        if self.drivers_stopped > 0 {
            failures.push(format!("{} drivers stopped", self.drivers_stopped));
        }
        failures
    }

    pub fn total(&self, field: impl Fn(&PhaseReport) -> usize) -> usize {
        self.phases.iter().map(field).sum()
    }
}
