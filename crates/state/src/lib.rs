//! What all switchyard processes share: circuit breakers, quota buckets and
//! probe leases. Three backends behind one interface: in-memory (unit tests, one
//! process), file (default: every process on this machine) and Redis (a team).
//!
//! Every backend owns its clock: records carry times in milliseconds on that
//! clock (the paused tokio clock in memory, the wall clock in files, the Redis
//! server's `TIME`), so processes with skewed clocks still agree.
//!
//! Architecture Invariant: a read-modify-write of one key is atomic across all
//! processes sharing the backend; nothing outside this module knows how.

pub mod bucket;
pub mod file;
pub mod jsonl;
pub mod memory;
pub mod redis;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

pub use bucket::{BucketOp, BucketReply, BucketSpec};

pub type Json = serde_json::Value;

/// Rewrites one record: gets the stored value (`None` when absent, expired or
/// unreadable) and the backend clock's now in ms; returns the value to store
/// (`None` removes the key). A backend may run it more than once (Redis retries
/// when another writer got in first), so it must not have side effects beyond
/// what the last run leaves behind.
pub type Update<'a> = Box<dyn FnMut(Option<Json>, u64) -> Option<Json> + Send + 'a>;

#[derive(Clone, Debug, thiserror::Error)]
#[error("shared state ({backend}) is unavailable: {reason}")]
pub struct StateError {
    pub backend: String,
    pub reason: String,
}

/// What to do when the shared state cannot be reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenUnavailable {
    /// Carry on as if nothing were shared (breakers closed, quota free): an
    /// editor keeps completing while Redis is down.
    #[default]
    Open,
    /// Refuse remote calls until the state is back: a team that must never
    /// overdraw a shared quota.
    Closed,
}

pub trait SharedState: Send + Sync {
    /// Where the state lives, for status and errors ("file /run/…", "redis://host:6379").
    fn describe(&self) -> String;

    /// Atomically rewrites the record at `key`; returns what was stored. `ttl`
    /// expires the record that long after this write.
    fn update<'a>(
        &'a self,
        key: &'a str,
        ttl: Option<Duration>,
        update: Update<'a>,
    ) -> BoxFuture<'a, Result<Option<Json>, StateError>>;

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Json>, StateError>>;

    /// The backend's clock, ms since the Unix epoch (since start for memory).
    fn now_ms(&self) -> BoxFuture<'_, Result<u64, StateError>>;

    /// Every live record whose key starts with `prefix`, sorted by key.
    fn scan<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(String, Json)>, StateError>>;

    /// Takes the lease at `key` for `holder` unless another holder has a live
    /// one (Redis: `SET NX PX`). A holder's lease dies with its `ttl`, so a
    /// crashed holder cannot keep it.
    fn try_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StateError>>;

    /// Drops the lease if `holder` still has it.
    fn release_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>>;

    /// One atomic operation on the token bucket at `key` (see [`bucket`]).
    /// Redis runs it as a Lua script on the server's clock; other backends
    /// apply [`bucket::apply`] through [`SharedState::update`].
    fn bucket<'a>(
        &'a self,
        key: &'a str,
        spec: BucketSpec,
        op: BucketOp,
    ) -> BoxFuture<'a, Result<BucketReply, StateError>> {
        Box::pin(async move {
            let mut reply = None;
            self.update(
                key,
                Some(bucket::TTL),
                Box::new(|stored, now_ms| {
                    let (record, answer) = bucket::apply(stored, &spec, &op, now_ms);
                    reply = Some(answer);
                    Some(record)
                }),
            )
            .await?;
            Ok(reply.expect("update runs its closure"))
        })
    }
}

/// A backend that could not be opened, kept under `when_unavailable =
/// "closed"`: every call fails with the reason, so remote calls are refused.
pub struct Unavailable(pub StateError);

impl SharedState for Unavailable {
    fn describe(&self) -> String {
        format!("{} (unavailable: {})", self.0.backend, self.0.reason)
    }

    fn update<'a>(
        &'a self,
        _: &'a str,
        _: Option<Duration>,
        _: Update<'a>,
    ) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(std::future::ready(Err(self.0.clone())))
    }

    fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(std::future::ready(Err(self.0.clone())))
    }

    fn now_ms(&self) -> BoxFuture<'_, Result<u64, StateError>> {
        Box::pin(std::future::ready(Err(self.0.clone())))
    }

    fn scan<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Vec<(String, Json)>, StateError>> {
        Box::pin(std::future::ready(Err(self.0.clone())))
    }

    fn try_lease<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: Duration,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(std::future::ready(Err(self.0.clone())))
    }

    fn release_lease<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(std::future::ready(Err(self.0.clone())))
    }
}

/// Opens the backend a configuration names: `memory`, `file` (the default
/// directory), `file:///path`, or `redis://…`.
pub fn open(url: &str) -> Result<Arc<dyn SharedState>, StateError> {
    let invalid = |reason: String| StateError {
        backend: url.to_owned(),
        reason,
    };
    match url {
        "memory" => Ok(Arc::new(memory::MemoryState::new())),
        "file" | "" => Ok(Arc::new(
            file::FileState::open(default_dir()).map_err(invalid)?,
        )),
        _ if url.starts_with("file://") => Ok(Arc::new(
            file::FileState::open(url.trim_start_matches("file://").into()).map_err(invalid)?,
        )),
        _ if url.starts_with("redis://") || url.starts_with("rediss://") => {
            Ok(Arc::new(redis::RedisState::open(url).map_err(invalid)?))
        }
        _ => Err(invalid(
            "expected `file`, `file:///path`, `redis://host:port` or `memory`".into(),
        )),
    }
}

/// The default file backend's directory, beside the other state.
pub fn default_dir() -> std::path::PathBuf {
    switchyard_base::paths::state_dir().join("shared")
}
