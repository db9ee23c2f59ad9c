//! The one definition of the tracehouse traces table in ClickHouse, shared by the
//! collector and the operator, in two floors that point one way:
//!
//! **The pure side** (always built; what `tracehouse-contract` depends on): the table, its
//! SQL and the rules, with no ClickHouse client, no TLS and no runtime.
//! - [`model`]: the table itself — [`TableOptions`], [`columns`], [`insert_columns`],
//!   [`indexes`] — compatible with the OpenTelemetry Collector ClickHouse exporter's
//!   `otel_traces` (Map and JSON variants) and its trace-id lookup table and view; the
//!   choices users make about it ([`Attributes`], [`EngineKind`], and the insert format
//!   [`InsertFormat`] in [`ddl`]) are defined here once for the collector, the operator's
//!   CRD and every command line (features `clap` and `schemars` add their derives).
//! - [`settings`]: those choices as users write them, and the one checked conversion
//!   into [`TableOptions`].
//! - [`ddl`] and [`migrations`]: pure SQL rendering of that model, as an ordered,
//!   append-only list of additive migrations with checksums; [`version`] numbers them
//!   (the model's `since` and the migrations both name versions from there, so neither
//!   imports the other).
//! - [`mod@status`]: where each migration stands from its ledger row ([`ledger`]: the rows'
//!   shape and SQL), the opt-in layouts' recording rules; [`adopt`]: whether an existing
//!   object is ours to adopt; [`lock_decide`]: the schema lock's decisions.
//! - [`dedup_window`] and [`retention`]: how large the insert-deduplication window must be
//!   for a pipeline (the arithmetic is in its header) and what TTL the tables keep, and the
//!   statements that change them.
//! - [`layouts`]: the opt-in layouts of the Map table (item ALIAS columns with text indexes,
//!   bucketed Map serialization), which options take them, and the server-version gate.
//! - [`create_query`]: an existing table's `create_table_query` as the TTL and window
//!   parsers read it (comments taken out).
//!
//! **The server side** (feature `server`, on by default): the connection and the runners.
//! - `client`: the HTTP connection to ClickHouse (`Server`, `ConnectionConfig`: URL,
//!   credentials from the environment, statements sent verbatim), with TLS failures named;
//!   `tls`: TLS to ClickHouse (CA bundle, client certificate) for every client path, the
//!   collector's inserts and the load generator's verifier included; `tls_probe`.
//! - `catalog`: what the server has (system tables); `ledger_io`: the ledger's rows read
//!   and written; `dedup_window::read`, `retention::read`: where the window and the TTL
//!   stand, beside their rules.
//! - `migrate`: `status`, `plan` and `apply`, the async API that brings a server up to date
//!   under the schema lock (`lock`); `table_check`: the collector's start-up check.
//!
//! User-supplied names only ever reach SQL as [`Ident`]s (see [`ident`]).

// The pure side: the table, its SQL and the rules. No ClickHouse client; the contract
// crate depends on this much only (`default-features = false`).
pub mod adopt;
pub mod create_query;
pub mod ddl;
pub mod dedup_window;
pub mod error;
pub mod ident;
pub mod layouts;
pub mod ledger;
pub mod lock_decide;
pub mod migrations;
pub mod model;
pub mod options;
pub mod retention;
pub mod settings;
pub mod status;
pub mod types;
pub mod version;

// The server side (feature `server`, on by default): the HTTP client and its TLS, and the
// async runners that read the server and bring it up to date.
#[cfg(feature = "server")]
pub mod catalog;
#[cfg(feature = "server")]
pub mod client;
#[cfg(feature = "server")]
pub mod ledger_io;
#[cfg(feature = "server")]
pub mod lock;
#[cfg(feature = "server")]
pub mod migrate;
#[cfg(feature = "server")]
pub mod table_check;
#[cfg(feature = "server")]
pub mod tls;
#[cfg(feature = "server")]
pub mod tls_probe;

#[cfg(feature = "server")]
pub use client::{ConnectionConfig, Server};
pub use ddl::{InsertFormat, insert_into, insert_sql};
pub use dedup_window::WindowStatus;
pub use error::Error;
pub use ident::Ident;
pub use layouts::Layout;
pub use ledger::{AppliedRecord, Mode};
#[cfg(feature = "server")]
pub use lock::LockConfig;
#[cfg(feature = "server")]
pub use migrate::{ApplyOptions, ApplyReport, apply, plan, status};
pub use model::{
    Attributes, Column, Engine, EngineKind, Layouts, MapSerialization, Replication, SpanColumn,
    TableOptions, Ttl, columns, indexes, insert_columns,
};
pub use settings::{Setting, SettingError, TableSettings};
pub use status::{Action, State, Status};
#[cfg(feature = "server")]
pub use table_check::{TableCheck, TableProblem, check_table};
#[cfg(feature = "server")]
pub use tls::{ClientIdentity, TlsConfig, TlsError, TlsFailure};
pub use types::ClickHouseType;
pub use version::LATEST_VERSION;
