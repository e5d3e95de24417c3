//! The stdio boundary. Owns stdin and stdout and sits in front of the LSP
//! framework, because the framework stops reading after one undecodable message
//! (tokio-util's `FramedRead` ends the stream on a decode error), which would let
//! a single malformed message kill the server.
//!
//! Every incoming frame is checked here: well-formed JSON-RPC passes through to
//! the framework; anything else is answered with a JSON-RPC error (ARCHITECTURE.md invariant 12)
//! and dropped. Outgoing frames are forwarded whole, so error answers never
//! interleave with the framework's output (stdout stays pure protocol).

use serde_json::{Value, json};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::sync::mpsc;

/// Larger messages are refused (their bytes are skipped, not buffered).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

const PARSE_ERROR: i64 = -32700;
/// JSON-RPC `MethodNotFound`.
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_REQUEST: i64 = -32600;

/// One frame read from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Message(Vec<u8>),
    /// A frame that is not JSON-RPC, with the error to answer it with.
    Invalid {
        id: Value,
        code: i64,
        reason: String,
    },
    End,
}

/// Longer header lines are cut (the rest reads as another, ignored, line), so a
/// header without a newline cannot grow without bound.
const MAX_HEADER_LINE_BYTES: u64 = 64 * 1024;

/// Reads the next frame. Header lines other than `Content-Length` are ignored.
pub async fn read_frame<R: AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<Incoming> {
    let mut length: Option<Result<usize, String>> = None;
    let mut saw_header = false;
    loop {
        // Bytes, not `read_line`: a header that is not UTF-8 must be one bad
        // frame, not an I/O error that ends the session.
        let mut bytes = Vec::new();
        let read = (&mut *input)
            .take(MAX_HEADER_LINE_BYTES)
            .read_until(b'\n', &mut bytes)
            .await?;
        if read == 0 {
            return Ok(Incoming::End);
        }
        let line = String::from_utf8_lossy(&bytes);
        if line == "\r\n" || line == "\n" {
            if saw_header {
                break;
            }
            continue; // blank lines between frames
        }
        saw_header = true;
        if let Some((name, value)) = line.trim_end().split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = Some(
                value
                    .trim()
                    .parse::<usize>()
                    .map_err(|e| format!("bad Content-Length {value:?}: {e}")),
            );
        }
    }
    let length = match length {
        None => {
            return Ok(invalid(
                Value::Null,
                PARSE_ERROR,
                "frame without a Content-Length header".into(),
            ));
        }
        Some(Err(reason)) => return Ok(invalid(Value::Null, PARSE_ERROR, reason)),
        Some(Ok(n)) => n,
    };
    if length > MAX_MESSAGE_BYTES {
        tokio::io::copy(
            &mut (&mut *input).take(length as u64),
            &mut tokio::io::sink(),
        )
        .await?;
        return Ok(invalid(
            Value::Null,
            INVALID_REQUEST,
            format!("message of {length} bytes exceeds the {MAX_MESSAGE_BYTES} byte limit"),
        ));
    }
    let mut body = vec![0; length];
    input.read_exact(&mut body).await?;
    Ok(check(body))
}

fn invalid(id: Value, code: i64, reason: String) -> Incoming {
    Incoming::Invalid { id, code, reason }
}

/// Passes a JSON-RPC 2.0 request, notification or response; anything else is invalid.
fn check(body: Vec<u8>) -> Incoming {
    let value: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(e) => {
            return invalid(
                Value::Null,
                PARSE_ERROR,
                format!("message body is not JSON: {e}"),
            );
        }
    };
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    // The framework's ids are i64: a float or larger id would fail its decoding.
    let id_ok = match &id {
        Value::Null | Value::String(_) => true,
        Value::Number(n) => n.is_i64(),
        _ => false,
    };
    let well_formed = value.get("jsonrpc") == Some(&json!("2.0"))
        && id_ok
        && match value.get("method") {
            Some(method) => {
                method.is_string()
                    && value
                        .get("params")
                        .is_none_or(|p| p.is_object() || p.is_array() || p.is_null())
            }
            None => {
                value.get("id").is_some()
                    && (value.get("result").is_some() || value.get("error").is_some())
            }
        }
        && framework_decodes(&body);
    let is_request = value.get("id").is_some();
    let protocol_method = value
        .get("method")
        .and_then(Value::as_str)
        .is_some_and(|m| m.starts_with("$/"));
    if well_formed && is_request && protocol_method {
        // The framework drops `$/` requests unanswered; the spec wants an error,
        // and a client would otherwise wait forever.
        return invalid(
            id,
            METHOD_NOT_FOUND,
            "this server implements no `$/` requests".into(),
        );
    }
    if well_formed {
        Incoming::Message(body)
    } else {
        let id = if id_ok { id } else { Value::Null };
        invalid(
            id,
            INVALID_REQUEST,
            "not a JSON-RPC 2.0 request, notification or response".into(),
        )
    }
}

/// Whether the framework's own decoder accepts `body`: one it cannot decode
/// ends its input stream (and so the session), e.g. a duplicated `"id"` key,
/// which `serde_json::Value` tolerates but a derived struct does not.
fn framework_decodes(body: &[u8]) -> bool {
    use tower_lsp_server::jsonrpc::{Request, Response};
    serde_json::from_slice::<Response>(body).is_ok()
        || serde_json::from_slice::<Request>(body).is_ok()
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// Runs the boundary: client bytes from `stdin` reach the framework through
/// `to_server`; the framework's output from `from_server` and our error answers go
/// to `stdout`. Returns when the client closes stdin and the framework's output ends.
pub async fn relay<I, O, S, F>(stdin: I, mut stdout: O, mut to_server: S, from_server: F)
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin,
    S: AsyncWrite + Unpin + Send + 'static,
    F: AsyncRead + Unpin,
{
    let (answers, mut answers_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let mut input = BufReader::new(stdin);
        loop {
            match read_frame(&mut input).await {
                Ok(Incoming::Message(body)) => {
                    if to_server.write_all(&frame(&body)).await.is_err() {
                        break;
                    }
                }
                Ok(Incoming::Invalid { id, code, reason }) => {
                    tracing::warn!("rejected a malformed message: {reason}");
                    let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": reason}});
                    let _ = answers.send(frame(&serde_json::to_vec(&error).expect("JSON")));
                }
                Ok(Incoming::End) | Err(_) => break,
            }
        }
        // Closing the framework's input lets it finish.
        let _ = to_server.shutdown().await;
    });

    let mut output = BufReader::new(from_server);
    loop {
        tokio::select! {
            frame_out = read_frame(&mut output) => match frame_out {
                Ok(Incoming::Message(body)) => {
                    if stdout.write_all(&frame(&body)).await.is_err() { return; }
                }
                Ok(Incoming::Invalid { reason, .. }) => tracing::error!("the server produced a malformed frame: {reason}"),
                Ok(Incoming::End) | Err(_) => break,
            },
            Some(answer) = answers_rx.recv() => {
                if stdout.write_all(&answer).await.is_err() { return; }
            }
        }
        let _ = stdout.flush().await;
    }
    let _ = stdout.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8]) -> Incoming {
        read_frame(&mut BufReader::new(bytes)).await.unwrap()
    }

    #[tokio::test]
    async fn well_formed_messages_pass() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        assert_eq!(read(&frame(body)).await, Incoming::Message(body.to_vec()));
        let response = br#"{"jsonrpc":"2.0","id":1,"result":null}"#;
        assert_eq!(
            read(&frame(response)).await,
            Incoming::Message(response.to_vec())
        );
    }

    #[tokio::test]
    async fn garbage_body_is_a_parse_error() {
        assert!(matches!(
            read(&frame(b"{garbage}")).await,
            Incoming::Invalid {
                code: PARSE_ERROR,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn json_that_is_not_json_rpc_is_an_invalid_request_keeping_its_id() {
        let Incoming::Invalid { id, code, .. } = read(&frame(br#"{"jsonrpc":"2.0","id":7}"#)).await
        else {
            panic!()
        };
        assert_eq!((id, code), (json!(7), INVALID_REQUEST));
        assert!(matches!(
            read(&frame(br#"[1,2]"#)).await,
            Incoming::Invalid {
                code: INVALID_REQUEST,
                ..
            }
        ));
        assert!(matches!(
            read(&frame(br#"{"jsonrpc":"1.0","method":"x"}"#)).await,
            Incoming::Invalid { .. }
        ));
    }

    #[tokio::test]
    async fn missing_or_bad_length_is_a_parse_error_and_reading_goes_on() {
        let mut input = BufReader::new(&b"X-Foo: 1\r\n\r\nContent-Length: 2\r\n\r\n[]"[..]);
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Incoming::Invalid {
                code: PARSE_ERROR,
                ..
            }
        ));
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Incoming::Invalid {
                code: INVALID_REQUEST,
                ..
            }
        ));
        assert_eq!(read_frame(&mut input).await.unwrap(), Incoming::End);
        assert!(matches!(
            read(b"Content-Length: lots\r\n\r\n").await,
            Incoming::Invalid {
                code: PARSE_ERROR,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn protocol_requests_are_answered_method_not_found_and_notifications_pass() {
        let mut bytes = frame(br#"{"jsonrpc":"2.0","id":7,"method":"$/custom"}"#);
        bytes.extend(frame(
            br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#,
        ));
        let mut input = BufReader::new(&bytes[..]);
        match read_frame(&mut input).await.unwrap() {
            Incoming::Invalid { id, code, .. } => {
                assert_eq!((id, code), (json!(7), METHOD_NOT_FOUND));
            }
            _ => panic!("a `$/` request must be answered"),
        }
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Incoming::Message(_)
        ));
    }

    /// Found by tests/fuzz_inputs.rs: each of these ended the session.
    #[tokio::test]
    async fn frames_the_framework_cannot_decode_are_rejected_and_reading_goes_on() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#[..],
            br#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","method":"x","method":"y"}"#,
        ] {
            let mut bytes = frame(body);
            bytes.extend(frame(br#"{"jsonrpc":"2.0","method":"exit"}"#));
            let mut input = BufReader::new(&bytes[..]);
            assert!(
                matches!(
                    read_frame(&mut input).await.unwrap(),
                    Incoming::Invalid {
                        code: INVALID_REQUEST,
                        ..
                    }
                ),
                "{}",
                String::from_utf8_lossy(body)
            );
            assert!(matches!(
                read_frame(&mut input).await.unwrap(),
                Incoming::Message(_)
            ));
        }
    }

    #[tokio::test]
    async fn a_header_that_is_not_utf8_is_one_bad_frame() {
        let mut bytes = b"X-\xff: 1\r\nContent-Length: 2\xff\r\n\r\n".to_vec();
        bytes.extend(frame(br#"{"jsonrpc":"2.0","method":"exit"}"#));
        let mut input = BufReader::new(&bytes[..]);
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Incoming::Invalid {
                code: PARSE_ERROR,
                ..
            }
        ));
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Incoming::Message(_)
        ));
    }

    #[tokio::test]
    async fn oversized_messages_are_skipped_not_buffered() {
        let header = format!("Content-Length: {}\r\n\r\n", MAX_MESSAGE_BYTES + 1);
        let mut bytes = header.into_bytes();
        bytes.resize(bytes.len() + MAX_MESSAGE_BYTES + 1, b' ');
        bytes.extend(frame(br#"{"jsonrpc":"2.0","method":"exit"}"#));
        let mut input = BufReader::new(&bytes[..]);
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Incoming::Invalid {
                code: INVALID_REQUEST,
                ..
            }
        ));
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Incoming::Message(_)
        ));
    }
}
