//! The quota governor: a client-side token bucket per (account, provider,
//! model) on each meter the provider has (requests per minute, tokens per
//! minute, input and output tokens per minute), shared by every process.
//!
//! A request reserves its input estimate plus its max output before it leaves
//! and is corrected with the real usage afterwards. Each response's rate-limit
//! headers reset the buckets to the remaining capacity the provider reports,
//! so the fleet uses whatever the account has spare, not a fixed share, while
//! a floor of headroom stays for the other users of the account. Before any
//! header is seen, buckets start empty and refill at `share` of the configured
//! quota: nothing yet says what the account has spent this minute.
//!
//! Priority is the floor: autocomplete may draw the bucket nearly to the
//! headroom, a refactor stops well above it, so a large refactor waits while
//! interactive work still gets through. No request leaves without its tokens
//! in hand.
//!
//! While the shared state cannot be reached (`when_unavailable = "open"`),
//! each process governs its part of the quota it last knew in buckets of its
//! own: the limit over the processes that answered the last roll call
//! ([`fleet`]), never the whole limit per process.

mod fleet;
mod own_share;
mod quota;
mod reservation;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use fleet::Fleet;
use quota::{Meter, headroom, priority_floor, spare_now};
use switchyard_base::task::TaskKind;
use switchyard_providers::{RateLimits, Usage};
use switchyard_state::bucket::{self, Record};
use switchyard_state::{
    BucketOp, BucketReply, BucketSpec, SharedState, StateError, WhenUnavailable,
};

pub use quota::{GovernorConfig, Quota};
pub use reservation::Reservation;

/// Why a reservation was refused, and how long until it may be granted.
type Refused = (String, Duration);

/// How long one read of an entry's pause and learned limits serves this
/// process's later admissions: the hot path reads them at most this often,
/// and a pause set by another process takes effect here within it.
pub const VIEW_TTL: Duration = Duration::from_millis(50);

/// An entry's pause and learned limits as last read.
#[derive(Clone, Copy)]
struct View {
    /// When a shared pause ends, on this process's clock.
    pause_ends: Option<Instant>,
    learned: Option<Quota>,
    read_at: Instant,
    /// Read again at the next admission, however recent: this process
    /// changed what it holds. Kept meanwhile for the own share, which
    /// needs the limits last known when the state goes away.
    stale: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("quota for {key}: {reason}")]
pub struct Starved {
    pub key: String,
    pub reason: String,
    /// How long until it would have fitted.
    pub wait: Duration,
}

/// One meter's headroom as status shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct MeterView {
    pub key: String,
    pub meter: String,
    pub limit: u64,
    pub available: f64,
}

/// Cheap to clone: clones share the state and the short-lived views.
#[derive(Clone)]
pub struct Governor {
    state: Arc<dyn SharedState>,
    config: GovernorConfig,
    when_unavailable: WhenUnavailable,
    views: Arc<Mutex<HashMap<String, View>>>,
    fleet: Arc<Fleet>,
    /// The governor of this process's own share, used while the shared state
    /// is away; `None` in that governor itself, whose limits are the fleet's
    /// split by its members.
    own_share: Option<Arc<Governor>>,
}

impl std::fmt::Debug for Governor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Governor").finish_non_exhaustive()
    }
}

fn bucket_key(key: &str, meter: Meter) -> String {
    format!("quota/{key}/{}", meter.as_str())
}

fn pause_key(key: &str) -> String {
    format!("pause/{key}")
}

fn learned_key(key: &str) -> String {
    format!("limits/{key}")
}

impl Governor {
    pub fn new(
        state: Arc<dyn SharedState>,
        config: GovernorConfig,
        when_unavailable: WhenUnavailable,
    ) -> Governor {
        let fleet = Arc::new(Fleet::new());
        Governor {
            own_share: Some(Arc::new(Governor::own_share(&config, fleet.clone()))),
            state,
            config,
            when_unavailable,
            views: Arc::default(),
            fleet,
        }
    }

    /// The entry's pause and learned limits, read at most every [`VIEW_TTL`].
    async fn view(&self, key: &str) -> Result<View, StateError> {
        if let Some(view) = self.views.lock().expect("views lock").get(key)
            && !view.stale
            && view.read_at.elapsed() < VIEW_TTL
        {
            return Ok(*view);
        }
        let paused_until = self
            .state
            .get(&pause_key(key))
            .await?
            .and_then(|j| j.as_u64());
        let read_at = Instant::now();
        let pause_ends = match paused_until {
            Some(until) => {
                let now = self.state.now_ms().await?;
                // Here once the backend's now is in: later than it was
                // there, so the pause ends here late, never early.
                let answered = Instant::now();
                (until > now).then(|| answered + Duration::from_millis(until - now))
            }
            None => None,
        };
        let learned = self
            .state
            .get(&learned_key(key))
            .await?
            .and_then(|json| serde_json::from_value::<Quota>(json).ok());
        let view = View {
            pause_ends,
            learned,
            read_at,
            stale: false,
        };
        self.views
            .lock()
            .expect("views lock")
            .insert(key.to_owned(), view);
        Ok(view)
    }

    fn expire_view(&self, key: &str) {
        if let Some(view) = self.views.lock().expect("views lock").get_mut(key) {
            view.stale = true;
        }
    }

    /// Re-reads the entry's pause and learned limits (at most every [`VIEW_TTL`]).
    pub async fn refresh(&self, key: &str) {
        if let Err(error) = self.view(key).await {
            tracing::debug!("quota {key}: {error}");
        }
    }

    /// How much longer a shared 429 pause holds the entry, as this process
    /// last read it. Plans use it without touching the shared state.
    pub fn paused_for(&self, key: &str) -> Option<Duration> {
        let views = self.views.lock().expect("views lock");
        let ends = views.get(key)?.pause_ends?;
        let left = ends.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// An armed reservation of nothing yet, to take `key`'s meters into.
    fn reservation(&self, key: &str, quota: Quota) -> Reservation {
        Reservation {
            key: key.to_owned(),
            held: Vec::new(),
            quota,
            at: Instant::now(),
            granted: false,
            usage: None,
            governor: Some(self.clone()),
            own_share: self.is_own_share(),
        }
    }

    fn spec(&self, limit: u64, observed: bool) -> BucketSpec {
        let per_minute = self.limit_here(limit);
        let share = if observed { 1.0 } else { self.config.share };
        BucketSpec {
            capacity: per_minute,
            refill_per_sec: per_minute * share / 60.0,
        }
    }

    async fn quota(&self, key: &str, configured: Quota) -> (Quota, bool) {
        let learned = self.view(key).await.ok().and_then(|view| view.learned);
        let observed = learned.is_some_and(|q| !q.is_empty());
        (configured.or(learned.unwrap_or_default()), observed)
    }

    /// Reserves what one request needs, waiting (until `deadline`) for the
    /// buckets to refill or a shared pause to end. A request whose tokens cannot
    /// be in hand by `deadline` is refused: fail over, downshift or park it.
    pub async fn admit(
        &self,
        key: &str,
        kind: TaskKind,
        configured: Quota,
        input_tokens: u64,
        max_output_tokens: u64,
        deadline: Instant,
    ) -> Result<Reservation, Starved> {
        let starved = |reason: String, wait: Duration| Starved {
            key: key.to_owned(),
            reason,
            wait,
        };
        if !self.is_own_share() && self.fleet.due() {
            let (fleet, state) = (self.fleet.clone(), self.state.clone());
            tokio::spawn(async move { fleet.roll_call(state.as_ref()).await });
        }
        loop {
            let wait = match self
                .try_admit(key, kind, configured, input_tokens, max_output_tokens)
                .await
            {
                Ok(Ok(reservation)) => return Ok(reservation),
                Ok(Err((reason, wait))) => (reason, wait),
                Err(error) => match self.when_unavailable {
                    WhenUnavailable::Open => {
                        let admitted = self.admit_on_own_share(
                            key,
                            kind,
                            configured,
                            (input_tokens, max_output_tokens),
                            deadline,
                            &error,
                        );
                        return Box::pin(admitted).await;
                    }
                    WhenUnavailable::Closed => {
                        return Err(starved(
                            format!("quota state unavailable ({error})"),
                            Duration::ZERO,
                        ));
                    }
                },
            };
            let (reason, wait) = wait;
            // A little jitter so waiters on one bucket do not all return at once.
            let wait = wait + Duration::from_millis(fastrand::u64(0..=50));
            if Instant::now() + wait > deadline {
                return Err(starved(reason, wait));
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt to reserve what a request needs; refused with why and how
    /// long to wait.
    async fn try_admit(
        &self,
        key: &str,
        kind: TaskKind,
        configured: Quota,
        input_tokens: u64,
        max_output_tokens: u64,
    ) -> Result<Result<Reservation, Refused>, StateError> {
        if let Some(ends) = self.view(key).await?.pause_ends
            && ends > Instant::now()
        {
            return Ok(Err((
                "paused by a rate limit".into(),
                ends - Instant::now(),
            )));
        }
        let (quota, observed) = self.quota(key, configured).await;
        if !observed {
            for meter in Meter::ALL.into_iter().filter(|m| m.limit(&quota).is_some()) {
                self.cold_start(key, meter).await?;
            }
        }
        // What is taken is held by an armed reservation from the first meter
        // on: a future dropped between two takes gives them back.
        let mut reservation = self.reservation(key, configured);
        for meter in Meter::ALL {
            let Some(limit) = meter.limit(&quota) else {
                continue;
            };
            let amount = meter.amount(input_tokens, max_output_tokens);
            let spec = self.spec(limit, observed);
            let floor = headroom(self.limit_here(limit), self.config.share) * priority_floor(kind);
            // A request too large to ever fit above the floor may draw into it
            // from a full bucket rather than starve forever.
            let floor = floor.min((spec.capacity - amount).max(0.0));
            if let Err(refused) = self
                .take(&mut reservation, meter, spec, amount, floor)
                .await?
            {
                let reason = format!(
                    "{} needs {amount:.0} {} with {:.0} available above the {floor:.0} kept for others",
                    kind.as_str(),
                    meter.as_str(),
                    refused.level
                );
                return Ok(Err((reason, refused.wait)));
            }
        }
        reservation.granted = true;
        reservation.at = Instant::now();
        Ok(Ok(reservation))
    }

    /// Takes `amount` of `meter` into `reservation`. A refusal gives back what
    /// the reservation held and returns the bucket's answer.
    async fn take(
        &self,
        reservation: &mut Reservation,
        meter: Meter,
        spec: BucketSpec,
        amount: f64,
        floor: f64,
    ) -> Result<Result<(), BucketReply>, StateError> {
        // Held before it is asked for: a future dropped while the bucket
        // grants it gives it back (an answer lost on its way back may then
        // be given back untaken; never the reverse).
        reservation.held.push((meter, amount, 0.0));
        let reply = self
            .state
            .bucket(
                &bucket_key(&reservation.key, meter),
                spec,
                BucketOp::Take { amount, floor },
            )
            .await;
        match reply {
            Ok(reply) if reply.granted => {
                reservation.held.last_mut().expect("pushed above").2 = reply.ticket;
                Ok(Ok(()))
            }
            Ok(refused) => {
                reservation.held.pop();
                self.give_back(reservation).await;
                Ok(Err(refused))
            }
            Err(error) => {
                // Not taken; what was is given back as the reservation drops.
                reservation.held.pop();
                Err(error)
            }
        }
    }

    /// Creates `meter`'s bucket empty unless it exists. Used before any header
    /// is seen: a quota known only from configuration says nothing about what
    /// the account spent this minute (other users, other machines, our own last
    /// run), and a full bucket would send a burst into an exhausted account. It
    /// earns at the share rate until the first response reports the real
    /// remaining capacity, seconds later.
    async fn cold_start(&self, key: &str, meter: Meter) -> Result<(), StateError> {
        self.state
            .update(
                &bucket_key(key, meter),
                Some(bucket::TTL),
                Box::new(|stored, now| {
                    let stored = stored
                        .filter(|json| serde_json::from_value::<Record>(json.clone()).is_ok());
                    Some(stored.unwrap_or_else(|| {
                        let empty = Record {
                            level: 0.0,
                            at: now,
                            reserved: 0.0,
                            last_take: now,
                        };
                        serde_json::to_value(empty).expect("record serialises")
                    }))
                }),
            )
            .await
            .map(|_| ())
    }

    /// Learns from the response's rate-limit headers (sent before the answer):
    /// the limits, and the remaining capacity as of this request, brought
    /// forward to now (see [`spare_now`]).
    pub async fn observe(&self, reservation: &Reservation, limits: &RateLimits) {
        // Its ticket is from this process's own buckets, not the shared ones.
        if reservation.own_share {
            return;
        }
        let learned = Quota::learned(limits);
        if !learned.is_empty()
            && self
                .view(&reservation.key)
                .await
                .ok()
                .and_then(|v| v.learned)
                != Some(learned)
        {
            self.remember_learned(&reservation.key, learned).await;
        }
        let quota = reservation.quota.or(learned);
        for meter in Meter::ALL {
            let (Some(limit), Some(remaining)) = (meter.limit(&quota), meter.remaining(limits))
            else {
                continue;
            };
            let ticket = reservation
                .held
                .iter()
                .find(|(m, _, _)| *m == meter)
                .map_or(f64::MAX, |(_, _, t)| *t);
            let op = BucketOp::Observe {
                remaining: spare_now(
                    limit as f64,
                    remaining as f64,
                    meter.reset(limits),
                    reservation.at.elapsed(),
                ),
                ticket,
            };
            let key = bucket_key(&reservation.key, meter);
            if let Err(error) = self.state.bucket(&key, self.spec(limit, true), op).await {
                tracing::warn!(
                    "quota {}: could not record remaining capacity: {error}",
                    reservation.key
                );
            }
        }
    }

    /// Stores the limits a response reported, for every process to read.
    async fn remember_learned(&self, key: &str, learned: Quota) {
        // Read again at the next admission, and known here at once for the
        // own share, even before that read.
        if let Some(view) = self.views.lock().expect("views lock").get_mut(key) {
            view.stale = true;
            view.learned = Some(learned);
        }
        let result = self
            .state
            .update(
                &learned_key(key),
                Some(switchyard_state::bucket::TTL),
                Box::new(|_, _| Some(serde_json::to_value(learned).expect("quota serialises"))),
            )
            .await;
        if let Err(error) = result {
            tracing::warn!("quota {key}: could not store learned limits: {error}");
        }
    }

    /// Corrects a finished request's reservation with what it really used.
    /// `None` usage (the request failed before the provider counted it) gives
    /// back everything but the request itself.
    pub async fn settle(&self, mut reservation: Reservation, usage: Option<Usage>) {
        reservation.usage = usage;
        let granting = reservation.governor.clone().unwrap_or_else(|| self.clone());
        granting.give_back(&mut reservation).await;
    }

    /// Gives back what `reservation` holds beyond what was used, a meter at
    /// a time: each leaves the reservation once its bucket has it back, so a
    /// reservation dropped half-way gives back the rest (an adjustment in
    /// flight may then be made twice, never lost).
    async fn give_back(&self, reservation: &mut Reservation) {
        if reservation.held.is_empty() {
            return;
        }
        let (quota, observed) = self.quota(&reservation.key, reservation.quota).await;
        while let Some(&(meter, amount, _)) = reservation.held.last() {
            let refund = reservation.refund(meter, amount);
            if let Some(limit) = meter.limit(&quota)
                && refund.abs() >= f64::EPSILON
            {
                let op = BucketOp::Adjust { delta: refund };
                let key = bucket_key(&reservation.key, meter);
                if let Err(error) = self
                    .state
                    .bucket(&key, self.spec(limit, observed), op)
                    .await
                {
                    tracing::warn!(
                        "quota {}: could not give back tokens: {error}",
                        reservation.key
                    );
                }
            }
            reservation.held.pop();
        }
    }

    /// Stops every process from sending to `key` for `wait` (a 429 said so).
    pub async fn pause(&self, key: &str, wait: Duration) {
        self.expire_view(key);
        let result = self
            .state
            .update(
                &pause_key(key),
                Some(wait + Duration::from_secs(1)),
                Box::new(|stored, now| {
                    let until = now + wait.as_millis() as u64;
                    Some(
                        stored
                            .and_then(|j| j.as_u64())
                            .unwrap_or(0)
                            .max(until)
                            .into(),
                    )
                }),
            )
            .await;
        if let Err(error) = result {
            tracing::warn!("quota {key}: could not share the pause: {error}");
        }
    }

    /// Every governed meter with its limit and what is available now.
    pub async fn views(&self) -> Vec<MeterView> {
        let mut views = Vec::new();
        for (learned, json) in self.state.scan("limits/").await.unwrap_or_default() {
            let key = learned.trim_start_matches("limits/").to_owned();
            let Ok(quota) = serde_json::from_value::<Quota>(json) else {
                continue;
            };
            for meter in Meter::ALL {
                let Some(limit) = meter.limit(&quota) else {
                    continue;
                };
                let Ok(reply) = self
                    .state
                    .bucket(
                        &bucket_key(&key, meter),
                        self.spec(limit, true),
                        BucketOp::Peek,
                    )
                    .await
                else {
                    continue;
                };
                views.push(MeterView {
                    key: key.clone(),
                    meter: meter.as_str().into(),
                    limit,
                    available: reply.level.max(0.0).floor(),
                });
            }
        }
        views
    }
}
