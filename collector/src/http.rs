//! The collector's HTTP endpoints: `/metrics` (Prometheus text), `/healthz` (the process
//! loop is alive), `/readyz` (running and ClickHouse reachable).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::metrics::Metrics;

/// Readiness inputs, set by the pipeline.
#[derive(Debug, Default)]
pub struct Health {
    pub started: AtomicBool,
    pub clickhouse_ok: AtomicBool,
    pub stopping: AtomicBool,
}

/// The source loop must have turned within this long for `/healthz` to pass.
const STALL_MS: u64 = 60_000;

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    heartbeat: Arc<AtomicU64>,
}

/// Bind and serve in the background; the returned handle aborts the server.
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    heartbeat: Arc<AtomicU64>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let state = AppState {
        registry: Arc::new(registry),
        metrics,
        health,
        heartbeat,
    };
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} (metrics_addr): {e}"),
        )
    })?;
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    }))
}

async fn metrics_handler(State(s): State<AppState>) -> axum::response::Response {
    s.metrics.refresh_process();
    openmetrics(&s.registry)
}

pub use tracehouse_contract::telemetry::openmetrics;

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    let last = s.heartbeat.load(Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if last == 0 || now.saturating_sub(last) < STALL_MS {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "kafka source loop stalled\n",
        )
    }
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let h = &s.health;
    if h.stopping.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping\n")
    } else if !h.started.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    } else if !h.clickhouse_ok.load(Ordering::Relaxed) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "ClickHouse not reachable\n",
        )
    } else {
        (StatusCode::OK, "ready\n")
    }
}
