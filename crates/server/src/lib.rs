//! Favlo's listener: OpenAI routes over axum, the one-resident scheduler, metrics.
//!
//! Key design choice: the server links no pipeline and no registry code. The
//! binary hands it a [`Catalog`] (the registry rows) and an
//! `Arc<dyn PipelineFactory>` (the families), and every generation runs on the
//! scheduler's own threads, never on the async runtime.

mod catalog;
mod config;
mod error;
mod extract;
pub mod json;
pub mod lock;
pub mod mcp;
pub mod media;
mod metrics;
mod routes;
mod scheduler;
mod stop;
pub mod tools;
pub mod ui;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use favlo_pipeline::{Ledger, PipelineFactory};

pub use catalog::{Catalog, CatalogRow};
pub use config::{PullPolicy, ServeConfig, is_loopback};
pub use error::{ApiError, ServerError};
pub use metrics::Metrics;
pub use scheduler::{Residency, Scheduler, SchedulerDeps};

/// What the binary provides.
#[derive(Clone)]
pub struct ServerDeps {
    /// Registry rows and pulling.
    pub catalog: Arc<dyn Catalog>,
    /// Opens pipelines for rows.
    pub factory: Arc<dyn PipelineFactory>,
    /// The process ledger.
    pub ledger: Arc<Ledger>,
    /// The web UI's files (`None`: no UI, `/` is a 404).
    pub ui: Option<ui::UiAssets>,
    /// The Favlo home: media files (`<home>/<kind>/<id>.<ext>`),
    /// `settings.json`, the machine lock.
    pub home: PathBuf,
}

/// Shared state of the routes.
pub struct AppState {
    /// Settings.
    pub config: ServeConfig,
    /// Registry.
    pub catalog: Arc<dyn Catalog>,
    /// Ledger.
    pub ledger: Arc<Ledger>,
    /// Workers.
    pub scheduler: Scheduler,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// One pull at a time.
    pub pull_lock: tokio::sync::Mutex<()>,
    /// Start time.
    pub started: Instant,
    /// The web UI's files.
    pub ui: Option<ui::UiAssets>,
    /// Cancelled at shutdown: ends MCP sessions and their open streams.
    pub shutdown: tokio_util::sync::CancellationToken,
    next_id: AtomicU64,
}

/// A request's id (`x-request-id` from the client, or minted).
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

impl AppState {
    /// Build the state and start the workers.
    pub fn new(config: ServeConfig, deps: ServerDeps) -> Arc<AppState> {
        let metrics = Arc::new(Metrics::default());
        let scheduler = Scheduler::start(SchedulerDeps {
            factory: deps.factory,
            ledger: deps.ledger.clone(),
            metrics: metrics.clone(),
            capacity: config.queue_capacity,
            store: media::MediaStore::new(&deps.home),
            lock: Some(lock::MachineLock::new(&deps.home)),
        });
        Arc::new(AppState {
            config,
            catalog: deps.catalog,
            ledger: deps.ledger,
            scheduler,
            metrics,
            pull_lock: tokio::sync::Mutex::new(()),
            started: Instant::now(),
            ui: deps.ui,
            shutdown: tokio_util::sync::CancellationToken::new(),
            next_id: AtomicU64::new(1),
        })
    }
}

/// The routes (for `serve` and for tests).
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .route("/health", get(routes::info::health))
        .route("/v1/models", get(routes::info::models))
        .route("/v1/models/{id}", get(routes::info::model))
        .route("/v1/chat/completions", post(routes::chat::chat_completions))
        .route("/v1/embeddings", post(routes::embeddings::embeddings))
        .route("/v1/audio/speech", post(routes::speech::speech))
        .route("/v1/memory", get(routes::info::memory))
        .route("/metrics", get(routes::info::metrics))
        .nest_service("/mcp", mcp::service(state.clone()))
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), frame))
        .with_state(state)
}

/// Unknown routes: the web UI for GETs outside the API, a JSON 404 otherwise.
async fn fallback(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let path = req.uri().path();
    if req.method() == axum::http::Method::GET
        && !ui::is_api_path(path)
        && let Some(resp) = state.ui.and_then(|assets| ui::serve(assets, path))
    {
        return resp;
    }
    ApiError::route_not_found(path).into_response()
}

/// Request id, API key check, access log, error counting.
async fn frame(State(state): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let t = Instant::now();
    let rid = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| {
            let n = state.next_id.fetch_add(1, Ordering::Relaxed);
            let s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            format!("{s:x}{n:04x}")
        });
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    req.extensions_mut().insert(RequestId(rid.clone()));
    let needs_key = path.starts_with("/v1/") || path == "/metrics" || path == "/mcp";
    let mut resp = match (&state.config.api_key, needs_key) {
        (Some(key), true) if !authorized(&req, key) => ApiError::unauthorized().into_response(),
        _ => next.run(req).await,
    };
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let status = resp.status();
    if status.as_u16() >= 400 {
        Metrics::add(&state.metrics.errors, 1);
    }
    tracing::info!(request_id = %rid, %method, %path, status = status.as_u16(),
                   ms = t.elapsed().as_millis() as u64, "request");
    resp
}

fn authorized(req: &Request, key: &str) -> bool {
    let Some(got) = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(token) = got.strip_prefix("Bearer ") else {
        return false;
    };
    // Length-independent comparison of the bytes.
    let (a, b) = (token.as_bytes(), key.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= (a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0)) as usize;
    }
    diff == 0
}

/// Bind, serve until Ctrl-C / SIGTERM, then shut down gracefully (open
/// requests get `shutdown_grace`; the resident is closed and swept).
pub async fn serve(config: ServeConfig, deps: ServerDeps) -> Result<(), ServerError> {
    config.check()?;
    let addr = config.addr();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local = listener.local_addr()?;
    let state = AppState::new(config, deps);
    tracing::info!(addr = %local, "favlo serve listening");
    let app = router(state.clone());
    tokio::spawn(sweep_media(state.clone()));
    let grace = state.config.shutdown_grace;
    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let token = state.shutdown.clone();
    let served = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown_signal().await;
        tracing::info!(grace_s = grace.as_secs(), "shutting down");
        // MCP sessions keep event streams open; end them so connections drain.
        token.cancel();
        let _ = signalled_tx.send(());
    });
    // Open requests get `grace` after the signal; then the server stops anyway.
    let result = tokio::select! {
        r = served => r,
        _ = async {
            let _ = signalled_rx.await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(grace_s = grace.as_secs(), "requests still open after the grace period; stopping");
            Ok(())
        }
    };
    state.scheduler.shutdown();
    result.map_err(ServerError::from)
}

/// Delete media files whose age has reached the lifetime in `settings.json`
/// and forget their jobs (and terminal jobs older than it); returns the files'
/// ids. Blocking (disk).
pub fn sweep_expired(state: &AppState, now: SystemTime) -> Vec<String> {
    let store = state.scheduler.store();
    let ttl = store.ttl();
    let gone: Vec<String> = store
        .sweep(ttl, now)
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    for id in &gone {
        state.scheduler.jobs().forget(id);
    }
    let now_s = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    state
        .scheduler
        .jobs()
        .forget_older(now_s.saturating_sub(ttl.as_secs()));
    gone
}

/// Every minute: delete media files past their lifetime and forget their jobs.
async fn sweep_media(state: Arc<AppState>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        let s = state.clone();
        let swept = tokio::task::spawn_blocking(move || sweep_expired(&s, SystemTime::now())).await;
        if let Err(e) = swept {
            tracing::error!(error = %e, "the media sweep failed");
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
