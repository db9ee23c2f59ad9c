//! Native: ClickHouse's columnar block format (the one its TCP protocol uses), as the
//! HTTP interface reads it (no block info, no per-column serialization flags).
//!
//! A block is `varint columns, varint rows`, then for each column its name, its type
//! and its data: the serialization state prefix, then every row's values. Per type:
//!
//! - `DateTime64(9)`, `UInt64`: 8 bytes little-endian per row;
//! - `String`: var-int length and bytes per row;
//! - `LowCardinality(String)`: prefix `u64 1` (shared dictionary with additional
//!   keys); data `u64 flags` (index width | has additional keys | update dictionary),
//!   `u64` key count, the keys as a `String` column, `u64` row count, one index per row
//!   (u8/u16/u32 by dictionary size); nothing at all for zero rows;
//! - `Array(T)`: T's prefix; cumulative `u64` end offsets per row; T's data for all
//!   elements;
//! - `Map(K, V)`: as `Array(Tuple(K, V))`: K's and V's prefixes, offsets, all keys,
//!   all values.
//!
//! Columns are built in their own buffers while rows arrive and laid out one after
//! the other when the block is cut, so each column's bytes are contiguous.
//!
//! - `JSON`: flattened, every path a `Dynamic` column of its own ([`super::native_json`],
//!   [`super::native_dynamic`]); the server reads that from 25.6 on, which is why the JSON
//!   table gets Native only from a server known to read it (`crate::insert::format`).

use std::collections::HashMap;

use tracehouse_schema::SpanColumn;

use super::native_json::JsonColumn;
use super::plan::{AttrShape, PlannedColumn, Shape, Text};
use super::{Rendered, SpanRow};
use crate::decode::proto;
use crate::rows;
use crate::wire::{put_str, put_u64, put_varint};

/// `LowCardinality` serialization constants (ClickHouse `SerializationLowCardinality`).
const LC_SHARED_DICTIONARIES_WITH_ADDITIONAL_KEYS: u64 = 1;
const LC_HAS_ADDITIONAL_KEYS: u64 = 1 << 9;
const LC_NEED_UPDATE_DICTIONARY: u64 = 1 << 10;

pub(super) type FastMap = HashMap<Box<[u8]>, u32, foldhash::fast::FixedState>;

/// A column under construction.
#[derive(Debug)]
enum Builder {
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

#[derive(Debug, Default)]
struct LowCardinality {
    dict: FastMap,
    /// The dictionary, already as a `String` column.
    keys: Vec<u8>,
    indexes: Vec<u32>,
    /// Changes whenever dictionary entries go away, so indexes remembered from before
    /// ([`RepeatCache`]) are known to be stale.
    epoch: u64,
}

impl LowCardinality {
    #[inline]
    fn index_of(&mut self, s: &[u8]) -> u32 {
        match self.dict.get(s) {
            Some(&i) => i,
            None => {
                let i = u32::try_from(self.dict.len()).unwrap_or(u32::MAX);
                self.dict.insert(s.into(), i);
                put_str(&mut self.keys, s);
                i
            }
        }
    }

    fn push(&mut self, s: &[u8]) {
        let index = self.index_of(s);
        self.indexes.push(index);
    }

    fn write_data(&self, out: &mut Vec<u8>) {
        if self.indexes.is_empty() {
            return;
        }
        let keys = self.dict.len();
        let (width, code) = match keys {
            0..=0x100 => (1, 0),
            0x101..=0x1_0000 => (2, 1),
            _ => (4, 2),
        };
        put_u64(
            out,
            code | LC_HAS_ADDITIONAL_KEYS | LC_NEED_UPDATE_DICTIONARY,
        );
        put_u64(out, keys as u64);
        out.extend_from_slice(&self.keys);
        put_u64(out, self.indexes.len() as u64);
        out.reserve(self.indexes.len() * width);
        for &i in &self.indexes {
            out.extend_from_slice(&i.to_le_bytes()[..width]);
        }
    }

    fn clear(&mut self) {
        self.dict.clear();
        self.keys.clear();
        self.indexes.clear();
        self.epoch += 1;
    }
}

/// The resource's attributes as the `ResourceAttributes` column last wrote them: every
/// span of a resource carries the same map, so its dictionary indexes and its values'
/// bytes are worked out once per resource instead of once per span.
#[derive(Debug, Default)]
pub(super) struct RepeatCache {
    /// [`crate::rows::MapAttrs::generation`] and [`LowCardinality::epoch`] it is for.
    key: Option<(u64, u64)>,
    key_indexes: Vec<u32>,
    /// The values, already as `String` column bytes.
    values: Vec<u8>,
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
    fn push_str(&mut self, s: &[u8]) {
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

    fn push_attrs(&mut self, attrs: &Rendered) -> proto::Result<()> {
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
    fn map_parts(&mut self) -> Option<(&mut Vec<u64>, &mut Builder, &mut Builder)> {
        match self {
            Builder::Map {
                offsets,
                keys,
                values,
            } => Some((offsets, &mut **keys, &mut **values)),
            _ => None,
        }
    }

    /// [`Self::push_attrs`] for a map that repeats row after row (the resource's).
    fn push_repeated_attrs(
        &mut self,
        attrs: &Rendered,
        cache: &mut RepeatCache,
    ) -> proto::Result<()> {
        if let (Some((offsets, keys, values)), Rendered::Map(m)) = (self.map_parts(), attrs)
            && let (Builder::Lc(lc), Builder::Str { data, rows }) = (keys, values)
        {
            let key = (m.generation(), lc.epoch);
            if cache.key != Some(key) {
                cache.key_indexes.clear();
                cache.values.clear();
                for (k, v) in m.iter() {
                    cache.key_indexes.push(lc.index_of(k));
                    put_str(&mut cache.values, v);
                }
                cache.key = Some(key);
            }
            lc.indexes.extend_from_slice(&cache.key_indexes);
            data.extend_from_slice(&cache.values);
            *rows += m.len();
            close_row(offsets, m.len());
            return Ok(());
        }
        self.push_attrs(attrs)
    }

    /// Closes the current row of an `Array` after `n` elements were pushed to `inner`.
    fn end_array(&mut self, n: usize) {
        if let Builder::Array { offsets, .. } = self {
            close_row(offsets, n);
        }
    }

    fn inner(&mut self) -> &mut Builder {
        match self {
            Builder::Array { inner, .. } => inner,
            other => other,
        }
    }

    fn write_prefix(&self, out: &mut Vec<u8>) {
        match self {
            Builder::Fixed(_) | Builder::Str { .. } => {}
            Builder::Lc(_) => put_u64(out, LC_SHARED_DICTIONARIES_WITH_ADDITIONAL_KEYS),
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
            Builder::Lc(lc) => out.extend([lc.indexes.len(), lc.dict.len(), lc.keys.len()]),
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
            Builder::Lc(lc) => {
                lc.indexes.truncate(next());
                let keys = next();
                if lc.dict.len() > keys {
                    lc.dict.retain(|_, i| (*i as usize) < keys);
                    lc.epoch += 1;
                }
                lc.keys.truncate(next());
            }
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
            Builder::Lc(lc) => lc.keys.len() + lc.indexes.len() * 2,
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
fn close_row(offsets: &mut Vec<u64>, n: usize) {
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
    resource_cache: Option<RepeatCache>,
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
            resource_cache: Some(RepeatCache::default()),
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
                    Some(cache) => b.push_repeated_attrs(row.resource, cache)?,
                    None => b.push_attrs(row.resource)?,
                },
                C::ScopeName => b.push_str(row.scope_name),
                C::ScopeVersion => b.push_str(row.scope_version),
                C::SpanAttributes => b.push_attrs(row.attrs)?,
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
