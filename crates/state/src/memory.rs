//! Shared state inside one process: unit tests and `memory` in config. Its
//! clock is tokio's, so tests on a paused clock move it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;

use super::{Json, SharedState, StateError, Update};
use switchyard_base::clock::Clock;

struct Entry {
    value: Json,
    expires: Option<u64>,
}

pub struct MemoryState {
    clock: Clock,
    entries: Mutex<BTreeMap<String, Entry>>,
}

impl Default for MemoryState {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryState {
    pub fn new() -> MemoryState {
        MemoryState {
            clock: Clock::tokio(),
            entries: Mutex::new(BTreeMap::new()),
        }
    }

    fn live<'m>(entries: &'m BTreeMap<String, Entry>, key: &str, now: u64) -> Option<&'m Json> {
        entries
            .get(key)
            .filter(|e| e.expires.is_none_or(|at| at > now))
            .map(|e| &e.value)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        // A panic elsewhere cannot leave a half-written map: every write is one insert.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SharedState for MemoryState {
    fn describe(&self) -> String {
        "memory".into()
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        ttl: Option<Duration>,
        mut update: Update<'a>,
    ) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            let mut entries = self.entries();
            let current = Self::live(&entries, key, now).cloned();
            let next = update(current, now);
            match &next {
                Some(value) => {
                    entries.insert(
                        key.to_owned(),
                        Entry {
                            value: value.clone(),
                            expires: ttl.map(|t| now + t.as_millis() as u64),
                        },
                    );
                }
                None => {
                    entries.remove(key);
                }
            }
            Ok(next)
        })
    }

    fn now_ms(&self) -> BoxFuture<'_, Result<u64, StateError>> {
        Box::pin(async move { Ok(self.clock.now_ms()) })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(async move { Ok(Self::live(&self.entries(), key, self.clock.now_ms()).cloned()) })
    }

    fn scan<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(String, Json)>, StateError>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            let entries = self.entries();
            Ok(entries
                .range(prefix.to_owned()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .filter(|(_, e)| e.expires.is_none_or(|at| at > now))
                .map(|(k, e)| (k.clone(), e.value.clone()))
                .collect())
        })
    }

    fn try_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            let mut entries = self.entries();
            if Self::live(&entries, key, now).is_some() {
                return Ok(false);
            }
            entries.insert(
                key.to_owned(),
                Entry {
                    value: Json::String(holder.to_owned()),
                    expires: Some(now + ttl.as_millis() as u64),
                },
            );
            Ok(true)
        })
    }

    fn release_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            let mut entries = self.entries();
            if Self::live(&entries, key, now).and_then(Json::as_str) == Some(holder) {
                entries.remove(key);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BucketOp, BucketSpec};

    #[tokio::test(start_paused = true)]
    async fn records_expire_on_the_tokio_clock() {
        let state = MemoryState::new();
        state
            .update(
                "k",
                Some(Duration::from_secs(5)),
                Box::new(|_, _| Some(1.into())),
            )
            .await
            .unwrap();
        assert_eq!(state.get("k").await.unwrap(), Some(1.into()));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(state.get("k").await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn one_lease_holder_until_release_or_expiry() {
        let state = MemoryState::new();
        let ttl = Duration::from_secs(10);
        assert!(state.try_lease("lease", "a", ttl).await.unwrap());
        assert!(!state.try_lease("lease", "b", ttl).await.unwrap());
        state.release_lease("lease", "b").await.unwrap();
        assert!(
            !state.try_lease("lease", "b", ttl).await.unwrap(),
            "only the holder releases"
        );
        state.release_lease("lease", "a").await.unwrap();
        assert!(state.try_lease("lease", "b", ttl).await.unwrap());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(
            state.try_lease("lease", "c", ttl).await.unwrap(),
            "a crashed holder's lease expires"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn scan_lists_live_keys_under_a_prefix() {
        let state = MemoryState::new();
        for key in ["breaker/a", "breaker/b", "bucket/a"] {
            state
                .update(key, None, Box::new(|_, _| Some(Json::Null)))
                .await
                .unwrap();
        }
        let keys: Vec<_> = state
            .scan("breaker/")
            .await
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, ["breaker/a", "breaker/b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn buckets_refill_with_the_clock() {
        let state = MemoryState::new();
        let spec = BucketSpec {
            capacity: 100.0,
            refill_per_sec: 10.0,
        };
        let take = BucketOp::Take {
            amount: 100.0,
            floor: 0.0,
        };
        assert!(state.bucket("b", spec, take).await.unwrap().granted);
        assert!(!state.bucket("b", spec, take).await.unwrap().granted);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(state.bucket("b", spec, take).await.unwrap().granted);
    }
}
