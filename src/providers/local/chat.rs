//! The local engine as a chat [`Provider`] (tier small, completion-grade tasks),
//! so the router treats it like any other entry of a chain.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream;

use super::{ChatJob, EngineError, LocalEngine, ModelInfo, StopReason};
use crate::cancel::CancelFlag;
use crate::providers::{
    ChatRequest, FailureKind, Finish, FinishReason, Provider, ProviderError, RateLimits,
    ResponseStream, Role, StreamEvent, Timeouts, Usage,
};

pub use crate::entry::LOCAL;

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
            super::EngineStatus::Ready(info) => Some(info),
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
            let mut messages: Vec<(String, String)> = request
                .system
                .into_iter()
                .map(|s| ("system".to_owned(), s))
                .collect();
            messages.extend(request.messages.into_iter().map(|m| {
                let role = match m.role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                (role.to_owned(), m.content)
            }));
            let cancel = CancelFlag::default();
            let _stop_if_dropped = cancel.cancel_on_drop();
            let job = ChatJob {
                messages,
                max_tokens: request.max_tokens as usize,
                // The local answer arrives whole, so its first token is its last.
                deadline: Instant::now() + timeouts.first_token,
                cancel: cancel.clone(),
            };
            let generation = engine.chat(job).await.map_err(|e| match e {
                EngineError::Loading => error(FailureKind::Connect, e.to_string()),
                other => error(FailureKind::Malformed, other.to_string()),
            })?;
            let mut text = generation.text;
            let reason = match generation.stop {
                StopReason::EndOfText | StopReason::Rule => FinishReason::EndTurn,
                // The cap is the local model's own limit, not a provider cutting an
                // answer short: the answer is delivered, and says where it stops.
                StopReason::MaxTokens => {
                    text.push_str(&format!(
                        "\n\n*(cut at {} tokens, the local model's answer limit)*",
                        generation.tokens_generated
                    ));
                    FinishReason::EndTurn
                }
                StopReason::Deadline | StopReason::PromptDeadline => {
                    let mut e = error(
                        FailureKind::TimeoutFirstToken,
                        "the local model did not finish in time".into(),
                    );
                    e.partial = text;
                    return Err(e);
                }
                StopReason::Cancelled => {
                    return Err(error(FailureKind::StreamCut, "cancelled".into()));
                }
            };
            let usage = Usage {
                input_tokens: generation.prompt_tokens as u64,
                output_tokens: generation.tokens_generated as u64,
            };
            let events = vec![
                Ok(StreamEvent::Delta(text)),
                Ok(StreamEvent::End(Finish { reason, usage })),
            ];
            Ok(ResponseStream {
                events: Box::pin(stream::iter(events)),
                rate_limits: RateLimits::default(),
            })
        })
    }
}
