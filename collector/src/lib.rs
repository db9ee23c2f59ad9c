//! tracehouse collector library: OTLP spans from Kafka into ClickHouse, at least once.
//!
//! Read top to bottom as the data flows:
//! kafka source ([`source`]: a pure partition state machine and its rdkafka shell) →
//! batches ([`batch`], holding [`budget`] permits) → decode/encode workers ([`workers`]:
//! [`decode`] → [`rows`] → [`encode`]) → inserts ([`insert`], the ClickHouse side as
//! [`source`] is the Kafka side: retries, bisection, the rejection breaker, the HTTP sink,
//! skipped records to the dead-letter topic) → acknowledgements and commits ([`offsets`]).
//! Dependencies point down this list only: [`rows`] reads [`decode`]'s views and writes
//! with [`wire`] (ClickHouse's binary primitives, a leaf); [`process`] (the drop, redact and
//! sample rules) reads the same views; [`encode`] uses all three.
//! [`pipeline`] wires the stages with bounded queues; [`config`] is what the user writes
//! (with [`yaml`], from the `tracehouse-contract` crate the operator shares);
//! [`metrics`] and [`http`] are what operators and autoscalers read ([`freshness`] is the
//! one metric the encoder fills: a leaf).

pub mod batch;
pub mod budget;
pub mod bundle;
pub mod cpu_quota;
pub mod decode;
pub mod encode;
pub mod freshness;
pub mod http;
pub mod insert;
pub mod kafka_clients;
pub mod log_limit;
pub mod metrics;
pub mod offsets;
pub mod pipeline;
pub mod pool;
pub mod process;
pub mod rows;
pub mod source;
pub mod startup;
pub mod wire;
pub mod workers;

/// The collector's configuration and its YAML: the operator ↔ collector contract.
pub use tracehouse_contract::{config, telemetry::init_logging, yaml};
