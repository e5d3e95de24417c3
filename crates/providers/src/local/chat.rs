//! The local engine as a chat [`Provider`] (tier small, completion-grade tasks),
//! so the router treats it like any other entry of a chain. Its answer
//! streams as the engine generates it, so the first-token ceiling applies to
//! the first token and the router's total ceiling to the whole answer.

use std::collections::VecDeque;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream;
use tokio::task::JoinHandle;

use crate::{
    ChatMessage, ChatRequest, FailureKind, Finish, FinishReason, Provider, ProviderError,
    RateLimits, ResponseStream, Role, StreamEvent, Timeouts, Usage,
};
use switchyard_base::cancel::{CancelFlag, CancelOnDrop};
use switchyard_base::entry::LOCAL;
use switchyard_engine::{
    ChatJob, EngineError, EngineStatus, Generation, LocalEngine, ModelInfo, StopReason,
};

/// The engine the server loaded, if any; swapped when the model changes.
#[derive(Clone, Default)]
pub struct EngineSlot(Arc<RwLock<Option<LocalEngine>>>);

impl EngineSlot {
    pub fn set(&self, engine: Option<LocalEngine>) {
        *self.0.write().expect("engine slot lock") = engine;
    }

    pub fn get(&self) -> Option<LocalEngine> {
        self.0.read().expect("engine slot lock").clone()
    }

    /// The loaded model, if it is ready.
    pub fn model(&self) -> Option<ModelInfo> {
        match self.get()?.status() {
            EngineStatus::Ready(info) => Some(info),
            _ => None,
        }
    }
}

pub struct LocalProvider {
    slot: EngineSlot,
}

impl LocalProvider {
    pub fn new(slot: EngineSlot) -> LocalProvider {
        LocalProvider { slot }
    }
}

fn error(kind: FailureKind, message: String) -> ProviderError {
    ProviderError::new(LOCAL, kind, message)
}

impl Provider for LocalProvider {
    fn name(&self) -> &str {
        LOCAL
    }

    fn supports_prefill(&self) -> bool {
        false
    }

    fn stream(
        &self,
        request: ChatRequest,
        timeouts: Timeouts,
    ) -> BoxFuture<'static, Result<ResponseStream, ProviderError>> {
        let engine = self.slot.get();
        Box::pin(async move {
            let engine = engine.ok_or_else(|| {
                error(FailureKind::Connect, "the local model is not loaded".into())
            })?;
            // Before any stream: the model cannot answer at all.
            answerable(&engine.status())?;
            let messages = roles_and_texts(request.system, request.messages);
            let cancel = CancelFlag::default();
            let (pieces, answer_pieces) = tokio::sync::mpsc::unbounded_channel();
            let job = ChatJob {
                messages,
                max_tokens: request.max_tokens as usize,
                // The router's total ceiling ends a long answer (dropping the
                // stream cancels the job); this only bounds a forgotten one.
                deadline: Instant::now() + LONGEST_ANSWER,
                first_token_by: Instant::now().checked_add(timeouts.first_token),
                cancel: cancel.clone(),
                pieces: Some(pieces),
            };
            let answer = LocalAnswer {
                pieces: answer_pieces,
                // Spawned: the job goes to the engine now, while the pieces are read.
                generation: Some(tokio::spawn(async move { engine.chat(job).await })),
                timeouts,
                first: true,
                queued: VecDeque::new(),
                _stop_if_dropped: cancel.cancel_on_drop(),
            };
            let events = stream::unfold(answer, |mut answer| async move {
                let event = answer.next().await?;
                Some((event, answer))
            });
            Ok(ResponseStream {
                events: Box::pin(events),
                rate_limits: RateLimits::default(),
            })
        })
    }
}

/// Whether an engine in `status` can answer a chat at all.
fn answerable(status: &EngineStatus) -> Result<(), ProviderError> {
    match status {
        EngineStatus::Loading => Err(error(
            FailureKind::Connect,
            EngineError::Loading.to_string(),
        )),
        EngineStatus::Failed(reason) => Err(error(
            FailureKind::Malformed,
            EngineError::Failed(reason.clone()).to_string(),
        )),
        EngineStatus::Ready(_) => Ok(()),
    }
}

/// The chat as (role, text) pairs, the system prompt first.
fn roles_and_texts(system: Option<String>, messages: Vec<ChatMessage>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = system
        .into_iter()
        .map(|s| ("system".to_owned(), s))
        .collect();
    out.extend(messages.into_iter().map(|m| {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        (role.to_owned(), m.content)
    }));
    out
}

/// The most a local answer may take when nothing else stops it.
const LONGEST_ANSWER: Duration = Duration::from_secs(600);

type Event = Result<StreamEvent, ProviderError>;

/// A local answer as a stream: each piece of text as the engine generates it,
/// the first within the first-token limit and the rest within the idle
/// limit of each other, then the end. Dropping it cancels the job.
struct LocalAnswer {
    pieces: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// The final generation; taken once the pieces have all come.
    generation: Option<JoinHandle<Result<Generation, EngineError>>>,
    timeouts: Timeouts,
    first: bool,
    /// Events decided at the end, not yet yielded.
    queued: VecDeque<Event>,
    _stop_if_dropped: CancelOnDrop,
}

impl LocalAnswer {
    async fn next(&mut self) -> Option<Event> {
        if let Some(event) = self.queued.pop_front() {
            return Some(event);
        }
        let generation = self.generation.as_mut()?;
        let (limit, kind, what) = match self.first {
            true => (
                self.timeouts.first_token,
                FailureKind::TimeoutFirstToken,
                "start",
            ),
            false => (self.timeouts.idle, FailureKind::Stalled, "go on"),
        };
        let late = || {
            error(
                kind.clone(),
                format!("the local model did not {what} within {limit:?}"),
            )
        };
        match tokio::time::timeout(limit, self.pieces.recv()).await {
            Err(_) => {
                self.generation = None;
                return Some(Err(late()));
            }
            Ok(Some(piece)) => {
                self.first = false;
                return Some(Ok(StreamEvent::Delta(piece)));
            }
            // The engine is done with the job: its generation says how it ended.
            Ok(None) => {}
        }
        let ended = generation.await.unwrap_or(Err(EngineError::Stopped));
        self.generation = None;
        self.queued = finish(ended);
        self.queued.pop_front()
    }
}

/// The events that end an answer, from the engine's generation.
fn finish(ended: Result<Generation, EngineError>) -> VecDeque<Event> {
    let generation = match ended {
        Ok(generation) => generation,
        Err(e @ EngineError::Loading) => {
            return [Err(error(FailureKind::Connect, e.to_string()))].into();
        }
        Err(other) => return [Err(error(FailureKind::Malformed, other.to_string()))].into(),
    };
    let usage = Usage {
        input_tokens: generation.prompt_tokens as u64,
        output_tokens: generation.tokens_generated as u64,
    };
    let end = |reason| -> Event { Ok(StreamEvent::End(Finish { reason, usage })) };
    match generation.stop {
        StopReason::EndOfText | StopReason::Rule => [end(FinishReason::EndTurn)].into(),
        // The cap is the local model's own limit, not a provider cutting an
        // answer short: the answer is delivered, and says where it stops.
        StopReason::MaxTokens => [
            Ok(StreamEvent::Delta(format!(
                "\n\n*(cut at {} tokens, the local model's answer limit)*",
                generation.tokens_generated
            ))),
            end(FinishReason::EndTurn),
        ]
        .into(),
        StopReason::Deadline | StopReason::PromptDeadline => {
            let mut e = error(
                FailureKind::StreamCut,
                "the local model did not finish in time".into(),
            );
            e.partial = generation.text;
            [Err(e)].into()
        }
        StopReason::Cancelled => [Err(error(FailureKind::StreamCut, "cancelled".into()))].into(),
    }
}
