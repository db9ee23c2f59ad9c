//! SQL rendering: pure functions from [`TableOptions`] (and the model) to statements.
//!
//! No IO here. Every user-supplied name enters through [`Ident`]'s quoted form and
//! every free-text value through [`quote_str`]; everything else is a constant of
//! this crate.

use std::fmt::Write as _;

use crate::error::Error;
use crate::ident::{Ident, quote_ident, quote_str};
use crate::model::{
    self, Attributes, Column, Engine, Index, TableOptions, columns, indexes, lookup_columns,
    order_by,
};

/// ` ON CLUSTER `c`` for replicated tables, empty otherwise.
pub fn on_cluster(opts: &TableOptions) -> String {
    match opts.cluster() {
        Some(c) => format!(" ON CLUSTER {c}"),
        None => String::new(),
    }
}

/// `` `db`.`name` ``.
pub fn qualified(opts: &TableOptions, name: &Ident) -> String {
    format!("{}.{}", opts.database, name)
}

/// `CREATE DATABASE IF NOT EXISTS`: bootstrap, safe to repeat and to race.
pub fn create_database(opts: &TableOptions) -> String {
    format!(
        "CREATE DATABASE IF NOT EXISTS {}{}",
        opts.database,
        on_cluster(opts)
    )
}

/// The `ENGINE = …` value for a stored table named by the server's `{table}` macro.
pub(crate) fn merge_tree_engine(opts: &TableOptions) -> String {
    match &opts.engine {
        Engine::Replicated(r) => format!(
            "ReplicatedMergeTree({}, {})",
            quote_str(&r.zk_path),
            quote_str(&r.replica)
        ),
        Engine::MergeTree | Engine::Null => "MergeTree".into(),
    }
}

fn render_column(out: &mut String, name: &str, ty: &str, codec: &model::Codec) {
    write!(out, "    {} {ty}", quote_ident(name)).unwrap();
    if !codec.is_default() {
        write!(out, " CODEC({codec})").unwrap();
    }
}

fn render_index(idx: &Index) -> String {
    format!(
        "INDEX {} {} TYPE {} GRANULARITY {}",
        quote_ident(idx.name),
        idx.expr,
        idx.kind,
        idx.granularity
    )
}

/// The column list of a `CREATE TABLE`, with `Nested` columns regrouped the way the
/// exporter declares them: `Events Nested (Timestamp DateTime64(9), …) CODEC(ZSTD(1))`.
fn render_columns(cols: &[Column]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cols.len() {
        let c = &cols[i];
        let mut line = String::new();
        match c.id.nested() {
            None => render_column(&mut line, c.name(), &c.ch_type.to_string(), &c.codec),
            Some((parent, _)) => {
                let group: Vec<&Column> = cols[i..]
                    .iter()
                    .take_while(|g| g.id.nested().map(|(p, _)| p) == Some(parent))
                    .collect();
                let fields: Vec<String> = group
                    .iter()
                    .map(|g| {
                        let (_, field) = g.id.nested().unwrap_or_default();
                        let elem = g.ch_type.array_element().unwrap_or(&g.ch_type);
                        format!("        {} {elem}", quote_ident(field))
                    })
                    .collect();
                write!(
                    line,
                    "    {} Nested (\n{}\n    )",
                    quote_ident(parent),
                    fields.join(",\n")
                )
                .unwrap();
                // One codec for the group: the model gives every field the same one.
                if !c.codec.is_default() {
                    write!(line, " CODEC({})", c.codec).unwrap();
                }
                i += group.len() - 1;
            }
        }
        out.push(line);
        i += 1;
    }
    out
}

/// The TTL clause on `time_column`, or empty.
fn ttl_clause(opts: &TableOptions, time_column: &str) -> String {
    match opts.ttl {
        Some(ttl) if opts.is_stored() => {
            format!("\nTTL toDateTime({time_column}) + {}", ttl.interval_sql())
        }
        _ => String::new(),
    }
}

/// `CREATE TABLE` for the traces table with every column and index of `version` or
/// earlier: the OTel exporter's table, plus what later migrations add when rendered
/// at a later version.
pub fn create_traces_table(opts: &TableOptions, version: u32) -> String {
    let cols: Vec<Column> = columns(opts)
        .into_iter()
        .filter(|c| c.since <= version)
        .collect();
    let mut items = render_columns(&cols);
    items.extend(
        indexes(opts)
            .iter()
            .filter(|i| i.since <= version)
            .map(|i| format!("    {}", render_index(i))),
    );
    let mut sql = format!(
        "CREATE TABLE {}{}\n(\n{}\n)",
        qualified(opts, &opts.table),
        on_cluster(opts),
        items.join(",\n")
    );
    if opts.is_stored() {
        write!(
            sql,
            "\nENGINE = {}\nPARTITION BY {}\nORDER BY {}{}\nSETTINGS index_granularity = 8192, ttl_only_drop_parts = 1",
            merge_tree_engine(opts),
            model::PARTITION_BY,
            order_by(opts.attributes),
            ttl_clause(opts, "Timestamp"),
        )
        .unwrap();
    } else {
        sql.push_str("\nENGINE = Null");
    }
    sql
}

/// `CREATE TABLE <table>_trace_id_ts`: first and last second of each trace id.
pub fn create_lookup_table(opts: &TableOptions) -> Result<String, Error> {
    let mut items: Vec<String> = lookup_columns()
        .iter()
        .map(|c| {
            let mut s = String::new();
            render_column(&mut s, c.name, &c.ch_type.to_string(), &c.codec);
            s
        })
        .collect();
    items.push("    INDEX `idx_trace_id` TraceId TYPE bloom_filter(0.01) GRANULARITY 1".into());
    Ok(format!(
        "CREATE TABLE {}{}\n(\n{}\n)\nENGINE = {}\nPARTITION BY toDate(Start)\nORDER BY (TraceId, Start){}\nSETTINGS index_granularity = 8192, ttl_only_drop_parts = 1",
        qualified(opts, &opts.lookup_table()?),
        on_cluster(opts),
        items.join(",\n"),
        merge_tree_engine(opts),
        ttl_clause(opts, "Start"),
    ))
}

/// `CREATE MATERIALIZED VIEW <table>_trace_id_ts_mv TO <table>_trace_id_ts`.
pub fn create_lookup_view(opts: &TableOptions) -> Result<String, Error> {
    Ok(format!(
        "CREATE MATERIALIZED VIEW {}{} TO {}\nAS SELECT\n    TraceId,\n    min(Timestamp) AS Start,\n    max(Timestamp) AS End\nFROM {}\nWHERE TraceId != ''\nGROUP BY TraceId",
        qualified(opts, &opts.lookup_view()?),
        on_cluster(opts),
        qualified(opts, &opts.lookup_table()?),
        qualified(opts, &opts.table),
    ))
}

/// `ALTER TABLE … ADD INDEX IF NOT EXISTS …` for the indexes `version` adds, or
/// `None` if it adds none to this variant. `IF NOT EXISTS` keeps the step harmless on
/// an adopted table that already has the index.
pub fn add_indexes(opts: &TableOptions, version: u32) -> Option<String> {
    let clauses: Vec<String> = indexes(opts)
        .iter()
        .filter(|i| i.since == version)
        .map(|i| {
            format!(
                "    ADD {}",
                render_index(i).replacen("INDEX", "INDEX IF NOT EXISTS", 1)
            )
        })
        .collect();
    (!clauses.is_empty()).then(|| {
        format!(
            "ALTER TABLE {}{}\n{}",
            qualified(opts, &opts.table),
            on_cluster(opts),
            clauses.join(",\n")
        )
    })
}

/// `ALTER TABLE … ADD COLUMN IF NOT EXISTS …` for the columns `version` adds (each
/// placed after its predecessor in the model), or `None`. Nested fields are added as
/// their flattened `Parent.field Array(…)` columns, which ClickHouse groups by name.
pub fn add_columns(opts: &TableOptions, version: u32) -> Option<String> {
    let all = columns(opts);
    let clauses: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, c)| c.since == version)
        .map(|(i, c)| {
            let mut s = format!(
                "    ADD COLUMN IF NOT EXISTS {} {}",
                quote_ident(c.name()),
                c.ch_type
            );
            if !c.codec.is_default() {
                write!(s, " CODEC({})", c.codec).unwrap();
            }
            match i.checked_sub(1) {
                Some(prev) => write!(s, " AFTER {}", quote_ident(all[prev].name())).unwrap(),
                None => s.push_str(" FIRST"),
            }
            s
        })
        .collect();
    (!clauses.is_empty()).then(|| {
        format!(
            "ALTER TABLE {}{}\n{}",
            qualified(opts, &opts.table),
            on_cluster(opts),
            clauses.join(",\n")
        )
    })
}

/// Sets `non_replicated_deduplication_window` on a plain MergeTree traces table and
/// its lookup table, so retried inserts carrying the same `insert_deduplication_token`
/// are dropped, including on tables adopted from the exporter, which lack it. Changes
/// metadata only. `None` for replicated tables (deduplicated by default) and `Null`.
pub fn enable_insert_deduplication(opts: &TableOptions) -> Result<Option<Vec<String>>, Error> {
    if opts.engine != Engine::MergeTree {
        return Ok(None);
    }
    let set = |t: &Ident| {
        format!(
            "ALTER TABLE {} MODIFY SETTING non_replicated_deduplication_window = {}",
            qualified(opts, t),
            opts.dedup_window
        )
    };
    Ok(Some(vec![set(&opts.table), set(&opts.lookup_table()?)]))
}

/// The ClickHouse input format of the collector's inserts: the one definition, spelled
/// `auto` / `native` / `row_binary` in the collector's configuration, the `TracePipeline`
/// resource and flags.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "clap", value(rename_all = "snake_case"))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum InsertFormat {
    /// The measured best for the table variant and the server (see the collector README).
    #[default]
    Auto,
    /// ClickHouse `Native`: column blocks (both attribute layouts; JSON in the flattened
    /// serialization, which servers read from 25.6 on).
    Native,
    /// ClickHouse `RowBinary`: row after row (both attribute layouts).
    RowBinary,
}

impl InsertFormat {
    /// The format sent to a table with `attributes` when the server is not known:
    /// [`Self::Auto`] becomes Native for Map attributes and RowBinary for JSON ones (the
    /// collector sends those Native too once it knows the server reads them: its
    /// `insert/format.rs`); an explicit choice stays. Never returns `Auto`.
    pub fn resolve(self, attributes: Attributes) -> Self {
        match (self, attributes) {
            (Self::Auto, Attributes::Map) => Self::Native,
            (Self::Auto, Attributes::Json) => Self::RowBinary,
            (chosen, _) => chosen,
        }
    }

    /// ClickHouse's name of the format sent to a table with `attributes` (`Native`,
    /// `RowBinary`).
    pub fn clickhouse_name(self, attributes: Attributes) -> &'static str {
        match self.resolve(attributes) {
            Self::Native => "Native",
            // `resolve` never returns `Auto`.
            Self::RowBinary | Self::Auto => "RowBinary",
        }
    }
}

/// `INSERT INTO db.table (cols…)` with [`model::insert_columns`] in order: the statement
/// without its `FORMAT` clause, for inserts in a format of the caller's choosing.
pub fn insert_into(opts: &TableOptions) -> String {
    let cols: Vec<String> = model::insert_columns(opts)
        .iter()
        .map(|c| quote_ident(c.name()))
        .collect();
    format!(
        "INSERT INTO {} ({})",
        qualified(opts, &opts.table),
        cols.join(", ")
    )
}

/// `INSERT INTO db.table (cols…) FORMAT <format>` ([`insert_into`] with `format`
/// resolved for the table): the statement the collector's sink sends with the encoded
/// rows.
pub fn insert_sql(opts: &TableOptions, format: InsertFormat) -> String {
    format!(
        "{} FORMAT {}",
        insert_into(opts),
        format.clickhouse_name(opts.attributes)
    )
}

#[cfg(test)]
#[path = "ddl_tests.rs"]
mod tests;
