//! The migration ledger: one row per migration applied to a traces table, kept in
//! `<database>.tracehouse_schema_migrations`.
//!
//! Several traces tables may share a database, so rows are keyed by `target` (the
//! table name) and `version`. Rows are only ever inserted, under the schema lock. If
//! a version somehow has several rows (which the lock exists to prevent), the
//! earliest counts and `records` says how many there are, so it shows up in `status`.
//!
//! Version [`SETTINGS_VERSION`] (0) is not a migration: its rows record changes of table
//! settings that are desired state rather than history (the deduplication window, see
//! [`crate::dedup_window`]), one row per change, and are left out of what
//! [`read_ledger_sql`] reads. This file is the ledger's shape and SQL; reading and writing
//! rows is [`crate::ledger_io`]'s.

use serde::Deserialize;

use crate::ddl::{merge_tree_engine, on_cluster};
use crate::ident::{Ident, quote_str};
use crate::migrations::Rendered;
use crate::model::TableOptions;

/// Name of the ledger table, in the traces table's database.
pub const LEDGER_TABLE: &str = "tracehouse_schema_migrations";
/// The ledger version of setting changes (no migration has it).
pub const SETTINGS_VERSION: u32 = 0;

/// How a migration came to be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Its statements ran.
    Applied,
    /// Its object already existed with the right shape (made by the OTel exporter,
    /// ClickStack, or an applier that died before recording); nothing ran.
    Adopted,
    /// It has nothing to do for these options (e.g. indexes on a `Null` table).
    NoOp,
    /// An opt-in layout these options did not ask for ([`crate::layouts`]); asking for it
    /// later runs it and records it again, `applied`.
    Skipped,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Adopted => "adopted",
            Self::NoOp => "noop",
            Self::Skipped => "skipped",
        }
    }
}

/// What the ledger says about one version.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "server", derive(clickhouse::Row))]
pub struct AppliedRecord {
    pub version: u32,
    pub name: String,
    pub checksum: String,
    pub mode: String,
    pub applied_at: String,
    pub applied_by: String,
    /// Rows recorded for this version; 1 unless something went wrong.
    pub records: u64,
    /// The statements that ran (or would have), `;\n`-separated.
    pub statements: String,
}

pub(crate) fn ledger_ident() -> Ident {
    Ident::new("table", LEDGER_TABLE).expect("constant name is valid")
}

/// `CREATE TABLE IF NOT EXISTS` for the ledger (always a stored engine, also when
/// the traces table is `Null`).
pub fn create_ledger_table(opts: &TableOptions) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {}.{}{}\n(\n    `target` String,\n    `version` UInt32,\n    `name` String,\n    `checksum` String,\n    `mode` String,\n    `statements` String,\n    `applied_at` DateTime64(3) DEFAULT now64(3),\n    `applied_by` String,\n    `tool_version` String,\n    `lock_token` String,\n    `duration_ms` UInt64\n)\nENGINE = {}\nORDER BY (target, version)",
        opts.database,
        ledger_ident(),
        on_cluster(opts),
        merge_tree_engine(opts),
    )
}

/// The `SELECT` that reads the ledger for `opts.table`, one row per version.
pub fn read_ledger_sql(opts: &TableOptions) -> String {
    // The inner query renames `applied_at`, so the outer alias of the same name does
    // not shadow the column inside the aggregates (`md` likewise for `mode`). The earliest row counts, except that a
    // `skipped` opt-in migration applied later counts as applied (`k` orders the other
    // modes first; `records` counts the rows of the kind that counts).
    format!(
        "SELECT version, argMin(name, k) AS name, argMin(checksum, k) AS checksum, \
         argMin(md, k) AS mode, toString(argMin(ts, k)) AS applied_at, \
         argMin(applied_by, k) AS applied_by, \
         if(countIf(md != 'skipped') = 0, count(), countIf(md != 'skipped')) AS records, \
         argMin(statements, k) AS statements \
         FROM (SELECT version, name, checksum, mode AS md, applied_by, statements, \
         applied_at AS ts, (mode = 'skipped', applied_at) AS k \
         FROM {}.{} WHERE target = {} AND version != {SETTINGS_VERSION}) \
         GROUP BY version ORDER BY version",
        opts.database,
        ledger_ident(),
        quote_str(opts.table.as_str()),
    )
}

/// Who and what a ledger row records besides the migration itself.
#[derive(Debug, Clone)]
pub struct RecordContext<'a> {
    pub applied_by: &'a str,
    pub lock_token: &'a str,
    pub duration_ms: u64,
}

/// The `INSERT` that records `migration` for `opts.table`. Every value is a quoted
/// literal; `statements` keeps the exact text that ran (or would have) for audits.
pub fn record_sql(
    opts: &TableOptions,
    migration: &Rendered,
    mode: Mode,
    ctx: &RecordContext<'_>,
) -> String {
    format!(
        "INSERT INTO {}.{} (target, version, name, checksum, mode, statements, applied_by, tool_version, lock_token, duration_ms) \
         SETTINGS async_insert = 0 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
        opts.database,
        ledger_ident(),
        quote_str(opts.table.as_str()),
        migration.version,
        quote_str(migration.name),
        quote_str(&migration.checksum),
        quote_str(mode.as_str()),
        quote_str(&migration.statements.join(";\n")),
        quote_str(ctx.applied_by),
        quote_str(env!("CARGO_PKG_VERSION")),
        quote_str(ctx.lock_token),
        ctx.duration_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::render_all;

    #[test]
    fn record_quotes_every_value() {
        let mut opts = TableOptions::new(
            Ident::new("database", "otel").unwrap(),
            Ident::new("table", "t'); DROP TABLE x; --").unwrap(),
        );
        opts.attributes = crate::model::Attributes::Map;
        let m = &render_all(&opts).unwrap()[0];
        let sql = record_sql(
            &opts,
            m,
            Mode::Applied,
            &RecordContext {
                applied_by: "host'1",
                lock_token: "tok",
                duration_ms: 7,
            },
        );
        assert!(sql.contains(r"VALUES ('t\'); DROP TABLE x; --', 1, 'create_traces_table', "));
        assert!(sql.contains(r"'host\'1'"));
        // The stored DDL is one literal: its newlines are escapes, not raw.
        let values = &sql[sql.find("VALUES").unwrap()..];
        assert!(!values.contains('\n'));
        assert!(values.ends_with(", 7)"));
    }

    #[test]
    fn ledger_reads_are_scoped_to_the_target_table() {
        let opts = TableOptions::new(
            Ident::new("database", "d").unwrap(),
            Ident::new("table", "x'y").unwrap(),
        );
        let sql = read_ledger_sql(&opts);
        assert!(sql.contains(r"FROM `d`.`tracehouse_schema_migrations` WHERE target = 'x\'y'"));
    }
}
