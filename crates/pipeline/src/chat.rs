//! Chat messages as a language pipeline receives them.
//!
//! Key design choice: content is already flattened to one string by the server
//! (OpenAI text content parts are concatenated), and tool-call arguments are
//! kept as the JSON text the client sent. [`ChatMessage::template_value`] gives
//! the shape Hugging Face chat templates expect (arguments as an object), so
//! every language pipeline renders tools the same way.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions (`system`; OpenAI's `developer` maps here).
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering an assistant tool call.
    Tool,
}

impl Role {
    /// The role name as chat templates spell it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A call the assistant made to a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id (`call_...`), echoed back in the tool message's `tool_call_id`.
    pub id: String,
    /// Function name.
    pub name: String,
    /// Arguments as JSON text (OpenAI sends a string).
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Author.
    pub role: Role,
    /// Text content (content parts already joined).
    pub content: String,
    /// Tool calls an assistant message made (empty otherwise).
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the call this message answers.
    pub tool_call_id: Option<String>,
    /// Optional author name (or the tool's name for `Role::Tool`).
    pub name: Option<String>,
}

impl ChatMessage {
    /// A plain text message.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// The message as a chat template reads it: `{"role","content"}` plus
    /// `tool_calls: [{"id","type":"function","function":{"name","arguments"}}]`
    /// with `arguments` parsed to a JSON object when it parses (templates call
    /// `tojson` on it), and `tool_call_id` / `name` when present.
    pub fn template_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("role".into(), Value::from(self.role.as_str()));
        m.insert("content".into(), Value::from(self.content.clone()));
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    let args = serde_json::from_str::<Value>(&c.arguments)
                        .unwrap_or_else(|_| Value::from(c.arguments.clone()));
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": args}})
                })
                .collect();
            m.insert("tool_calls".into(), Value::Array(calls));
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), Value::from(id.clone()));
        }
        if let Some(name) = &self.name {
            m.insert("name".into(), Value::from(name.clone()));
        }
        Value::Object(m)
    }

    /// All messages as the JSON array a chat template's `messages` variable is.
    pub fn template_values(messages: &[ChatMessage]) -> Value {
        Value::Array(messages.iter().map(ChatMessage::template_value).collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn template_value_parses_arguments() {
        let mut m = ChatMessage::new(Role::Assistant, "");
        m.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
        });
        let v = m.template_value();
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
        let t = ChatMessage {
            tool_call_id: Some("call_1".into()),
            ..ChatMessage::new(Role::Tool, "18C")
        };
        assert_eq!(t.template_value()["tool_call_id"], "call_1");
        assert!(t.template_value().get("tool_calls").is_none());
    }
}
