//! One circuit breaker per (account, provider, model), shared by every
//! switchyard process through [`SharedState`].
//!
//! Closed → open after `failures` consecutive failures or an error rate of
//! `error_rate` over the window (with at least `min_samples`). Open → after the
//! cooldown, exactly one process holds the half-open probe lease and sends one
//! request; everyone else keeps routing around it until the probe's verdict.
//! Success closes it for all; failure re-opens it with a doubled cooldown. A
//! crashed prober's lease expires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use serde::{Deserialize, Serialize};

use crate::state::{Json, SharedState, WhenUnavailable};

#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker.
    pub failures: u32,
    /// Failure share over the window that opens it.
    pub error_rate: f64,
    pub min_samples: u32,
    pub window_ms: u64,
    pub cooldown_ms: u64,
    /// Repeated trips double the cooldown up to this.
    pub max_cooldown_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 6,
            error_rate: 0.5,
            min_samples: 10,
            window_ms: 60_000,
            cooldown_ms: 300_000,
            max_cooldown_ms: 3_600_000,
        }
    }
}

fn slot_width(config: &BreakerConfig) -> u64 {
    (config.window_ms / SLOTS).max(1)
}

/// Breakers live this long after their last event, then start closed again.
const RECORD_TTL: Duration = Duration::from_secs(24 * 3600);
/// The window is kept as this many slots, so the record stays small.
const SLOTS: u64 = 6;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub open: bool,
    pub consecutive: u32,
    /// (slot start ms, successes, failures), oldest first.
    pub window: Vec<(u64, u32, u32)>,
    pub open_until: u64,
    /// Trips since the breaker last closed: each doubles the cooldown.
    pub trips: u32,
    pub reason: String,
    /// Lifetime counts, for status and the dashboard.
    pub total_trips: u64,
    pub recoveries: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Closed,
    Open,
    /// Cooled down; waiting for (or running) the one probe.
    HalfOpen,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Closed => "closed",
            Phase::Open => "open",
            Phase::HalfOpen => "half-open",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long one read of a closed breaker serves this process's later
/// admissions: the hot path reads shared state at most this often per entry,
/// and a trip recorded by another process takes effect here within it.
pub const VIEW_TTL: Duration = Duration::from_millis(50);

/// A record as last read, with the backend's clock at the read.
struct View {
    record: Record,
    backend_now: u64,
    read_at: Instant,
}

/// What a caller may do with the entry now.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Closed,
    /// This caller holds the probe lease: its request is the probe.
    Probe(ProbePermit),
    /// Route around it.
    Open {
        reason: String,
        retry_in: Duration,
    },
}

impl Admission {
    pub fn is_probe(&self) -> bool {
        matches!(self, Admission::Probe(_))
    }
}

/// The half-open probe lease, held while the probe request runs. Recording
/// the verdict gives it back; so does dropping it (a cancelled or abandoned
/// request), at once rather than when the lease's TTL runs out, so another
/// request or process can probe.
#[derive(Debug)]
pub struct ProbePermit {
    lease: Option<Lease>,
}

struct Lease {
    state: Arc<dyn SharedState>,
    key: String,
    holder: String,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish()
    }
}

impl Lease {
    async fn release(self) {
        if let Err(error) = self.state.release_lease(&self.key, &self.holder).await {
            tracing::warn!("{}: could not release the probe lease: {error}", self.key);
        }
    }
}

impl ProbePermit {
    /// Gives the lease back now.
    pub async fn release(mut self) {
        if let Some(lease) = self.lease.take() {
            lease.release().await;
        }
    }
}

impl Drop for ProbePermit {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(lease.release());
            }
            // No runtime left (process exit): the lease's TTL frees it.
            Err(_) => tracing::debug!("{}: probe lease left to expire", lease.key),
        }
    }
}

/// Every permit is the same permit: what matters is that the caller holds one.
impl PartialEq for ProbePermit {
    fn eq(&self, _: &ProbePermit) -> bool {
        true
    }
}

impl Eq for ProbePermit {}

/// One breaker as status shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerView {
    pub key: String,
    pub phase: Phase,
    pub reason: String,
    /// How much longer it stays open.
    pub open_for_ms: u64,
    pub consecutive_failures: u32,
    pub trips: u64,
    pub recoveries: u64,
}

pub struct Breakers {
    state: Arc<dyn SharedState>,
    config: BreakerConfig,
    /// Names this process in probe leases.
    holder: String,
    when_unavailable: WhenUnavailable,
    /// Successes on healthy entries not yet written, with when this process
    /// last wrote them: the hot path reads the record but writes it at most
    /// once per window slot, so a busy healthy entry costs no lock per request.
    pending: Mutex<HashMap<String, (u32, Instant)>>,
    /// Short-lived views of closed breakers (see [`VIEW_TTL`]).
    views: Mutex<HashMap<String, View>>,
}

fn lease_key(breaker: &str) -> String {
    format!("lease/{breaker}")
}

fn decode(stored: Option<Json>) -> Record {
    stored
        .and_then(|json| serde_json::from_value(json).ok())
        .unwrap_or_default()
}

fn encode(record: &Record) -> Option<Json> {
    Some(serde_json::to_value(record).expect("breaker record serialises"))
}

impl Record {
    fn phase(&self, now: u64) -> Phase {
        match (self.open, now >= self.open_until) {
            (false, _) => Phase::Closed,
            (true, false) => Phase::Open,
            (true, true) => Phase::HalfOpen,
        }
    }

    fn note(&mut self, successes: u32, failures: u32, now: u64, config: &BreakerConfig) {
        let width = slot_width(config);
        let start = now - now % width;
        self.window.retain(|(at, _, _)| at + config.window_ms > now);
        match self.window.last_mut() {
            Some(slot) if slot.0 == start => {
                slot.1 += successes;
                slot.2 += failures;
            }
            _ => self.window.push((start, successes, failures)),
        }
    }

    fn error_rate(&self) -> (u32, f64) {
        let (ok, failed) = self
            .window
            .iter()
            .fold((0, 0), |(o, f), (_, so, sf)| (o + so, f + sf));
        let total = ok + failed;
        (
            total,
            if total == 0 {
                0.0
            } else {
                failed as f64 / total as f64
            },
        )
    }

    fn trip(&mut self, now: u64, reason: String, config: &BreakerConfig) {
        let cooldown = config
            .cooldown_ms
            .saturating_mul(1u64 << self.trips.min(20))
            .min(config.max_cooldown_ms.max(config.cooldown_ms));
        self.open = true;
        self.open_until = now + cooldown;
        self.trips += 1;
        self.total_trips += 1;
        self.reason = reason;
    }

    fn close(&mut self) {
        self.open = false;
        self.consecutive = 0;
        self.trips = 0;
        self.window.clear();
        self.recoveries += 1;
        self.reason.clear();
    }
}

impl Breakers {
    pub fn new(
        state: Arc<dyn SharedState>,
        config: BreakerConfig,
        when_unavailable: WhenUnavailable,
    ) -> Breakers {
        Breakers {
            state,
            config,
            holder: format!("{}-{:08x}", std::process::id(), fastrand::u32(..)),
            when_unavailable,
            pending: Mutex::new(HashMap::new()),
            views: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The record and the backend's now.
    async fn read(&self, key: &str) -> Result<(Record, u64), crate::state::StateError> {
        let (record, now) = (
            decode(self.state.get(key).await?),
            self.state.now_ms().await?,
        );
        self.remember(key, record.clone(), now);
        Ok((record, now))
    }

    /// The record of a breaker read closed less than [`VIEW_TTL`] ago.
    fn closed_view(&self, key: &str) -> Option<Record> {
        let views = self.views.lock().expect("views lock");
        let view = views.get(key)?;
        let age = view.read_at.elapsed();
        let now = view.backend_now + age.as_millis() as u64;
        (age < VIEW_TTL && view.record.phase(now) == Phase::Closed).then(|| view.record.clone())
    }

    /// The phase of a breaker as this process last read it (by an admission
    /// or a scan), with the reason and how long it stays open; `None` if it
    /// never read it. Plans use it without touching the shared state.
    pub fn last_known(&self, key: &str) -> Option<(Phase, String, Duration)> {
        let views = self.views.lock().expect("views lock");
        let view = views.get(key)?;
        let now = view.backend_now + view.read_at.elapsed().as_millis() as u64;
        let record = &view.record;
        let open_for = Duration::from_millis(record.open_until.saturating_sub(now));
        Some((record.phase(now), record.reason.clone(), open_for))
    }

    fn remember(&self, key: &str, record: Record, backend_now: u64) {
        let view = View {
            record,
            backend_now,
            read_at: Instant::now(),
        };
        self.views
            .lock()
            .expect("views lock")
            .insert(key.to_owned(), view);
    }

    fn forget_view(&self, key: &str) {
        self.views.lock().expect("views lock").remove(key);
    }

    /// May a request go to this entry now? `probe_ttl` bounds how long a probe
    /// may hold the half-open lease (the probe request's own ceiling).
    pub async fn admit(&self, key: &str, probe_ttl: Duration) -> Admission {
        if self.closed_view(key).is_some() {
            return Admission::Closed;
        }
        let (record, now) = match self.read(key).await {
            Ok(read) => read,
            Err(error) => return self.unavailable(&error.to_string()),
        };
        match record.phase(now) {
            Phase::Closed => Admission::Closed,
            Phase::Open => Admission::Open {
                reason: record.reason,
                retry_in: Duration::from_millis(record.open_until - now),
            },
            Phase::HalfOpen => match self
                .state
                .try_lease(&lease_key(key), &self.holder, probe_ttl)
                .await
            {
                Ok(true) => self.confirm_probe(key, self.permit(key)).await,
                Ok(false) => Admission::Open {
                    reason: format!("{}; another request is probing it", record.reason),
                    retry_in: probe_ttl,
                },
                Err(error) => self.unavailable(&error.to_string()),
            },
        }
    }

    /// The lease is ours, but the record was read before taking it: a probe
    /// that failed in between re-opened the breaker and then freed the lease.
    /// Probers record their verdict before releasing, so a second read now
    /// tells; a breaker no longer half-open gets its lease back, unused.
    async fn confirm_probe(&self, key: &str, permit: ProbePermit) -> Admission {
        let (record, now) = match self.read(key).await {
            Ok(read) => read,
            Err(error) => return self.unavailable(&error.to_string()),
        };
        match record.phase(now) {
            Phase::HalfOpen => Admission::Probe(permit),
            Phase::Closed => {
                permit.release().await;
                Admission::Closed
            }
            Phase::Open => {
                permit.release().await;
                Admission::Open {
                    reason: record.reason,
                    retry_in: Duration::from_millis(record.open_until - now),
                }
            }
        }
    }

    fn permit(&self, key: &str) -> ProbePermit {
        ProbePermit {
            lease: Some(Lease {
                state: self.state.clone(),
                key: lease_key(key),
                holder: self.holder.clone(),
            }),
        }
    }

    fn unavailable(&self, error: &str) -> Admission {
        tracing::warn!("breaker state unavailable: {error}");
        match self.when_unavailable {
            WhenUnavailable::Open => Admission::Closed,
            WhenUnavailable::Closed => Admission::Open {
                reason: format!("breaker state unavailable ({error})"),
                retry_in: Duration::from_secs(5),
            },
        }
    }

    /// Records how a request admitted by [`Breakers::admit`] went. Failures that
    /// say nothing about the provider's health are not recorded at all.
    pub async fn record(&self, key: &str, admission: Admission, success: bool, reason: &str) {
        let probe = admission.is_probe();
        if success && !probe && self.batch_success(key).await {
            return;
        }
        let successes = self.take_pending(key) + u32::from(success);
        let config = &self.config;
        let mut written_at = None;
        let result = self
            .state
            .update(
                key,
                Some(RECORD_TTL),
                Box::new(|stored, now| {
                    written_at = Some(now);
                    let mut record = decode(stored);
                    match (record.phase(now), probe, success) {
                        // Only the probe's verdict moves an open breaker.
                        (Phase::Open | Phase::HalfOpen, true, true) => record.close(),
                        (Phase::Open | Phase::HalfOpen, true, false) => {
                            record.trip(now, format!("probe failed: {reason}"), config)
                        }
                        (Phase::Open | Phase::HalfOpen, false, _) => {}
                        (Phase::Closed, _, true) => {
                            record.consecutive = 0;
                            record.note(successes, 0, now, config);
                        }
                        (Phase::Closed, _, false) => {
                            record.consecutive += 1;
                            record.note(successes, 1, now, config);
                            let (samples, rate) = record.error_rate();
                            if record.consecutive >= config.failures {
                                record.trip(
                                    now,
                                    format!(
                                        "{} failures in a row, last: {reason}",
                                        record.consecutive
                                    ),
                                    config,
                                );
                            } else if samples >= config.min_samples && rate >= config.error_rate {
                                record.trip(
                                    now,
                                    format!(
                                        "{:.0}% of {samples} requests failed, last: {reason}",
                                        rate * 100.0
                                    ),
                                    config,
                                );
                            }
                        }
                    }
                    encode(&record)
                }),
            )
            .await;
        match (result, written_at) {
            (Ok(stored), Some(now)) => self.remember(key, decode(stored), now),
            (result, _) => {
                self.forget_view(key);
                if let Err(error) = result {
                    tracing::warn!("breaker {key}: could not record the outcome: {error}");
                }
            }
        }
        // The verdict is written before the lease goes back (see `confirm_probe`).
        if let Admission::Probe(permit) = admission {
            permit.release().await;
        }
    }

    /// Counts a success on a closed breaker with no failure streak locally;
    /// `false` when it must be written now (a streak to reset, an open
    /// breaker, or a slot's worth of successes to flush).
    async fn batch_success(&self, key: &str) -> bool {
        let record = match self.closed_view(key) {
            Some(record) => Some(record),
            None => self.read(key).await.ok().map(|(record, _)| record),
        };
        let healthy = record.is_some_and(|record| !record.open && record.consecutive == 0);
        if !healthy {
            return false;
        }
        let width = Duration::from_millis(slot_width(&self.config));
        let mut pending = self.pending.lock().expect("pending lock");
        let (count, since) = pending.entry(key.to_owned()).or_insert((0, Instant::now()));
        if since.elapsed() >= width {
            return false;
        }
        *count += 1;
        true
    }

    fn take_pending(&self, key: &str) -> u32 {
        let mut pending = self.pending.lock().expect("pending lock");
        match pending.get_mut(key) {
            Some((count, since)) => {
                *since = Instant::now();
                std::mem::take(count)
            }
            None => 0,
        }
    }

    /// Every breaker some process has recorded.
    pub async fn views(&self) -> Vec<BreakerView> {
        let now = self.state.now_ms().await.unwrap_or_default();
        let records = self.state.scan("breaker/").await.unwrap_or_default();
        records
            .into_iter()
            .map(|(key, json)| {
                let record = decode(Some(json));
                let phase = record.phase(now);
                self.remember(&key, record.clone(), now);
                BreakerView {
                    key: key.trim_start_matches("breaker/").to_owned(),
                    phase,
                    reason: record.reason.clone(),
                    open_for_ms: if phase == Phase::Open {
                        record.open_until - now
                    } else {
                        0
                    },
                    consecutive_failures: record.consecutive,
                    trips: record.total_trips,
                    recoveries: record.recoveries,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryState;

    const TTL: Duration = Duration::from_secs(30);

    fn breakers(state: &Arc<MemoryState>) -> Breakers {
        Breakers::new(
            state.clone(),
            BreakerConfig::default(),
            WhenUnavailable::Open,
        )
    }

    async fn fail(b: &Breakers, key: &str, n: usize) {
        for _ in 0..n {
            let admission = b.admit(key, TTL).await;
            b.record(key, admission, false, "HTTP 503").await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_and_says_why() {
        let state = Arc::new(MemoryState::new());
        let b = breakers(&state);
        fail(&b, "k", 5).await;
        assert_eq!(b.admit("k", TTL).await, Admission::Closed);
        fail(&b, "k", 1).await;
        match b.admit("k", TTL).await {
            Admission::Open { reason, retry_in } => {
                assert!(reason.contains("6 failures in a row"), "{reason}");
                assert_eq!(retry_in, Duration::from_secs(300));
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_on_the_error_rate_over_the_window() {
        let state = Arc::new(MemoryState::new());
        let b = breakers(&state);
        for i in 0..10 {
            let admission = b.admit("k", TTL).await;
            b.record("k", admission, i % 2 == 0, "HTTP 500").await;
        }
        assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn old_failures_leave_the_window() {
        let state = Arc::new(MemoryState::new());
        let b = breakers(&state);
        for _ in 0..9 {
            let admission = b.admit("k", TTL).await;
            b.record("k", admission, false, "x").await;
            b.record("k", Admission::Closed, true, "").await;
            tokio::time::advance(Duration::from_secs(20)).await;
        }
        assert_eq!(b.admit("k", TTL).await, Admission::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_among_many_processes_and_its_verdict_is_for_all() {
        let state = Arc::new(MemoryState::new());
        let k = "breaker/acct/p/m".to_owned();
        let processes: Vec<_> = (0..4).map(|_| breakers(&state)).collect();
        fail(&processes[0], &k, 6).await;
        tokio::time::advance(Duration::from_secs(301)).await;
        let mut admissions = Vec::new();
        for b in &processes {
            for _ in 0..3 {
                admissions.push(b.admit(&k, TTL).await);
            }
        }
        let probes = admissions.iter().filter(|a| a.is_probe()).count();
        assert_eq!(probes, 1, "{admissions:?}");
        let at = admissions.iter().position(Admission::is_probe).unwrap();
        let probe = admissions.swap_remove(at);
        processes[at / 3].record(&k, probe, true, "").await;
        for b in &processes {
            assert_eq!(b.admit(&k, TTL).await, Admission::Closed);
        }
        assert_eq!(processes[0].views().await[0].recoveries, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_with_a_longer_cooldown() {
        let state = Arc::new(MemoryState::new());
        let b = breakers(&state);
        fail(&b, "k", 6).await;
        tokio::time::advance(Duration::from_secs(300)).await;
        let probe = b.admit("k", TTL).await;
        assert!(probe.is_probe());
        b.record("k", probe, false, "HTTP 503").await;
        match b.admit("k", TTL).await {
            Admission::Open { reason, retry_in } => {
                assert!(reason.starts_with("probe failed"), "{reason}");
                assert_eq!(retry_in, Duration::from_secs(600));
            }
            other => panic!("{other:?}"),
        }
    }

    /// B read the breaker as half-open just before A's probe failed and freed
    /// the lease: B takes the free lease but must not probe a re-opened breaker.
    #[tokio::test(start_paused = true)]
    async fn a_lease_taken_after_a_failed_probe_is_not_a_probe() {
        let state = Arc::new(MemoryState::new());
        let (a, b) = (breakers(&state), breakers(&state));
        fail(&a, "k", 6).await;
        tokio::time::advance(Duration::from_secs(300)).await;
        let probe = a.admit("k", TTL).await;
        assert!(probe.is_probe());
        a.record("k", probe, false, "HTTP 503").await;
        assert!(
            state
                .try_lease(&lease_key("k"), &b.holder, TTL)
                .await
                .unwrap()
        );
        assert!(matches!(
            b.confirm_probe("k", b.permit("k")).await,
            Admission::Open { .. }
        ));
        assert!(
            state
                .try_lease(&lease_key("k"), "someone", TTL)
                .await
                .unwrap(),
            "the unused lease was given back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_crashed_probers_lease_expires() {
        let state = Arc::new(MemoryState::new());
        let (a, b) = (breakers(&state), breakers(&state));
        fail(&a, "k", 6).await;
        tokio::time::advance(Duration::from_secs(300)).await;
        let probe = a.admit("k", TTL).await;
        assert!(probe.is_probe());
        // Crashed: no verdict, and no destructor runs either.
        std::mem::forget(probe);
        drop(a);
        assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
        tokio::time::advance(TTL + Duration::from_secs(1)).await;
        assert!(b.admit("k", TTL).await.is_probe());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_probe_gives_its_lease_back_at_once() {
        let state = Arc::new(MemoryState::new());
        let (a, b) = (breakers(&state), breakers(&state));
        fail(&a, "k", 6).await;
        tokio::time::advance(Duration::from_secs(300)).await;
        let probe = a.admit("k", TTL).await;
        assert!(probe.is_probe());
        assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
        drop(probe); // the request was cancelled before its verdict
        tokio::task::yield_now().await;
        assert!(b.admit("k", TTL).await.is_probe(), "no wait for the TTL");
    }

    #[tokio::test(start_paused = true)]
    async fn a_trip_in_another_process_takes_effect_within_the_view_ttl() {
        let state = Arc::new(MemoryState::new());
        let (a, b) = (breakers(&state), breakers(&state));
        assert_eq!(b.admit("k", TTL).await, Admission::Closed);
        fail(&a, "k", 6).await;
        tokio::time::advance(VIEW_TTL).await;
        assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn late_answers_do_not_move_an_open_breaker() {
        let state = Arc::new(MemoryState::new());
        let b = breakers(&state);
        fail(&b, "k", 6).await;
        b.record("k", Admission::Closed, true, "").await;
        assert!(matches!(b.admit("k", TTL).await, Admission::Open { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn views_show_every_breaker() {
        let state = Arc::new(MemoryState::new());
        let b = breakers(&state);
        fail(&b, "breaker/acct/anthropic/m", 6).await;
        let views = b.views().await;
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].key, "acct/anthropic/m");
        assert_eq!(views[0].phase, Phase::Open);
        assert_eq!(views[0].open_for_ms, 300_000);
    }
}
