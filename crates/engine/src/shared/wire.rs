//! What windows sharing one engine say to each other over its socket: one
//! JSON message a line, jobs one way and their answers the other. Times
//! cross as what is left of them, since an `Instant` means nothing in
//! another process.

use std::io::{self, BufRead, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{EngineError, EngineStatus, FimText, Generation, Prewarm, SpanText};

/// A client window to the window hosting the engine.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum ToHost {
    Complete {
        id: u64,
        text: FimText,
        span: Option<SpanText>,
        max_tokens: usize,
        within_us: u64,
    },
    Chat {
        id: u64,
        messages: Vec<(String, String)>,
        max_tokens: usize,
        within_us: u64,
        first_token_within_us: Option<u64>,
        streams: bool,
    },
    Prewarm {
        id: u64,
        prewarm: Prewarm,
        tells_done: bool,
    },
    Cancel {
        id: u64,
    },
    /// What the job's stop rule says of the text so far.
    Stops {
        id: u64,
        stops: bool,
    },
}

/// The host to a client window.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum ToClient {
    Status(EngineStatus),
    /// Asks the window's stop rule (a closure, which stays where it was
    /// made) whether the text generated so far is finished.
    Stops {
        id: u64,
        text: String,
    },
    Piece {
        id: u64,
        text: String,
    },
    Answer {
        id: u64,
        answer: Result<Generation, EngineError>,
    },
    Prewarmed {
        id: u64,
        done: bool,
    },
    /// The host's engine has stopped: choose a new host.
    Closing,
}

/// A peer that reads nothing for this long (stopped, swapping) is let go:
/// the engine thread, which asks stop rules, must never wait on one window.
const WRITE_TIMEOUT: Duration = Duration::from_millis(500);

/// The writing half of a connection, shared by the threads that answer on it.
#[derive(Clone, Debug)]
pub(super) struct Peer(Arc<Mutex<UnixStream>>);

impl Peer {
    pub(super) fn new(stream: UnixStream) -> Peer {
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        Peer(Arc::new(Mutex::new(stream)))
    }

    /// Sends `message`; a failed send ends the connection both ways, so the
    /// reading side sees the end and lets go of what the peer had running.
    pub(super) fn send(&self, message: &impl Serialize) -> io::Result<()> {
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        let mut stream = locked(&self.0);
        let sent = stream.write_all(&line);
        if sent.is_err() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        sent
    }

    /// Whether both are the same connection.
    pub(super) fn is(&self, other: &Peer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// `mutex` locked; a thread that panicked holding it left nothing half-done
/// that matters here (a map of jobs, a list of peers, a stream).
pub(super) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The next message, `None` at the end of the connection. A line that is
/// not a message is an error: the connection cannot be trusted after it.
pub(super) fn receive<T: DeserializeOwned>(reader: &mut impl BufRead) -> io::Result<Option<T>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// What is left until `deadline`, to send.
pub(super) fn left_until(deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(Instant::now());
    u64::try_from(left.as_micros()).unwrap_or(u64::MAX)
}

/// The deadline a received time left stands for here.
pub(super) fn deadline_in(left_us: u64) -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_micros(left_us))
        .unwrap_or_else(|| now + Duration::from_secs(86_400))
}
