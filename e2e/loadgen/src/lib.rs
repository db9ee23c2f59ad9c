//! tracehouse load generator: numbered, realistic OTLP traces into Kafka, and a check
//! that each of them reached ClickHouse exactly once.
//!
//! - [`generate`]: [`Generator`] makes deterministic `ExportTraceServiceRequest`s whose
//!   spans carry `loadgen.id` and `loadgen.seq` (0, 1, 2, …);
//! - [`hostile`]: [`Hostile`] reshapes them into hostile but valid records (spans over many
//!   days, fat resources) for the fault matrix;
//! - [`encode`](mod@encode): [`encode()`] writes them as `otlp_proto` or `otlp_json`,
//!   as the OpenTelemetry Collector's kafka exporter does;
//! - [`produce`](mod@produce): [`produce()`] sends N spans to a topic, at a rate or flat out;
//! - [`verify`](mod@verify): [`verify()`] counts found / missing / duplicated spans per
//!   generator in the `otel_traces` table, on the server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tracehouse_loadgen::*;
//! let generator = GeneratorConfig { generator_id: "run-1".into(), seed: 7, ..Default::default() };
//! let report = produce(&ProduceOptions {
//!     brokers: "127.0.0.1:19092".into(),
//!     spans: 100_000,
//!     compression: Compression::Lz4,
//!     generator,
//!     ..Default::default()
//! })
//! .await?;
//! // … run the collector until it has consumed the topic …
//! let check = verify(&VerifyOptions {
//!     url: "http://127.0.0.1:18123".into(),
//!     generators: vec![Expectation { generator_id: "run-1".into(), expected: report.spans }],
//!     ..Default::default()
//! })
//! .await?;
//! assert!(check.is_exact());
//! # Ok(()) }
//! ```

pub mod encode;
pub mod generate;
pub mod hostile;
pub mod produce;
mod rng;
pub mod verify;

pub use encode::{Encoding, encode, encode_into, to_otlp_json};
pub use generate::{ATTR_ID, ATTR_SEQ, Generator, GeneratorConfig, Shape};
pub use hostile::Hostile;
pub use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
pub use produce::{
    Compression, Partitioning, ProduceError, ProduceOptions, ProduceReport, Progress, produce,
    produce_with_progress,
};
pub use verify::{Expectation, GeneratorReport, VerifyError, VerifyOptions, VerifyReport, verify};
