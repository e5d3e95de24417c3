//! Turning a [`Behaviour`] into bytes on the socket: the plan of what to send,
//! the HTTP/1.1 framing (chunked bodies, error bodies), and where in the stream
//! each fault lands. What the bytes say is the wire format's module.

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{Behaviour, FakeRateLimits, anthropic, openai};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wire {
    Anthropic,
    OpenAi,
}

/// A behaviour flattened into what to send.
pub(super) struct Reply {
    head_delay: Duration,
    /// Held before the headers until it opens.
    gate: Option<super::Gate>,
    limits: Option<FakeRateLimits>,
    body: ReplyBody,
}

impl Reply {
    /// Whether the connection is fit for another request once this reply is
    /// sent: its body ends where the framing says (faults cut or reset it).
    pub(super) fn ends_cleanly(&self) -> bool {
        match &self.body {
            ReplyBody::Reset => false,
            ReplyBody::Error(_) => true,
            ReplyBody::Stream(answer) => answer.ending == Ending::Terminal,
        }
    }
}

enum ReplyBody {
    Reset,
    Error(Failure),
    Stream(Answer),
}

/// A refused request, rendered by each wire format as its API does.
#[derive(Clone, Copy)]
pub(super) enum Failure {
    RateLimited(Option<u64>),
    QuotaExhausted,
    Unavailable,
    /// 529 (Anthropic) or 503, with the seconds of a `retry-after` header.
    Overloaded(Option<u64>),
    ServerError,
    ContextLength,
    Unauthorized,
    PrefillRejected,
    /// 502 from a router, or from a proxy in front of the API.
    BadGateway,
}

/// A refused request's body: its API's JSON, or a page from a proxy in front of it.
pub(super) enum ErrorBody {
    Json(Value),
    Html(&'static str),
}

/// A 200 answer: its deltas, pacing, finish and how it ends.
pub(super) struct Answer {
    pub deltas: Vec<String>,
    pub delay: Duration,
    pub first_token_delay: Duration,
    pub stall: Option<(usize, Duration)>,
    pub stop: Stop,
    pub ending: Ending,
}

#[derive(Clone, Copy)]
pub(super) enum Stop {
    EndTurn,
    MaxTokens,
    Refusal,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    Terminal,
    CleanEofWithoutTerminal,
    CutAfter(usize),
    /// The body ends cleanly after this many deltas: no finish reason, no
    /// terminal event.
    EndsAfter(usize),
    /// This many events of garbage in a row after that many deltas.
    MalformedAfter {
        at: usize,
        count: usize,
    },
    InBandAfter(usize),
    /// The body is cut after this many bytes of event text (see [`chunk`]).
    CutAtByte(usize),
}

pub(super) fn plan(behaviour: Behaviour) -> Reply {
    let answer = |text: &str, chunks: usize| Answer {
        deltas: split(text, chunks),
        delay: Duration::ZERO,
        first_token_delay: Duration::ZERO,
        stall: None,
        stop: Stop::EndTurn,
        ending: Ending::Terminal,
    };
    let reply = |body| Reply {
        head_delay: Duration::ZERO,
        gate: None,
        limits: None,
        body,
    };
    let stream = |answer| reply(ReplyBody::Stream(answer));
    let error = |failure| reply(ReplyBody::Error(failure));
    match behaviour {
        Behaviour::Ok {
            text,
            chunks,
            delay,
        } => stream(Answer {
            delay,
            ..answer(&text, chunks)
        }),
        Behaviour::LatencyBeforeHeaders { delay, then } => Reply {
            head_delay: delay,
            ..plan(*then)
        },
        Behaviour::Gated { gate, then } => Reply {
            gate: Some(gate),
            ..plan(*then)
        },
        Behaviour::SlowFirstToken { delay, text } => stream(Answer {
            first_token_delay: delay,
            ..answer(&text, 3)
        }),
        Behaviour::StallMidStream {
            text,
            after_chunks,
            stall,
        } => stream(Answer {
            stall: Some((after_chunks, stall)),
            ..answer(&text, 4)
        }),
        Behaviour::CutAfter { text, after_chunks } => stream(Answer {
            ending: Ending::CutAfter(after_chunks),
            ..answer(&text, 4)
        }),
        Behaviour::MalformedChunk { text, after_chunks } => stream(Answer {
            ending: Ending::MalformedAfter {
                at: after_chunks,
                count: 1,
            },
            ..answer(&text, 4)
        }),
        Behaviour::MalformedRun {
            text,
            after_chunks,
            count,
        } => stream(Answer {
            ending: Ending::MalformedAfter {
                at: after_chunks,
                count,
            },
            ..answer(&text, 4)
        }),
        Behaviour::MissingTerminal { text } => stream(Answer {
            ending: Ending::CleanEofWithoutTerminal,
            ..answer(&text, 3)
        }),
        Behaviour::CutAtByte { text, at_byte } => stream(Answer {
            ending: Ending::CutAtByte(at_byte),
            ..answer(&text, 4)
        }),
        Behaviour::EndsEarly { text, after_chunks } => stream(Answer {
            ending: Ending::EndsAfter(after_chunks),
            ..answer(&text, 4)
        }),
        Behaviour::InBandError { text, after_chunks } => stream(Answer {
            ending: Ending::InBandAfter(after_chunks),
            ..answer(&text, 4)
        }),
        Behaviour::Refusal { text } => stream(Answer {
            stop: Stop::Refusal,
            ..answer(&text, 2)
        }),
        Behaviour::MaxTokens { text } => stream(Answer {
            stop: Stop::MaxTokens,
            ..answer(&text, 3)
        }),
        Behaviour::RateLimited { retry_after } => error(Failure::RateLimited(retry_after)),
        Behaviour::QuotaExhausted => error(Failure::QuotaExhausted),
        Behaviour::Unavailable => error(Failure::Unavailable),
        Behaviour::Overloaded => error(Failure::Overloaded(None)),
        Behaviour::OverloadedFor { retry_after } => error(Failure::Overloaded(Some(retry_after))),
        Behaviour::ServerError => error(Failure::ServerError),
        Behaviour::ContextLength => error(Failure::ContextLength),
        Behaviour::Unauthorized => error(Failure::Unauthorized),
        Behaviour::PrefillRejected => error(Failure::PrefillRejected),
        Behaviour::BadGateway => error(Failure::BadGateway),
        // Read against their request before they get here (`for_request`).
        Behaviour::Continues { full, .. } | Behaviour::RejectsPrefill { full, .. } => {
            stream(answer(&full, 4))
        }
        Behaviour::ByPrompt { otherwise, .. } => plan(*otherwise),
        Behaviour::ResetBeforeHeaders => reply(ReplyBody::Reset),
        Behaviour::WithRateLimits { limits, then } => Reply {
            limits: Some(limits),
            ..plan(*then)
        },
    }
}

/// `text` in `chunks` pieces of near-equal length (by characters).
pub(super) fn split(text: &str, chunks: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() || chunks == 0 {
        return Vec::new();
    }
    let size = chars.len().div_ceil(chunks.min(chars.len()));
    chars
        .chunks(size)
        .map(|piece| piece.iter().collect())
        .collect()
}

/// Sends `reply` in `wire`'s format. `bearer` is the key the request carried
/// (OpenAI's 401 quotes it back); `keep_open` leaves out `connection: close`.
pub(super) async fn respond(
    socket: &mut TcpStream,
    wire: Wire,
    reply: Reply,
    bearer: &str,
    keep_open: bool,
) -> std::io::Result<()> {
    if let Some(gate) = &reply.gate {
        gate.passed().await;
    }
    pause(reply.head_delay).await;
    let mut headers = match (&reply.limits, wire) {
        (Some(limits), Wire::Anthropic) => anthropic::rate_limit_headers(limits),
        (Some(limits), Wire::OpenAi) => openai::rate_limit_headers(limits),
        (None, _) => Vec::new(),
    };
    headers.push(match wire {
        Wire::Anthropic => ("request-id".to_owned(), "req_fake".to_owned()),
        Wire::OpenAi => ("x-request-id".to_owned(), "req_fake".to_owned()),
    });
    match reply.body {
        ReplyBody::Reset => socket.shutdown().await,
        ReplyBody::Error(failure) => {
            write_failure(socket, wire, failure, headers, bearer, keep_open).await
        }
        ReplyBody::Stream(answer) => {
            write_head(
                socket,
                200,
                "OK",
                "text/event-stream; charset=utf-8",
                None,
                &headers,
                keep_open,
            )
            .await?;
            let mut body = Chunked::new(socket, answer.ending);
            match wire {
                Wire::Anthropic => anthropic::stream(&mut body, answer).await,
                Wire::OpenAi => openai::stream(&mut body, answer).await,
            }
        }
    }
}

/// A refused request's response, as `wire`'s API (or a proxy in front of it) sends it.
async fn write_failure(
    socket: &mut TcpStream,
    wire: Wire,
    failure: Failure,
    mut headers: Vec<(String, String)>,
    bearer: &str,
    keep_open: bool,
) -> std::io::Result<()> {
    if let Failure::Unavailable = failure {
        // A proxy in front of either API answers this, in plain text.
        let text =
            "upstream connect error or disconnect/reset before headers. reset reason: overflow";
        let head = (503, "Service Unavailable", "text/plain");
        return write_whole(socket, head, &headers, text, keep_open).await;
    }
    if let Failure::RateLimited(Some(seconds)) | Failure::Overloaded(Some(seconds)) = failure {
        headers.push(("retry-after".to_owned(), seconds.to_string()));
    }
    let (status, reason, body) = match wire {
        Wire::Anthropic => anthropic::failure(failure),
        Wire::OpenAi => openai::failure(failure, bearer),
    };
    match body {
        ErrorBody::Json(body) => {
            write_error(socket, status, reason, &headers, &body, keep_open).await
        }
        ErrorBody::Html(page) => {
            let head = (status, reason, "text/html");
            write_whole(socket, head, &headers, page, keep_open).await
        }
    }
}

/// Waits `delay`; no delay sends at once (a zero-length `sleep` would wait for
/// the timer's next millisecond tick, on every event).
async fn pause(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// The status line and headers; `length` `None` means a chunked body.
async fn write_head(
    socket: &mut TcpStream,
    status: u16,
    reason: &str,
    content_type: &str,
    length: Option<usize>,
    headers: &[(String, String)],
    keep_open: bool,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n");
    if !keep_open {
        head.push_str("connection: close\r\n");
    }
    match length {
        Some(length) => head.push_str(&format!("content-length: {length}\r\n")),
        None => head.push_str("transfer-encoding: chunked\r\ncache-control: no-cache\r\n"),
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await
}

pub(super) async fn write_error(
    socket: &mut TcpStream,
    status: u16,
    reason: &str,
    headers: &[(String, String)],
    body: &Value,
    keep_open: bool,
) -> std::io::Result<()> {
    let head = (status, reason, "application/json");
    write_whole(socket, head, headers, &body.to_string(), keep_open).await
}

/// A response whose whole `body` goes out at once; `head` is its status,
/// reason and content type.
async fn write_whole(
    socket: &mut TcpStream,
    (status, reason, content_type): (u16, &str, &str),
    headers: &[(String, String)],
    body: &str,
    keep_open: bool,
) -> std::io::Result<()> {
    write_head(
        socket,
        status,
        reason,
        content_type,
        Some(body.len()),
        headers,
        keep_open,
    )
    .await?;
    socket.write_all(body.as_bytes()).await?;
    socket.flush().await
}

/// A 200 answer's chunked body on its socket. It counts the event text
/// written (every event, the opening ones included; not the chunk framing):
/// what a client parses, so a cut lands at a byte of that.
pub(super) struct Chunked<'a> {
    socket: &'a mut TcpStream,
    written: usize,
    cut_at: Option<usize>,
}

impl<'a> Chunked<'a> {
    fn new(socket: &'a mut TcpStream, ending: Ending) -> Self {
        let cut_at = match ending {
            Ending::CutAtByte(at) => Some(at),
            _ => None,
        };
        Chunked {
            socket,
            written: 0,
            cut_at,
        }
    }
}

/// Writes one HTTP chunk holding `text`, and flushes it so it arrives on its
/// own. The chunk that would pass the body's cut announces all of `text` but
/// carries only the bytes before the cut (mid-line, mid-JSON, mid-character
/// as may be); it then fails, so the caller's `?` sends nothing more (no final
/// chunk) and the connection closes.
pub(super) async fn chunk(body: &mut Chunked<'_>, text: &str) -> std::io::Result<()> {
    let room = body
        .cut_at
        .map_or(usize::MAX, |at| at.saturating_sub(body.written));
    let sent = &text.as_bytes()[..text.len().min(room)];
    let mut bytes = format!("{:x}\r\n", text.len()).into_bytes();
    bytes.extend_from_slice(sent);
    let whole = sent.len() == text.len();
    if whole {
        bytes.extend_from_slice(b"\r\n");
    }
    body.socket.write_all(&bytes).await?;
    body.socket.flush().await?;
    body.written += sent.len();
    match whole {
        true => Ok(()),
        false => Err(std::io::Error::other("the fake cut the body here")),
    }
}

/// The final zero-length chunk: the body ends cleanly.
pub(super) async fn end_body(body: &mut Chunked<'_>) -> std::io::Result<()> {
    body.socket.write_all(b"0\r\n\r\n").await?;
    body.socket.flush().await
}

/// How one wire format writes the events a fault needs.
pub(super) struct Events<D, I> {
    /// One text delta.
    pub delta: D,
    /// An event whose data is cut-off JSON.
    pub malformed: &'static str,
    /// An in-band error event, given how many deltas went before it.
    pub in_band: I,
}

/// Sends the deltas the answer's ending allows, with its delays and stall.
/// Returns `false` when the ending stopped the stream early (it has then been
/// written, and the caller must send nothing more).
pub(super) async fn send_deltas<D, I>(
    socket: &mut Chunked<'_>,
    answer: &Answer,
    events: Events<D, I>,
) -> std::io::Result<bool>
where
    D: Fn(&str) -> String,
    I: Fn(usize) -> String,
{
    pause(answer.first_token_delay).await;
    for index in 0..=answer.deltas.len() {
        match answer.ending {
            // Dropping the socket mid-body: no final chunk, so the client sees a broken body.
            Ending::CutAfter(n) if n == index => return Ok(false),
            // Events of garbage in an otherwise complete stream.
            Ending::MalformedAfter { at, count } if at == index => {
                for _ in 0..count {
                    chunk(socket, events.malformed).await?;
                }
            }
            Ending::InBandAfter(n) if n == index => {
                chunk(socket, &(events.in_band)(index)).await?;
                end_body(socket).await?;
                return Ok(false);
            }
            Ending::EndsAfter(n) if n == index => {
                end_body(socket).await?;
                return Ok(false);
            }
            _ => {}
        }
        if let Some((n, stall)) = answer.stall
            && n == index
        {
            pause(stall).await;
        }
        let Some(text) = answer.deltas.get(index) else {
            break;
        };
        if index > 0 {
            pause(answer.delay).await;
        }
        chunk(socket, &(events.delta)(text)).await?;
    }
    Ok(true)
}
