//! The OpenAI chat completions format as the gateway speaks it to its callers:
//! requests in, answers and stream chunks out, errors as OpenAI sends them.

use serde::Deserialize;
use serde_json::{Value, json};

use switchyard_providers::{ChatMessage, Role, Usage};

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub messages: Vec<InMessage>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub struct InMessage {
    pub role: String,
    pub content: Content,
}

/// A message's content: a string, or an array of parts of which text is used.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// The system prompt and the turns, or why they cannot be served.
pub fn conversation(messages: &[InMessage]) -> Result<(String, Vec<ChatMessage>), String> {
    let mut system = Vec::new();
    let mut turns = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let text = match &message.content {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => {
                if let Some(other) = parts.iter().find(|p| p.kind != "text") {
                    return Err(format!(
                        "messages[{i}]: content part type `{}` is not supported (text only)",
                        other.kind
                    ));
                }
                parts.iter().filter_map(|p| p.text.clone()).collect()
            }
        };
        let role = match message.role.as_str() {
            "system" | "developer" => {
                system.push(text);
                continue;
            }
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => return Err(format!("messages[{i}]: role `{other}` is not supported")),
        };
        turns.push(ChatMessage {
            role,
            content: text,
        });
    }
    if turns.first().is_none_or(|m| m.role != Role::User) {
        return Err("messages must contain a user message after any system messages".into());
    }
    Ok((system.join("\n\n"), turns))
}

pub fn error_body(kind: &str, code: Option<&str>, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    })
}

pub fn completion(id: &str, created: u64, model: &str, text: &str, usage: Usage) -> Value {
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }],
        "usage": usage_json(usage),
    })
}

/// One `chat.completion.chunk` carrying `delta` (and a finish reason on the last).
pub fn chunk(id: &str, created: u64, model: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

/// The usage chunk OpenAI sends last when asked (`stream_options.include_usage`);
/// switchyard always sends it, so callers know what the answering model used.
pub fn usage_chunk(id: &str, created: u64, model: &str, usage: Usage) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_json(usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> CompletionRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn system_messages_become_the_system_prompt() {
        let request = parse(json!({"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "Again"}
        ]}));
        let (system, turns) = conversation(&request.messages).unwrap();
        assert_eq!(system, "Be brief.");
        assert_eq!(turns.len(), 3);
        assert_eq!(
            (turns[0].role, turns[0].content.as_str()),
            (Role::User, "Hi")
        );
    }

    #[test]
    fn unsupported_roles_and_parts_are_named() {
        let tool = parse(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}));
        assert!(conversation(&tool.messages).unwrap_err().contains("`tool`"));
        let image = parse(
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
        );
        assert!(
            conversation(&image.messages)
                .unwrap_err()
                .contains("image_url")
        );
        let empty = parse(json!({"model": "m", "messages": [{"role": "system", "content": "x"}]}));
        assert!(conversation(&empty.messages).is_err());
    }
}
