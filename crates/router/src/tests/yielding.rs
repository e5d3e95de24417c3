//! A shared state a round trip away, as files and Redis are: every operation
//! yields before and after, so each await on it is a place where a drop can
//! land and where the requests of several routers (processes) interleave.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use serde_json::Value as Json;

use super::*;
use switchyard_state::{BucketOp, BucketReply, BucketSpec, SharedState, StateError, Update};

/// A shared state that yields around every operation and keeps a ledger of
/// what each bucket gave and got back.
pub(super) struct Yielding {
    pub(super) inner: Arc<dyn SharedState>,
    /// Per bucket key: taken minus given back.
    ledger: Mutex<BTreeMap<String, f64>>,
}

impl Yielding {
    pub(super) fn over(inner: Arc<dyn SharedState>) -> Arc<Yielding> {
        Arc::new(Yielding {
            inner,
            ledger: Mutex::default(),
        })
    }

    pub(super) fn ledger(&self) -> BTreeMap<String, f64> {
        self.ledger.lock().unwrap().clone()
    }
}

async fn around<T>(op: BoxFuture<'_, T>) -> T {
    tokio::task::yield_now().await;
    let out = op.await;
    tokio::task::yield_now().await;
    out
}

impl SharedState for Yielding {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn update<'a>(
        &'a self,
        key: &'a str,
        ttl: Option<Duration>,
        update: Update<'a>,
    ) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(around(self.inner.update(key, ttl, update)))
    }
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(around(self.inner.get(key)))
    }
    fn now_ms(&self) -> BoxFuture<'_, Result<u64, StateError>> {
        Box::pin(around(self.inner.now_ms()))
    }
    fn scan<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(String, Json)>, StateError>> {
        Box::pin(around(self.inner.scan(prefix)))
    }
    fn try_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(around(self.inner.try_lease(key, holder, ttl)))
    }
    fn release_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(around(self.inner.release_lease(key, holder)))
    }
    fn bucket<'a>(
        &'a self,
        key: &'a str,
        spec: BucketSpec,
        op: BucketOp,
    ) -> BoxFuture<'a, Result<BucketReply, StateError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            let reply = self.inner.bucket(key, spec, op).await;
            // The operation is done: it is in the ledger whatever happens next.
            let moved = match (&op, &reply) {
                (BucketOp::Take { amount, .. }, Ok(r)) if r.granted => *amount,
                (BucketOp::Adjust { delta }, Ok(_)) => -*delta,
                _ => 0.0,
            };
            *self
                .ledger
                .lock()
                .unwrap()
                .entry(key.to_owned())
                .or_default() += moved;
            tokio::task::yield_now().await;
            reply
        })
    }
}
