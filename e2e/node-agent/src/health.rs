//! The agent's own health endpoints: `/healthz` (the process serves) and `/readyz` (the Node
//! is registered and its last heartbeat went through). `e2e/lib/k8s.sh` waits on `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::node::NodeHealth;

pub async fn serve(
    addr: SocketAddr,
    health: Arc<NodeHealth>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || async move {
                if health.is_ready() {
                    (StatusCode::OK, "ok")
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "node not registered or heartbeat failing",
                    )
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}
