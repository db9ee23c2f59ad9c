//! Opt-in layouts of the Map table: what e2e/querybench measured worth offering
//! (docs/querybench.md, "Which layout for which workload"), each added by a migration of its
//! own that only the options asking for it run.
//!
//! | version | layout ([`crate::model::Layouts`]) | statements | server |
//! |---|---|---|---|
//! | 6 `add_attribute_items` | `attribute_items` | `ADD COLUMN IF NOT EXISTS` two `Array(String)` ALIAS columns, `ADD INDEX IF NOT EXISTS` a `text(tokenizer = 'array')` index on each, `MATERIALIZE INDEX` of both | 26.2+ (text index GA; 25.12–26.1 need `enable_full_text_index`) |
//! | 7 `bucketed_map_serialization` | `map_serialization: Buckets` | `MODIFY SETTING map_serialization_version = 'with_buckets', …` on the traces table | 26.3+ (the setting is new there) |
//!
//! **An opt-in migration in an append-only, numbered list.** Its number is taken like any
//! other's, so the list stays contiguous and the ledger keeps one row per version:
//! - options that do not ask for the layout record it as `skipped` (mode [`crate::ledger::Mode::Skipped`], no
//!   statements), so the table reads as up to date at [`crate::LATEST_VERSION`];
//! - options that ask for it later find it recorded `skipped` and see it pending again: it
//!   runs (its statements are idempotent) and is recorded a second time, `applied`; the ledger
//!   reads the `applied` row before the `skipped` one ([`crate::ledger::read_ledger_sql`]);
//! - options that stop asking for it find it applied and keep it: nothing is ever dropped
//!   (an ALIAS column stores nothing, a text index is dropped by hand if unwanted); the status
//!   lists it in [`crate::status::kept`], which the operator shows;
//! - it depends only on migration 1 (the table and its Map columns), so it may run after
//!   versions numbered above it.
//!
//! Migration 1's text never depends on the layouts (so opting in never reads as an edited
//! migration); a new table asked with layouts is created by migration 1 and given them by
//! 6 and 7 in the same `apply`, before any row arrives.
//!
//! **Gated on the server's version**: `apply` reads `version()` once when the options ask for
//! a layout, and refuses with [`Error::InvalidOptions`] (the option, the version it needs, the
//! server's) before any statement runs ([`gate`], pure). What is left out, and why:
//! `map_trace_proj` (a projection ordered by TraceId) made attribute searches lose their
//! skip indexes (about 3 s instead of 75 ms at 1 M spans); the benchmark's
//! `idx_trace_id_text` (a text index on TraceId) is not part of `attribute_items`: the
//! table's TraceId bloom filter serves trace lookups, and that layout's trace by id was not
//! faster at 1 M spans (p50 473 ms against 200 ms).

use std::fmt;

use crate::error::Error;
use crate::model::{Attributes, MapSerialization, TableOptions};
use crate::version::{V_ATTRIBUTE_ITEMS, V_MAP_BUCKETS};

/// One opt-in layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// [`crate::model::Layouts::attribute_items`].
    AttributeItems,
    /// [`crate::model::Layouts::map_serialization`] = [`MapSerialization::Buckets`].
    MapBuckets,
}

/// A ClickHouse release, `major.minor` (what `version()` starts with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion(pub u32, pub u32);

impl ServerVersion {
    /// `26.9.2.1` → 26.9; `None` when it does not start with `major.minor`.
    pub fn parse(version: &str) -> Option<Self> {
        let mut parts = version.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor: String = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Some(Self(major, minor.parse().ok()?))
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

impl Layout {
    pub const ALL: [Layout; 2] = [Layout::AttributeItems, Layout::MapBuckets];

    /// The option as the schema crate and the CLI name it.
    pub fn option(self) -> &'static str {
        match self {
            Self::AttributeItems => "attribute_items",
            Self::MapBuckets => "map_serialization=Buckets",
        }
    }

    /// The field of a `TracePipeline`'s `spec.clickhouse.schema.layouts` that asks for it,
    /// with its value: how status lines name it.
    pub fn field(self) -> &'static str {
        match self {
            Self::AttributeItems => "attributeItems",
            Self::MapBuckets => "mapSerialization=Buckets",
        }
    }

    /// The oldest server that takes it without an experimental or beta setting.
    pub fn min_server(self) -> ServerVersion {
        match self {
            Self::AttributeItems => ServerVersion(26, 2),
            Self::MapBuckets => ServerVersion(26, 3),
        }
    }

    fn why(self) -> &'static str {
        match self {
            Self::AttributeItems => {
                "text indexes are generally available from 26.2; 25.12-26.1 need the beta setting enable_full_text_index"
            }
            Self::MapBuckets => "the MergeTree setting map_serialization_version exists from 26.3",
        }
    }

    /// The migration that adds it.
    pub fn version(self) -> u32 {
        match self {
            Self::AttributeItems => V_ATTRIBUTE_ITEMS,
            Self::MapBuckets => V_MAP_BUCKETS,
        }
    }

    /// Whether `opts` ask for it.
    pub fn wanted(self, opts: &TableOptions) -> bool {
        match self {
            Self::AttributeItems => opts.layouts.attribute_items,
            Self::MapBuckets => opts.layouts.map_serialization == MapSerialization::Buckets,
        }
    }
}

/// The settings of [`Layout::MapBuckets`], as e2e/querybench measured them: with the
/// server's defaults (`sqrt`, at least 32 keys per bucket) a span's ~16 attributes stay in
/// one bucket and nothing changes; `linear` with no minimum gives about one bucket per key.
/// Parts written by inserts keep the basic serialization
/// (`map_serialization_version_for_zero_level_parts`), so inserts pay nothing, merges do.
pub const MAP_BUCKETS_SETTINGS: &str = "map_serialization_version = 'with_buckets', map_buckets_strategy = 'linear', map_buckets_min_avg_size = 0";

/// `(name, ALIAS expression)` of the item columns, exactly as PR #50878 declares them
/// (collector/schema/tests/fixtures/pr50878_map.sql), so its tables and ours answer the same
/// `has(SpanAttributeItems, 'k=v')`.
pub fn alias_columns() -> [(&'static str, &'static str); 2] {
    [
        (
            "ResourceAttributeItems",
            "arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(ResourceAttributes, 'Array(Tuple(String, String))'))",
        ),
        (
            "SpanAttributeItems",
            "arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(SpanAttributes, 'Array(Tuple(String, String))'))",
        ),
    ]
}

/// The layouts `opts` ask for.
pub fn wanted(opts: &TableOptions) -> Vec<Layout> {
    Layout::ALL.into_iter().filter(|l| l.wanted(opts)).collect()
}

/// Refuses layouts the table cannot take: both are about Map columns of a stored table.
pub fn check_options(opts: &TableOptions) -> Result<(), Error> {
    for layout in wanted(opts) {
        if opts.attributes != Attributes::Map {
            return Err(Error::InvalidOptions(format!(
                "the layout {} is for Map attributes; this table has {} attributes",
                layout.option(),
                opts.attributes
            )));
        }
        if !opts.is_stored() {
            return Err(Error::InvalidOptions(format!(
                "the layout {} needs a stored table; the Null engine stores nothing",
                layout.option()
            )));
        }
    }
    Ok(())
}

/// The version gate, pure: the first layout `opts` ask for that `server_version` (the
/// server's `version()`) is too old for, as the error `apply` returns.
pub fn gate(opts: &TableOptions, server_version: &str) -> Result<(), Error> {
    let have = ServerVersion::parse(server_version);
    for layout in wanted(opts) {
        if have.is_none_or(|v| v < layout.min_server()) {
            // `InvalidOptions` (the CLI's exit code 2): these options, on this server.
            return Err(Error::InvalidOptions(format!(
                "the layout option {} needs ClickHouse {} or newer ({}); {}.{} is on a \
                 server of version {}: nothing was changed",
                layout.option(),
                layout.min_server(),
                layout.why(),
                opts.database,
                opts.table,
                server_version.trim()
            )));
        }
    }
    Ok(())
}

/// Whether an opt-in migration is wanted by the options it was rendered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptIn {
    pub layout: Layout,
    pub wanted: bool,
}

/// Layouts as status lines show them: `attributeItems,mapSerialization=Buckets`; `none`.
pub fn label(layouts: &[Layout]) -> String {
    if layouts.is_empty() {
        return "none".into();
    }
    layouts
        .iter()
        .map(|l| l.field())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
#[path = "layouts_tests.rs"]
pub(crate) mod tests;
