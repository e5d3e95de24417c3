//! The fault-injection proxy the soak tests put between switchyard and a real
//! `redis-server` (tests/support/tcp_proxy.rs): it forwards, it delays each
//! chunk by the latency set, and a reset reaches the client as one while new
//! connections still get through.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::redis_server::RedisServer;
use support::tcp_proxy::TcpProxy;
use support::timing;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a reply may take before the test gives up (not a bound checked).
const PATIENCE: Duration = Duration::from_secs(10);

fn upstream(redis: &RedisServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], redis.port))
}

/// Sends a RESP `PING` on `stream` and reads the reply.
async fn ping(stream: &mut TcpStream) -> Vec<u8> {
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
    let mut reply = [0u8; 7];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut reply))
        .await
        .expect("a reply to PING through the proxy")
        .unwrap();
    reply.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_and_delays_each_chunk_by_the_latency() {
    let redis = RedisServer::start();
    let proxy = TcpProxy::start(upstream(&redis)).await;

    let client = redis::Client::open(proxy.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(proxy.connections(), 1);

    proxy.set_latency(Duration::from_millis(100));
    let started = Instant::now();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
    // One chunk each way, each held 100 ms.
    timing::assert_at_least(
        "a PING at 100 ms latency",
        started.elapsed(),
        Duration::from_millis(200),
    );

    proxy.set_latency(Duration::ZERO);
    let mut raw = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(ping(&mut raw).await, b"+PONG\r\n");
    assert_eq!(proxy.connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_cuts_open_connections_and_new_ones_get_through() {
    let redis = RedisServer::start();
    let proxy = TcpProxy::start(upstream(&redis)).await;
    let mut old = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(ping(&mut old).await, b"+PONG\r\n");
    assert_eq!(proxy.connections(), 1);

    proxy.reset_all();
    assert_eq!(proxy.connections(), 0);
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(PATIENCE, old.read(&mut buf))
        .await
        .expect("the old connection closed by the reset");
    match read {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the old connection still open after the reset: {other:?}"),
    }

    let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(ping(&mut new).await, b"+PONG\r\n");
    assert_eq!(proxy.connections(), 1);

    drop(proxy);
    let read = tokio::time::timeout(PATIENCE, new.read(&mut buf))
        .await
        .expect("the connection closed when the proxy is dropped");
    assert!(!matches!(read, Ok(n) if n > 0), "{read:?}");
}
