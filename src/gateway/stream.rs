//! A streamed chat completion: the routed task runs apart, nothing reaches
//! the caller before its first text (until then a failure fails over
//! unseen, and total failure is a plain HTTP error), then each piece is
//! relayed as an OpenAI chunk. A caller who hangs up cancels the task.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio_util::sync::CancellationToken;

use super::{model_of, now_secs, openai, route_error};
use switchyard_core::session::Session;
use switchyard_router::{Answer, Progress, RouteError, TaskRequest};

/// What the routed task reports while it runs.
enum Event {
    Trying(String),
    Delta(String),
    Done(Result<Answer, RouteError>),
}

/// Cancels the routed task when the caller's stream is dropped.
struct CancelOnDrop(CancellationToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

pub(super) async fn stream_completion(
    session: Arc<Session>,
    task: TaskRequest,
    id: String,
) -> Response {
    let cancel = CancellationToken::new();
    // A caller who hangs up at any point, before the first text too, cancels
    // the routed task: its guards give back probe leases and quota at once.
    let guard = CancelOnDrop(cancel.clone());
    let mut rx = routed(session, task, cancel);
    let mut model = String::new();
    let first = loop {
        match rx.recv().await {
            Some(Event::Trying(entry)) => model = entry,
            Some(Event::Delta(text)) => break text,
            Some(Event::Done(Ok(answer))) => break answer.text,
            Some(Event::Done(Err(e))) => return route_error(&e),
            None => return route_error(&RouteError::Cancelled),
        }
    };
    let (out, body) = mpsc::unbounded_channel::<Bytes>();
    let chunks = Chunks {
        id,
        created: now_secs(),
        model,
        out,
    };
    tokio::spawn(chunks.relay(first, rx));
    let stream = futures::stream::unfold((body, guard), |(mut body, guard)| async move {
        body.recv()
            .await
            .map(|bytes| (Ok::<_, Infallible>(bytes), (body, guard)))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("static headers are valid")
}

/// Runs `task` in the session, apart; what it reports comes out of the receiver.
fn routed(
    session: Arc<Session>,
    task: TaskRequest,
    cancel: CancellationToken,
) -> UnboundedReceiver<Event> {
    let (events, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let progress = events.clone();
        let on_progress = move |event| {
            let event = match event {
                Progress::Trying { entry, .. } => Event::Trying(entry.to_string()),
                Progress::Delta(text) => Event::Delta(text),
                Progress::Received { .. } => return,
            };
            let _ = progress.send(event);
        };
        let result = session.serve(task, cancel, &on_progress).await;
        let _ = events.send(Event::Done(result));
    });
    rx
}

/// The chunks of one streamed answer, sent to the caller's body.
struct Chunks {
    id: String,
    created: u64,
    /// The entry serving now (a failover changes it).
    model: String,
    out: UnboundedSender<Bytes>,
}

impl Chunks {
    /// Whether the caller still listens.
    fn send(&self, value: &Value) -> bool {
        self.out
            .send(Bytes::from(format!("data: {value}\n\n")))
            .is_ok()
    }

    fn delta(&self, delta: Value) -> bool {
        let chunk = openai::chunk(&self.id, self.created, &self.model, delta, None);
        self.send(&chunk)
    }

    /// The role and `first`, then every later event, until the end or until
    /// the caller hangs up.
    async fn relay(mut self, first: String, mut rx: UnboundedReceiver<Event>) {
        let role = json!({"role": "assistant", "content": ""});
        if !self.delta(role) || !self.delta(json!({"content": first})) {
            return;
        }
        while let Some(event) = rx.recv().await {
            let delivered = match event {
                Event::Trying(entry) => {
                    self.model = entry;
                    true
                }
                Event::Delta(text) => self.delta(json!({"content": text})),
                Event::Done(result) => return self.end(result),
            };
            if !delivered {
                return;
            }
        }
    }

    fn end(&self, result: Result<Answer, RouteError>) {
        match result {
            Ok(answer) => {
                let (id, created, model) = (&self.id, self.created, model_of(&answer));
                self.send(&openai::chunk(id, created, &model, json!({}), Some("stop")));
                self.send(&openai::usage_chunk(id, created, &model, answer.usage));
                let _ = self.out.send(Bytes::from_static(b"data: [DONE]\n\n"));
            }
            Err(e) => {
                // `e` lists every entry tried and what stopped each (a cut,
                // a stall after N s, a malformed stream, an open circuit).
                let message = format!("the answer is incomplete: {e}");
                self.send(&openai::error_body(
                    "server_error",
                    Some("stream_failed"),
                    &message,
                ));
            }
        }
    }
}
