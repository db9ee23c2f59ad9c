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
    let listener = bind(addr).await.map_err(|e| {
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

/// Binds `addr`. The unspecified IPv6 address (`[::]`, the default) listens on every IPv4
/// and IPv6 address (Linux's dual-stack default), so `kubectl port-forward` (which connects
/// to the pod's loopback) and an IPv6-only pod both reach it; on a node without IPv6 it falls
/// back to `0.0.0.0`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(addr).await {
        Err(e) if addr.ip() == std::net::Ipv6Addr::UNSPECIFIED => {
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            tracing::info!(error = %e, %v4, "no IPv6 here: listening on IPv4 only");
            tokio::net::TcpListener::bind(v4).await
        }
        other => other,
    }
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

#[cfg(test)]
mod bind_tests {
    use super::*;

    #[tokio::test]
    async fn the_default_address_answers_on_ipv4_and_ipv6_loopback() {
        let listener = bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                listener.accept().await.unwrap();
            }
        });
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("IPv4 loopback (kubectl port-forward) reaches [::]");
        tokio::net::TcpStream::connect(("::1", port))
            .await
            .expect("IPv6 loopback reaches [::]");
        accept.await.unwrap();
    }
}
