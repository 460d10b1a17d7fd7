//! `POST /v1/chat/completions` body → a resolved [`CompletionRequest`].
//!
//! Key design choice: every OpenAI field the server supports is validated here
//! with a 400 naming it; fields it does not know are ignored (as OpenAI-compatible
//! servers do); a field it knows but cannot honour (`n` > 1, image parts) is a
//! clear 400, never silently dropped.

use std::sync::Arc;

use favlo_pipeline::{ChatMessage, CompletionRequest, GrammarSpec, ModelSpec, Role, ToolCall};
use serde_json::{Map, Value};

use super::fields::{bool_opt, get, int_opt, model, num_opt, object};
use crate::error::ApiError;
use crate::json::Compiled;

/// A validated chat request.
#[derive(Debug)]
pub struct ParsedChat {
    /// Requested model id.
    pub model: String,
    /// The request (sampling defaults not yet applied).
    pub request: CompletionRequest,
    /// Which sampling fields the client set (so row defaults fill the others).
    pub set: SetFields,
    /// SSE streaming.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// Tools are active (parse `<tool_call>` blocks).
    pub tools_active: bool,
    /// `tool_choice` is `"required"` or names a function: the reply is
    /// constrained to one call's JSON (see [`forced_call_schema`]).
    pub tools_forced: bool,
    /// Compiled `response_format`.
    pub format: Option<(GrammarSpec, Arc<Compiled>)>,
}

/// Sampling fields present in the body.
#[derive(Debug, Default, Clone, Copy)]
pub struct SetFields {
    /// `temperature` given.
    pub temperature: bool,
    /// `top_p` given.
    pub top_p: bool,
    /// `max_tokens`/`max_completion_tokens` given.
    pub max_tokens: bool,
}

/// Validate a body.
pub fn parse_chat(body: &Value) -> Result<ParsedChat, ApiError> {
    let o = object(body)?;
    let model = model(o)?;
    let messages = parse_messages(o)?;
    let mut req = CompletionRequest::new(messages);
    let mut set = SetFields::default();

    if let Some(n) = int_opt(o, "n", i64::MIN, i64::MAX)?
        && n != 1
    {
        {
            return Err(ApiError::invalid(
                "n must be 1: this server returns one choice per request",
                Some("n"),
            ));
        }
    }
    let stream = bool_opt(o, "stream")?.unwrap_or(false);
    let include_usage = match get(o, "stream_options") {
        None => false,
        Some(Value::Object(so)) => bool_opt(so, "include_usage")
            .map_err(|_| {
                ApiError::invalid(
                    "stream_options.include_usage must be a boolean",
                    Some("stream_options"),
                )
            })?
            .unwrap_or(false),
        Some(_) => {
            return Err(ApiError::invalid(
                "stream_options must be an object",
                Some("stream_options"),
            ));
        }
    };
    let max_a = int_opt(o, "max_completion_tokens", 1, 1 << 24)?;
    let max_b = int_opt(o, "max_tokens", 1, 1 << 24)?;
    if let Some(m) = max_a.or(max_b) {
        req.max_tokens = Some(m as usize);
        set.max_tokens = true;
    }
    if let Some(t) = num_opt(o, "temperature", 0.0, 2.0)? {
        req.sampling.temperature = t as f32;
        set.temperature = true;
    }
    if let Some(p) = num_opt(o, "top_p", 0.0, 1.0)? {
        if p == 0.0 {
            return Err(ApiError::invalid(
                "top_p must be greater than 0",
                Some("top_p"),
            ));
        }
        req.sampling.top_p = p as f32;
        set.top_p = true;
    }
    if let Some(p) = num_opt(o, "presence_penalty", -2.0, 2.0)? {
        req.sampling.presence_penalty = p as f32;
    }
    if let Some(p) = num_opt(o, "frequency_penalty", -2.0, 2.0)? {
        req.sampling.frequency_penalty = p as f32;
    }
    if let Some(s) = get(o, "seed") {
        let seed = s
            .as_i64()
            .map(|v| v as u64)
            .or_else(|| s.as_u64())
            .ok_or_else(|| ApiError::invalid("seed must be an integer", Some("seed")))?;
        req.sampling.seed = Some(seed);
    }
    req.stop = match get(o, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if a.len() <= 4 => a
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::invalid("stop must be a string or an array of strings", Some("stop"))
            })?,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "stop may hold at most 4 strings",
                Some("stop"),
            ));
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "stop must be a string or an array of strings",
                Some("stop"),
            ));
        }
    };
    req.logprobs = bool_opt(o, "logprobs")?.unwrap_or(false);
    if let Some(k) = int_opt(o, "top_logprobs", 0, 20)? {
        if !req.logprobs {
            return Err(ApiError::invalid(
                "top_logprobs requires logprobs to be true",
                Some("top_logprobs"),
            ));
        }
        req.top_logprobs = k as usize;
    }
    let (tools, tools_active) = parse_tools(o)?;
    let forced = match (&tools, get(o, "tool_choice")) {
        (Some(t), Some(choice)) => forced_call_schema(t, choice)?,
        _ => None,
    };
    req.tools = tools;
    let mut format = parse_response_format(o)?;
    let tools_forced = forced.is_some();
    if let Some(schema) = forced {
        if format.is_some() {
            return Err(ApiError::invalid(
                "response_format cannot be combined with a required tool_choice",
                Some("response_format"),
            ));
        }
        let compiled = Compiled::from_schema(&schema)
            .map_err(|e| ApiError::invalid(format!("tool parameters: {e}"), Some("tools")))?;
        format = Some((GrammarSpec::JsonSchema(schema), Arc::new(compiled)));
    }
    Ok(ParsedChat {
        model,
        request: req,
        set,
        stream,
        include_usage,
        tools_active,
        tools_forced,
        format,
    })
}

/// For a named `tool_choice` (or `"required"` with a single tool), the JSON
/// schema of the one call the model must write: `{"name": <the name>,
/// "arguments": <that function's parameters>}`; the reply is then parsed as a
/// bare call. `None` otherwise: `"required"` over several tools is served like
/// `"auto"`, because the constraint engine cannot make the arguments' schema
/// depend on the name chosen before them.
fn forced_call_schema(tools: &Value, choice: &Value) -> Result<Option<Value>, ApiError> {
    let funcs: Vec<&Value> = tools
        .as_array()
        .map(|a| a.iter().filter_map(|t| t.get("function")).collect())
        .unwrap_or_default();
    let name_of = |f: &&Value| f.get("name").and_then(Value::as_str).map(str::to_owned);
    let chosen: Vec<&Value> = match choice {
        Value::String(s) if s == "required" && funcs.len() == 1 => funcs,
        Value::Object(c) => {
            let want = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str);
            let hit: Vec<&Value> = funcs
                .into_iter()
                .filter(|f| name_of(f).as_deref() == want)
                .collect();
            if hit.is_empty() {
                return Err(ApiError::invalid(
                    format!(
                        "tool_choice names {:?}, which is not in tools",
                        want.unwrap_or("")
                    ),
                    Some("tool_choice"),
                ));
            }
            hit
        }
        _ => return Ok(None),
    };
    let names: Vec<String> = chosen.iter().filter_map(name_of).collect();
    let arguments = match chosen.as_slice() {
        [one] => one
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object"})),
        _ => serde_json::json!({"type": "object"}),
    };
    Ok(Some(serde_json::json!({
        "type": "object",
        "properties": {"name": {"enum": names}, "arguments": arguments},
        "required": ["name", "arguments"],
    })))
}

/// Fill what the client left out from the row's defaults.
pub fn apply_defaults(p: &mut ParsedChat, spec: &ModelSpec) {
    let d = &spec.defaults;
    let f = |k: &str| d.get(k).and_then(Value::as_f64);
    if !p.set.temperature
        && let Some(t) = f("temperature")
    {
        p.request.sampling.temperature = t as f32;
    }
    if !p.set.top_p
        && let Some(t) = f("top_p")
    {
        p.request.sampling.top_p = t as f32;
    }
    if let Some(k) = d.get("top_k").and_then(Value::as_u64) {
        p.request.sampling.top_k = k as usize;
    }
    if let Some(r) = f("repetition_penalty") {
        p.request.sampling.repetition_penalty = r as f32;
    }
    if !p.set.max_tokens
        && let Some(m) = d.get("max_tokens").and_then(Value::as_u64)
    {
        p.request.max_tokens = Some(m as usize);
    }
}

fn parse_messages(o: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let arr = match get(o, "messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "messages must not be empty",
                Some("messages"),
            ));
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "messages must be an array",
                Some("messages"),
            ));
        }
        None => return Err(ApiError::invalid("messages is required", Some("messages"))),
    };
    arr.iter()
        .enumerate()
        .map(|(i, m)| parse_message(i, m))
        .collect()
}

fn parse_message(i: usize, m: &Value) -> Result<ChatMessage, ApiError> {
    let p = format!("messages[{i}]");
    let bad = |what: &str, field: &str| {
        ApiError::invalid(format!("{p}.{field} {what}"), Some(&format!("{p}.{field}")))
    };
    let m = m
        .as_object()
        .ok_or_else(|| ApiError::invalid(format!("{p} must be an object"), Some(&p)))?;
    let role = match get(m, "role").and_then(Value::as_str) {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        Some(other) => {
            return Err(bad(
                &format!("`{other}` is not a role (system, user, assistant, tool)"),
                "role",
            ));
        }
        None => return Err(bad("must be a string", "role")),
    };
    let content = match get(m, "content") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut s = String::new();
            for part in parts {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => s.push_str(t),
                    (Some("text"), None) => {
                        return Err(bad("has a text part without a string `text`", "content"));
                    }
                    (Some(t), _) => {
                        return Err(bad(
                            &format!("has a `{t}` part; only text content parts are supported"),
                            "content",
                        ));
                    }
                    (None, _) => return Err(bad("parts must be objects with a `type`", "content")),
                }
            }
            s
        }
        Some(_) => {
            return Err(bad(
                "must be a string or an array of content parts",
                "content",
            ));
        }
    };
    let mut msg = ChatMessage::new(role, content);
    if role == Role::User && get(m, "content").is_none() {
        return Err(bad("is required for user messages", "content"));
    }
    if let Some(calls) = get(m, "tool_calls") {
        let calls = calls
            .as_array()
            .ok_or_else(|| bad("must be an array", "tool_calls"))?;
        for c in calls {
            let f = c
                .get("function")
                .ok_or_else(|| bad("entries need a `function`", "tool_calls"))?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("function.name must be a string", "tool_calls"))?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => "{}".into(),
                Some(other) => other.to_string(),
            };
            let id = c.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
            msg.tool_calls.push(ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            });
        }
    }
    msg.tool_call_id = get(m, "tool_call_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    msg.name = get(m, "name").and_then(Value::as_str).map(str::to_owned);
    Ok(msg)
}

fn parse_tools(o: &Map<String, Value>) -> Result<(Option<Value>, bool), ApiError> {
    let tools = match get(o, "tools") {
        None => return Ok((None, false)),
        Some(Value::Array(a)) if a.is_empty() => return Ok((None, false)),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::invalid("tools must be an array", Some("tools"))),
    };
    for (i, t) in tools.iter().enumerate() {
        let ok = t.get("type").and_then(Value::as_str) == Some("function")
            && t.get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .is_some();
        if !ok {
            return Err(ApiError::invalid(
                format!(
                    "tools[{i}] must be {{\"type\":\"function\",\"function\":{{\"name\":...}}}}"
                ),
                Some("tools"),
            ));
        }
    }
    let active = match get(o, "tool_choice") {
        None => true,
        Some(Value::String(s)) if s == "none" => false,
        Some(Value::String(s)) if s == "auto" || s == "required" => true,
        Some(Value::Object(c))
            if c.get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .is_some() =>
        {
            true
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}",
                Some("tool_choice"),
            ));
        }
    };
    Ok((active.then(|| Value::Array(tools.clone())), active))
}

fn parse_response_format(
    o: &Map<String, Value>,
) -> Result<Option<(GrammarSpec, Arc<Compiled>)>, ApiError> {
    let Some(rf) = get(o, "response_format") else {
        return Ok(None);
    };
    let bad = |m: &str| ApiError::invalid(m.to_owned(), Some("response_format"));
    let rf = rf
        .as_object()
        .ok_or_else(|| bad("response_format must be an object"))?;
    match rf.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some((
            GrammarSpec::JsonObject,
            Arc::new(Compiled::any_object()),
        ))),
        Some("json_schema") => {
            let schema = rf
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .ok_or_else(|| bad("response_format.json_schema.schema is required"))?;
            let compiled = Compiled::from_schema(schema)
                .map_err(|e| bad(&format!("response_format.json_schema.schema: {e}")))?;
            Ok(Some((
                GrammarSpec::JsonSchema(schema.clone()),
                Arc::new(compiled),
            )))
        }
        _ => Err(bad(
            "response_format.type must be \"text\", \"json_object\" or \"json_schema\"",
        )),
    }
}
