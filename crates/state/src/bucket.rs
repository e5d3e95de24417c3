//! The token bucket every backend stores: its record and the one function that
//! moves it. The Redis backend's Lua script mirrors [`apply`] line for line.
//!
//! A bucket holds what this account may still spend on one meter (requests or
//! tokens). `Take` reserves before a request leaves; `Adjust` corrects with the
//! usage the provider reported; `Observe` resets the level to the remaining
//! capacity the provider's rate-limit headers report, less what was reserved
//! after that request left (the provider had not seen those yet).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Json;

/// Buckets nobody touched for this long are forgotten.
pub const TTL: Duration = Duration::from_secs(3600);
/// A bucket left idle this long refills only to [`RAMP_SHARE`] of its
/// capacity: providers punish a sudden burst after quiet.
pub const IDLE_MS: u64 = 60_000;
pub const RAMP_SHARE: f64 = 0.5;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketSpec {
    pub capacity: f64,
    pub refill_per_sec: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BucketOp {
    /// Reserve `amount` if the level stays at or above `floor` afterwards.
    Take { amount: f64, floor: f64 },
    /// Give back (positive) or charge (negative) after the fact.
    Adjust { delta: f64 },
    /// The provider reported `remaining` for the request whose `Take` returned `ticket`.
    Observe { remaining: f64, ticket: f64 },
    /// Read the level.
    Peek,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketReply {
    pub granted: bool,
    /// The level after the operation.
    pub level: f64,
    /// When refused: how long until the refill covers the request.
    pub wait: Duration,
    /// Running total reserved in this bucket, for `Observe`.
    pub ticket: f64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub level: f64,
    /// When `level` was last refilled, ms on the backend's clock.
    pub at: u64,
    /// Everything ever reserved here: orders `Take`s for `Observe`.
    pub reserved: f64,
    pub last_take: u64,
}

/// Applies `op` to the stored record at `now_ms`; returns the record to store and the reply.
pub fn apply(
    stored: Option<Json>,
    spec: &BucketSpec,
    op: &BucketOp,
    now_ms: u64,
) -> (Json, BucketReply) {
    let mut record = stored
        .and_then(|json| serde_json::from_value::<Record>(json).ok())
        .unwrap_or(Record {
            level: spec.capacity,
            at: now_ms,
            reserved: 0.0,
            last_take: now_ms,
        });
    let elapsed = now_ms.saturating_sub(record.at) as f64 / 1000.0;
    let mut ceiling = spec.capacity;
    if matches!(op, BucketOp::Take { .. }) && now_ms.saturating_sub(record.last_take) > IDLE_MS {
        ceiling = spec.capacity * RAMP_SHARE;
    }
    record.level = (record.level + elapsed * spec.refill_per_sec)
        .min(ceiling.max(record.level.min(spec.capacity)));
    record.at = now_ms;
    let mut reply = BucketReply {
        granted: true,
        level: 0.0,
        wait: Duration::ZERO,
        ticket: record.reserved,
    };
    match *op {
        BucketOp::Take { amount, floor } => {
            if record.level - amount >= floor {
                record.level -= amount;
                record.reserved += amount;
                record.last_take = now_ms;
                reply.ticket = record.reserved;
            } else {
                reply.granted = false;
                let short = amount + floor - record.level;
                reply.wait = if spec.refill_per_sec > 0.0 {
                    Duration::from_secs_f64((short / spec.refill_per_sec).min(86_400.0))
                } else {
                    Duration::from_secs(86_400)
                };
            }
        }
        BucketOp::Adjust { delta } => record.level = (record.level + delta).min(spec.capacity),
        BucketOp::Observe { remaining, ticket } => {
            record.level = (remaining - (record.reserved - ticket).max(0.0)).min(spec.capacity)
        }
        BucketOp::Peek => {}
    }
    reply.level = record.level;
    (
        serde_json::to_value(record).expect("record serialises"),
        reply,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: BucketSpec = BucketSpec {
        capacity: 1000.0,
        refill_per_sec: 10.0,
    };

    fn step(stored: Option<Json>, op: BucketOp, now: u64) -> (Option<Json>, BucketReply) {
        let (record, reply) = apply(stored, &SPEC, &op, now);
        (Some(record), reply)
    }

    #[test]
    fn a_new_bucket_is_full_and_takes_down_to_the_floor() {
        let (s, r) = step(
            None,
            BucketOp::Take {
                amount: 800.0,
                floor: 100.0,
            },
            0,
        );
        assert!(r.granted);
        assert_eq!(r.level, 200.0);
        let (_, r) = step(
            s,
            BucketOp::Take {
                amount: 150.0,
                floor: 100.0,
            },
            0,
        );
        assert!(!r.granted);
        assert_eq!(r.wait, Duration::from_secs(5), "50 short at 10/s");
    }

    #[test]
    fn refill_is_capped_at_capacity() {
        let (s, _) = step(
            None,
            BucketOp::Take {
                amount: 500.0,
                floor: 0.0,
            },
            0,
        );
        let (_, r) = step(s, BucketOp::Peek, 30_000);
        assert_eq!(r.level, 800.0);
        let (s, _) = step(
            None,
            BucketOp::Take {
                amount: 500.0,
                floor: 0.0,
            },
            0,
        );
        let (_, r) = step(
            s,
            BucketOp::Take {
                amount: 1.0,
                floor: 0.0,
            },
            55_000,
        );
        assert_eq!(r.level, 999.0);
    }

    #[test]
    fn after_idle_a_take_refills_only_to_the_ramp_share() {
        let (s, _) = step(
            None,
            BucketOp::Take {
                amount: 900.0,
                floor: 0.0,
            },
            0,
        );
        let (_, r) = step(
            s,
            BucketOp::Take {
                amount: 600.0,
                floor: 0.0,
            },
            120_000,
        );
        assert!(
            !r.granted,
            "only half the bucket is open after a quiet minute"
        );
        assert_eq!(r.level, 500.0);
    }

    #[test]
    fn observe_subtracts_reservations_made_after_the_observed_request() {
        let (s, first) = step(
            None,
            BucketOp::Take {
                amount: 100.0,
                floor: 0.0,
            },
            0,
        );
        let (s, _) = step(
            s,
            BucketOp::Take {
                amount: 300.0,
                floor: 0.0,
            },
            0,
        );
        // The provider saw only the first request and reports 850 left.
        let (_, r) = step(
            s,
            BucketOp::Observe {
                remaining: 850.0,
                ticket: first.ticket,
            },
            0,
        );
        assert_eq!(r.level, 550.0);
    }

    #[test]
    fn adjust_refunds_unused_reservation() {
        let (s, _) = step(
            None,
            BucketOp::Take {
                amount: 600.0,
                floor: 0.0,
            },
            0,
        );
        let (_, r) = step(s, BucketOp::Adjust { delta: 250.0 }, 0);
        assert_eq!(r.level, 650.0);
    }

    #[test]
    fn a_corrupt_record_starts_over() {
        let (_, r) = step(Some(serde_json::json!("garbage")), BucketOp::Peek, 5);
        assert_eq!(r.level, 1000.0);
    }
}
