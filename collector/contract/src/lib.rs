//! The operator ↔ collector contract: what a collector `ConfigMap` may say and how it is
//! read, shared by the collector, the operator (which writes it) and the load generator.
//!
//! - [`config`]: the collector's configuration, its defaults and its pure validation;
//! - [`yaml`]: the one door to the YAML library (the config file, the ConfigMap, the CRD);
//! - [`processing`]: the drop, redact and sample rules and how a value is tested;
//! - [`Encoding`]: how records on the topic are encoded;
//! - [`telemetry`]: the log format and the `/metrics` text both binaries serve;
//! - [`metric_names`]: the collector's metrics another program reads (the autoscaler, the
//!   skew check);
//! - [`revision`]: which configuration keys each config revision knows, so an operator
//!   renders only what an older collector reads;
//! - [`oauth`]: OAUTHBEARER with OIDC client credentials — the `kafka.oauth` settings, and
//!   with the feature `oauth` the token source every Kafka client of both binaries uses.
//!
//! Without the `oauth` feature nothing here knows Kafka, ClickHouse or Kubernetes clients: the
//! crate is small so that depending on it costs nothing, and no dependency points from it back
//! to a binary's crate.

pub mod config;
mod encoding;
pub mod metric_names;
pub mod oauth;
pub mod processing;
pub mod revision;
pub mod telemetry;
pub mod yaml;

pub use encoding::{Encoding, UnknownEncoding};
