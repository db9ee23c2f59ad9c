//! What a user chooses about the traces table: where it lives, the attributes layout, the
//! engine (with replication), the TTL, the deduplication window. The columns and indexes
//! that follow from these choices are in [`crate::model`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;
use crate::ident::Ident;

/// Default database, as the OTel Collector ClickHouse exporter names it.
pub const DEFAULT_DATABASE: &str = "otel";
/// Default traces table, as the OTel Collector ClickHouse exporter names it.
pub const DEFAULT_TABLE: &str = "otel_traces";
/// Default `non_replicated_deduplication_window`: how many recent insert blocks a
/// plain MergeTree remembers so a retried insert with the same
/// `insert_deduplication_token` is dropped. Enough for about two partitions at a 1 s
/// linger: a floor, which the operator raises to what the pipeline needs
/// ([`crate::dedup_window`]); the CLI's `--dedup-window` sets it directly.
pub const DEFAULT_DEDUP_WINDOW: u64 = 1000;

/// How span and resource attributes are stored: the one definition of the attributes
/// layout, spelled `map` / `json` in the collector's configuration, the `TracePipeline`
/// resource, and the collector's and load generator's flags.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Attributes {
    /// `Map(LowCardinality(String), String)`: values flattened to strings (OTel default).
    #[default]
    Map,
    /// `JSON` (the exporter's `json: true` variant).
    Json,
}

impl Attributes {
    /// The configuration spelling: `map` / `json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Map => "map",
            Self::Json => "json",
        }
    }
}

impl fmt::Display for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a Map attribute column is stored in merged parts: the one definition, spelled
/// `Default` / `Buckets` in the `TracePipeline` resource (`layouts.mapSerialization`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum MapSerialization {
    /// The server's default (`basic`): a part stores each Map column as one stream, so
    /// reading one key reads the whole map.
    #[default]
    Default,
    /// `map_serialization_version = 'with_buckets'`, about one bucket per key (ClickHouse
    /// 26.3+): one key is read without the rest of the map (facets 3.9x faster in
    /// docs/querybench.md), reading whole maps (the trace view) about 2x slower.
    Buckets,
}

/// The opt-in layouts of the Map table that e2e/querybench showed worth offering
/// (docs/querybench.md, "Which layout for which workload"). Each is added to an existing
/// table by an additive migration of its own ([`crate::layouts`]); none is on by default.
/// The one definition: the `TracePipeline`'s `spec.clickhouse.schema.layouts` is this type
/// (feature `schemars`), spelled `attributeItems` / `mapSerialization` there.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Layouts {
    /// Add `ResourceAttributeItems`/`SpanAttributeItems` (`Array(String)` ALIAS columns of
    /// `key=value` items, stored nowhere) with `text(tokenizer = 'array')` indexes, as
    /// opentelemetry-collector-contrib PR #50878 and ClickStack define them: readers asking
    /// `has(SpanAttributeItems, 'k=v')` find attribute values about 5.8x faster, for about
    /// +56 % disk and +80 % server CPU per inserted span. Needs ClickHouse 26.2 or newer.
    #[serde(default)]
    pub attribute_items: bool,
    /// How merged parts store the Map columns: `Default` (the server's) or `Buckets` (about
    /// one bucket per key: one-key reads such as facets about 3.9x faster, whole-map reads
    /// such as the trace view about 2x slower). Needs ClickHouse 26.3 or newer.
    #[serde(default)]
    pub map_serialization: MapSerialization,
}

impl Layouts {
    /// True when no layout is asked for (today's table).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Which table engine, without its settings: what users choose (`MergeTree`,
/// `ReplicatedMergeTree`, `Null` in the configuration and the `TracePipeline` resource;
/// `merge-tree`, `replicated`, `null` as the `schema` command's `--engine`). The
/// settings that complete it into an [`Engine`] come from [`crate::TableSettings`].
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum EngineKind {
    /// Single-server MergeTree.
    #[default]
    MergeTree,
    /// ReplicatedMergeTree, every statement ON CLUSTER (needs a cluster).
    #[cfg_attr(feature = "clap", value(name = "replicated"))]
    ReplicatedMergeTree,
    /// Null engine: stores nothing; for benchmarks.
    Null,
}

/// The table engine and where the DDL runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engine {
    /// Single server `MergeTree`.
    MergeTree,
    /// `ReplicatedMergeTree`, every statement sent `ON CLUSTER`.
    Replicated(Replication),
    /// `Null`: parses every inserted row and stores nothing. For benchmarks; no
    /// partitioning, ordering, indexes, codecs, TTL, lookup table or view.
    Null,
}

impl Engine {
    /// The engine without its settings.
    pub fn kind(&self) -> EngineKind {
        match self {
            Self::MergeTree => EngineKind::MergeTree,
            Self::Replicated(_) => EngineKind::ReplicatedMergeTree,
            Self::Null => EngineKind::Null,
        }
    }
}

/// Where replicated tables keep their Keeper state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// The cluster every statement runs `ON CLUSTER`.
    pub cluster: Ident,
    /// Keeper path; the server expands `{shard}`, `{database}` and `{table}`.
    pub zk_path: String,
    /// Replica name; the server expands `{replica}` from its macros.
    pub replica: String,
}

impl Replication {
    /// Default Keeper path: one per shard, database and table, so the lookup table
    /// (a different `{table}`) never shares the traces table's path.
    pub const DEFAULT_ZK_PATH: &'static str = "/clickhouse/tables/{shard}/{database}/{table}";
    pub const DEFAULT_REPLICA: &'static str = "{replica}";

    pub fn new(cluster: Ident) -> Self {
        Self {
            cluster,
            zk_path: Self::DEFAULT_ZK_PATH.into(),
            replica: Self::DEFAULT_REPLICA.into(),
        }
    }
}

/// Data retention, rendered as the OTel exporter renders it (largest whole unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(Duration);

impl Ttl {
    /// Longest accepted retention: 50 years. The TTL is evaluated as `DateTime`, which
    /// wraps in 2106, so a longer one would silently expire rows on insert.
    pub const MAX: Duration = Duration::from_secs(50 * 365 * 86_400);

    /// A retention of at least one second, in whole seconds, at most [`Ttl::MAX`].
    pub fn new(duration: Duration) -> Result<Self, Error> {
        if duration.as_secs() == 0 || duration.subsec_nanos() != 0 {
            return Err(Error::InvalidOptions(format!(
                "TTL must be a whole number of seconds and at least 1s, got {duration:?}"
            )));
        }
        if duration > Self::MAX {
            return Err(Error::InvalidOptions(format!(
                "TTL of {} days is longer than 50 years: toDateTime(Timestamp) + TTL would \
                 pass 2106, where DateTime wraps, and rows would expire on insert",
                duration.as_secs() / 86_400
            )));
        }
        Ok(Self(duration))
    }

    pub fn days(days: u64) -> Result<Self, Error> {
        Self::new(Duration::from_secs(days.saturating_mul(86_400)))
    }

    pub fn duration(&self) -> Duration {
        self.0
    }

    /// The largest whole unit: `(count, short suffix, ClickHouse interval function)`.
    fn largest_unit(&self) -> (u64, &'static str, &'static str) {
        let s = self.0.as_secs();
        [
            (86_400, "d", "toIntervalDay"),
            (3_600, "h", "toIntervalHour"),
            (60, "m", "toIntervalMinute"),
        ]
        .into_iter()
        .find(|(unit, _, _)| s.is_multiple_of(*unit))
        .map_or((s, "s", "toIntervalSecond"), |(unit, suffix, function)| {
            (s / unit, suffix, function)
        })
    }

    /// `toIntervalDay(30)`, `toIntervalHour(12)`, … as the exporter's `GenerateTTLExpr`.
    pub fn interval_sql(&self) -> String {
        let (n, _, function) = self.largest_unit();
        format!("{function}({n})")
    }
}

/// Parses `30` (days), `30d`, `72h`, `90m` or `3600s`.
impl FromStr for Ttl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let bad = || {
            Error::InvalidOptions(format!(
                "invalid TTL {s:?}: use a number of days (30) or a duration (30d, 72h, 90m, 3600s)"
            ))
        };
        let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
            Some(i) => s.split_at(i),
            None => (s, "d"),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        let secs = match unit {
            "d" => n.checked_mul(86_400),
            "h" => n.checked_mul(3_600),
            "m" => n.checked_mul(60),
            "s" => Some(n),
            _ => None,
        }
        .ok_or_else(bad)?;
        Self::new(Duration::from_secs(secs))
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, suffix, _) = self.largest_unit();
        write!(f, "{n}{suffix}")
    }
}

/// Everything that shapes the traces table and its companions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableOptions {
    pub database: Ident,
    pub table: Ident,
    pub attributes: Attributes,
    /// JSON variant only: add `ResourceAttributesKeys` / `SpanAttributesKeys`
    /// (sorted, de-duplicated attribute keys) with bloom-filter indexes, as newer
    /// exporter versions do. Ignored for the Map variant.
    pub attribute_keys_columns: bool,
    pub engine: Engine,
    pub ttl: Option<Ttl>,
    /// The insert-deduplication window to keep (0 disables deduplication of retried
    /// inserts): `non_replicated_deduplication_window` on plain MergeTree,
    /// `replicated_deduplication_window` (never below its default) on replicated tables.
    /// `apply` raises (never lowers) it on existing tables too; see [`crate::dedup_window`].
    pub dedup_window: u64,
    /// Opt-in layouts (Map variant, stored engines only); see [`crate::layouts`].
    pub layouts: Layouts,
}

impl TableOptions {
    /// The exporter-compatible defaults: Map attributes, MergeTree, no TTL.
    pub fn new(database: Ident, table: Ident) -> Self {
        Self {
            database,
            table,
            attributes: Attributes::Map,
            attribute_keys_columns: true,
            engine: Engine::MergeTree,
            ttl: None,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            layouts: Layouts::default(),
        }
    }

    /// Checks what the types alone cannot: the derived object names must be valid too.
    /// (Whether the layouts fit the variant and engine is [`crate::layouts::check_options`];
    /// rendering the migrations checks both.)
    pub fn validate(&self) -> Result<(), Error> {
        self.lookup_table()?;
        self.lookup_view()?;
        Ok(())
    }

    /// `<table>_trace_id_ts`: first and last timestamp of each trace.
    pub fn lookup_table(&self) -> Result<Ident, Error> {
        self.table.with_suffix("table", "_trace_id_ts")
    }

    /// `<table>_trace_id_ts_mv`: the view that fills the lookup table.
    pub fn lookup_view(&self) -> Result<Ident, Error> {
        self.table.with_suffix("table", "_trace_id_ts_mv")
    }

    /// Whether the JSON keys columns exist in this variant.
    pub fn has_keys_columns(&self) -> bool {
        self.attributes == Attributes::Json && self.attribute_keys_columns
    }

    /// Whether the table stores data (and so has partitions, indexes and companions).
    pub fn is_stored(&self) -> bool {
        !matches!(self.engine, Engine::Null)
    }

    /// The cluster every statement runs on, if replicated.
    pub fn cluster(&self) -> Option<&Ident> {
        match &self.engine {
            Engine::Replicated(r) => Some(&r.cluster),
            _ => None,
        }
    }
}
