//! `POST /v1/chat/completions`: queue the job, then reply whole or as SSE.
//!
//! Key design choice: the handler only waits on the job's channel; the
//! generation runs on the scheduler's thread. Dropping the receiver (client
//! gone, timeout) is what stops the generation. With tools active, text from a
//! `<tool_call>` tag on is held back while streaming and sent as `tool_calls`
//! at the end.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use favlo_pipeline::{Completion, FinishReason, ModelKind, PipelineError, TokenLogprob};
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::chat_parse::{apply_defaults, parse_chat};
use super::resolve_model;
use crate::AppState;
use crate::RequestId;
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::metrics::Metrics;
use crate::scheduler::{ChatEvent, ChatJob, SubmitError};
use crate::tools;

/// The handler.
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    Extension(rid): Extension<RequestId>,
    ApiJson(body): ApiJson,
) -> Result<Response, ApiError> {
    Metrics::add(&state.metrics.chat_requests, 1);
    let mut parsed = parse_chat(&body)?;
    let spec = resolve_model(&state, &parsed.model, ModelKind::Chat).await?;
    apply_defaults(&mut parsed, &spec);
    let want_logprobs = parsed.request.logprobs;
    let (tx, rx) = mpsc::unbounded_channel();
    let model = spec.id.clone();
    let job = ChatJob {
        spec,
        request: parsed.request,
        format: parsed.format,
        events: tx,
    };
    state.scheduler.submit_chat(job).map_err(|e| match e {
        SubmitError::Full => ApiError::queue_full(state.scheduler.capacity()),
        SubmitError::Closed => {
            ApiError::unavailable("the server is shutting down", "shutting_down")
        }
        SubmitError::Locked(h) => ApiError::unavailable(
            format!(
                "the machine is locked by pid {} ({} on {}); chat resumes after `favlo lock release`",
                h.pid, h.command, h.pipeline
            ),
            "machine_locked",
        ),
    })?;
    let ctx = Ctx {
        id: format!("chatcmpl-{}", rid.0),
        model,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        tools: parsed.tools_active,
        forced: parsed.tools_forced,
        logprobs: want_logprobs,
    };
    if parsed.stream {
        Ok(stream_reply(ctx, rx, parsed.include_usage).into_response())
    } else {
        let timeout = state.config.request_timeout;
        match tokio::time::timeout(timeout, collect(rx)).await {
            Ok(Ok((c, lps))) => Ok(Json(whole_reply(&ctx, c, lps)).into_response()),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(ApiError::unavailable(
                format!("the request took longer than {} s", timeout.as_secs()),
                "timeout",
            )),
        }
    }
}

struct Ctx {
    id: String,
    model: String,
    created: u64,
    tools: bool,
    /// The whole reply is one forced tool call: hold it all for the parser.
    forced: bool,
    logprobs: bool,
}

async fn collect(
    mut rx: mpsc::UnboundedReceiver<ChatEvent>,
) -> Result<(Completion, Vec<TokenLogprob>), PipelineError> {
    let mut lps = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            ChatEvent::Token { logprob, .. } => lps.extend(logprob),
            ChatEvent::Done(r) => return r.map(|c| (c, lps)),
        }
    }
    Err(PipelineError::internal(
        "the chat worker dropped the request",
    ))
}

fn logprob_json(l: &TokenLogprob) -> Value {
    json!({
        "token": l.token, "logprob": l.logprob, "bytes": l.bytes,
        "top_logprobs": l.top.iter().map(|t| json!({"token": t.token, "logprob": t.logprob, "bytes": t.bytes})).collect::<Vec<_>>(),
    })
}

fn usage(c: &Completion) -> Value {
    json!({"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
           "total_tokens": c.prompt_tokens + c.completion_tokens})
}

fn calls_json(calls: &[favlo_pipeline::ToolCall], with_index: bool) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut v = json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}});
                if with_index {
                    v["index"] = json!(i);
                }
                v
            })
            .collect(),
    )
}

fn whole_reply(ctx: &Ctx, c: Completion, lps: Vec<TokenLogprob>) -> Value {
    let mut finish = c.finish_reason;
    let mut message = json!({"role": "assistant", "content": c.text});
    if ctx.tools {
        let parsed = tools::parse(&c.text, &format!("call_{}_", ctx.id));
        if !parsed.calls.is_empty() {
            message["content"] = if parsed.content.is_empty() {
                Value::Null
            } else {
                json!(parsed.content)
            };
            message["tool_calls"] = calls_json(&parsed.calls, false);
            finish = FinishReason::ToolCalls;
        }
    }
    let logprobs = if ctx.logprobs {
        json!({"content": lps.iter().map(logprob_json).collect::<Vec<_>>()})
    } else {
        Value::Null
    };
    json!({
        "id": ctx.id, "object": "chat.completion", "created": ctx.created, "model": ctx.model,
        "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish.as_str()}],
        "usage": usage(&c),
        "system_fingerprint": null,
    })
}

struct StreamState {
    rx: mpsc::UnboundedReceiver<ChatEvent>,
    ctx: Ctx,
    include_usage: bool,
    held: String,
    in_tool: bool,
    started: bool,
    done: bool,
}

impl StreamState {
    fn chunk(&self, delta: Value, logprobs: Value, finish: Value) -> Event {
        let v = json!({
            "id": self.ctx.id, "object": "chat.completion.chunk", "created": self.ctx.created,
            "model": self.ctx.model, "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        });
        Event::default().data(v.to_string())
    }

    /// Content safe to stream now (tool-call text held back).
    fn visible(&mut self, piece: &str) -> String {
        if !self.ctx.tools {
            return piece.to_owned();
        }
        if self.in_tool {
            self.held.push_str(piece);
            return String::new();
        }
        self.held.push_str(piece);
        if let Some(at) = self.held.find(tools::OPEN) {
            self.in_tool = true;
            let out = self.held[..at].to_owned();
            self.held.drain(..at);
            return out;
        }
        let keep = tools::partial_open_len(&self.held);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_owned();
        self.held.drain(..cut);
        out
    }

    fn on_event(&mut self, ev: Option<ChatEvent>) -> Vec<Event> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
                Value::Null,
            ));
        }
        match ev {
            Some(ChatEvent::Token { piece, logprob }) => {
                let text = self.visible(&piece);
                let lp = match (&logprob, self.ctx.logprobs) {
                    (Some(l), true) => json!({"content": [logprob_json(l)]}),
                    _ => Value::Null,
                };
                if !text.is_empty() || !lp.is_null() {
                    out.push(self.chunk(json!({"content": text}), lp, Value::Null));
                }
            }
            Some(ChatEvent::Done(Ok(c))) => {
                let mut finish = c.finish_reason;
                if self.ctx.tools {
                    let parsed = tools::parse(&self.held, &format!("call_{}_", self.ctx.id));
                    if parsed.calls.is_empty() {
                        if !self.held.is_empty() {
                            let rest = std::mem::take(&mut self.held);
                            out.push(self.chunk(
                                json!({"content": rest}),
                                Value::Null,
                                Value::Null,
                            ));
                        }
                    } else {
                        if !parsed.content.is_empty() {
                            out.push(self.chunk(
                                json!({"content": parsed.content}),
                                Value::Null,
                                Value::Null,
                            ));
                        }
                        out.push(self.chunk(
                            json!({"tool_calls": calls_json(&parsed.calls, true)}),
                            Value::Null,
                            Value::Null,
                        ));
                        finish = FinishReason::ToolCalls;
                    }
                }
                out.push(self.chunk(json!({}), Value::Null, json!(finish.as_str())));
                if self.include_usage {
                    let v = json!({
                        "id": self.ctx.id, "object": "chat.completion.chunk", "created": self.ctx.created,
                        "model": self.ctx.model, "choices": [], "usage": usage(&c),
                    });
                    out.push(Event::default().data(v.to_string()));
                }
                out.push(Event::default().data("[DONE]"));
                self.done = true;
            }
            Some(ChatEvent::Done(Err(e))) => {
                let api: ApiError = e.into();
                out.push(Event::default().data(api.body().to_string()));
                out.push(Event::default().data("[DONE]"));
                self.done = true;
            }
            None => {
                let api = ApiError::internal("the chat worker dropped a streaming request");
                out.push(Event::default().data(api.body().to_string()));
                self.done = true;
            }
        }
        out
    }
}

fn stream_reply(
    ctx: Ctx,
    rx: mpsc::UnboundedReceiver<ChatEvent>,
    include_usage: bool,
) -> Sse<impl futures_util::Stream<Item = Result<Event, std::convert::Infallible>>> {
    let in_tool = ctx.forced;
    let st = StreamState {
        rx,
        ctx,
        include_usage,
        held: String::new(),
        in_tool,
        started: false,
        done: false,
    };
    let s = stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let ev = st.rx.recv().await;
        let events = st.on_event(ev);
        Some((events, st))
    })
    .flat_map(|events| stream::iter(events.into_iter().map(Ok)));
    Sse::new(s)
}
