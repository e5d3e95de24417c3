//! Turning an HTTP event stream into [`StreamEvent`]s under the stream rules:
//! the first-token and idle timeouts, the terminal-event rule (a stream that
//! stops without one is [`FailureKind::StreamCut`]), and the text streamed so
//! far carried on every error. SSE framing is eventsource-stream's; what each
//! event means is the wire format's [`Decoder`].

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::http::{Endpoint, ErrorBody};
use super::{
    FailureKind, Finish, ProviderError, RateLimits, ResponseStream, StreamEvent, Timeouts,
};

/// What one event of a wire format means.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Decoded {
    /// Bookkeeping (ping, block start, usage): nothing for the caller yet.
    Nothing,
    Text(String),
    /// The terminal event.
    End(Finish),
    /// An error event inside a stream that started with HTTP 200.
    InBand(ErrorBody),
    /// Not this wire format; the text says what was wrong.
    Malformed(String),
}

/// A wire format's reading of its events, one at a time, in order.
pub(crate) trait Decoder: Send + 'static {
    /// `event` is the SSE `event:` field (`message` when absent), `data` its data.
    fn decode(&mut self, event: &str, data: &str) -> Decoded;
    /// How the format marks the end of a stream, for error messages.
    fn terminal(&self) -> &'static str;
    /// How the answer finished, once the stream has said so (a finish or stop
    /// reason) even before its terminal event: a stream that then ends without
    /// the terminal event is complete, not cut.
    fn finished(&self) -> Option<Finish> {
        None
    }
}

/// Why the event stream itself failed, before any decoder saw an event.
#[derive(Debug, thiserror::Error)]
enum SseError {
    /// The connection failed under the body.
    #[error("{0}")]
    Transport(String),
    /// The bytes are not an event stream (bad UTF-8, unparseable lines).
    #[error("{0}")]
    Format(String),
}

type SseStream = Pin<Box<dyn Stream<Item = Result<Event, SseError>> + Send>>;

/// One step of a reader: the next event or error, or `None` once it is done.
type Item = Option<Result<StreamEvent, ProviderError>>;

/// Sends `body` to `endpoint` and streams the answer through `decoder`: the one
/// call path both wire formats share.
pub(crate) fn call(
    endpoint: Endpoint,
    body: serde_json::Value,
    decoder: impl Decoder,
    timeouts: Timeouts,
) -> futures::future::BoxFuture<'static, Result<ResponseStream, ProviderError>> {
    Box::pin(async move {
        let opened = endpoint.open(&body, &timeouts).await?;
        let bytes = opened.response.bytes_stream();
        Ok(stream(
            endpoint,
            bytes,
            opened.rate_limits,
            decoder,
            &timeouts,
        ))
    })
}

/// Streams the answer in `body` (a response body that arrived with
/// `rate_limits`, its headers read just now) through `decoder`.
pub(crate) fn stream<S, B, E>(
    endpoint: Endpoint,
    body: S,
    rate_limits: RateLimits,
    decoder: impl Decoder,
    timeouts: &Timeouts,
) -> ResponseStream
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::error::Error + Send + 'static,
{
    let sse = utf8_checked(body).eventsource().map(|item| {
        item.map_err(|e| match e {
            EventStreamError::Transport(e) => e,
            EventStreamError::Utf8(e) => SseError::Format(e.to_string()),
            EventStreamError::Parser(e) => SseError::Format(e.to_string()),
        })
    });
    let reader = Reader {
        sse: Box::pin(sse),
        decoder,
        endpoint,
        rate_limits: rate_limits.clone(),
        first_token_deadline: Instant::now() + timeouts.first_token,
        first_token: timeouts.first_token,
        idle: timeouts.idle,
        text_started: false,
        partial: String::new(),
        malformed_in_a_row: 0,
        done: false,
    };
    let events = futures::stream::unfold(reader, |mut reader| async move {
        let item = reader.next().await?;
        Some((item, reader))
    });
    ResponseStream {
        events: events.boxed(),
        rate_limits,
    }
}

struct Reader<D> {
    sse: SseStream,
    decoder: D,
    endpoint: Endpoint,
    rate_limits: RateLimits,
    first_token_deadline: Instant,
    first_token: Duration,
    idle: Duration,
    text_started: bool,
    partial: String,
    /// Malformed events since the last good one.
    malformed_in_a_row: u32,
    /// Set after the terminal event or an error: the stream yields nothing more.
    done: bool,
}

/// Malformed events in a row that make a stream broken rather than noisy.
const MALFORMED_IN_A_ROW: u32 = 3;

impl<D: Decoder> Reader<D> {
    async fn next(&mut self) -> Item {
        if self.done {
            return None;
        }
        loop {
            let event = match self.next_event().await {
                Ok(event) => event,
                Err(ending) => return ending,
            };
            // Scrubbed before a decoder quotes an excerpt of it (see `Endpoint::scrub`).
            let data = self.endpoint.scrub(event.data);
            let decoded = self.decoder.decode(&event.event, &data);
            if let Some(item) = self.take(decoded) {
                return Some(item);
            }
        }
    }

    /// The next raw event, or how the stream ends: its finish, or the failure
    /// of a missed deadline, a cut or bytes that are no event stream.
    async fn next_event(&mut self) -> Result<Event, Item> {
        // Before the first text only the first-token deadline applies (a model
        // may think quietly); after it, every gap between events is bounded.
        let deadline = if self.text_started {
            Instant::now() + self.idle
        } else {
            self.first_token_deadline
        };
        match tokio::time::timeout_at(deadline, self.sse.next()).await {
            Err(_) if self.text_started => Err(self.fail(
                FailureKind::Stalled,
                format!("stream silent for {:?}", self.idle),
            )),
            Err(_) => Err(self.fail(
                FailureKind::TimeoutFirstToken,
                format!("no text within {:?}", self.first_token),
            )),
            Ok(None) if let Some(finish) = self.decoder.finished() => {
                // Every delta and the finish reason arrived; only the
                // terminal event is missing. Finalise with what was reported.
                self.done = true;
                Err(Some(Ok(StreamEvent::End(finish))))
            }
            Ok(None) => {
                let terminal = self.decoder.terminal();
                Err(self.fail(
                    FailureKind::StreamCut,
                    format!("stream ended before {terminal}"),
                ))
            }
            Ok(Some(Err(SseError::Transport(e)))) => Err(self.fail(
                FailureKind::StreamCut,
                format!("connection dropped mid-stream: {e}"),
            )),
            Ok(Some(Err(SseError::Format(e)))) => Err(self.fail(
                FailureKind::Malformed,
                format!("not a valid event stream: {e}"),
            )),
            Ok(Some(Ok(event))) => Ok(event),
        }
    }

    /// What a decoded event gives the caller; `None` where it gives nothing
    /// (a keep-alive, empty text) and the next event is read.
    fn take(&mut self, decoded: Decoded) -> Item {
        if !matches!(decoded, Decoded::Malformed(_)) {
            self.malformed_in_a_row = 0;
        }
        match decoded {
            Decoded::Nothing => None,
            Decoded::Text(text) if text.is_empty() => None,
            Decoded::Text(text) => {
                self.text_started = true;
                self.partial.push_str(&text);
                Some(Ok(StreamEvent::Delta(text)))
            }
            Decoded::End(finish) => {
                self.done = true;
                Some(Ok(StreamEvent::End(finish)))
            }
            Decoded::InBand(body) => {
                let error =
                    self.endpoint
                        .body_error(FailureKind::InBand, "error event mid-stream", body);
                self.finish_with(error)
            }
            Decoded::Malformed(message) => {
                self.malformed_in_a_row += 1;
                if self.malformed_in_a_row >= MALFORMED_IN_A_ROW {
                    let message =
                        format!("{MALFORMED_IN_A_ROW} malformed events in a row, last: {message}");
                    return self.fail(FailureKind::Malformed, message);
                }
                Some(Ok(StreamEvent::Skipped(message)))
            }
        }
    }

    fn fail(&mut self, kind: FailureKind, message: String) -> Item {
        let error = self.endpoint.error(kind, message);
        self.finish_with(error)
    }

    fn finish_with(&mut self, error: ProviderError) -> Item {
        self.done = true;
        Some(Err(ProviderError {
            rate_limits: self.rate_limits.clone(),
            partial: self.partial.clone(),
            ..error
        }))
    }
}

/// Fails on invalid UTF-8 as soon as it arrives. eventsource-stream cannot tell
/// a bad byte from a character split across reads, so it would buffer the rest
/// of the stream behind it and the call would end as a stall, not `Malformed`.
fn utf8_checked<S, B, E>(body: S) -> impl Stream<Item = Result<Vec<u8>, SseError>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::error::Error,
{
    // The start of a character split across reads, held for the next read.
    let mut carry = Vec::new();
    body.map(move |item| {
        let bytes = item.map_err(|e| SseError::Transport(super::http::chain(&e)))?;
        let mut data = std::mem::take(&mut carry);
        data.extend_from_slice(bytes.as_ref());
        match std::str::from_utf8(&data) {
            Ok(_) => Ok(data),
            Err(e) if e.error_len().is_none() => {
                carry = data.split_off(e.valid_up_to());
                Ok(data)
            }
            Err(e) => Err(SseError::Format(format!(
                "invalid UTF-8 after {} bytes of a read",
                e.valid_up_to()
            ))),
        }
    })
}

/// The start of `data`, for messages about a chunk that could not be read.
pub(crate) fn excerpt(data: &str) -> String {
    const CHARS: usize = 200;
    let mut text: String = data.chars().take(CHARS).collect();
    if text.len() < data.len() {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use std::io;

    use futures::channel::mpsc;

    use super::*;
    use crate::http::{Auth, WireFormat};
    use crate::{FinishReason, Usage};

    /// A wire format whose event names say what they are: `text`, `ping`, `end`, `bad`.
    struct Named;

    impl Decoder for Named {
        fn decode(&mut self, event: &str, data: &str) -> Decoded {
            match event {
                "text" => Decoded::Text(data.to_owned()),
                "end" => Decoded::End(Finish {
                    reason: FinishReason::EndTurn,
                    usage: Usage::default(),
                }),
                "bad" => Decoded::Malformed(data.to_owned()),
                _ => Decoded::Nothing,
            }
        }

        fn terminal(&self) -> &'static str {
            "end"
        }
    }

    static FORMAT: WireFormat = WireFormat {
        rate_limits: |_, _| RateLimits::default(),
        error_body: |_| None,
    };

    const TIMEOUTS: Timeouts = Timeouts {
        connect: Duration::from_secs(1),
        first_byte: Duration::from_secs(1),
        first_token: Duration::from_secs(1),
        idle: Duration::from_millis(300),
    };

    type Body = mpsc::UnboundedSender<Result<Vec<u8>, io::Error>>;

    fn open() -> (Body, ResponseStream) {
        let endpoint = Endpoint::new(
            "fake",
            "http://127.0.0.1:9/",
            Auth::Bearer,
            None,
            Vec::new(),
            &FORMAT,
        )
        .unwrap();
        let (sender, body) = mpsc::unbounded();
        (
            sender,
            stream(endpoint, body, RateLimits::default(), Named, &TIMEOUTS),
        )
    }

    /// Sends one event; a closed stream (the reader has finished) swallows it.
    fn send(body: &Body, event: &str, data: &str) {
        let _ = body.unbounded_send(Ok(format!("event: {event}\ndata: {data}\n\n").into_bytes()));
    }

    async fn error_of(response: &mut ResponseStream) -> ProviderError {
        loop {
            match response.events.next().await {
                Some(Ok(_)) => continue,
                Some(Err(error)) => return error,
                None => panic!("stream ended without an error"),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn text_then_terminal_yields_deltas_then_end_then_nothing() {
        let (body, mut response) = open();
        send(&body, "ping", "{}");
        send(&body, "text", "ab");
        send(&body, "text", "cd");
        send(&body, "end", "{}");
        send(&body, "text", "after the end");
        let mut seen = Vec::new();
        while let Some(event) = response.events.next().await {
            seen.push(event.unwrap());
        }
        assert_eq!(
            seen,
            vec![
                StreamEvent::Delta("ab".into()),
                StreamEvent::Delta("cd".into()),
                StreamEvent::End(Finish {
                    reason: FinishReason::EndTurn,
                    usage: Usage::default()
                }),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pings_do_not_hold_off_the_first_token_deadline() {
        let (body, mut response) = open();
        tokio::spawn(async move {
            loop {
                send(&body, "ping", "{}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        let started = Instant::now();
        let error = error_of(&mut response).await;
        assert_eq!(error.kind, FailureKind::TimeoutFirstToken);
        let waited = started.elapsed();
        assert!(
            waited >= TIMEOUTS.first_token && waited < TIMEOUTS.first_token + TIMEOUTS.idle,
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn silence_after_text_is_a_stall_carrying_the_partial_text() {
        let (body, mut response) = open();
        send(&body, "text", "fn main");
        let error = error_of(&mut response).await;
        assert_eq!(error.kind, FailureKind::Stalled);
        assert_eq!(error.partial, "fn main");
        drop(body);
    }

    #[tokio::test(start_paused = true)]
    async fn events_closer_than_idle_keep_a_long_stream_alive() {
        let (body, mut response) = open();
        tokio::spawn(async move {
            for _ in 0..20 {
                send(&body, "text", "x");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            send(&body, "end", "{}");
        });
        let mut text = String::new();
        let mut ended = false;
        while let Some(event) = response.events.next().await {
            match event.unwrap() {
                StreamEvent::Delta(delta) => text.push_str(&delta),
                StreamEvent::End(_) => ended = true,
                StreamEvent::Skipped(why) => panic!("skipped {why}"),
            }
        }
        assert!(ended);
        assert_eq!(text.len(), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn end_of_body_before_the_terminal_event_is_a_cut() {
        let (body, mut response) = open();
        send(&body, "text", "half an ans");
        drop(body);
        let error = error_of(&mut response).await;
        assert_eq!(error.kind, FailureKind::StreamCut);
        assert_eq!(error.partial, "half an ans");
        assert!(error.message.contains("before end"), "{}", error.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_transport_error_mid_body_is_a_cut() {
        let (body, mut response) = open();
        send(&body, "text", "abc");
        body.unbounded_send(Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "peer reset",
        )))
        .unwrap();
        let error = error_of(&mut response).await;
        assert_eq!(error.kind, FailureKind::StreamCut);
        assert_eq!(error.partial, "abc");
        assert!(error.message.contains("peer reset"), "{}", error.message);
    }

    #[tokio::test(start_paused = true)]
    async fn invalid_utf8_is_malformed() {
        let (body, mut response) = open();
        body.unbounded_send(Ok(b"event: text\ndata: \xff\xfe\n\n".to_vec()))
            .unwrap();
        let error = error_of(&mut response).await;
        assert_eq!(error.kind, FailureKind::Malformed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_malformed_event_is_skipped_and_the_answer_goes_on() {
        let (body, mut response) = open();
        send(&body, "text", "ok so far");
        send(&body, "bad", "{not json");
        send(&body, "text", ", and more");
        let mut events = Vec::new();
        for _ in 0..3 {
            events.push(response.events.next().await.unwrap().unwrap());
        }
        assert!(matches!(&events[1], StreamEvent::Skipped(m) if m.contains("not json")));
        assert_eq!(events[2], StreamEvent::Delta(", and more".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn repeated_garbage_ends_the_stream_with_the_partial_text() {
        let (body, mut response) = open();
        send(&body, "text", "ok so far");
        for _ in 0..MALFORMED_IN_A_ROW {
            send(&body, "bad", "{not json");
        }
        let error = error_of(&mut response).await;
        assert_eq!(error.kind, FailureKind::Malformed);
        assert_eq!(error.partial, "ok so far");
        assert!(error.message.contains("in a row"), "{}", error.message);
        assert!(response.events.next().await.is_none());
    }
}
