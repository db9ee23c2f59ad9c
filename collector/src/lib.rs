//! tracehouse collector library: OTLP spans from Kafka into ClickHouse, at least once.
//!
//! Read top to bottom as the data flows:
//! kafka source ([`source`]: a pure partition state machine and its rdkafka shell) →
//! batches ([`batch`], holding [`budget`] permits) → decode/encode workers ([`workers`]:
//! [`decode`] → [`rows`] → [`encode`]) → inserts ([`insert`]: retries, bisection, the
//! rejection [`breaker`]; [`sink`], [`retry`]; skipped records to the [`dead_letter`]
//! topic) → acknowledgements and commits ([`offsets`]).
//! Dependencies point down this list only: [`rows`] reads [`decode`]'s views and writes
//! with [`wire`] (ClickHouse's binary primitives, a leaf); [`encode`] uses both.
//! [`pipeline`] wires the stages with bounded queues; [`config`] is what the user writes;
//! [`metrics`] and [`http`] are what operators and autoscalers read ([`freshness`] is the
//! one metric the encoder fills: a leaf); [`yaml`] is the one door to the YAML library.

pub mod batch;
pub mod breaker;
pub mod budget;
pub mod config;
pub mod dead_letter;
pub mod decode;
pub mod encode;
pub mod freshness;
pub mod http;
pub mod insert;
pub mod insert_encoder;
pub mod kafka_clients;
pub mod log_limit;
pub mod metrics;
pub mod offsets;
pub mod pipeline;
pub mod pool;
pub mod retry;
pub mod rows;
pub mod sink;
pub mod source;
pub mod wire;
pub mod workers;
pub mod yaml;

/// Logs to stderr, as text or (`format == "json"`) JSON lines; `RUST_LOG` filters, default
/// `info` with librdkafka at `warn`. The operator binary logs the same way.
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
