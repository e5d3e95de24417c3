//! A loopback TCP proxy between switchyard and a `redis-server`, for fault
//! injection in the soak tests: a real network fails by slowing down and by
//! dropping connections, and a stopped or killed server (SIGSTOP, kill) does
//! neither. Each chunk is forwarded by an explicit read/write loop per
//! direction (not `copy_bidirectional`) so it can be held back, and each
//! connection can be cut with a reset the client sees as one.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

/// A proxy on a free local port to one upstream address; dropping it stops
/// accepting and resets every connection it holds.
pub struct TcpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: DropGuard,
}

/// What the proxy and its connection tasks share.
struct Shared {
    latency: Mutex<Duration>,
    /// The connections open now, each by the token that resets it.
    open: Mutex<HashMap<u64, CancellationToken>>,
    next_id: AtomicU64,
}

impl TcpProxy {
    /// Starts a proxy to `upstream` on `127.0.0.1:0`.
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            latency: Mutex::new(Duration::ZERO),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        tokio::spawn(accept(listener, upstream, shared.clone(), stop.clone()));
        TcpProxy {
            addr,
            shared,
            _stop: stop.drop_guard(),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The proxy as a Redis URL, to give switchyard in place of the server's.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// Holds each chunk read from now on, in either direction, `latency`
    /// before writing it (a Redis round trip takes twice that more); zero
    /// forwards at once. Chunks keep their order.
    pub fn set_latency(&self, latency: Duration) {
        *self.shared.latency.lock().unwrap() = latency;
    }

    /// Cuts every connection open now: the client gets a reset (RST, not
    /// FIN: `SO_LINGER` 0), the upstream socket is closed. Later connections
    /// are accepted as before.
    pub fn reset_all(&self) {
        let open = std::mem::take(&mut *self.shared.open.lock().unwrap());
        for token in open.into_values() {
            token.cancel();
        }
    }

    /// How many connections are open now.
    pub fn connections(&self) -> usize {
        self.shared.open.lock().unwrap().len()
    }
}

/// Accepts clients until `stop`, each on its own task with a token that is a
/// child of `stop` (so dropping the proxy resets them all).
async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    loop {
        let client = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(_) => continue,
            },
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let token = stop.child_token();
        shared.open.lock().unwrap().insert(id, token.clone());
        let shared = shared.clone();
        tokio::spawn(async move {
            serve(client, upstream, &shared.latency, token).await;
            shared.open.lock().unwrap().remove(&id);
        });
    }
}

/// Pipes one client to a fresh upstream connection until both sides are
/// done, one fails, or `reset` is cancelled.
async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    latency: &Mutex<Duration>,
    reset: CancellationToken,
) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        let _ = client.set_zero_linger();
        return;
    };
    let cut = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let both = async {
            tokio::try_join!(
                pipe(client_read, server_write, latency),
                pipe(server_read, client_write, latency),
            )
        };
        tokio::select! {
            _ = reset.cancelled() => true,
            _ = both => false,
        }
    };
    if cut {
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
}

/// One direction: a reader that stamps each chunk with when it is due, and a
/// writer that waits for that time, so the latency delays every chunk by the
/// same amount instead of adding up across a burst. EOF is passed on as a
/// shutdown of the write side.
async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    latency: &Mutex<Duration>,
) -> io::Result<()> {
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = from.read(&mut buf).await?;
            let at = Instant::now() + *latency.lock().unwrap();
            if n == 0 || chunks.send((at, buf[..n].to_vec())).is_err() {
                return io::Result::Ok(());
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write).map(|_| ())
}
