//! The one definition of the tracehouse traces table in ClickHouse, shared by the
//! collector and the operator.
//!
//! - [`model`]: the table itself — [`TableOptions`], [`columns`], [`insert_columns`],
//!   [`indexes`] — compatible with the OpenTelemetry Collector ClickHouse exporter's
//!   `otel_traces` (Map and JSON variants) and its trace-id lookup table and view; the
//!   choices users make about it ([`Attributes`], [`EngineKind`], and the insert format
//!   [`InsertFormat`] in [`ddl`]) are defined here once for the collector, the operator's
//!   CRD and every command line (features `clap` and `schemars` add their derives).
//! - [`settings`]: those choices as users write them, and the one checked conversion
//!   into [`TableOptions`].
//! - [`ddl`] and [`migrations`]: pure SQL rendering of that model, as an ordered,
//!   append-only list of additive migrations with checksums.
//! - [`status`], [`plan`], [`apply`]: the async API that brings a server up to date
//!   under a lock ([`lock`]), recording each step in a ledger ([`ledger`]) and adopting
//!   tables the exporter or ClickStack created ([`adopt`]).
//!
//! - [`dedup_window`]: how large the insert-deduplication window must be for a pipeline
//!   (the arithmetic is in its header), and the statements that change it; `apply` keeps
//!   the tables at [`TableOptions::dedup_window`].
//! - [`table_check`]: the collector's start-up check of the table's shape and window.
//!
//! - [`tls`]: TLS to ClickHouse (CA bundle, client certificate), for every client path.
//!
//! User-supplied names only ever reach SQL as [`Ident`]s (see [`ident`]).

pub mod adopt;
pub mod client;
pub mod ddl;
pub mod dedup_window;
pub mod error;
pub mod ident;
pub mod ledger;
pub mod lock;
pub mod lock_decide;
pub mod migrate;
pub mod migrations;
pub mod model;
pub mod options;
pub mod retention;
pub mod settings;
pub mod table_check;
pub mod tls;
pub mod tls_probe;
pub mod types;

pub use client::{ConnectionConfig, Server};
pub use ddl::{InsertFormat, insert_into, insert_sql};
pub use error::Error;
pub use ident::Ident;
pub use ledger::{AppliedRecord, Mode};
pub use lock::LockConfig;
pub use migrate::{
    Action, ApplyOptions, ApplyReport, State, Status, WindowStatus, apply, plan, status,
};
pub use migrations::LATEST_VERSION;
pub use model::{
    Attributes, Column, Engine, EngineKind, Replication, SpanColumn, TableOptions, Ttl, columns,
    indexes, insert_columns,
};
pub use settings::{Setting, SettingError, TableSettings};
pub use table_check::{TableCheck, TableProblem, check_table};
pub use tls::{ClientIdentity, TlsConfig, TlsError, TlsFailure};
pub use types::ClickHouseType;
