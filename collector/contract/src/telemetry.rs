//! The conventions both binaries share for what operators read: the log format and the
//! `/metrics` response.

#[cfg(feature = "http")]
use axum::http::{StatusCode, header};
#[cfg(feature = "http")]
use axum::response::IntoResponse;
#[cfg(feature = "http")]
use prometheus_client::registry::Registry;

/// Logs to stderr, as text or (`format == "json"`) JSON lines; `RUST_LOG` filters, default
/// `info` with librdkafka at `warn`. The collector and the operator log the same way.
pub fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,librdkafka=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// `registry` in the OpenMetrics text format, as a `/metrics` response (feature `http`) (the operator
/// serves its own registry with this too).
#[cfg(feature = "http")]
pub fn openmetrics(registry: &Registry) -> axum::response::Response {
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            e.to_string(),
        )
            .into_response(),
    }
}
