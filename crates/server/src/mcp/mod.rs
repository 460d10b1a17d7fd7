//! MCP over streamable HTTP at `POST /mcp`: media tools, optional tasks, resources.
//!
//! Key design choice: rmcp owns the protocol (sessions, versions, the tasks
//! extension's capability checks, Host/Origin validation); this module is a
//! thin `ServerHandler` over the scheduler's job table and the media store.
//! A job id is also its task id and its file stem, so `tasks/get`,
//! `media_status` and `favlo://<kind>/<id>` all name the same thing.

mod resources;
pub(crate) use resources::memory_json;
mod time;
mod tools;

use std::sync::Arc;

use axum::http::StatusCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::media::{JobRecord, JobStatus};

/// Suggested poll interval for task clients.
pub const POLL_INTERVAL_MS: u64 = 2000;

/// Build a protocol type from its wire JSON (rmcp's types are non-exhaustive).
/// Results carry `resultType: "complete"` (2026-07-28; rmcp drops it for
/// peers on older revisions).
fn wire<T: serde::de::DeserializeOwned>(mut v: Value) -> Result<T, McpError> {
    if let Some(o) = v.as_object_mut() {
        o.entry("resultType").or_insert_with(|| json!("complete"));
    }
    serde_json::from_value(v)
        .map_err(|e| McpError::internal_error(format!("building a reply: {e}"), None))
}

/// An HTTP-shaped error as a JSON-RPC error: client faults are invalid params.
fn api_to_mcp(e: ApiError) -> McpError {
    let data = e.param.as_ref().map(|p| json!({"param": p}));
    if e.status.is_client_error() {
        McpError::invalid_params(e.message, data)
    } else if e.status == StatusCode::SERVICE_UNAVAILABLE {
        McpError::internal_error(e.message, data)
    } else {
        McpError::internal_error(e.message, None)
    }
}

/// One MCP session's handler (cheap: the state is shared).
#[derive(Clone)]
pub struct FavloMcp {
    state: Arc<AppState>,
}

/// The `/mcp` service for the router: loopback Host names (plus the bound
/// host) and browser Origins of this listener only.
pub fn service(state: Arc<AppState>) -> StreamableHttpService<FavloMcp, LocalSessionManager> {
    let c = &state.config;
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !hosts.contains(&c.host) {
        hosts.push(c.host.clone());
    }
    hosts.extend(c.mcp_allowed_hosts.iter().cloned());
    let mut origins = vec![
        "http://localhost:*".to_string(),
        "http://127.0.0.1:*".to_string(),
        "http://[::1]:*".to_string(),
    ];
    origins.extend(c.mcp_allowed_origins.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(c.max_body_bytes)
        .with_cancellation_token(state.shutdown.child_token());
    let s = state.clone();
    StreamableHttpService::new(
        move || Ok(FavloMcp { state: s.clone() }),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

fn task_of(rec: &JobRecord, state: &AppState) -> Value {
    let status = match rec.status {
        JobStatus::Queued | JobStatus::InProgress => "working",
        JobStatus::Completed => "completed",
        JobStatus::Failed => "failed",
        JobStatus::Cancelled => "cancelled",
    };
    let stage = match rec.progress.stages {
        Some(n) => format!("stage {} of {n}", rec.progress.stage),
        None => format!("stage {}", rec.progress.stage),
    };
    let message = match rec.status {
        JobStatus::Queued => "queued".to_string(),
        JobStatus::InProgress if rec.preemptions > 0 => {
            format!(
                "in progress, {stage} (paused {} times for chat)",
                rec.preemptions
            )
        }
        JobStatus::InProgress => format!("in progress, {stage}"),
        JobStatus::Completed => "completed".into(),
        JobStatus::Failed => rec
            .error
            .as_ref()
            .map(|e| e.message.clone())
            .unwrap_or_default(),
        JobStatus::Cancelled => "cancelled".into(),
    };
    let ttl_ms = state.scheduler.store().ttl().as_millis() as u64;
    json!({
        "taskId": rec.id,
        "status": status,
        "statusMessage": message,
        "createdAt": time::iso8601(rec.created_at),
        "lastUpdatedAt": time::iso8601(rec.updated_at),
        "ttlMs": ttl_ms,
        "pollIntervalMs": POLL_INTERVAL_MS,
    })
}

impl ServerHandler for FavloMcp {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_tasks()
            .build();
        let info = rmcp::model::Implementation::new("favlo", env!("CARGO_PKG_VERSION"));
        ServerConfig::new(caps)
            .with_server_info(info)
            .with_instructions(
                "Favlo's media tools. generate_* tools queue a job on the shared accelerator \
                 (chat may pause it; it resumes by itself with the same id). Clients with the \
                 tasks extension get a task to poll; others get the result on the same call. \
                 Read results with resources/read on the favlo:// link; media_status and \
                 media_cancel take the job id.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let state = self.state.clone();
        let tools = tokio::task::spawn_blocking(move || tools::list(&state))
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let name = request.name.as_ref();
        if let Some(tool) = tools::GENERATE.iter().find(|t| t.name == name) {
            let rec = tools::submit(&self.state, tool, &args).await?;
            let wants_task = context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
            if wants_task {
                let task = task_of(&rec, &self.state);
                return Ok(CallToolResponse::Task(wire(json!({
                    "resultType": "task",
                    "taskId": task["taskId"], "status": task["status"],
                    "statusMessage": task["statusMessage"],
                    "createdAt": task["createdAt"], "lastUpdatedAt": task["lastUpdatedAt"],
                    "ttlMs": task["ttlMs"], "pollIntervalMs": task["pollIntervalMs"],
                }))?));
            }
            let done = self
                .state
                .scheduler
                .jobs()
                .wait(&rec.id)
                .await
                .ok_or_else(|| McpError::internal_error("the job disappeared", None))?;
            return Ok(CallToolResponse::Complete(tools::finished(
                &self.state,
                &done,
            )?));
        }
        match name {
            "media_status" => Ok(CallToolResponse::Complete(tools::status(
                &self.state,
                &args,
            )?)),
            "media_cancel" => {
                let id = tools::id_arg(&args)?;
                let rec = tools::cancel(&self.state, &id)?;
                Ok(CallToolResponse::Complete(tools::status_result(&rec)?))
            }
            other => Err(McpError::invalid_params(
                format!("unknown tool `{other}`; tools/list names the tools"),
                Some(json!({"param": "name"})),
            )),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let id = request.task_id;
        let rec = self
            .state
            .scheduler
            .jobs()
            .get(&id)
            .ok_or_else(|| McpError::invalid_params(format!("no task with id `{id}`"), None))?;
        let mut task = task_of(&rec, &self.state);
        match rec.status {
            JobStatus::Completed => {
                let result = tools::finished(&self.state, &rec)?;
                task["result"] = serde_json::to_value(result)
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            }
            JobStatus::Failed => {
                let e = rec.error.clone();
                task["error"] = json!({
                    "code": -32603,
                    "message": e.as_ref().map(|e| e.message.clone()).unwrap_or_default(),
                    "data": {"type": e.map(|e| e.kind).unwrap_or_default()},
                });
            }
            _ => {}
        }
        task["resultType"] = json!("complete");
        wire(task)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        tools::cancel(&self.state, &request.task_id).map(|_| ())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        resources::list(&self.state)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        resources::templates()
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || resources::read(&state, &request.uri))
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
            .map(ReadResourceResponse::Complete)
    }
}
