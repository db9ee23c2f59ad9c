//! Native: ClickHouse's columnar block format (the one its TCP protocol uses), as the
//! HTTP interface reads it (no block info, no per-column serialization flags).
//!
//! A block is `varint columns, varint rows`, then for each column its name, its type
//! and its data: the serialization state prefix, then every row's values. Per type:
//!
//! - `DateTime64(9)`, `UInt64`: 8 bytes little-endian per row;
//! - `String`: var-int length and bytes per row;
//! - `LowCardinality(String)`: a dictionary per block ([`super::native_lc`]);
//! - `Array(T)`: T's prefix; cumulative `u64` end offsets per row; T's data for all
//!   elements;
//! - `Map(K, V)`: as `Array(Tuple(K, V))`: K's and V's prefixes, offsets, all keys,
//!   all values;
//! - `JSON`: flattened, every path a `Dynamic` column of its own ([`super::native_json`],
//!   [`super::native_json`]); the server reads that from 25.6 on, which is why the JSON
//!   table gets Native only from a server known to read it (`crate::insert::format`).
//!
//! Columns are built in their own buffers while rows arrive and laid out one after
//! the other when the block is cut, so each column's bytes are contiguous. The resource's
//! columns are worked out once per resource ([`repeat`]).

use tracehouse_schema::SpanColumn;

use super::native_json::JsonColumn;
use super::native_lc::LowCardinality;
use super::plan::{AttrShape, PlannedColumn, Shape, Text};
use super::{Rendered, SpanRow};
use crate::decode::proto;
use crate::rows;
use crate::wire::{put_str, put_u64, put_varint};
use repeat::RepeatCache;

/// A column under construction.
#[derive(Debug)]
pub(super) enum Builder {
    /// 8-byte little-endian values.
    Fixed(Vec<u8>),
    Str {
        data: Vec<u8>,
        rows: usize,
    },
    Lc(LowCardinality),
    Array {
        offsets: Vec<u64>,
        inner: Box<Builder>,
    },
    Map {
        offsets: Vec<u64>,
        keys: Box<Builder>,
        values: Box<Builder>,
    },
    Json(JsonColumn),
}

impl Builder {
    fn text(t: Text) -> Self {
        match t {
            Text::String => Builder::Str {
                data: Vec::new(),
                rows: 0,
            },
            Text::LowCardinality => Builder::Lc(LowCardinality::default()),
        }
    }

    fn array(inner: Builder) -> Self {
        Builder::Array {
            offsets: Vec::new(),
            inner: Box::new(inner),
        }
    }

    fn attrs(a: AttrShape) -> Self {
        match a {
            AttrShape::Map(key) => Builder::Map {
                offsets: Vec::new(),
                keys: Box::new(Builder::text(key)),
                values: Box::new(Builder::text(Text::String)),
            },
            AttrShape::Json => Builder::Json(JsonColumn::default()),
        }
    }

    fn for_shape(shape: Shape) -> Self {
        match shape {
            Shape::Nanos | Shape::UInt64 => Builder::Fixed(Vec::new()),
            Shape::Text(t) => Builder::text(t),
            Shape::Attrs(a) => Builder::attrs(a),
            Shape::NanosArray => Builder::array(Builder::Fixed(Vec::new())),
            Shape::TextArray(t) => Builder::array(Builder::text(t)),
            Shape::AttrsArray(a) => Builder::array(Builder::attrs(a)),
        }
    }

    #[inline]
    fn push_fixed(&mut self, v: [u8; 8]) {
        if let Builder::Fixed(data) = self {
            data.extend_from_slice(&v);
        }
    }

    #[inline]
    pub(super) fn push_str(&mut self, s: &[u8]) {
        match self {
            Builder::Str { data, rows } => {
                put_str(data, s);
                *rows += 1;
            }
            Builder::Lc(lc) => lc.push(s),
            _ => {}
        }
    }

    fn push_hex_id(&mut self, id: &[u8]) {
        match self {
            Builder::Str { data, rows } => {
                put_varint(data, rows::hex_id_len(id) as u64);
                rows::push_hex_id(id, data);
                *rows += 1;
            }
            _ => {
                let mut hex = Vec::with_capacity(id.len() * 2);
                rows::push_hex_id(id, &mut hex);
                self.push_str(&hex);
            }
        }
    }

    pub(super) fn push_attrs(&mut self, attrs: &Rendered) -> proto::Result<()> {
        if let (Builder::Json(column), Rendered::Json(j)) = (&mut *self, attrs) {
            // Only a bug of the transcoder could refuse the values `rows::json` wrote: the
            // record then goes the way of one the in-place reader does not take.
            return column.push_object(j).map_err(|_| proto::Unusual);
        }
        if let (Some((offsets, keys, values)), Rendered::Map(m)) = (self.map_parts(), attrs) {
            for (k, v) in m.iter() {
                keys.push_str(k);
                values.push_str(v);
            }
            close_row(offsets, m.len());
        }
        Ok(())
    }

    /// The offsets, keys and values of a `Map` column.
    pub(super) fn map_parts(&mut self) -> Option<(&mut Vec<u64>, &mut Builder, &mut Builder)> {
        match self {
            Builder::Map {
                offsets,
                keys,
                values,
            } => Some((offsets, &mut **keys, &mut **values)),
            _ => None,
        }
    }

    /// Closes the current row of an `Array` after `n` elements were pushed to `inner`.
    pub(super) fn end_array(&mut self, n: usize) {
        if let Builder::Array { offsets, .. } = self {
            close_row(offsets, n);
        }
    }

    pub(super) fn inner(&mut self) -> &mut Builder {
        match self {
            Builder::Array { inner, .. } => inner,
            other => other,
        }
    }

    fn write_prefix(&self, out: &mut Vec<u8>) {
        match self {
            Builder::Fixed(_) | Builder::Str { .. } => {}
            Builder::Lc(lc) => lc.write_prefix(out),
            Builder::Array { inner, .. } => inner.write_prefix(out),
            Builder::Map { keys, values, .. } => {
                keys.write_prefix(out);
                values.write_prefix(out);
            }
            Builder::Json(j) => j.write_prefix(out),
        }
    }

    fn write_data(&self, out: &mut Vec<u8>) {
        match self {
            Builder::Fixed(data) | Builder::Str { data, .. } => out.extend_from_slice(data),
            Builder::Lc(lc) => lc.write_data(out),
            Builder::Array { offsets, inner } => {
                put_offsets(offsets, out);
                inner.write_data(out);
            }
            Builder::Map {
                offsets,
                keys,
                values,
            } => {
                put_offsets(offsets, out);
                keys.write_data(out);
                values.write_data(out);
            }
            Builder::Json(j) => j.write_data(out),
        }
    }

    fn clear(&mut self) {
        match self {
            Builder::Fixed(data) => data.clear(),
            Builder::Str { data, rows } => {
                data.clear();
                *rows = 0;
            }
            Builder::Lc(lc) => lc.clear(),
            Builder::Array { offsets, inner } => {
                offsets.clear();
                inner.clear();
            }
            Builder::Map {
                offsets,
                keys,
                values,
            } => {
                offsets.clear();
                keys.clear();
                values.clear();
            }
            Builder::Json(j) => j.clear(),
        }
    }

    fn mark(&self, out: &mut Vec<usize>) {
        match self {
            Builder::Fixed(data) => out.push(data.len()),
            Builder::Str { data, rows } => out.extend([data.len(), *rows]),
            Builder::Lc(lc) => lc.mark(out),
            Builder::Array { offsets, inner } => {
                out.push(offsets.len());
                inner.mark(out);
            }
            Builder::Map {
                offsets,
                keys,
                values,
            } => {
                out.push(offsets.len());
                keys.mark(out);
                values.mark(out);
            }
            Builder::Json(j) => j.mark(out),
        }
    }

    fn rollback(&mut self, marks: &mut impl Iterator<Item = usize>) {
        let mut next = || marks.next().unwrap_or(0);
        match self {
            Builder::Fixed(data) => data.truncate(next()),
            Builder::Str { data, rows } => {
                data.truncate(next());
                *rows = next();
            }
            Builder::Lc(lc) => lc.rollback(marks),
            Builder::Array { offsets, inner } => {
                offsets.truncate(next());
                inner.rollback(marks);
            }
            Builder::Map {
                offsets,
                keys,
                values,
            } => {
                offsets.truncate(next());
                keys.rollback(marks);
                values.rollback(marks);
            }
            Builder::Json(j) => j.rollback(marks),
        }
    }

    /// Approximate size of the column's data, for cutting blocks.
    fn data_len(&self) -> usize {
        match self {
            Builder::Fixed(data) | Builder::Str { data, .. } => data.len(),
            Builder::Lc(lc) => lc.data_len(),
            Builder::Array { offsets, inner } => offsets.len() * 8 + inner.data_len(),
            Builder::Map {
                offsets,
                keys,
                values,
            } => offsets.len() * 8 + keys.data_len() + values.data_len(),
            Builder::Json(j) => j.data_len(),
        }
    }
}

/// Closes a row of an `Array` or `Map` column that has `n` more elements than the last.
pub(super) fn close_row(offsets: &mut Vec<u64>, n: usize) {
    let end = offsets.last().copied().unwrap_or(0) + n as u64;
    offsets.push(end);
}

fn put_offsets(offsets: &[u64], out: &mut Vec<u8>) {
    out.reserve(offsets.len() * 8);
    for &o in offsets {
        put_u64(out, o);
    }
}

/// The columns of the block being built.
#[derive(Debug)]
pub(super) struct NativeBlock {
    names: Vec<(&'static str, String)>,
    columns: Vec<(SpanColumn, Builder)>,
    rows: usize,
    /// `None` only in tests that compare against the uncached path.
    resource_cache: Option<Box<RepeatCache>>,
}

impl NativeBlock {
    pub(super) fn new(plan: &[PlannedColumn]) -> Self {
        let mut names = Vec::with_capacity(plan.len());
        let mut columns = Vec::with_capacity(plan.len());
        for c in plan {
            names.push((c.name, c.ch_type.to_string()));
            columns.push((c.id, Builder::for_shape(c.shape)));
        }
        Self {
            names,
            columns,
            rows: 0,
            resource_cache: Some(Box::default()),
        }
    }

    #[cfg(test)]
    pub(super) fn without_repeat_cache(&mut self) {
        self.resource_cache = None;
    }

    pub(super) fn data_len(&self) -> usize {
        self.columns.iter().map(|(_, b)| b.data_len()).sum()
    }

    /// Adds one span's values to every column.
    pub(super) fn push_row(
        &mut self,
        row: &SpanRow<'_>,
        scratch: &mut Rendered,
    ) -> proto::Result<()> {
        let span = row.span;
        let events = &row.lists.events[span.events.clone()];
        let links = &row.lists.links[span.links.clone()];
        let mut resource_cache = self.resource_cache.as_mut();
        for (id, b) in &mut self.columns {
            use SpanColumn as C;
            match id {
                C::Timestamp => {
                    b.push_fixed(rows::timestamp_ns(span.start_time_unix_nano).to_le_bytes())
                }
                C::TraceId => b.push_hex_id(span.trace_id),
                C::SpanId => b.push_hex_id(span.span_id),
                C::ParentSpanId => b.push_hex_id(span.parent_span_id),
                C::TraceState => b.push_str(span.trace_state),
                C::SpanName => b.push_str(span.name),
                C::SpanKind => b.push_str(rows::span_kind(span.kind).as_bytes()),
                C::ServiceName => b.push_str(row.service_name),
                C::ResourceAttributes => match resource_cache.as_deref_mut() {
                    Some(cache) => {
                        b.push_repeated_attrs(row.resource, row.resource_generation, cache)?
                    }
                    None => b.push_attrs(row.resource)?,
                },
                C::ScopeName => b.push_str(row.scope_name),
                C::ScopeVersion => b.push_str(row.scope_version),
                C::SpanAttributes => b.push_attrs(row.attrs)?,
                C::ResourceAttributesKeys if resource_cache.is_some() => {
                    if let Some(cache) = resource_cache.as_deref_mut() {
                        b.push_repeated_keys(row.resource, row.resource_generation, cache);
                    }
                }
                C::ResourceAttributesKeys | C::SpanAttributesKeys => {
                    let attrs = if *id == C::SpanAttributesKeys {
                        row.attrs
                    } else {
                        row.resource
                    };
                    let n = match attrs {
                        Rendered::Json(j) => {
                            let inner = b.inner();
                            for k in j.keys() {
                                inner.push_str(k);
                            }
                            j.keys().len()
                        }
                        Rendered::Map(_) => 0,
                    };
                    b.end_array(n);
                }
                C::Duration => b.push_fixed(
                    rows::duration_ns(span.start_time_unix_nano, span.end_time_unix_nano)
                        .to_le_bytes(),
                ),
                C::StatusCode => b.push_str(rows::status_code(span.status_code).as_bytes()),
                C::StatusMessage => b.push_str(span.status_message),
                C::EventsTimestamp => {
                    let inner = b.inner();
                    for e in events {
                        inner.push_fixed(rows::timestamp_ns(e.time_unix_nano).to_le_bytes());
                    }
                    b.end_array(events.len());
                }
                C::EventsName => {
                    let inner = b.inner();
                    for e in events {
                        inner.push_str(e.name);
                    }
                    b.end_array(events.len());
                }
                C::EventsAttributes => {
                    let inner = b.inner();
                    for e in events {
                        scratch.fill(
                            &row.lists.event_attrs[e.attrs.clone()],
                            proto::EVENT_LINK_VALUE_DEPTH,
                        )?;
                        inner.push_attrs(scratch)?;
                    }
                    b.end_array(events.len());
                }
                C::LinksTraceId => {
                    let inner = b.inner();
                    for l in links {
                        inner.push_hex_id(l.trace_id);
                    }
                    b.end_array(links.len());
                }
                C::LinksSpanId => {
                    let inner = b.inner();
                    for l in links {
                        inner.push_hex_id(l.span_id);
                    }
                    b.end_array(links.len());
                }
                C::LinksTraceState => {
                    let inner = b.inner();
                    for l in links {
                        inner.push_str(l.trace_state);
                    }
                    b.end_array(links.len());
                }
                C::LinksAttributes => {
                    let inner = b.inner();
                    for l in links {
                        scratch.fill(
                            &row.lists.link_attrs[l.attrs.clone()],
                            proto::EVENT_LINK_VALUE_DEPTH,
                        )?;
                        inner.push_attrs(scratch)?;
                    }
                    b.end_array(links.len());
                }
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// Every column's buffer lengths, depth first, for [`Self::rollback`].
    pub(super) fn mark(&self, out: &mut Vec<usize>) {
        out.push(self.rows);
        for (_, b) in &self.columns {
            b.mark(out);
        }
    }

    /// Takes back every value pushed since [`Self::mark`] wrote `marks`.
    pub(super) fn rollback(&mut self, marks: &[usize]) {
        let mut it = marks.iter().copied();
        self.rows = it.next().unwrap_or(0);
        for (_, b) in &mut self.columns {
            b.rollback(&mut it);
        }
    }

    /// Appends the block (if it has rows) to `out` and empties the columns, keeping
    /// their buffers for the next block.
    /// Appends the block to `out` and starts a new one. `flush` is called on `out` after
    /// each column, so the caller can compress and drain what is there: `out` then holds
    /// about one column at a time, not a copy of the whole block.
    pub(super) fn cut(&mut self, out: &mut Vec<u8>, flush: &mut dyn FnMut(&mut Vec<u8>)) {
        if self.rows == 0 {
            return;
        }
        put_varint(out, self.columns.len() as u64);
        put_varint(out, self.rows as u64);
        for ((name, ty), (_, b)) in self.names.iter().zip(&mut self.columns) {
            put_str(out, name.as_bytes());
            put_str(out, ty.as_bytes());
            b.write_prefix(out);
            b.write_data(out);
            b.clear();
            flush(out);
        }
        self.rows = 0;
    }
}

/// What a resource's JSON columns resolve to, kept while its spans follow each other: a child,
/// so it builds on this file's column builders without a circle between files.
#[path = "native_repeat.rs"]
mod repeat;
