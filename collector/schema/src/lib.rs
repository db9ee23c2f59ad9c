//! The one definition of the tracehouse traces table in ClickHouse, shared by the
//! collector and the operator — and, despite the name, the ClickHouse connection both use:
//! an HTTP client ([`client`]: [`Server`], [`ConnectionConfig`]) and its TLS ([`tls`],
//! [`tls_probe`]), which the collector's insert path and the load generator's verifier take
//! from here too. Two parts, then: the table (model, DDL, migrations, ledger, lock) and the
//! connection to a server (client, TLS); the table's async API is the only part that needs
//! both.
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
//!   append-only list of additive migrations with checksums; [`version`] numbers them
//!   (the model's `since` and the migrations both name versions from there, so neither
//!   imports the other).
//! - [`status`], [`plan`], [`apply`]: the async API that brings a server up to date
//!   under a lock ([`lock`]), recording each step in a ledger ([`ledger`]) and adopting
//!   tables the exporter or ClickStack created ([`adopt`]).
//!
//! - [`dedup_window`]: how large the insert-deduplication window must be for a pipeline
//!   (the arithmetic is in its header), and the statements that change it; `apply` keeps
//!   the tables at [`TableOptions::dedup_window`].
//! - [`layouts`]: the opt-in layouts of the Map table (item ALIAS columns with text indexes,
//!   bucketed Map serialization), their migrations, how an opt-in migration lives in the
//!   append-only list, and the server-version gate.
//! - [`table_check`]: the collector's start-up check of the table's shape and window.
//! - [`create_query`]: an existing table's `create_table_query` as the TTL and window
//!   parsers read it (comments taken out).
//!
//! - [`client`]: the HTTP connection to ClickHouse (URL, credentials from the environment,
//!   statements sent verbatim), with TLS failures named; [`tls`]: TLS to ClickHouse (CA
//!   bundle, client certificate), for every client path, the collector's inserts included;
//!   [`tls_probe`]: tells "this port does not speak TLS" from other handshake failures.
//!
//! User-supplied names only ever reach SQL as [`Ident`]s (see [`ident`]).

pub mod adopt;
pub mod client;
pub mod create_query;
pub mod ddl;
pub mod dedup_window;
pub mod error;
pub mod ident;
pub mod layouts;
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
pub mod version;

pub use client::{ConnectionConfig, Server};
pub use ddl::{InsertFormat, insert_into, insert_sql};
pub use error::Error;
pub use ident::Ident;
pub use layouts::Layout;
pub use ledger::{AppliedRecord, Mode};
pub use lock::LockConfig;
pub use migrate::{
    Action, ApplyOptions, ApplyReport, State, Status, WindowStatus, apply, plan, status,
};
pub use model::{
    Attributes, Column, Engine, EngineKind, Layouts, MapSerialization, Replication, SpanColumn,
    TableOptions, Ttl, columns, indexes, insert_columns,
};
pub use settings::{Setting, SettingError, TableSettings};
pub use table_check::{TableCheck, TableProblem, check_table};
pub use tls::{ClientIdentity, TlsConfig, TlsError, TlsFailure};
pub use types::ClickHouseType;
pub use version::LATEST_VERSION;
