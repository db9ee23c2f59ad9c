//! The traces table, defined once: options, columns, codecs and skip indexes.
//!
//! Everything else derives from this file: the DDL (`ddl`), the migrations that
//! build the table step by step (`migrations`, through each element's `since`), the
//! shape check that adopts existing tables (`adopt`) and the column list the
//! collector's encoder writes ([`insert_columns`]). Changing a column here changes
//! all of them together, and the tests prove they agree.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;
use crate::ident::Ident;
use crate::migrations::{V_CREATE_TRACES_TABLE, V_SPAN_NAME_INDEX};
use crate::types::ClickHouseType;

/// Default database, as the OTel Collector ClickHouse exporter names it.
pub const DEFAULT_DATABASE: &str = "otel";
/// Default traces table, as the OTel Collector ClickHouse exporter names it.
pub const DEFAULT_TABLE: &str = "otel_traces";
/// Default `non_replicated_deduplication_window`: how many recent insert blocks a
/// plain MergeTree remembers so a retried insert with the same
/// `insert_deduplication_token` is dropped. 1000 matches the replicated default.
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
    /// `non_replicated_deduplication_window` for plain MergeTree (0 disables
    /// deduplication of retried inserts). Not used by the other engines.
    pub dedup_window: u64,
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
        }
    }

    /// Checks what the types alone cannot: the derived object names must be valid too.
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

/// Every column the traces table can have, in table order. The encoder matches on
/// this instead of comparing names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanColumn {
    Timestamp,
    TraceId,
    SpanId,
    ParentSpanId,
    TraceState,
    SpanName,
    SpanKind,
    ServiceName,
    ResourceAttributes,
    ResourceAttributesKeys,
    ScopeName,
    ScopeVersion,
    SpanAttributes,
    SpanAttributesKeys,
    Duration,
    StatusCode,
    StatusMessage,
    EventsTimestamp,
    EventsName,
    EventsAttributes,
    LinksTraceId,
    LinksSpanId,
    LinksTraceState,
    LinksAttributes,
}

impl SpanColumn {
    /// The column name as inserted and as `DESCRIBE TABLE` reports it; columns of a
    /// `Nested` are flattened to `Parent.field`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Timestamp => "Timestamp",
            Self::TraceId => "TraceId",
            Self::SpanId => "SpanId",
            Self::ParentSpanId => "ParentSpanId",
            Self::TraceState => "TraceState",
            Self::SpanName => "SpanName",
            Self::SpanKind => "SpanKind",
            Self::ServiceName => "ServiceName",
            Self::ResourceAttributes => "ResourceAttributes",
            Self::ResourceAttributesKeys => "ResourceAttributesKeys",
            Self::ScopeName => "ScopeName",
            Self::ScopeVersion => "ScopeVersion",
            Self::SpanAttributes => "SpanAttributes",
            Self::SpanAttributesKeys => "SpanAttributesKeys",
            Self::Duration => "Duration",
            Self::StatusCode => "StatusCode",
            Self::StatusMessage => "StatusMessage",
            Self::EventsTimestamp => "Events.Timestamp",
            Self::EventsName => "Events.Name",
            Self::EventsAttributes => "Events.Attributes",
            Self::LinksTraceId => "Links.TraceId",
            Self::LinksSpanId => "Links.SpanId",
            Self::LinksTraceState => "Links.TraceState",
            Self::LinksAttributes => "Links.Attributes",
        }
    }

    /// `(parent, field)` for columns declared inside a `Nested(...)`.
    pub fn nested(self) -> Option<(&'static str, &'static str)> {
        self.name().split_once('.')
    }
}

/// One codec stage of a column's `CODEC(...)` chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecStep {
    /// Delta encoding over values of this many bytes (8 for DateTime64, 4 for DateTime).
    Delta(u8),
    /// Zstandard at this level.
    Zstd(u8),
}

impl fmt::Display for CodecStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Delta(n) => write!(f, "Delta({n})"),
            Self::Zstd(n) => write!(f, "ZSTD({n})"),
        }
    }
}

/// A column's codec chain; empty means the server default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codec(pub &'static [CodecStep]);

impl Codec {
    pub const DEFAULT: Codec = Codec(&[]);
    pub const ZSTD1: Codec = Codec(&[CodecStep::Zstd(1)]);
    pub const DELTA8_ZSTD1: Codec = Codec(&[CodecStep::Delta(8), CodecStep::Zstd(1)]);
    pub const DELTA4_ZSTD1: Codec = Codec(&[CodecStep::Delta(4), CodecStep::Zstd(1)]);

    pub fn is_default(&self) -> bool {
        self.0.is_empty()
    }
}

/// `Delta(8), ZSTD(1)`: the form of `system.columns.compression_codec` without
/// the `CODEC(...)` wrapper (empty for the default).
impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{step}")?;
        }
        Ok(())
    }
}

/// One physical column of the traces table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub id: SpanColumn,
    /// The type as stored and as written on the wire: columns of a `Nested` are
    /// `Array(element)` here, e.g. `Events.Timestamp` is `Array(DateTime64(9))`.
    pub ch_type: ClickHouseType,
    pub codec: Codec,
    /// The migration version that added this column.
    pub since: u32,
}

impl Column {
    pub fn name(&self) -> &'static str {
        self.id.name()
    }
}

/// A data-skipping index of the traces table.
#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    pub name: &'static str,
    /// The indexed expression, as `system.data_skipping_indices.expr` reports it.
    pub expr: &'static str,
    pub kind: IndexKind,
    pub granularity: u32,
    /// The migration version that added this index.
    pub since: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum IndexKind {
    BloomFilter(f64),
    MinMax,
    TokenBf {
        size_bytes: u32,
        hashes: u32,
        seed: u32,
    },
}

/// `bloom_filter(0.001)`, … as `system.data_skipping_indices.type_full` reports it.
impl fmt::Display for IndexKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BloomFilter(p) => write!(f, "bloom_filter({p})"),
            Self::MinMax => f.write_str("minmax"),
            Self::TokenBf {
                size_bytes,
                hashes,
                seed,
            } => write!(f, "tokenbf_v1({size_bytes}, {hashes}, {seed})"),
        }
    }
}

/// Type of the attribute columns (and of the attributes inside Events and Links).
pub fn attributes_type(attributes: Attributes) -> ClickHouseType {
    match attributes {
        Attributes::Map => ClickHouseType::map(
            ClickHouseType::low_cardinality_string(),
            ClickHouseType::String,
        ),
        Attributes::Json => ClickHouseType::Json,
    }
}

/// Every physical column of the traces table at the latest version, in table order.
pub fn columns(opts: &TableOptions) -> Vec<Column> {
    use ClickHouseType as T;
    use SpanColumn as C;
    let attrs = attributes_type(opts.attributes);
    let lc = T::low_cardinality_string;
    // The Null engine stores nothing, so it gets no codecs.
    let codec = |c: Codec| if opts.is_stored() { c } else { Codec::DEFAULT };
    let col = |id, ch_type, c| Column {
        id,
        ch_type,
        codec: codec(c),
        since: V_CREATE_TRACES_TABLE,
    };
    let z = Codec::ZSTD1;
    let mut out = vec![
        col(C::Timestamp, T::DateTime64(9), Codec::DELTA8_ZSTD1),
        col(C::TraceId, T::String, z),
        col(C::SpanId, T::String, z),
        col(C::ParentSpanId, T::String, z),
        col(C::TraceState, T::String, z),
        col(C::SpanName, lc(), z),
        col(C::SpanKind, lc(), z),
        col(C::ServiceName, lc(), z),
        col(C::ResourceAttributes, attrs.clone(), z),
    ];
    if opts.has_keys_columns() {
        out.push(col(C::ResourceAttributesKeys, T::array(lc()), z));
    }
    out.extend([
        col(C::ScopeName, T::String, z),
        col(C::ScopeVersion, T::String, z),
        col(C::SpanAttributes, attrs.clone(), z),
    ]);
    if opts.has_keys_columns() {
        out.push(col(C::SpanAttributesKeys, T::array(lc()), z));
    }
    out.extend([
        col(C::Duration, T::UInt64, z),
        col(C::StatusCode, lc(), z),
        col(C::StatusMessage, T::String, z),
        // Nested(...) CODEC(ZSTD(1)): the codec applies to every flattened array.
        col(C::EventsTimestamp, T::array(T::DateTime64(9)), z),
        col(C::EventsName, T::array(lc()), z),
        col(C::EventsAttributes, T::array(attrs.clone()), z),
        col(C::LinksTraceId, T::array(T::String), z),
        col(C::LinksSpanId, T::array(T::String), z),
        col(C::LinksTraceState, T::array(T::String), z),
        col(C::LinksAttributes, T::array(attrs), z),
    ]);
    out
}

/// The columns the collector writes, in order: the 22 OTel columns, plus the two
/// `*Keys` columns for the JSON variant when enabled. Every physical column is
/// written today (none has a default expression), so this is [`columns`]; it is
/// a separate function so a future defaulted column does not silently join inserts.
pub fn insert_columns(opts: &TableOptions) -> Vec<Column> {
    columns(opts)
}

/// The skip indexes of the traces table at the latest version (none for `Null`).
pub fn indexes(opts: &TableOptions) -> Vec<Index> {
    if !opts.is_stored() {
        return Vec::new();
    }
    let idx = |name, expr, kind, granularity, since| Index {
        name,
        expr,
        kind,
        granularity,
        since,
    };
    let v1 = V_CREATE_TRACES_TABLE;
    let mut out = Vec::new();
    match opts.attributes {
        Attributes::Map => out.extend([
            idx(
                "idx_trace_id",
                "TraceId",
                IndexKind::BloomFilter(0.001),
                1,
                v1,
            ),
            idx(
                "idx_res_attr_key",
                "mapKeys(ResourceAttributes)",
                IndexKind::BloomFilter(0.01),
                1,
                v1,
            ),
            idx(
                "idx_res_attr_value",
                "mapValues(ResourceAttributes)",
                IndexKind::BloomFilter(0.01),
                1,
                v1,
            ),
            idx(
                "idx_span_attr_key",
                "mapKeys(SpanAttributes)",
                IndexKind::BloomFilter(0.01),
                1,
                v1,
            ),
            idx(
                "idx_span_attr_value",
                "mapValues(SpanAttributes)",
                IndexKind::BloomFilter(0.01),
                1,
                v1,
            ),
        ]),
        // The JSON variant finds traces through the lookup table, not a TraceId index.
        Attributes::Json if opts.has_keys_columns() => out.extend([
            idx(
                "idx_res_attr_keys",
                "ResourceAttributesKeys",
                IndexKind::BloomFilter(0.01),
                1,
                v1,
            ),
            idx(
                "idx_span_attr_keys",
                "SpanAttributesKeys",
                IndexKind::BloomFilter(0.01),
                1,
                v1,
            ),
        ]),
        Attributes::Json => {}
    }
    out.push(idx("idx_duration", "Duration", IndexKind::MinMax, 1, v1));
    // Case-insensitive span-name search, added by later exporter versions; ours
    // adds it as an additive migration so tables created at v1 gain it too.
    out.push(idx(
        "idx_lower_span_name",
        "lower(SpanName)",
        IndexKind::TokenBf {
            size_bytes: 32768,
            hashes: 3,
            seed: 0,
        },
        8,
        V_SPAN_NAME_INDEX,
    ));
    out
}

/// `PARTITION BY` of the traces table.
pub const PARTITION_BY: &str = "toDate(Timestamp)";

/// `ORDER BY` of the traces table; the JSON variant adds the full timestamp.
pub fn order_by(attributes: Attributes) -> &'static str {
    match attributes {
        Attributes::Map => "(ServiceName, SpanName, toDateTime(Timestamp))",
        Attributes::Json => "(ServiceName, SpanName, toDateTime(Timestamp), Timestamp)",
    }
}

/// A column of the trace-id lookup table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupColumn {
    pub name: &'static str,
    pub ch_type: ClickHouseType,
    pub codec: Codec,
}

/// `<table>_trace_id_ts (TraceId String, Start DateTime, End DateTime)`.
pub fn lookup_columns() -> Vec<LookupColumn> {
    vec![
        LookupColumn {
            name: "TraceId",
            ch_type: ClickHouseType::String,
            codec: Codec::ZSTD1,
        },
        LookupColumn {
            name: "Start",
            ch_type: ClickHouseType::DateTime,
            codec: Codec::DELTA4_ZSTD1,
        },
        LookupColumn {
            name: "End",
            ch_type: ClickHouseType::DateTime,
            codec: Codec::DELTA4_ZSTD1,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(attributes: Attributes, keys: bool) -> TableOptions {
        let mut o = TableOptions::new(
            Ident::new("database", "otel").unwrap(),
            Ident::new("table", "otel_traces").unwrap(),
        );
        o.attributes = attributes;
        o.attribute_keys_columns = keys;
        o
    }

    fn names(cols: &[Column]) -> Vec<&'static str> {
        cols.iter().map(Column::name).collect()
    }

    const OTEL_22: [&str; 22] = [
        "Timestamp",
        "TraceId",
        "SpanId",
        "ParentSpanId",
        "TraceState",
        "SpanName",
        "SpanKind",
        "ServiceName",
        "ResourceAttributes",
        "ScopeName",
        "ScopeVersion",
        "SpanAttributes",
        "Duration",
        "StatusCode",
        "StatusMessage",
        "Events.Timestamp",
        "Events.Name",
        "Events.Attributes",
        "Links.TraceId",
        "Links.SpanId",
        "Links.TraceState",
        "Links.Attributes",
    ];

    #[test]
    fn map_variant_inserts_the_22_otel_columns_in_order() {
        assert_eq!(
            names(&insert_columns(&opts(Attributes::Map, true))),
            OTEL_22
        );
    }

    #[test]
    fn json_variant_adds_keys_columns_after_their_attributes_only_when_enabled() {
        assert_eq!(
            names(&insert_columns(&opts(Attributes::Json, false))),
            OTEL_22
        );
        let with_keys = names(&insert_columns(&opts(Attributes::Json, true)));
        assert_eq!(with_keys.len(), 24);
        let pos = |n| with_keys.iter().position(|c| *c == n).unwrap();
        assert_eq!(pos("ResourceAttributesKeys"), pos("ResourceAttributes") + 1);
        assert_eq!(pos("SpanAttributesKeys"), pos("SpanAttributes") + 1);
        let without: Vec<_> = with_keys
            .into_iter()
            .filter(|n| !n.ends_with("Keys"))
            .collect();
        assert_eq!(without, OTEL_22);
    }

    #[test]
    fn nested_columns_are_arrays_of_the_attribute_type() {
        let json = insert_columns(&opts(Attributes::Json, true));
        let by = |id| {
            json.iter()
                .find(|c| c.id == id)
                .unwrap()
                .ch_type
                .to_string()
        };
        assert_eq!(by(SpanColumn::EventsTimestamp), "Array(DateTime64(9))");
        assert_eq!(by(SpanColumn::EventsAttributes), "Array(JSON)");
        assert_eq!(by(SpanColumn::SpanAttributes), "JSON");
        assert_eq!(
            by(SpanColumn::SpanAttributesKeys),
            "Array(LowCardinality(String))"
        );
        let map = insert_columns(&opts(Attributes::Map, true));
        let by = |id| map.iter().find(|c| c.id == id).unwrap().ch_type.to_string();
        assert_eq!(
            by(SpanColumn::LinksAttributes),
            "Array(Map(LowCardinality(String), String))"
        );
        assert_eq!(
            SpanColumn::LinksAttributes.nested(),
            Some(("Links", "Attributes"))
        );
        assert_eq!(SpanColumn::Duration.nested(), None);
    }

    #[test]
    fn null_engine_has_no_codecs_and_no_indexes() {
        let mut o = opts(Attributes::Map, true);
        o.engine = Engine::Null;
        assert!(columns(&o).iter().all(|c| c.codec.is_default()));
        assert!(indexes(&o).is_empty());
    }

    #[test]
    fn ttl_parses_days_and_durations_and_renders_like_the_exporter() {
        let t = |s: &str| s.parse::<Ttl>().unwrap();
        assert_eq!(t("30").interval_sql(), "toIntervalDay(30)");
        assert_eq!(t("30d").interval_sql(), "toIntervalDay(30)");
        assert_eq!(t("48h").interval_sql(), "toIntervalDay(2)");
        assert_eq!(t("36h").interval_sql(), "toIntervalHour(36)");
        assert_eq!(t("90m").interval_sql(), "toIntervalMinute(90)");
        assert_eq!(t("61s").interval_sql(), "toIntervalSecond(61)");
        assert_eq!(t("36h").to_string(), "36h");
        for bad in [
            "",
            "0",
            "0d",
            "-1",
            "1w",
            "d",
            "1.5d",
            "99999999999999999999d",
            "36500",
        ] {
            assert!(bad.parse::<Ttl>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn derived_names_must_fit_the_identifier_limit() {
        let mut o = opts(Attributes::Map, true);
        o.table = Ident::new("table", "t".repeat(49)).unwrap();
        assert!(o.validate().is_ok());
        o.table = Ident::new("table", "t".repeat(50)).unwrap();
        let err = o.validate().unwrap_err().to_string();
        assert!(err.contains("_trace_id_ts_mv"), "{err}");
    }
}
