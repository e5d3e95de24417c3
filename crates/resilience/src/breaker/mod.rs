//! One circuit breaker per (account, provider, model), shared by every
//! switchyard process through [`SharedState`].
//!
//! Closed → open after `failures` consecutive failures or an error rate of
//! `error_rate` over the window (with at least `min_samples`). Open → after the
//! cooldown, exactly one process holds the half-open probe lease and sends one
//! request; everyone else keeps routing around it until the probe's verdict.
//! Success closes it for all; failure re-opens it for another cooldown. A
//! crashed prober's lease expires. Each probe granted takes the next fencing
//! token from the record, and only the latest token's verdict counts: a
//! holder that stalled past its lease while another probed is refused.
//! Canaries test an open breaker far more often than the cooldown
//! (`record_canary`): a healthy canary closes it.

mod permit;
mod record;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use serde::Deserialize;

use permit::Lease;
use record::{RECORD_TTL, decode, encode, slot_width};
use switchyard_state::{SharedState, WhenUnavailable};

pub use permit::{Admission, ProbePermit};
pub use record::{Phase, Record};

#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker.
    pub failures: u32,
    /// Failure share over the window that opens it.
    pub error_rate: f64,
    pub min_samples: u32,
    pub window_ms: u64,
    /// How long user requests stay off an open breaker, unless a canary
    /// finds the entry healthy first.
    pub cooldown_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 6,
            error_rate: 0.5,
            min_samples: 10,
            window_ms: 60_000,
            cooldown_ms: 300_000,
        }
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

/// One breaker as status shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerView {
    pub key: String,
    pub phase: Phase,
    pub reason: String,
    /// How much longer it stays open.
    pub open_for_ms: u64,
    pub consecutive_failures: u32,
    pub trips: u64,
    pub recoveries: u64,
    /// Probe verdicts refused because a later probe had been granted.
    pub stale_verdicts: u64,
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
    /// Woken when this process trips a breaker, so requests waiting to retry
    /// that entry stop waiting.
    trips: Mutex<HashMap<String, Arc<Notify>>>,
}

fn lease_key(breaker: &str) -> String {
    format!("lease/{breaker}")
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
            trips: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The record and the backend's now.
    async fn read(&self, key: &str) -> Result<(Record, u64), switchyard_state::StateError> {
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
            Phase::HalfOpen => {
                // Armed before it is asked for: a request dropped while the
                // shared state grants it leaves nothing held.
                let lease = Lease::claim(self.state.clone(), lease_key(key), &self.holder);
                match self
                    .state
                    .try_lease(&lease.key, &lease.holder, probe_ttl)
                    .await
                {
                    Ok(true) => self.confirm_probe(key, lease).await,
                    Ok(false) => {
                        lease.not_granted();
                        Admission::Open {
                            reason: format!("{}; another request is probing it", record.reason),
                            retry_in: probe_ttl,
                        }
                    }
                    Err(error) => self.unavailable(&error.to_string()),
                }
            }
        }
    }

    /// The lease is ours, but the record was read before taking it: a probe
    /// that failed in between re-opened the breaker and then freed the lease.
    /// Probers record their verdict before releasing, so the record tells
    /// now; a breaker no longer half-open gets its lease back, unused. One
    /// still half-open gives the probe the next fencing token in the same
    /// write, so a holder whose lease lapses meanwhile holds an older one.
    async fn confirm_probe(&self, key: &str, lease: Lease) -> Admission {
        let confirmed = self
            .write(key, |record, now| {
                if record.phase(now) == Phase::HalfOpen {
                    record.probe_token += 1;
                }
            })
            .await;
        let (record, now) = match confirmed {
            Ok(written) => written,
            Err(error) => return self.unavailable(&error),
        };
        match record.phase(now) {
            Phase::HalfOpen => Admission::Probe(ProbePermit {
                lease,
                token: record.probe_token,
            }),
            Phase::Closed => {
                lease.release().await;
                Admission::Closed
            }
            Phase::Open => {
                lease.release().await;
                Admission::Open {
                    reason: record.reason,
                    retry_in: Duration::from_millis(record.open_until - now),
                }
            }
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
        let token = match &admission {
            Admission::Probe(permit) => Some(permit.token),
            _ => None,
        };
        if success && token.is_none() && self.batch_success(key).await {
            return;
        }
        let successes = self.take_pending(key) + u32::from(success);
        let config = &self.config;
        let mut stale = false;
        self.rewrite(key, |record, now| {
            // A later probe was granted (this one's lease lapsed while it
            // stalled): that probe decides; this one is only a late answer.
            stale = token.is_some_and(|token| token != record.probe_token);
            record.stale_verdicts += u64::from(stale);
            let probe = token.is_some() && !stale;
            match (record.phase(now), probe, success) {
                // Only the current probe's verdict moves an open breaker.
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
                        let why =
                            format!("{} failures in a row, last: {reason}", record.consecutive);
                        record.trip(now, why, config);
                    } else if samples >= config.min_samples && rate >= config.error_rate {
                        let why = format!(
                            "{:.0}% of {samples} requests failed, last: {reason}",
                            rate * 100.0
                        );
                        record.trip(now, why, config);
                    }
                }
            }
        })
        .await;
        if stale {
            tracing::warn!(
                "breaker {key}: refused a stale probe verdict, a later probe was granted"
            );
        }
        // The verdict is written before the lease goes back (see `confirm_probe`).
        if let Admission::Probe(permit) = admission {
            permit.release().await;
        }
    }

    /// Resolves when this process next trips (or re-opens) `key`'s breaker.
    pub fn tripped(&self, key: &str) -> Arc<Notify> {
        self.trips
            .lock()
            .expect("trips lock")
            .entry(key.to_owned())
            .or_default()
            .clone()
    }

    /// Takes the right to send `key`'s canary for `every`: one process
    /// probes an entry per canary interval, however many run.
    pub async fn canary_turn(&self, key: &str, every: Duration) -> bool {
        self.state
            .try_lease(&format!("canary/{key}"), &self.holder, every)
            .await
            .unwrap_or(false)
    }

    /// A canary's word on an entry, outside user traffic: a healthy canary
    /// closes an open (or cooled-down) breaker at once; a failed one leaves
    /// it as it is (user traffic stays off it until the cooldown ends).
    pub async fn record_canary(&self, key: &str, healthy: bool, reason: &str) {
        self.rewrite(key, |record, now| match (record.phase(now), healthy) {
            // A canary does not count in user traffic's window.
            (Phase::Closed, _) => {}
            (_, true) => record.close(),
            (_, false) => record.reason = format!("canary failed: {reason}"),
        })
        .await;
    }

    /// Rewrites `key`'s record atomically, keeps the result as this process's
    /// view, and wakes requests waiting on the entry if it is now open.
    async fn rewrite(&self, key: &str, change: impl FnMut(&mut Record, u64) + Send) {
        match self.write(key, change).await {
            Ok((record, now)) if record.phase(now) != Phase::Closed => {
                self.tripped(key).notify_waiters();
            }
            Ok(_) => {}
            Err(error) => tracing::warn!("breaker {key}: could not record the outcome: {error}"),
        }
    }

    /// Rewrites `key`'s record atomically and keeps the result as this
    /// process's view: the record as written, with the backend's now.
    async fn write(
        &self,
        key: &str,
        mut change: impl FnMut(&mut Record, u64) + Send,
    ) -> Result<(Record, u64), String> {
        let mut written_at = None;
        let result = self
            .state
            .update(
                key,
                Some(RECORD_TTL),
                Box::new(|stored, now| {
                    written_at = Some(now);
                    let existed = stored.is_some();
                    let mut record = decode(stored);
                    change(&mut record, now);
                    // Nothing to say about an entry nobody recorded: no record.
                    (existed || record != Record::default())
                        .then(|| encode(&record))
                        .flatten()
                }),
            )
            .await;
        match (result, written_at) {
            (Ok(stored), Some(now)) => {
                let record = decode(stored);
                self.remember(key, record.clone(), now);
                Ok((record, now))
            }
            (result, _) => {
                self.forget_view(key);
                Err(result.map_or_else(
                    |e| e.to_string(),
                    |_| "the update was not applied".to_owned(),
                ))
            }
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
                    stale_verdicts: record.stale_verdicts,
                }
            })
            .collect()
    }
}
