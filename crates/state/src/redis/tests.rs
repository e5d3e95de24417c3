//! Redis's URL handling, glob escaping and the quiet after an unanswered call.

use super::*;

#[test]
fn urls_lose_their_credentials() {
    assert_eq!(
        redact("redis://:secret@host:6379/0"),
        "redis://***@host:6379/0"
    );
    assert_eq!(redact("rediss://user:p@ss@host"), "rediss://***@host");
    assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    assert_eq!(redact("redis://host/0?password=x"), "redis://host/0");
    assert_eq!(password_of("redis://user:p@ss@host"), Some("p@ss".into()));
    assert_eq!(password_of("redis://user@host"), None);
    assert_eq!(scrub("auth p@ss failed", Some("p@ss")), "auth *** failed");
}

#[test]
fn glob_characters_in_keys_are_literal() {
    assert_eq!(
        escape_glob("switchyard:a*b?[c]\\"),
        "switchyard:a\\*b\\?\\[c\\]\\\\"
    );
}

/// A stopped Redis (SIGSTOP) takes connections and answers nothing: the
/// first two calls wait their timeout (one late answer may be a starved
/// process), the calls after them fail at once for a while, and then one
/// asks again.
#[tokio::test(start_paused = true)]
async fn after_two_unanswered_calls_the_next_ones_fail_at_once_for_a_while() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            kept.push(socket);
        }
    });
    let state = RedisState::open(&format!("redis://127.0.0.1:{port}")).unwrap();
    for _ in 0..2 {
        let started = Instant::now();
        assert!(state.get("k").await.is_err());
        assert_eq!(
            started.elapsed(),
            TIMEOUT,
            "the first two wait their timeout"
        );
    }
    let next = Instant::now();
    let err = state.get("k").await.unwrap_err();
    assert_eq!(
        next.elapsed(),
        Duration::ZERO,
        "the next fails at once: {err}"
    );
    assert!(err.to_string().contains("not asked again yet"), "{err}");
    tokio::time::advance(QUIET).await;
    let later = Instant::now();
    assert!(state.get("k").await.is_err());
    assert_eq!(later.elapsed(), TIMEOUT, "after the quiet, it asks again");
}

#[tokio::test]
async fn an_unreachable_redis_is_an_error_within_the_timeout() {
    // Nothing listens on port 1; TEST-NET-1 (192.0.2.0/24) never answers.
    for url in [
        "redis://:hunter2@127.0.0.1:1",
        "redis://:hunter2@192.0.2.1:6379",
    ] {
        let state = RedisState::open(url).unwrap();
        let started = std::time::Instant::now();
        let err = state.get("k").await.unwrap_err();
        assert!(
            started.elapsed() < TIMEOUT + Duration::from_millis(500),
            "{url}: {err}"
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().contains("redis://***@"), "{err}");
    }
}
