//! Shared state in Redis: a team's switchyard processes on many machines.
//! Records are JSON strings under `switchyard:<key>`, expiring through `PX`; the
//! clock is the server's `TIME`, so machines with skewed clocks agree.
//!
//! All commands go through one lazily connected, self-reconnecting
//! `ConnectionManager` (multiplexed). `WATCH`/`MULTI` belong to a connection, so
//! they cannot be shared by concurrent tasks on a multiplexed one; `update` is
//! instead an optimistic compare-and-set: read the record and `TIME`, run the
//! closure, then write with a Lua script only if the record is still what was
//! read, retrying on conflict. Same guarantee as `WATCH`, no dedicated connection.
//! The closure may therefore run more than once per `update`.
//!
//! Every call gives up after [`TIMEOUT`]: a Redis that does not answer is an
//! error the caller handles (see `WhenUnavailable`), never a hang. After two
//! calls in a row go unanswered, the calls of the next [`QUIET`] fail at
//! once: a stopped Redis accepts connections and answers nothing, and each
//! request makes several calls, each of which would wait the whole timeout.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::bucket::{self, BucketOp, BucketReply, BucketSpec};
use super::{Json, SharedState, StateError, Update};

/// The longest any call to Redis (connecting included) may take.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// How long after two unanswered calls in a row every call fails without
/// asking; the first call after it asks again.
pub const QUIET: Duration = Duration::from_secs(2);
const KEY_PREFIX: &str = "switchyard:";
/// Conflicting writers each win a round, so this bounds contention, not progress.
const MAX_UPDATE_ATTEMPTS: usize = 100;

/// Compare-and-set of one record. ARGV: [1] `1` if a record was read (else it
/// must still be absent), [2] the record read, [3] `1` to write (else delete),
/// [4] the record to write, [5] its expiry in ms or `` for none.
/// Returns 1 when done, 0 when the record changed since it was read.
static COMPARE_AND_SET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local current = redis.call('GET', KEYS[1])
local expected_present = ARGV[1] == '1'
if expected_present then
  if current ~= ARGV[2] then return 0 end
elseif current then
  return 0
end
if ARGV[3] == '1' then
  if ARGV[5] == '' then
    redis.call('SET', KEYS[1], ARGV[4])
  else
    redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
  end
else
  redis.call('DEL', KEYS[1])
end
return 1
",
    )
});

static RELEASE_LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// [`bucket::apply`] on the server's clock, line for line; the constants come in
/// as arguments so they are written once, in Rust. Floats go back as `%.17g`
/// strings (Redis truncates Lua numbers to integers) and the record is stored as
/// the same JSON `bucket::Record` serialises to, so `get` and `scan` read it.
/// Needs Redis >= 5 (effects replication lets a script write after `TIME`).
static BUCKET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local capacity, refill = tonumber(ARGV[1]), tonumber(ARGV[2])
local op, a, b = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local idle_ms, ramp_share, ttl_ms = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local record = nil
local raw = redis.call('GET', KEYS[1])
if raw then
  local ok, decoded = pcall(cjson.decode, raw)
  if ok and type(decoded) == 'table' and type(decoded.level) == 'number'
      and type(decoded.at) == 'number' and type(decoded.reserved) == 'number'
      and type(decoded.last_take) == 'number' then
    record = decoded
  end
end
if not record then
  record = { level = capacity, at = now, reserved = 0, last_take = now }
end

local function since(t) return math.max(now - t, 0) end
local elapsed = since(record.at) / 1000
local ceiling = capacity
if op == 'take' and since(record.last_take) > idle_ms then
  ceiling = capacity * ramp_share
end
record.level = math.min(record.level + elapsed * refill,
  math.max(ceiling, math.min(record.level, capacity)))
record.at = now
local granted, wait, ticket = 1, 0, record.reserved
if op == 'take' then
  if record.level - a >= b then
    record.level = record.level - a
    record.reserved = record.reserved + a
    record.last_take = now
    ticket = record.reserved
  else
    granted = 0
    local short = a + b - record.level
    if refill > 0 then wait = math.min(short / refill, 86400) else wait = 86400 end
  end
elseif op == 'adjust' then
  record.level = math.min(record.level + a, capacity)
elseif op == 'observe' then
  record.level = math.min(a - math.max(record.reserved - b, 0), capacity)
end

local function float(x) return string.format('%.17g', x) end
redis.call('SET', KEYS[1], string.format(
  '{"level":%s,"at":%.0f,"reserved":%s,"last_take":%.0f}',
  float(record.level), record.at, float(record.reserved), record.last_take), 'PX', ttl_ms)
return { granted, float(record.level), float(wait), float(ticket) }
"#,
    )
});

pub struct RedisState {
    client: redis::Client,
    /// The URL without credentials: for `describe` and every error.
    redacted_url: String,
    /// The password, scrubbed from any error text that might quote it.
    password: Option<String>,
    /// Connected on first use: `open` is sync, and a Redis that is down at
    /// startup must not stop the server from starting.
    connection: OnceCell<ConnectionManager>,
    /// Keys already reported as holding something other than JSON.
    reported: Mutex<HashSet<String>>,
    /// Unanswered calls in a row, and until when calls fail at once (why).
    silence: Mutex<(u32, Option<(Instant, String)>)>,
}

impl RedisState {
    /// Parses `url`; connects on first use.
    pub fn open(url: &str) -> Result<RedisState, String> {
        let redacted_url = redact(url);
        let client = redis::Client::open(url).map_err(|e| {
            format!(
                "invalid Redis URL {redacted_url}: {}",
                scrub(&e.to_string(), password_of(url).as_deref())
            )
        })?;
        Ok(RedisState {
            password: password_of(url),
            client,
            redacted_url,
            connection: OnceCell::new(),
            reported: Mutex::new(HashSet::new()),
            silence: Mutex::new((0, None)),
        })
    }

    fn error(&self, reason: impl std::fmt::Display) -> StateError {
        StateError {
            backend: self.redacted_url.clone(),
            reason: scrub(&reason.to_string(), self.password.as_deref()),
        }
    }

    /// Runs one exchange with Redis within [`TIMEOUT`], connecting first if needed.
    async fn call<T>(
        &self,
        exchange: impl AsyncFnOnce(&mut ConnectionManager) -> redis::RedisResult<T>,
    ) -> Result<T, StateError> {
        let attempt = async {
            let mut connection = self
                .connection
                .get_or_try_init(|| {
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(TIMEOUT))
                        .set_response_timeout(Some(TIMEOUT))
                        .set_number_of_retries(1);
                    ConnectionManager::new_with_config(self.client.clone(), config)
                })
                .await?
                .clone();
            exchange(&mut connection).await
        };
        if let Some(why) = self.quiet() {
            return Err(self.error(why));
        }
        let answered = tokio::time::timeout(TIMEOUT, attempt).await;
        let mut silence = self.silence.lock().unwrap_or_else(|e| e.into_inner());
        match answered {
            Ok(result) => {
                *silence = (0, None);
                result.map_err(|e| self.error(e))
            }
            Err(_) => {
                let why = format!("no answer within {TIMEOUT:?}");
                // One late answer may be this process starved of CPU; two
                // in a row is a Redis that has stopped answering.
                silence.0 += 1;
                if silence.0 >= 2 {
                    silence.1 = Some((Instant::now() + QUIET, why.clone()));
                }
                Err(self.error(why))
            }
        }
    }

    /// Why calls fail at once now, if they do.
    fn quiet(&self) -> Option<String> {
        let silence = self.silence.lock().unwrap_or_else(|e| e.into_inner());
        let (until, why) = silence.1.as_ref()?;
        (Instant::now() < *until).then(|| format!("{why} twice; not asked again yet"))
    }

    /// The stored JSON, or `None` (with a warning, once per key) when it is not JSON.
    fn parse(&self, key: &str, raw: Option<&str>) -> Option<Json> {
        let raw = raw?;
        match serde_json::from_str(raw) {
            Ok(json) => Some(json),
            Err(e) => {
                let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
                if reported.insert(key.to_owned()) {
                    tracing::warn!(
                        backend = %self.redacted_url,
                        key,
                        reason = %e,
                        "ignoring a shared state record that is not JSON; the next write replaces it"
                    );
                }
                None
            }
        }
    }
}

impl SharedState for RedisState {
    fn describe(&self) -> String {
        self.redacted_url.clone()
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        ttl: Option<Duration>,
        mut update: Update<'a>,
    ) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(async move {
            let redis_key = format!("{KEY_PREFIX}{key}");
            let ttl_ms = ttl.map_or(String::new(), |t| expiry_ms(t).to_string());
            for _ in 0..MAX_UPDATE_ATTEMPTS {
                let (current, (secs, micros)): (Option<String>, (u64, u64)) = self
                    .call(async |c| {
                        redis::pipe()
                            .get(&redis_key)
                            .cmd("TIME")
                            .query_async(c)
                            .await
                    })
                    .await?;
                let now_ms = secs * 1000 + micros / 1000;
                let next = update(self.parse(key, current.as_deref()), now_ms);
                let encoded = match &next {
                    Some(value) => Some(serde_json::to_string(value).map_err(|e| self.error(e))?),
                    None => None,
                };
                let written: i64 = self
                    .call(async |c| {
                        COMPARE_AND_SET
                            .key(&redis_key)
                            .arg(if current.is_some() { "1" } else { "0" })
                            .arg(current.as_deref().unwrap_or(""))
                            .arg(if encoded.is_some() { "1" } else { "0" })
                            .arg(encoded.as_deref().unwrap_or(""))
                            .arg(&ttl_ms)
                            .invoke_async(c)
                            .await
                    })
                    .await?;
                if written == 1 {
                    if next.is_some() {
                        self.reported
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(key);
                    }
                    return Ok(next);
                }
            }
            Err(self.error(format!(
                "{key} changed under every one of {MAX_UPDATE_ATTEMPTS} attempts to update it"
            )))
        })
    }

    fn now_ms(&self) -> BoxFuture<'_, Result<u64, StateError>> {
        Box::pin(async move {
            let (seconds, micros): (u64, u64) = self
                .call(async |c| redis::cmd("TIME").query_async(c).await)
                .await?;
            Ok(seconds * 1000 + micros / 1000)
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Json>, StateError>> {
        Box::pin(async move {
            let redis_key = format!("{KEY_PREFIX}{key}");
            let raw: Option<String> = self.call(async |c| c.get(&redis_key).await).await?;
            Ok(self.parse(key, raw.as_deref()))
        })
    }

    fn scan<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(String, Json)>, StateError>> {
        Box::pin(async move {
            let pattern = format!("{}*", escape_glob(&format!("{KEY_PREFIX}{prefix}")));
            let mut keys: Vec<String> = Vec::new();
            let mut cursor: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<String>) = self
                    .call(async |c| {
                        redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(&pattern)
                            .arg("COUNT")
                            .arg(1000)
                            .query_async(c)
                            .await
                    })
                    .await?;
                keys.extend(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            // SCAN may return a key twice.
            keys.sort();
            keys.dedup();
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let values: Vec<Option<String>> = self
                .call(async |c| redis::cmd("MGET").arg(&keys).query_async(c).await)
                .await?;
            Ok(keys
                .iter()
                .zip(values)
                .filter_map(|(redis_key, raw)| {
                    // A record that expired between SCAN and MGET comes back nil.
                    let key = redis_key.strip_prefix(KEY_PREFIX)?;
                    Some((key.to_owned(), self.parse(key, raw.as_deref())?))
                })
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
            let redis_key = format!("{KEY_PREFIX}{key}");
            // Stored as a JSON string, like every record, so `get` reads the holder.
            let value = Json::String(holder.to_owned()).to_string();
            let taken: Option<String> = self
                .call(async |c| {
                    redis::cmd("SET")
                        .arg(&redis_key)
                        .arg(&value)
                        .arg("NX")
                        .arg("PX")
                        .arg(expiry_ms(ttl))
                        .query_async(c)
                        .await
                })
                .await?;
            Ok(taken.is_some())
        })
    }

    fn release_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let redis_key = format!("{KEY_PREFIX}{key}");
            let value = Json::String(holder.to_owned()).to_string();
            let _: i64 = self
                .call(async |c| {
                    RELEASE_LEASE
                        .key(&redis_key)
                        .arg(&value)
                        .invoke_async(c)
                        .await
                })
                .await?;
            Ok(())
        })
    }

    /// One round trip, atomic on the server, instead of the default's
    /// read-then-compare-and-set loop.
    fn bucket<'a>(
        &'a self,
        key: &'a str,
        spec: BucketSpec,
        op: BucketOp,
    ) -> BoxFuture<'a, Result<BucketReply, StateError>> {
        Box::pin(async move {
            let redis_key = format!("{KEY_PREFIX}{key}");
            let (name, a, b) = match op {
                BucketOp::Take { amount, floor } => ("take", amount, floor),
                BucketOp::Adjust { delta } => ("adjust", delta, 0.0),
                BucketOp::Observe { remaining, ticket } => ("observe", remaining, ticket),
                BucketOp::Peek => ("peek", 0.0, 0.0),
            };
            let (granted, level, wait, ticket): (i64, String, String, String) = self
                .call(async |c| {
                    BUCKET
                        .key(&redis_key)
                        .arg(spec.capacity.to_string())
                        .arg(spec.refill_per_sec.to_string())
                        .arg(name)
                        .arg(a.to_string())
                        .arg(b.to_string())
                        .arg(bucket::IDLE_MS)
                        .arg(bucket::RAMP_SHARE.to_string())
                        .arg(expiry_ms(bucket::TTL))
                        .invoke_async(c)
                        .await
                })
                .await?;
            let float = |text: &str| {
                text.parse::<f64>()
                    .map_err(|_| self.error(format!("the bucket script returned {text:?}")))
            };
            let wait = float(&wait)?;
            Ok(BucketReply {
                granted: granted == 1,
                level: float(&level)?,
                wait: Duration::try_from_secs_f64(wait).unwrap_or(Duration::ZERO),
                ticket: float(&ticket)?,
            })
        })
    }
}

/// Redis refuses `PX 0`; a lease or record lives at least a millisecond.
fn expiry_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}

/// `*`, `?`, `[`, `]` and `\` in a key are literal in `SCAN MATCH`.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The user-info part of `scheme://user:password@host…`, if any.
fn user_info(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let authority_end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let at = url[start..authority_end].rfind('@')? + start;
    Some((start, at))
}

fn password_of(url: &str) -> Option<String> {
    let (start, at) = user_info(url)?;
    let (_, password) = url[start..at].split_once(':')?;
    (!password.is_empty()).then(|| password.to_owned())
}

/// `redis://:secret@host:6379/0` → `redis://***@host:6379/0`; query strings
/// (which may carry credentials) are dropped.
fn redact(url: &str) -> String {
    let url = url.split('?').next().unwrap_or(url);
    match user_info(url) {
        Some((start, at)) => format!("{}***{}", &url[..start], &url[at..]),
        None => url.to_owned(),
    }
}

fn scrub(text: &str, password: Option<&str>) -> String {
    match password {
        Some(password) => text.replace(password, "***"),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
