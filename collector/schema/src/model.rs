//! The traces table, defined once: options, columns, codecs and skip indexes.
//!
//! Everything else derives from this file: the DDL (`ddl`), the migrations that
//! build the table step by step (`migrations`, through each element's `since`), the
//! shape check that adopts existing tables (`adopt`) and the column list the
//! collector's encoder writes ([`insert_columns`]). Changing a column here changes
//! all of them together, and the tests prove they agree.

use std::fmt;

use crate::types::ClickHouseType;
use crate::version::{V_ATTRIBUTE_ITEMS, V_CREATE_TRACES_TABLE, V_SPAN_NAME_INDEX};

pub use crate::options::*;

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
    /// `text(tokenizer = '<tokenizer>')`: an inverted index (the `attribute_items` layout).
    Text {
        tokenizer: &'static str,
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
            Self::Text { tokenizer } => write!(f, "text(tokenizer = '{tokenizer}')"),
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
    // Opt-in (crate::layouts): text indexes on the `*AttributeItems` ALIAS columns, with
    // the names PR #50878 gives them, so its tables already have them. `GRANULARITY 1` is
    // the statement e2e/querybench measured; 26.9 stores every text index with GRANULARITY
    // 100000000 (one index per part) whatever is asked, as it did there.
    if opts.layouts.attribute_items && opts.attributes == Attributes::Map {
        let text = || IndexKind::Text { tokenizer: "array" };
        out.extend([
            idx(
                "idx_res_attr_items",
                "ResourceAttributeItems",
                text(),
                1,
                V_ATTRIBUTE_ITEMS,
            ),
            idx(
                "idx_span_attr_items",
                "SpanAttributeItems",
                text(),
                1,
                V_ATTRIBUTE_ITEMS,
            ),
        ]);
    }
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

/// `otel.otel_traces` with every default: the options most unit tests start from.
#[cfg(test)]
pub(crate) fn default_options() -> TableOptions {
    TableOptions::new(
        crate::Ident::new("database", "otel").unwrap(),
        crate::Ident::new("table", "otel_traces").unwrap(),
    )
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
