//! The operator's own metrics (prometheus-client) and its HTTP endpoints: `/metrics`,
//! `/healthz` (the process serves) and `/readyz` (the controller loop runs or waits for the
//! Lease). Labels stay low-cardinality: error kinds and object kinds, never object names.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::pipeline_metrics::PipelineMetrics;

/// Metric names without the `tracehouse_operator_` prefix (counters get `_total`).
pub const RECONCILIATIONS: &str = "reconciliations";
pub const RECONCILE_ERRORS: &str = "reconcile_errors";
pub const RECONCILE_DURATION: &str = "reconcile_duration_seconds";
pub const WRITES: &str = "writes";
pub const LEADER: &str = "leader";
pub const AUTOSCALE_DECISIONS: &str = "autoscale_decisions";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `up`, `down` or `hold`.
    pub direction: &'static str,
    /// The decision's reason in snake_case (`lag_above_target`, `cooldown`, …).
    pub reason: &'static str,
}

/// Every metric the operator exports.
pub struct Metrics {
    pub reconciliations: Counter,
    pub errors: Family<KindLabels, Counter>,
    pub duration: Histogram,
    /// Writes to the API (applies, status patches, Events) by kind: stays flat while
    /// nothing changes.
    pub writes: Family<KindLabels, Counter>,
    pub leader: Gauge,
    /// Autoscaler decisions by direction and reason.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Per-pipeline conditions, schema version, partitions and limits (pipeline_metrics.rs).
    pub pipelines: PipelineMetrics,
    /// The controller loop is running (as leader) or waiting for the Lease.
    pub alive: AtomicBool,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            reconciliations: Counter::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            writes: Family::default(),
            leader: Gauge::default(),
            decisions: Family::default(),
            pipelines: PipelineMetrics::default(),
            alive: AtomicBool::new(true),
        };
        for kind in Error::METRIC_LABELS {
            m.errors.get_or_create(&KindLabels { kind }).inc_by(0);
        }
        let r = registry.sub_registry_with_prefix("tracehouse_operator");
        m.pipelines.register(r);
        r.register(
            RECONCILIATIONS,
            "Reconciliations started",
            m.reconciliations.clone(),
        );
        r.register(
            RECONCILE_ERRORS,
            "Failed reconciliations by error kind",
            m.errors.clone(),
        );
        r.register(
            RECONCILE_DURATION,
            "Duration of reconciliations",
            m.duration.clone(),
        );
        r.register(
            WRITES,
            "Writes to the Kubernetes API by object kind",
            m.writes.clone(),
        );
        r.register(
            LEADER,
            "1 while this replica holds the Lease",
            m.leader.clone(),
        );
        r.register(
            AUTOSCALE_DECISIONS,
            "Autoscaler decisions by direction (up, down, hold) and reason",
            m.decisions.clone(),
        );
        m
    }

    pub fn decided(&self, direction: &'static str, reason: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabels { direction, reason })
            .inc();
    }

    /// Counts a reconcile and times it until the guard drops.
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        self.reconciliations.inc();
        ReconcileTimer {
            metrics: self,
            started: Instant::now(),
        }
    }

    pub fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&KindLabels { kind }).inc();
    }

    pub fn wrote(&self, kind: &'static str) {
        self.writes.get_or_create(&KindLabels { kind }).inc();
    }
}

/// Observes the reconcile duration when dropped.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    started: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .duration
            .observe(self.started.elapsed().as_secs_f64());
    }
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(healthz))
        .with_state(AppState {
            registry: Arc::new(registry),
            metrics,
        });
    let listener = crate::listen::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} (--metrics-addr): {e}"),
        )
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, "serving /metrics and /healthz");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

async fn metrics_handler(State(s): State<AppState>) -> axum::response::Response {
    tracehouse_contract::telemetry::openmetrics(&s.registry)
}

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    if s.metrics.alive.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "controller loop stopped\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_are_prefixed_and_counters_end_in_total() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.error("kafka");
        m.wrote("Deployment");
        drop(m.reconcile_started());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for line in [
            "tracehouse_operator_reconciliations_total 1",
            "tracehouse_operator_reconcile_errors_total{kind=\"kafka\"} 1",
            "tracehouse_operator_writes_total{kind=\"Deployment\"} 1",
            "tracehouse_operator_reconcile_duration_seconds_count 1",
            "tracehouse_operator_leader 0",
        ] {
            assert!(out.contains(line), "{line} missing from:\n{out}");
        }
    }

    #[test]
    fn every_error_kind_is_exported_at_zero_from_the_start() {
        let mut registry = Registry::default();
        let _m = Metrics::new(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for kind in Error::METRIC_LABELS {
            let line = format!("tracehouse_operator_reconcile_errors_total{{kind=\"{kind}\"}} 0");
            assert!(out.contains(&line), "{line} missing from:\n{out}");
        }
    }
}
