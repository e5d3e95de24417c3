//! The last hour of health, for the gateway's dashboard: a snapshot every
//! tick of each entry's beacon (p95 time to first token and latency, error
//! and degradation rates), breakers, quota headroom, downshifts, canaries and
//! parked work. Bounded: one hour of points.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use super::Router;
use super::canary::CanaryResult;
use switchyard_base::task::{TaskKind, Tier};
use switchyard_resilience::breaker::BreakerView;
use switchyard_resilience::governor::MeterView;

const KEEP: Duration = Duration::from_secs(3600);
/// The least time between two points: an hour is at most 360 of them,
/// however often the routes are refreshed (a short canary interval).
const SPACING: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct EntryPoint {
    pub provider: String,
    pub model: String,
    pub samples: usize,
    pub p95_first_token_ms: Option<u64>,
    pub p95_total_ms: Option<u64>,
    pub error_rate: f64,
    pub degraded_rate: f64,
}

#[derive(Clone, Debug)]
pub struct Downshift {
    pub kind: TaskKind,
    pub from: Tier,
    pub to: Tier,
    pub reason: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Point {
    pub at_ms: u64,
    pub entries: Vec<EntryPoint>,
    pub breakers: Vec<BreakerView>,
    pub quota: Vec<MeterView>,
    pub downshifts: Vec<Downshift>,
    /// Canaries sent since the previous point.
    pub canaries: Vec<CanaryResult>,
    pub parked: usize,
}

/// The points of the last hour, one per canary interval and at most one
/// per [`SPACING`].
#[derive(Default)]
pub struct History {
    points: Mutex<VecDeque<Point>>,
}

impl History {
    /// The time between two points when the routes are refreshed `every`.
    pub fn tick(every: Duration) -> Duration {
        every.max(SPACING)
    }

    /// Adds a point from the router's current view (call after refreshing it).
    pub fn record(&self, router: &Router) {
        let at_ms = switchyard_base::clock::now_ms();
        let last = self
            .points
            .lock()
            .expect("history lock")
            .back()
            .map(|p| p.at_ms);
        if last.is_some_and(|last| at_ms < last + SPACING.as_millis() as u64) {
            return;
        }
        let status = router.status();
        let entries = entry_points(router);
        let downshifts = status
            .tasks
            .iter()
            .filter_map(|task| {
                let route = task.route.as_ref()?;
                Some(Downshift {
                    kind: task.kind,
                    from: route.downshifted_from?,
                    to: route.tier,
                    reason: route.reason.clone(),
                })
            })
            .collect();
        let mut points = self.points.lock().expect("history lock");
        let since = points.back().map_or(0, |p| p.at_ms);
        let canaries = router
            .canaries()
            .into_iter()
            .filter(|c| c.at_ms > since)
            .collect();
        points.push_back(Point {
            at_ms,
            entries,
            breakers: status.breakers,
            quota: status.quota,
            downshifts,
            canaries,
            parked: status.parked.len(),
        });
        let oldest = at_ms.saturating_sub(KEEP.as_millis() as u64);
        while points.front().is_some_and(|p| p.at_ms < oldest) {
            points.pop_front();
        }
    }

    pub fn points(&self) -> Vec<Point> {
        self.points
            .lock()
            .expect("history lock")
            .iter()
            .cloned()
            .collect()
    }
}

/// Each planned entry's beacon as it is now.
fn entry_points(router: &Router) -> Vec<EntryPoint> {
    let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
    router
        .planned_entries()
        .candidates()
        .iter()
        .map(|candidate| {
            let summary = router.beacons().summary(&candidate.entry);
            let switchyard_base::entry::ModelRef { provider, model } = candidate.entry.clone();
            EntryPoint {
                samples: summary.samples,
                p95_first_token_ms: ms(summary.p95_first_token),
                p95_total_ms: ms(summary.p95_total),
                error_rate: summary.error_rate,
                degraded_rate: summary.degraded_rate,
                provider,
                model,
            }
        })
        .collect()
}
