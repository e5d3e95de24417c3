//! Health beacons: how each (provider, model) did over the last minute, from
//! real requests. A beacon judges health against a task's ceilings, so the same
//! provider can be fine for a refactor and too slow for an explanation.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use switchyard_base::entry::ModelRef;
use switchyard_base::task::TaskProfile;

/// The default window (`resilience.beacon_window_ms`).
pub const WINDOW: Duration = Duration::from_secs(60);
/// The default for `resilience.beacon_min_samples`: fewer samples than this
/// say nothing about slowness or degradation. (A verdict once given is
/// sticky: see `switchyard_resilience::verdict`.)
pub const MIN_SAMPLES: usize = 3;
/// At most this many recent samples per entry: enough for a p95, and bounded
/// work per request however busy the entry is.
pub const MAX_SAMPLES: usize = 256;
/// Share of degraded answers at which an entry is unhealthy. Failed requests
/// are the circuit breaker's business (shared by every process); the beacon
/// judges what a breaker cannot see: slowness and silent degradation.
pub const MAX_BAD_SHARE: f64 = 0.5;

/// A sign that an answer came back worse than asked, though with status 200.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Degradation {
    /// Stopped by `max_tokens` without the task having asked for a short answer.
    Truncated,
    Refused,
    Empty,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Degraded(Degradation),
    Failed,
}

#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: Instant,
    pub first_token: Option<Duration>,
    pub total: Duration,
    pub outcome: Outcome,
    /// The longest silence between two deltas once text flowed.
    pub longest_gap: Option<Duration>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// p95 of each answer's longest silence between deltas.
    pub p95_gap: Option<Duration>,
    pub samples: usize,
    /// The fewest samples a judgement needs.
    pub min_samples: usize,
    pub p95_first_token: Option<Duration>,
    pub p95_total: Option<Duration>,
    pub error_rate: f64,
    pub degraded_rate: f64,
}

/// The shortest stall limit an entry's own pace can set.
pub const MIN_STALL: Duration = Duration::from_secs(2);
/// How many times its usual longest gap an entry may go silent mid-answer.
const STALL_FACTOR: u32 = 8;

impl Summary {
    /// How long this entry may go silent mid-answer before it counts as
    /// stalled: a multiple of its usual longest gap between deltas, between
    /// [`MIN_STALL`] and the task's idle ceiling (all the task gets while the
    /// beacon has too few samples to know the entry's pace).
    pub fn stall_limit(&self, task_idle: Duration) -> Duration {
        match self.p95_gap {
            Some(gap) if self.samples >= self.min_samples.max(1) => {
                (gap * STALL_FACTOR).clamp(MIN_STALL.min(task_idle), task_idle)
            }
            _ => task_idle,
        }
    }

    /// `None` when healthy for this task, else why not.
    pub fn unhealthy_reason(&self, profile: &TaskProfile) -> Option<String> {
        if self.samples < self.min_samples.max(1) {
            return None;
        }
        if self.degraded_rate >= MAX_BAD_SHARE {
            return Some(format!(
                "{:.0}% of the last {} answers were degraded (truncated, refused or empty)",
                self.degraded_rate * 100.0,
                self.samples
            ));
        }
        if let Some(p95) = self
            .p95_first_token
            .filter(|p| *p >= profile.first_token_ceiling())
        {
            return Some(format!(
                "time to first token p95 {:.1} s is over the {:.1} s ceiling",
                p95.as_secs_f64(),
                profile.first_token_ceiling().as_secs_f64()
            ));
        }
        if let Some(p95) = self.p95_total.filter(|p| *p >= profile.total_ceiling()) {
            return Some(format!(
                "latency p95 {:.1} s is over the {:.1} s ceiling",
                p95.as_secs_f64(),
                profile.total_ceiling().as_secs_f64()
            ));
        }
        None
    }
}

fn p95(mut values: Vec<Duration>) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let rank = ((values.len() as f64) * 0.95).ceil() as usize;
    let index = rank.clamp(1, values.len()) - 1;
    Some(*values.select_nth_unstable(index).1)
}

/// One entry's recent samples, with the summary of them last computed: a
/// request reads the summary two or three times (plan, stall limit, status),
/// and sorting the window each time was most of the router's own work.
#[derive(Debug, Default)]
struct Window {
    samples: VecDeque<Sample>,
    /// Valid until a sample is added or the oldest one leaves the window.
    summary: Option<(Summary, Instant)>,
}

/// The beacons of every (provider, model).
#[derive(Debug)]
pub struct Beacons {
    samples: Mutex<HashMap<ModelRef, Window>>,
    /// Degraded answers in a row per entry.
    strikes: Mutex<HashMap<ModelRef, u32>>,
    /// (window, minimum samples), from the configuration.
    settings: Mutex<(Duration, usize)>,
}

impl Default for Beacons {
    fn default() -> Beacons {
        Beacons {
            samples: Mutex::default(),
            strikes: Mutex::default(),
            settings: Mutex::new((WINDOW, MIN_SAMPLES)),
        }
    }
}

impl Beacons {
    /// Sets the window and the fewest samples a judgement needs.
    pub fn configure(&self, window: Duration, min_samples: usize) {
        *self.settings.lock().expect("beacon settings lock") = (window, min_samples);
        for window in self.samples.lock().expect("beacons lock").values_mut() {
            window.summary = None;
        }
    }

    fn settings(&self) -> (Duration, usize) {
        *self.settings.lock().expect("beacon settings lock")
    }

    pub fn record(&self, entry: &ModelRef, sample: Sample) {
        let (span, _) = self.settings();
        let mut map = self.samples.lock().expect("beacons lock");
        let window = map.entry(entry.clone()).or_default();
        window.samples.push_back(sample);
        window.summary = None;
        prune(&mut window.samples, sample.at, span);
    }

    /// Counts a degraded answer; returns how many came in a row.
    pub fn strike(&self, entry: &ModelRef) -> u32 {
        let mut strikes = self.strikes.lock().expect("strikes lock");
        let count = strikes.entry(entry.clone()).or_default();
        *count += 1;
        *count
    }

    /// A good answer ends the run of degraded ones.
    pub fn clear_strikes(&self, entry: &ModelRef) {
        self.strikes.lock().expect("strikes lock").remove(entry);
    }

    /// Forgets an entry's samples: a canary found it healthy again, so what
    /// it did before the recovery says nothing about it now.
    pub fn forget(&self, entry: &ModelRef) {
        self.samples.lock().expect("beacons lock").remove(entry);
        self.clear_strikes(entry);
    }

    pub fn summary(&self, entry: &ModelRef) -> Summary {
        let (span, min_samples) = self.settings();
        let mut map = self.samples.lock().expect("beacons lock");
        let Some(window) = map.get_mut(entry) else {
            return Summary {
                min_samples,
                ..Summary::default()
            };
        };
        let now = Instant::now();
        if let Some((summary, valid_until)) = &window.summary
            && now < *valid_until
        {
            return summary.clone();
        }
        prune(&mut window.samples, now, span);
        let summary = summarize(&window.samples, min_samples);
        // The summary holds until the oldest sample leaves the window.
        let valid_until = window.samples.front().map_or(now, |s| s.at + span);
        window.summary = Some((summary.clone(), valid_until));
        summary
    }
}

fn summarize(window: &VecDeque<Sample>, min_samples: usize) -> Summary {
    let n = window.len();
    let share = |f: &dyn Fn(&Sample) -> bool| {
        window.iter().filter(|s| f(s)).count() as f64 / n.max(1) as f64
    };
    Summary {
        samples: n,
        min_samples,
        p95_first_token: p95(window.iter().filter_map(|s| s.first_token).collect()),
        p95_gap: p95(window.iter().filter_map(|s| s.longest_gap).collect()),
        p95_total: p95(window
            .iter()
            .filter(|s| s.outcome != Outcome::Failed)
            .map(|s| s.total)
            .collect()),
        error_rate: share(&|s| s.outcome == Outcome::Failed),
        degraded_rate: share(&|s| matches!(s.outcome, Outcome::Degraded(_))),
    }
}

fn prune(window: &mut VecDeque<Sample>, now: Instant, span: Duration) {
    while window.len() > MAX_SAMPLES
        || window
            .front()
            .is_some_and(|s| now.duration_since(s.at) > span)
    {
        window.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_base::task::{TaskKind, TaskProfile};

    fn a() -> ModelRef {
        ModelRef::new("a", "m")
    }

    fn sample(first_token_ms: u64, outcome: Outcome) -> Sample {
        Sample {
            longest_gap: None,
            at: Instant::now(),
            first_token: Some(Duration::from_millis(first_token_ms)),
            total: Duration::from_millis(first_token_ms + 500),
            outcome,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_entries_count_as_healthy() {
        let beacons = Beacons::default();
        beacons.record(&a(), sample(90_000, Outcome::Failed));
        beacons.record(&a(), sample(90_000, Outcome::Failed));
        let explain = TaskProfile::default_for(TaskKind::Explain);
        assert_eq!(beacons.summary(&a()).unhealthy_reason(&explain), None);
    }

    #[tokio::test(start_paused = true)]
    async fn slow_first_tokens_breach_the_task_ceiling_not_a_provider_one() {
        let beacons = Beacons::default();
        for _ in 0..4 {
            beacons.record(&a(), sample(15_000, Outcome::Ok));
        }
        let summary = beacons.summary(&a());
        let explain = TaskProfile::default_for(TaskKind::Explain);
        let refactor = TaskProfile::default_for(TaskKind::Refactor);
        assert!(
            summary
                .unhealthy_reason(&explain)
                .unwrap()
                .contains("time to first token")
        );
        assert_eq!(summary.unhealthy_reason(&refactor), None);
    }

    #[tokio::test(start_paused = true)]
    async fn truncated_answers_with_status_200_are_degradation() {
        let beacons = Beacons::default();
        for _ in 0..3 {
            beacons.record(&a(), sample(100, Outcome::Degraded(Degradation::Truncated)));
        }
        let explain = TaskProfile::default_for(TaskKind::Explain);
        assert!(
            beacons
                .summary(&a())
                .unhealthy_reason(&explain)
                .unwrap()
                .contains("degraded")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_stall_limit_follows_the_entrys_own_pace_within_the_task_ceiling() {
        let beacons = Beacons::default();
        let idle = Duration::from_secs(30);
        assert_eq!(
            beacons.summary(&a()).stall_limit(idle),
            idle,
            "unknown pace"
        );
        for _ in 0..3 {
            let mut quick = sample(100, Outcome::Ok);
            quick.longest_gap = Some(Duration::from_millis(400));
            beacons.record(&a(), quick);
        }
        assert_eq!(
            beacons.summary(&a()).stall_limit(idle),
            Duration::from_millis(3_200)
        );
        assert_eq!(
            beacons.summary(&a()).stall_limit(Duration::from_secs(1)),
            Duration::from_secs(1),
            "never above the task's own setting"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_entry_keeps_only_its_most_recent_samples() {
        let beacons = Beacons::default();
        for _ in 0..MAX_SAMPLES + 50 {
            beacons.record(&a(), sample(100, Outcome::Ok));
        }
        assert_eq!(beacons.summary(&a()).samples, MAX_SAMPLES);
    }

    #[tokio::test(start_paused = true)]
    async fn samples_older_than_the_window_are_forgotten() {
        let beacons = Beacons::default();
        for _ in 0..5 {
            beacons.record(&a(), sample(100, Outcome::Failed));
        }
        tokio::time::advance(WINDOW + Duration::from_secs(1)).await;
        assert_eq!(beacons.summary(&a()).samples, 0);
    }

    /// The summary is kept between reads, never past a change it would miss.
    #[tokio::test(start_paused = true)]
    async fn a_kept_summary_follows_new_samples_and_aged_out_ones() {
        let beacons = Beacons::default();
        beacons.record(&a(), sample(100, Outcome::Ok));
        tokio::time::advance(Duration::from_secs(30)).await;
        beacons.record(&a(), sample(900, Outcome::Ok));
        assert_eq!(beacons.summary(&a()).samples, 2);
        beacons.record(&a(), sample(2_000, Outcome::Ok));
        let summary = beacons.summary(&a());
        assert_eq!(summary.samples, 3);
        assert_eq!(summary.p95_first_token, Some(Duration::from_millis(2_000)));
        // The first sample leaves the window; the other two stay.
        tokio::time::advance(WINDOW - Duration::from_secs(29)).await;
        assert_eq!(beacons.summary(&a()).samples, 2);
        beacons.configure(Duration::from_secs(1), MIN_SAMPLES);
        assert_eq!(
            beacons.summary(&a()).samples,
            0,
            "a shorter window applies at once"
        );
    }
}
