//! MCP at `/mcp` and the media job engine, against a fake stage-by-stage
//! pipeline whose uninterrupted result is known in closed form: inline and
//! task mode, resources, errors, preemption by chat, cancel, the machine lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use favlo_server::{ServeConfig, router};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// A JSON-RPC session over the router (session id kept after initialize).
struct Session {
    app: axum::Router,
    sid: Option<String>,
    next: u64,
}

fn sse_json(text: &str) -> Value {
    // SSE: the JSON-RPC message is the last `data:` line with a JSON object.
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|d| d.starts_with('{'))
        .map(|d| serde_json::from_str(d).unwrap())
        .unwrap_or_else(|| serde_json::from_str(text).unwrap_or(Value::String(text.into())))
}

impl Session {
    async fn raw(&mut self, body: Value, origin: Option<&str>) -> (StatusCode, Value) {
        let mut b = Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", "127.0.0.1:8129")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = &self.sid {
            b = b
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25");
        }
        if let Some(o) = origin {
            b = b.header("origin", o);
        }
        let resp = self
            .app
            .clone()
            .oneshot(b.body(Body::from(body.to_string())).unwrap())
            .await
            .unwrap();
        if let Some(s) = resp.headers().get("mcp-session-id") {
            self.sid = Some(s.to_str().unwrap().to_string());
        }
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, sse_json(&String::from_utf8_lossy(&bytes)))
    }

    async fn open(app: &axum::Router, tasks: bool) -> Session {
        let mut s = Session {
            app: app.clone(),
            sid: None,
            next: 1,
        };
        let caps = if tasks {
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
        } else {
            json!({})
        };
        let (st, v) = s
            .raw(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": caps,
                    "clientInfo": {"name": "test", "version": "0"}}}),
                None,
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(v["result"]["serverInfo"]["name"], "favlo", "{v}");
        assert!(
            v["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
            "{v}"
        );
        s.raw(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            None,
        )
        .await;
        s
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let (_, v) = self
            .raw(
                json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}),
                None,
            )
            .await;
        v
    }
}

/// POST a chat body to the router.
async fn post_chat(app: &axum::Router, chat: &Value) -> axum::response::Response {
    let req = Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(chat.to_string()))
        .unwrap();
    app.clone().oneshot(req).await.unwrap()
}

fn png_of(v: &Value) -> Vec<u8> {
    let blob = v["result"]["contents"][0]["blob"].as_str().unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(blob)
        .unwrap()
}

fn expected_bytes(seed: u64, steps: u64) -> Vec<u8> {
    common::fake_media_value(seed, steps).to_le_bytes()[..3].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_call_resources_and_errors() {
    let (state, _, _) = common::state_with(ServeConfig::default());
    let app = router(state.clone());
    let mut s = Session::open(&app, false).await;

    let tools = s.call("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    // Only kinds with a model row get a generate tool.
    assert_eq!(names, ["generate_image", "media_status", "media_cancel"]);

    // Inline: the finished result on the same call.
    let v = s
        .call(
            "tools/call",
            json!({"name": "generate_image", "arguments": {"steps": 3, "seed": 9, "stage_ms": 5}}),
        )
        .await;
    let r = &v["result"];
    assert_eq!(r["isError"], false, "{v}");
    assert_eq!(r["structuredContent"]["status"], "completed", "{v}");
    assert_eq!(r["structuredContent"]["progress"]["stage"], 3, "{v}");
    let id = r["structuredContent"]["id"].as_str().unwrap().to_string();
    let uri = format!("favlo://images/{id}");
    assert!(
        r["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "resource_link" && c["uri"] == uri.as_str()),
        "{v}"
    );
    assert!(
        !r.to_string()
            .contains(state.scheduler.store().root().to_str().unwrap()),
        "a path leaked: {v}"
    );

    let read = s.call("resources/read", json!({"uri": uri})).await;
    assert_eq!(
        read["result"]["contents"][0]["mimeType"], "image/png",
        "{read}"
    );
    assert_eq!(png_of(&read), expected_bytes(9, 3));
    let on_disk = state
        .scheduler
        .store()
        .root()
        .join(format!("images/{id}.png"));
    assert_eq!(std::fs::read(on_disk).unwrap(), expected_bytes(9, 3));

    let list = s.call("resources/list", json!({})).await;
    assert!(list.to_string().contains(&uri), "{list}");
    let mem = s
        .call("resources/read", json!({"uri": "favlo://memory"}))
        .await;
    let text = mem["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(
        serde_json::from_str::<Value>(text).unwrap()["budget"].is_u64(),
        "{mem}"
    );

    // Errors: malformed arguments, traversal ids, unknown ids, unknown tools.
    let bad = s
        .call(
            "tools/call",
            json!({"name": "generate_image", "arguments": {"steps": "many"}}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(
        bad["error"]["message"].as_str().unwrap().contains("steps"),
        "{bad}"
    );
    for uri in [
        "favlo://images/../secret",
        "favlo://images/a.b",
        "favlo://nope/x",
        "file:///etc/passwd",
    ] {
        let e = s.call("resources/read", json!({"uri": uri})).await;
        assert_eq!(e["error"]["code"], -32602, "{uri}: {e}");
    }
    let e = s
        .call("resources/read", json!({"uri": "favlo://images/unknown1"}))
        .await;
    assert_eq!(e["error"]["code"], -32002, "{e}");
    let e = s
        .call(
            "tools/call",
            json!({"name": "media_status", "arguments": {"id": "../x"}}),
        )
        .await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let e = s
        .call(
            "tools/call",
            json!({"name": "media_status", "arguments": {}}),
        )
        .await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let e = s
        .call(
            "tools/call",
            json!({"name": "generate_video", "arguments": {}}),
        )
        .await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no video model"),
        "{e}"
    );
    let e = s
        .call("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert!(e["error"].is_object(), "{e}");
    // The task methods need the extension.
    let e = s.call("tasks/get", json!({"taskId": id})).await;
    assert!(e["error"].is_object(), "{e}");

    // DNS rebinding: a foreign Origin is refused before any JSON-RPC.
    let (st, _) = s
        .raw(
            json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}),
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_mode_polls_and_cancels() {
    let (state, _, _) = common::state_with(ServeConfig::default());
    let app = router(state.clone());
    let mut s = Session::open(&app, true).await;
    let v = s
        .call(
            "tools/call",
            json!({"name": "generate_image", "arguments": {"steps": 4, "seed": 3, "stage_ms": 20}}),
        )
        .await;
    let r = &v["result"];
    assert_eq!(r["resultType"], "task", "{v}");
    assert_eq!(r["pollIntervalMs"], 2000, "{v}");
    assert_eq!(r["status"], "working", "{v}");
    let id = r["taskId"].as_str().unwrap().to_string();
    let t0 = Instant::now();
    let done = loop {
        let g = s.call("tasks/get", json!({"taskId": id})).await;
        if g["result"]["status"] != "working" {
            break g;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{g}");
        tokio::time::sleep(Duration::from_millis(30)).await;
    };
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"]["id"],
        id.as_str(),
        "{done}"
    );
    let read = s
        .call(
            "resources/read",
            json!({"uri": format!("favlo://images/{id}")}),
        )
        .await;
    assert_eq!(png_of(&read), expected_bytes(3, 4));

    // Cancel a long job while it runs (tasks/cancel), and one while queued (media_cancel).
    let long = s
        .call(
            "tools/call",
            json!({"name": "generate_image", "arguments": {"steps": 50, "stage_ms": 40}}),
        )
        .await;
    let long_id = long["result"]["taskId"].as_str().unwrap().to_string();
    let queued = s
        .call(
            "tools/call",
            json!({"name": "generate_image", "arguments": {"steps": 2}}),
        )
        .await;
    let queued_id = queued["result"]["taskId"].as_str().unwrap().to_string();
    let c = s
        .call(
            "tools/call",
            json!({"name": "media_cancel", "arguments": {"id": queued_id}}),
        )
        .await;
    assert_eq!(
        c["result"]["structuredContent"]["status"], "cancelled",
        "{c}"
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let c = s.call("tasks/cancel", json!({"taskId": long_id})).await;
    assert!(c["result"].is_object(), "{c}");
    let t0 = Instant::now();
    loop {
        let g = s.call("tasks/get", json!({"taskId": long_id})).await;
        if g["result"]["status"] == "cancelled" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{g}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let e = s
        .call(
            "resources/read",
            json!({"uri": format!("favlo://images/{long_id}")}),
        )
        .await;
    assert_eq!(e["error"]["code"], -32002, "{e}");
    let again = s
        .call(
            "tools/call",
            json!({"name": "media_cancel", "arguments": {"id": long_id}}),
        )
        .await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_preempts_a_job_that_resumes_to_the_same_bytes() {
    let (state, log, ledger) = common::state_with(ServeConfig::default());
    let app = router(state.clone());
    let mut s = Session::open(&app, true).await;
    let v = s
        .call(
            "tools/call",
            json!({"name": "generate_image", "arguments": {"steps": 30, "seed": 11, "stage_ms": 30}}),
        )
        .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_string();
    // Wait until it runs, then chat.
    let t0 = Instant::now();
    while state.scheduler.jobs().get(&id).unwrap().progress.stage < 3 {
        assert!(t0.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let chat = json!({"model": "chat-a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let resp = post_chat(&app, &chat).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // While the chat ran, the job was paused with the same id, not lost.
    let rec = state.scheduler.jobs().get(&id).unwrap();
    assert!(rec.preemptions >= 1, "{rec:?}");
    assert!(!rec.status.is_terminal() || rec.status == favlo_server::media::JobStatus::Completed);
    {
        let l = log.lock().unwrap();
        assert!(
            l.closed.iter().any(|c| c == "img"),
            "the media runtime was not closed: {:?}",
            l.closed
        );
    }
    let t0 = Instant::now();
    loop {
        let rec = state.scheduler.jobs().get(&id).unwrap();
        if rec.status.is_terminal() {
            assert_eq!(
                rec.status,
                favlo_server::media::JobStatus::Completed,
                "{rec:?}"
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (bytes, _) = state
        .scheduler
        .store()
        .read(favlo_pipeline::MediaKind::Image, &id, None)
        .unwrap();
    assert_eq!(
        bytes,
        expected_bytes(11, 30),
        "a preempted job must give the unpreempted bytes"
    );
    // Nothing leaked across the switches: only the resident's spans remain.
    let snap = ledger.snapshot();
    assert!(snap.owners.len() <= 1, "{:?}", snap.owners);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_preemptions_same_bytes_and_expiry() {
    let (state, _, _) = common::state_with(ServeConfig::default());
    let app = router(state.clone());
    let mut s = Session::open(&app, true).await;
    let v = s
        .call(
            "tools/call",
            json!({"name": "generate_image", "arguments": {"steps": 40, "seed": 5, "stage_ms": 25}}),
        )
        .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_string();
    let chat = json!({"model": "chat-b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    for round in 0..3 {
        let t0 = Instant::now();
        loop {
            let rec = state.scheduler.jobs().get(&id).unwrap();
            if rec.status == favlo_server::media::JobStatus::InProgress && !rec.paused {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "round {round}: {rec:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(post_chat(&app, &chat).await.status(), StatusCode::OK);
    }
    let rec = state.scheduler.jobs().wait(&id).await.unwrap();
    assert_eq!(
        rec.status,
        favlo_server::media::JobStatus::Completed,
        "{rec:?}"
    );
    assert!(rec.preemptions >= 3, "{rec:?}");
    assert!(rec.pause_latency_ms.unwrap() <= 1000, "{rec:?}");
    let (bytes, _) = state
        .scheduler
        .store()
        .read(favlo_pipeline::MediaKind::Image, &id, None)
        .unwrap();
    assert_eq!(bytes, expected_bytes(5, 40));

    // Expiry: with a lifetime of 60 s, a sweep an hour later removes the file and the job.
    let root = state.scheduler.store().root().to_path_buf();
    std::fs::write(root.join("settings.json"), r#"{"media_ttl_seconds": 60}"#).unwrap();
    let later = std::time::SystemTime::now() + Duration::from_secs(3600);
    let gone = favlo_server::sweep_expired(&state, later);
    assert_eq!(gone, vec![id.clone()]);
    assert!(state.scheduler.jobs().get(&id).is_none());
    let e = s
        .call(
            "resources/read",
            json!({"uri": format!("favlo://images/{id}")}),
        )
        .await;
    assert_eq!(e["error"]["code"], -32002, "{e}");
    let e = s.call("tasks/get", json!({"taskId": id})).await;
    assert!(e["error"].is_object(), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_machine_lock_turns_chat_away() {
    let (state, _, _) = common::state_with(ServeConfig::default());
    let app = router(state.clone());
    let lock = favlo_server::lock::MachineLock::new(state.scheduler.store().root());
    let me = favlo_server::lock::LockInfo {
        pipeline: "fake".into(),
        pid: std::process::id(),
        command: "test".into(),
    };
    lock.acquire(&me).unwrap();
    let chat = json!({"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]});
    let resp = post_chat(&app, &chat).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "machine_locked", "{v}");
    let req = Request::builder()
        .uri("/health")
        .body(Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["locked"]["pid"], std::process::id(), "{v}");
    lock.release(std::process::id()).unwrap();
}
