//! Tool calls in the model's own format (ChatML/Hermes: Qwen, SmolLM).
//!
//! Key design choice: the model writes `<tool_call>{"name":...,"arguments":{...}}</tool_call>`;
//! the server, not the pipeline, turns that into OpenAI `tool_calls`, so every
//! family with this format shares one parser. Text outside the tags stays content.

use favlo_pipeline::ToolCall;
use serde_json::Value;

/// Opening tag.
pub const OPEN: &str = "<tool_call>";
/// Closing tag.
pub const CLOSE: &str = "</tool_call>";

/// What a finished generation contained.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    /// Text outside the tool-call blocks (trimmed).
    pub content: String,
    /// The calls, in order.
    pub calls: Vec<ToolCall>,
}

/// Split `text` into content and tool calls. A block whose JSON does not parse
/// or has no `name` stays in the content, untouched. An unclosed last block is
/// parsed up to the end of the text (models often stop before the closing tag).
pub fn parse(text: &str, id_prefix: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = text;
    let mut content = String::new();
    while let Some(start) = rest.find(OPEN) {
        content.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let (body, next) = match after.find(CLOSE) {
            Some(end) => (&after[..end], &after[end + CLOSE.len()..]),
            None => (after, ""),
        };
        match call_from_json(body.trim(), &format!("{id_prefix}{}", out.calls.len())) {
            Some(call) => out.calls.push(call),
            None => {
                content.push_str(&rest[start..rest.len() - next.len()]);
            }
        }
        rest = next;
    }
    content.push_str(rest);
    out.content = content.trim().to_owned();
    if out.calls.is_empty()
        && let Some(call) = bare_call(&out.content, &format!("{id_prefix}0"))
    {
        out.content.clear();
        out.calls.push(call);
    }
    out
}

/// Small models sometimes answer a tool request with the call's JSON alone,
/// bare or in a ```json fence, instead of inside the tags. The whole reply must
/// be one object with a `name` and `arguments` (or `parameters`), so ordinary
/// JSON answers stay content.
fn bare_call(content: &str, id: &str) -> Option<ToolCall> {
    let body = content.trim();
    let body = match body.strip_prefix("```") {
        Some(fenced) => fenced
            .strip_suffix("```")?
            .trim_start_matches("json")
            .trim(),
        None => body,
    };
    let v: Value = serde_json::from_str(body).ok()?;
    v.get("arguments").or_else(|| v.get("parameters"))?;
    call_from_json(body, id)
}

fn call_from_json(body: &str, id: &str) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(body).ok()?;
    let name = v.get("name")?.as_str()?.to_owned();
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "{}".into(),
    };
    Some(ToolCall {
        id: id.to_owned(),
        name,
        arguments,
    })
}

/// How much of `text`'s end could be the start of [`OPEN`] (to hold back while streaming).
pub fn partial_open_len(text: &str) -> usize {
    (1..OPEN.len())
        .rev()
        .find(|&n| text.ends_with(&OPEN[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_hermes_calls() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\":\"t\",\"arguments\":\"{}\"}";
        let p = parse(text, "call_");
        assert_eq!(p.content, "Let me check.");
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0].name, "get_weather");
        assert_eq!(p.calls[0].id, "call_0");
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!(args["city"], "Paris");
        assert_eq!(p.calls[1].arguments, "{}");
    }

    #[test]
    fn bare_and_fenced_calls() {
        let fenced = "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```";
        let p = parse(fenced, "c");
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].name, "get_weather");
        assert!(p.content.is_empty());
        let bare = parse("{\"name\": \"t\", \"parameters\": {}}", "c");
        assert_eq!(bare.calls.len(), 1);
        // Plain JSON answers and prose around JSON stay content.
        assert!(parse("{\"name\": \"Ada\"}", "c").calls.is_empty());
        assert!(
            parse("Here: {\"name\": \"t\", \"arguments\": {}}", "c")
                .calls
                .is_empty()
        );
    }

    #[test]
    fn bad_blocks_stay_content() {
        let p = parse("a <tool_call>not json</tool_call> b", "c");
        assert!(p.calls.is_empty());
        assert_eq!(p.content, "a <tool_call>not json</tool_call> b");
        assert_eq!(partial_open_len("hi <tool_"), 6);
        assert_eq!(partial_open_len("hi"), 0);
    }
}
