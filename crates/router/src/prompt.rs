//! The request one entry is sent: the task's prompt rendered within the
//! entry's input budget, continuing a partial answer whatever the provider:
//! as an assistant prefill where the model takes one, otherwise as its own
//! previous turn followed by an instruction to go on from where it stopped.
//! It is the one place remote prompts are built, so every one passes
//! `switchyard_privacy::redact` (ARCHITECTURE.md invariant 17).

use switchyard_base::entry::ModelRef;
use switchyard_base::task::TaskProfile;
use switchyard_context::chat::{self, OverBudget};
use switchyard_privacy::redact;
use switchyard_providers::{ChatMessage, ChatRequest, Role};

use super::Router;
use super::request::TaskRequest;
use super::seam::Form;

/// Of a task's first-token ceiling, the share a local chat's prompt may take
/// to decode at the measured speed: the rest is for the completions it yields
/// to (`engine/engine/aside.rs`) and the chunk in flight. The
/// completion budget sized for a cold FIM prompt (about 250 tokens on a busy
/// laptop) refused a newcomer's first explain of 25 lines.
const LOCAL_PROMPT_SHARE: f64 = 0.6;

/// A request ready to send, and the answer so far it continues.
pub(super) struct Prompt {
    pub request: ChatRequest,
    /// The text the answer continues (empty for a fresh answer).
    pub continues: String,
    /// How the model was asked to go on with `continues` (see `seam`).
    pub form: Form,
    /// Secrets replaced by placeholders before it left.
    pub redactions: usize,
}

impl Prompt {
    /// The answer so far went out as an assistant prefill.
    pub fn prefilled(&self) -> bool {
        self.form == Form::Prefill
    }

    /// Bytes of text the provider is sent.
    pub fn bytes(&self) -> usize {
        let system = self.request.system.as_deref().unwrap_or_default();
        system.len()
            + self
                .request
                .messages
                .iter()
                .map(|m| m.content.len())
                .sum::<usize>()
    }

    /// Estimated tokens the provider reads, for the quota reservation.
    pub fn input_tokens(&self) -> usize {
        let system = self.request.system.as_deref().unwrap_or_default();
        let text = self
            .request
            .messages
            .iter()
            .fold(system.to_owned(), |all, m| all + &m.content);
        chat::estimate_tokens(&text)
    }
}

/// The request's conversation within `budget` tokens: the caller's as it
/// is, or one user message rendered from its parts.
fn conversation(request: &TaskRequest, budget: usize) -> Result<Vec<ChatMessage>, OverBudget> {
    let Some(messages) = &request.messages else {
        let content = chat::render(&request.parts, budget)?;
        return Ok(vec![ChatMessage {
            role: Role::User,
            content,
        }]);
    };
    let needed = messages
        .iter()
        .map(|m| chat::estimate_tokens(&m.content))
        .sum();
    if needed > budget {
        return Err(OverBudget::conversation(needed, budget));
    }
    Ok(messages.clone())
}

impl Router {
    /// The request for `entry`, continuing `partial` (as a prefill where
    /// `supports_prefill`), with the input budget scaled by `input_scale` (a
    /// model said the prompt was too long).
    pub(super) fn prompt(
        &self,
        entry: &ModelRef,
        request: &TaskRequest,
        profile: &TaskProfile,
        (partial, input_scale): (&str, f64),
        supports_prefill: bool,
    ) -> Result<Prompt, OverBudget> {
        let (input_budget, max_tokens) = self.limits(entry, profile);
        let input_budget = (input_budget as f64 * input_scale) as usize;
        let max_tokens = request
            .max_tokens
            .map_or(max_tokens, |asked| max_tokens.min(asked as usize));
        let budget = input_budget.saturating_sub(chat::estimate_tokens(&request.system));
        let mut messages = conversation(request, budget)?;
        // Providers reject a prefill that ends in whitespace.
        let continues = partial.trim_end().to_owned();
        let form = match (continues.is_empty(), supports_prefill) {
            (true, _) => Form::Fresh,
            (false, true) => Form::Prefill,
            (false, false) => Form::Restated,
        };
        if !continues.is_empty() {
            messages.push(ChatMessage {
                role: Role::Assistant,
                content: continues.clone(),
            });
        }
        if form == Form::Restated {
            messages.push(ChatMessage {
                role: Role::User,
                content: switchyard_base::prompts::CONTINUE_INSTRUCTION.into(),
            });
        }
        // No system message when there is none (never an empty one).
        let mut system = (!request.system.is_empty()).then(|| request.system.clone());
        let mut redactions = 0;
        if request.redact && !entry.is_local() {
            let mut scrub = |text: &mut String| {
                let redacted = redact::redact(text);
                redactions += redacted.count;
                *text = redacted.text;
            };
            system.iter_mut().for_each(&mut scrub);
            messages.iter_mut().for_each(|m| scrub(&mut m.content));
        }
        Ok(Prompt {
            request: ChatRequest {
                model: entry.model.clone(),
                system,
                messages,
                max_tokens: max_tokens as u32,
                temperature: Some(0.2),
            },
            continues,
            form,
            redactions,
        })
    }

    /// Input and output token limits for an entry: the task's, or what the
    /// local model can take: a prompt that decodes within
    /// [`LOCAL_PROMPT_SHARE`] of the task's first-token ceiling at the
    /// measured speed, beside the answer in its context.
    fn limits(&self, entry: &ModelRef, profile: &TaskProfile) -> (usize, usize) {
        match entry.is_local().then(|| self.local.model()).flatten() {
            Some(info) => {
                let output = profile
                    .output_tokens
                    .min(switchyard_engine::CHAT_OUTPUT_TOKENS);
                let ceiling = profile.first_token_ceiling().as_secs_f64();
                let in_time = (info.prompt_tokens_per_s * ceiling * LOCAL_PROMPT_SHARE) as usize;
                let room = (info.context_tokens as usize).saturating_sub(output);
                (profile.input_tokens.min(in_time).min(room), output)
            }
            None => (profile.input_tokens, profile.output_tokens),
        }
    }
}
