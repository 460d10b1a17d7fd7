//! Router tests with `tower::ServiceExt::oneshot` against fake pipelines:
//! validation and error shapes, auth, limits, and the scheduler's behaviour.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default,
    clippy::await_holding_lock
)]

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use favlo_server::{ServeConfig, router};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    body: Option<String>,
    key: Option<&str>,
) -> (StatusCode, String) {
    let mut b = Request::builder().method(method).uri(path);
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    if let Some(k) = key {
        b = b.header("authorization", format!("Bearer {k}"));
    }
    let req = b
        .body(body.map(Body::from).unwrap_or_else(Body::empty))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn post(app: &axum::Router, path: &str, body: Value) -> (StatusCode, Value) {
    let (s, text) = call(app, "POST", path, Some(body.to_string()), None).await;
    (
        s,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn assert_error(v: &Value, param: Option<&str>) {
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
}

fn app() -> axum::Router {
    router(common::state_with(ServeConfig::default()).0)
}

#[tokio::test]
async fn malformed_and_wrong_types_are_400() {
    let app = app();
    let (s, t) = call(
        &app,
        "POST",
        "/v1/chat/completions",
        Some("{not json".into()),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_str(&t).unwrap();
    assert_error(&v, None);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );

    let cases = [
        (json!({"model": 5, "messages": []}), "model"),
        (json!({"model": "chat-a"}), "messages"),
        (json!({"model": "chat-a", "messages": "hi"}), "messages"),
        (
            json!({"model": "chat-a", "messages": [{"role": "wizard", "content": "x"}]}),
            "messages[0].role",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            "messages[0].content",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
            "temperature",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "temperature": 3}),
            "temperature",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "n": 2}),
            "n",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}),
            "stream",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
            "max_tokens",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "stop": 3}),
            "stop",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}),
            "top_logprobs",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "x"}]}),
            "tools",
        ),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}),
            "response_format",
        ),
        (
            json!({"model": "emb", "messages": [{"role": "user", "content": "x"}]}),
            "model",
        ),
    ];
    for (body, param) in cases {
        let (s, v) = post(&app, "/v1/chat/completions", body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body} -> {v}");
        assert_error(&v, Some(param));
    }
    let (s, v) = post(&app, "/v1/chat/completions", json!([1, 2])).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_error(&v, None);
}

#[tokio::test]
async fn unknown_and_path_like_models_are_404() {
    let app = app();
    for id in [
        "nope",
        "../../etc/passwd",
        "/etc/passwd",
        "chat-a/../chat-b",
        "C:\\x",
    ] {
        let (s, v) = post(
            &app,
            "/v1/chat/completions",
            json!({"model": id, "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{id}");
        assert_error(&v, Some("model"));
        assert_eq!(v["error"]["code"], "model_not_found");
        let (s, _) = post(&app, "/v1/embeddings", json!({"model": id, "input": "x"})).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
    let (s, t) = call(&app, "GET", "/v1/nothing", None, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_error(&serde_json::from_str(&t).unwrap(), None);
}

#[tokio::test]
async fn not_pulled_under_never_is_503_and_pull_failure_is_503() {
    let mut c = ServeConfig::default();
    c.pull = favlo_server::PullPolicy::Never;
    let app = router(common::state_with(c).0);
    let (s, v) = post(
        &app,
        "/v1/chat/completions",
        json!({"model": "not-pulled", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("favlo pull not-pulled")
    );
    let auto = router(common::state_with(ServeConfig::default()).0);
    let (s, v) = post(
        &auto,
        "/v1/chat/completions",
        json!({"model": "not-pulled", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["error"]["code"], "pull_failed");
}

#[tokio::test]
async fn oversized_body_is_413() {
    let mut c = ServeConfig::default();
    c.max_body_bytes = 1000;
    let app = router(common::state_with(c).0);
    let big =
        json!({"model": "chat-a", "messages": [{"role": "user", "content": "x".repeat(5000)}]});
    let (s, v) = post(&app, "/v1/chat/completions", big).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_error(&v, None);
}

#[tokio::test]
async fn api_key_is_required_when_set() {
    let mut c = ServeConfig::default();
    c.api_key = Some("sekrit".into());
    let app = router(common::state_with(c).0);
    let (s, t) = call(&app, "GET", "/v1/models", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_error(&serde_json::from_str(&t).unwrap(), None);
    let (s, _) = call(&app, "GET", "/v1/models", None, Some("wrong")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = call(&app, "GET", "/v1/models", None, Some("sekrit")).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(&app, "GET", "/health", None, None).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn chat_whole_stop_logprobs_and_switch() {
    let (state, log, ledger) = common::state_with(ServeConfig::default());
    let app = router(state);
    let (s, v) = post(&app, "/v1/chat/completions", json!({"model": "chat-a", "messages": [{"role": "user", "content": "hello world"}], "logprobs": true})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hello world");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 17);
    assert_eq!(v["usage"]["total_tokens"], 22);
    assert_eq!(
        v["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .len(),
        17
    );
    // Stop string and max_tokens.
    let (_, v) = post(&app, "/v1/chat/completions", json!({"model": "chat-a", "messages": [{"role": "user", "content": "abcdef"}], "stop": ["cd"]})).await;
    assert_eq!(v["choices"][0]["message"]["content"], "echo: ab");
    let (_, v) = post(&app, "/v1/chat/completions", json!({"model": "chat-a", "messages": [{"role": "user", "content": "abcdef"}], "max_tokens": 3})).await;
    assert_eq!(v["choices"][0]["message"]["content"], "ech");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    // Switch to chat-b closes chat-a and its owner is swept (nothing live but chat-b).
    let live_a = ledger.live();
    let (s, _) = post(
        &app,
        "/v1/chat/completions",
        json!({"model": "chat-b", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(ledger.live(), live_a);
    let l = log.lock().unwrap();
    assert_eq!(l.opened, vec!["chat-a", "chat-b"]);
    assert_eq!(l.closed, vec!["chat-a"]);
    drop(l);
    let (_, t) = call(&app, "GET", "/v1/models", None, None).await;
    let v: Value = serde_json::from_str(&t).unwrap();
    let b = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "chat-b")
        .unwrap();
    assert_eq!(b["resident"], true);
    assert_eq!(b["object"], "model");
    assert_eq!(b["owned_by"], "favlo");
    assert_eq!(b["kind"], "chat");
}

fn sse_data(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn streaming_with_usage_and_tool_calls() {
    let app = app();
    let (s, t) = call(&app, "POST", "/v1/chat/completions", Some(json!({"model": "chat-a", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "hi"}]}).to_string()), None).await;
    assert_eq!(s, StatusCode::OK);
    let data = sse_data(&t);
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "echo: hi");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let fin = chunks
        .iter()
        .find(|c| !c["choices"][0]["finish_reason"].is_null())
        .unwrap();
    assert_eq!(fin["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 8);

    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    let body = json!({"model": "chat-a", "messages": [{"role": "user", "content": "weather in Paris?"}], "tools": tools});
    let (_, v) = post(&app, "/v1/chat/completions", body.clone()).await;
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let call0 = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call0["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call0["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    let mut sbody = body;
    sbody["stream"] = json!(true);
    let (_, t) = call(
        &app,
        "POST",
        "/v1/chat/completions",
        Some(sbody.to_string()),
        None,
    )
    .await;
    let data = sse_data(&t);
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| {
        !c["choices"][0]["delta"]["content"]
            .as_str()
            .unwrap_or("")
            .contains("<tool")
    }));
    let tc = chunks
        .iter()
        .find(|c| c["choices"][0]["delta"]["tool_calls"].is_array())
        .unwrap();
    assert_eq!(tc["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "tool_calls")
    );
    // The tool result round trip is accepted.
    let (s, v) = post(&app, "/v1/chat/completions", json!({"model": "chat-a", "tools": tools, "messages": [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"}]})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "echo: 18C");
}

#[tokio::test]
async fn json_schema_output_is_valid() {
    let app = app();
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 2}}, "required": ["name", "age", "ok", "tags"]});
    // Several seeds of the random fake model: every output must parse and fit.
    for seed in 0..8u64 {
        let (s, v) = post(&app, "/v1/chat/completions", json!({"model": "chat-a", "seed": seed, "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}})).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let out: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(
            out["name"].is_string() && out["age"].is_i64() && out["ok"].is_boolean(),
            "{out}"
        );
        let tags = out["tags"].as_array().unwrap();
        assert!(
            (1..=2).contains(&tags.len()) && tags.iter().all(|t| t == "a" || t == "b"),
            "{out}"
        );
        let (_, v) = post(&app, "/v1/chat/completions", json!({"model": "chat-a", "seed": seed, "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})).await;
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let out: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(out.is_object());
    }
}

#[tokio::test]
async fn embeddings_float_base64_dimensions_and_errors() {
    let app = app();
    let (s, v) = post(
        &app,
        "/v1/embeddings",
        json!({"model": "emb", "input": ["a b", "ccc"]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "emb");
    assert_eq!(v["data"][1]["embedding"], json!([3.0, 1.0, -2.0, 0.5]));
    assert_eq!(v["usage"]["prompt_tokens"], 4 + 3);
    let (_, v) = post(
        &app,
        "/v1/embeddings",
        json!({"model": "emb", "input": "ccc", "encoding_format": "base64"}),
    )
    .await;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let floats: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(floats, vec![3.0, 1.0, -2.0, 0.5]);
    let (_, v) = post(
        &app,
        "/v1/embeddings",
        json!({"model": "emb", "input": "ccc", "dimensions": 2}),
    )
    .await;
    let e: Vec<f64> = v["data"][0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let n = (9.0f64 + 1.0).sqrt();
    assert!(
        (e[0] - 3.0 / n).abs() < 1e-6 && (e[1] - 1.0 / n).abs() < 1e-6,
        "{e:?}"
    );
    for (body, param) in [
        (json!({"model": "emb", "input": "  "}), "input"),
        (json!({"model": "emb"}), "input"),
        (json!({"model": "emb", "input": ["a", 3]}), "input"),
        (
            json!({"model": "emb", "input": "a", "encoding_format": "hex"}),
            "encoding_format",
        ),
        (
            json!({"model": "emb", "input": "a", "dimensions": 9}),
            "dimensions",
        ),
        (json!({"model": "chat-a", "input": "a"}), "model"),
    ] {
        let (s, v) = post(&app, "/v1/embeddings", body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body} -> {v}");
        assert_error(&v, Some(param));
    }
    let (_, v) = post(
        &app,
        "/v1/embeddings",
        json!({"model": "emb", "input": [1, 2]}),
    )
    .await;
    assert_eq!(v["error"]["param"], "input");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("token arrays")
    );
}

#[tokio::test]
async fn memory_metrics_health() {
    let app = app();
    // A device ledger (as a CUDA context registers its own) shows under `devices`
    // while it lives, with its owner's bytes.
    let dev = favlo_runtime::ledger::Ledger::with_fixed_budget(
        favlo_runtime::device::Device::Cuda(5),
        8 << 30,
        None,
    );
    favlo_runtime::device_ledgers::register(&dev);
    let owner = favlo_runtime::ledger::Owner::mint("memory-test-gpu-model");
    let span = dev
        .span(&owner, favlo_runtime::ledger::SpanKind::Resident, 3 << 20)
        .unwrap();
    let (s, t) = call(&app, "GET", "/v1/memory", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["budget"], 1u64 << 30);
    assert_eq!(v["device"], "cpu");
    let gpu = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == "cuda:5")
        .unwrap_or_else(|| panic!("no cuda:5 in {v}"));
    assert_eq!(gpu["budget"], 8u64 << 30);
    assert_eq!(gpu["live"], 3u64 << 20);
    assert_eq!(gpu["owners"][0]["kinds"]["resident"], 3u64 << 20);
    let (_, m) = call(&app, "GET", "/metrics", None, None).await;
    assert!(
        m.contains("# TYPE favlo_device_ledger_live_bytes gauge")
            && m.contains("favlo_device_ledger_live_bytes{device=\"cuda:5\"} 3145728")
            && m.contains("favlo_device_ledger_budget_bytes{device=\"cuda:5\"} 8589934592"),
        "{m}"
    );
    drop(span);
    drop(dev);
    let (_, t) = call(&app, "GET", "/v1/memory", None, None).await;
    assert!(!t.contains("cuda:5"), "{t}");
    let (_, m) = call(&app, "GET", "/metrics", None, None).await;
    assert!(!m.contains("cuda:5"), "{m}");
    let (s, t) = call(&app, "GET", "/metrics", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        t.contains("# TYPE favlo_queue_depth gauge")
            && t.contains("favlo_ledger_budget_bytes 1073741824"),
        "{t}"
    );
    let (_, t) = call(&app, "GET", "/health", None, None).await;
    assert_eq!(serde_json::from_str::<Value>(&t).unwrap()["status"], "ok");
}

#[tokio::test]
async fn disconnect_mid_stream_stops_generation_and_next_request_succeeds() {
    let (state, log, _) = common::state_with(ServeConfig::default());
    let app = router(state);
    let body = json!({"model": "chat-a", "stream": true, "messages": [{"role": "user", "content": "forever"}]});
    let req = Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let mut b = resp.into_body();
    // Read a few frames, then hang up.
    for _ in 0..3 {
        b.frame().await.unwrap().unwrap();
    }
    drop(b);
    let (s, v) = post(
        &app,
        "/v1/chat/completions",
        json!({"model": "chat-a", "messages": [{"role": "user", "content": "after"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["choices"][0]["message"]["content"], "echo: after");
    let sent = log
        .lock()
        .unwrap()
        .tokens_sent
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        sent < 5_000,
        "generation kept going after the disconnect: {sent} tokens"
    );
}

/// A resident model that decodes several chats together (chat-p) serves the chat at
/// the front of the queue and every chat that reaches the front while it runs, first
/// come, first served: a response_format chat is served alone and ends the run, and
/// every chat gets its own answer.
#[tokio::test]
async fn waiting_chats_of_a_batching_model_join_the_running_ones() {
    let (state, log, _) = common::state_with(ServeConfig::default());
    let app = router(state);
    let chat = |content: &str| json!({"model": "chat-p", "messages": [{"role": "user", "content": content}]});
    // Open chat-p, then hold the worker with a slow chat while five more queue.
    let (s, _) = post(&app, "/v1/chat/completions", chat("first")).await;
    assert_eq!(s, StatusCode::OK);
    let slow = tokio::spawn({
        let app = app.clone();
        let body = chat("wait 800");
        async move { post(&app, "/v1/chat/completions", body).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut waiting = Vec::new();
    for i in 0..5 {
        let app = app.clone();
        let mut body = chat(&format!("chat {i}"));
        if i == 2 {
            body["response_format"] = json!({"type": "json_object"});
        }
        waiting.push(tokio::spawn(async move {
            post(&app, "/v1/chat/completions", body).await
        }));
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (s, v) = slow.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "echo: wait 800");
    for (i, h) in waiting.into_iter().enumerate() {
        let (s, v) = h.await.unwrap();
        assert_eq!(s, StatusCode::OK, "chat {i}: {v}");
        if i != 2 {
            assert_eq!(
                v["choices"][0]["message"]["content"],
                format!("echo: chat {i}")
            );
        }
    }
    // "first" opened chat-p alone; then the slow chat with chats 0 and 1 (they reached
    // the front while it ran), chat 2 alone (its response_format), 3 and 4 together.
    let b = log.lock().unwrap().batches.clone();
    let flat: Vec<String> = b.iter().flatten().cloned().collect();
    assert_eq!(
        flat,
        ["wait 800", "chat 0", "chat 1", "chat 3", "chat 4"],
        "{b:?}"
    );
    assert!(
        b.iter().all(
            |run| !(run.contains(&"chat 1".to_string()) && run.contains(&"chat 3".to_string()))
        ),
        "a run crossed the response_format chat: {b:?}"
    );
    assert_eq!(b[0], ["wait 800", "chat 0", "chat 1"], "{b:?}");
}

/// A pipeline that panics answers its chat with a 500, is closed, and the next chat
/// opens it again: alone (`chat-a`) and through the batching queue (`chat-p`).
#[tokio::test]
async fn a_panicking_pipeline_answers_500_and_reopens() {
    let (state, log, _) = common::state_with(ServeConfig::default());
    let app = router(state);
    for model in ["chat-a", "chat-p"] {
        let chat = |content: &str| json!({"model": model, "messages": [{"role": "user", "content": content}]});
        let (s, _) = post(&app, "/v1/chat/completions", chat("open")).await;
        assert_eq!(s, StatusCode::OK);
        let (s, v) = post(&app, "/v1/chat/completions", chat("panic")).await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{model}: {v}");
        assert_error(&v, None);
        let (s, v) = post(&app, "/v1/chat/completions", chat("again")).await;
        assert_eq!(s, StatusCode::OK, "{model}: {v}");
        assert_eq!(v["choices"][0]["message"]["content"], "echo: again");
    }
    let l = log.lock().unwrap();
    // Each model opened, closed by its panic, and opened again.
    assert_eq!(
        l.opened.iter().filter(|m| *m == "chat-p").count(),
        2,
        "{:?}",
        l.opened
    );
    assert_eq!(
        l.opened.iter().filter(|m| *m == "chat-a").count(),
        2,
        "{:?}",
        l.opened
    );
}
