//! The fast `otlp_proto` reader: walks an `ExportTraceServiceRequest` in place and hands
//! out borrowed views of its spans, without building the `prost` message tree.
//!
//! Why not `prost` alone: decoding into `opentelemetry-proto`'s owned types allocates a
//! `String` or `Vec` for every id, name, key and value of every span and frees them all
//! again, which profiled as the largest single cost of the collector. The rows only
//! need to *read* those bytes once, so this reader borrows them from the Kafka payload.
//!
//! `prost` stays the reference. This reader takes only the plain, canonical shape of
//! the message; whenever it meets anything else it answers [`Unusual`] and the caller
//! decodes the record with `prost` instead (which either rejects it with its own error
//! message, or accepts it, and its re-encoding — canonical — is then read here). What
//! sends a record down that path:
//!
//! - a malformed key, varint or length, a group, a known field with the wrong wire type;
//! - a string field that is not UTF-8 (`prost` rejects the record: same outcome);
//! - a singular message field given twice (`prost` merges the two);
//! - an `AnyValue` with more than one value field (`prost`'s `oneof` rules);
//! - attribute values nested deeper than `prost`'s limit allows ([`MAX_MESSAGE_DEPTH`]).
//!
//! So the rows written are always those of `prost`'s decoding; the differential tests
//! in `tests` (and `golden_rows.rs`) hold the two readers to that.
//!
//! Why one file of ~650 lines: it is one walk over one schema, read top to bottom from the
//! wire primitives to the span views; split, its depth accounting (which must match
//! `prost`'s to the message) would be spread over files.

use std::ops::Range;

use opentelemetry_proto::tonic::common::v1::EntityRef;
use prost::Message;

/// The record is not in the shape this reader takes; decode it with `prost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unusual;

pub type Result<T> = std::result::Result<T, Unusual>;

/// One field's value, by wire type.
#[derive(Debug, Clone, Copy)]
pub enum Wire<'a> {
    Varint(u64),
    I64(u64),
    Len(&'a [u8]),
    I32(u32),
}

/// Iterates the fields of one message body.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    #[inline]
    fn varint(&mut self) -> Result<u64> {
        // Most varints (keys, lengths, small numbers) are one byte.
        if let Some((&b, rest)) = self.buf.split_first()
            && b < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(b));
        }
        self.varint_slow()
    }

    fn varint_slow(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first().ok_or(Unusual)?;
            self.buf = rest;
            if i == 9 && b > 1 {
                // More than 64 bits.
                return Err(Unusual);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(Unusual)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.buf.len() {
            return Err(Unusual);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next field's bytes if it is a length-delimited field with the one-byte key
    /// `key`; otherwise `None` and nothing consumed (the fast path for the canonical
    /// field order).
    #[inline]
    fn len_field(&mut self, key: u8) -> Option<&'a [u8]> {
        let save = self.buf;
        let (&k, rest) = self.buf.split_first()?;
        if k != key {
            return None;
        }
        self.buf = rest;
        let got = self
            .varint()
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| self.take(n).ok());
        if got.is_none() {
            self.buf = save;
        }
        got
    }

    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next `(field number, value)`, `None` at the end of the body.
    #[inline]
    pub fn next_field(&mut self) -> Result<Option<(u32, Wire<'a>)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        // prost refuses a key over u32::MAX (not only a field number over it): so do we.
        let key = u32::try_from(self.varint()?).map_err(|_| Unusual)?;
        let tag = key >> 3;
        if tag == 0 {
            return Err(Unusual);
        }
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                Wire::I64(u64::from_le_bytes(b.try_into().map_err(|_| Unusual)?))
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| Unusual)?;
                Wire::Len(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Wire::I32(u32::from_le_bytes(b.try_into().map_err(|_| Unusual)?))
            }
            // Groups (3, 4) and the undefined wire types 6, 7.
            _ => return Err(Unusual),
        };
        Ok(Some((tag, wire)))
    }
}

/// A string field's bytes, checked to be UTF-8 (as `prost` checks them). Kept as bytes:
/// the columns take bytes, and the ASCII test is far cheaper than building a `&str`.
#[inline]
fn utf8(b: &[u8]) -> Result<&[u8]> {
    if b.is_ascii() || std::str::from_utf8(b).is_ok() {
        Ok(b)
    } else {
        Err(Unusual)
    }
}

/// An attribute value, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// No value (or the profiles-only string-table reference, meaningless in traces).
    Empty,
    /// UTF-8, checked.
    Str(&'a [u8]),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(&'a [u8]),
    /// An `ArrayValue` body (its items are read by whoever renders it).
    Array(&'a [u8]),
    /// A `KeyValueList` body.
    KvList(&'a [u8]),
}

/// `prost`'s limit on message nesting (its `RECURSION_LIMIT`): the request is at depth 0,
/// a message in it at 1, and so on; a message at depth 101 makes `prost` refuse the record.
pub const MAX_MESSAGE_DEPTH: usize = 100;
/// Message depth of the `AnyValue` of a resource attribute (request → resource spans →
/// resource → key value → any value).
pub const RESOURCE_VALUE_DEPTH: usize = 4;
/// … of a scope's attribute (request → resource spans → scope spans → scope → kv → value).
pub const SCOPE_VALUE_DEPTH: usize = 5;
/// … of a span's attribute.
pub const SPAN_VALUE_DEPTH: usize = 5;
/// … of an event's or a link's attribute.
pub const EVENT_LINK_VALUE_DEPTH: usize = 6;

/// [`Unusual`] for a message deeper than `prost` reads, so that `prost` decides.
#[inline]
pub fn at_depth(depth: usize) -> Result<()> {
    if depth > MAX_MESSAGE_DEPTH {
        Err(Unusual)
    } else {
        Ok(())
    }
}

/// Checks a value all the way down, as rendering it would (for values no column
/// renders). `depth`: the message depth of the value's `AnyValue`.
pub fn check_value(v: Value<'_>, depth: usize) -> Result<()> {
    if v != Value::Empty {
        at_depth(depth)?;
    }
    match v {
        Value::Array(b) => {
            at_depth(depth + 1)?;
            for item in array_items(b) {
                check_value(item?, depth + 2)?;
            }
        }
        Value::KvList(b) => {
            at_depth(depth + 1)?;
            for kv in kvlist_items(b) {
                at_depth(depth + 2)?;
                check_value(kv?.value, depth + 3)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Reads each field 1 of a message body with `read` (both `ArrayValue.values` and
/// `KeyValueList.values` are field 1).
fn repeated_field_1<'a, T: 'a>(
    body: &'a [u8],
    read: fn(&'a [u8]) -> Result<T>,
) -> impl Iterator<Item = Result<T>> + 'a {
    let mut f = Fields::new(body);
    std::iter::from_fn(move || {
        loop {
            match f.next_field() {
                Err(e) => return Some(Err(e)),
                Ok(None) => return None,
                Ok(Some((1, Wire::Len(b)))) => return Some(read(b)),
                Ok(Some((1, _))) => return Some(Err(Unusual)),
                Ok(Some(_)) => {}
            }
        }
    })
}

/// The items of an `ArrayValue` body.
pub fn array_items(body: &[u8]) -> impl Iterator<Item = Result<Value<'_>>> {
    repeated_field_1(body, any_value)
}

/// The entries of a `KeyValueList` body.
pub fn kvlist_items(body: &[u8]) -> impl Iterator<Item = Result<Kv<'_>>> {
    repeated_field_1(body, kv)
}

/// Reads an `AnyValue` body.
#[inline]
pub fn any_value(body: &[u8]) -> Result<Value<'_>> {
    // Fast path: exactly one value field, as every encoder writes it.
    let mut f = Fields::new(body);
    let fast = match body.first() {
        None => Some(Value::Empty),
        Some(0x0a) => f.len_field(0x0a).map(Value::Str),
        Some(0x10) => f.next_field().ok().flatten().and_then(|(_, w)| match w {
            Wire::Varint(x) => Some(Value::Bool(x != 0)),
            _ => None,
        }),
        Some(0x18) => f.next_field().ok().flatten().and_then(|(_, w)| match w {
            Wire::Varint(x) => Some(Value::Int(x as i64)),
            _ => None,
        }),
        Some(0x21) => f.next_field().ok().flatten().and_then(|(_, w)| match w {
            Wire::I64(x) => Some(Value::Double(f64::from_bits(x))),
            _ => None,
        }),
        Some(0x2a) => f.len_field(0x2a).map(Value::Array),
        Some(0x32) => f.len_field(0x32).map(Value::KvList),
        Some(0x3a) => f.len_field(0x3a).map(Value::Bytes),
        Some(_) => None,
    };
    match fast {
        Some(Value::Str(s)) if f.is_empty() => Ok(Value::Str(utf8(s)?)),
        Some(v) if f.is_empty() => Ok(v),
        _ => any_value_general(body),
    }
}

fn any_value_general(body: &[u8]) -> Result<Value<'_>> {
    let mut value = Value::Empty;
    let mut seen = false;
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        let v = match (tag, w) {
            (1, Wire::Len(b)) => Value::Str(utf8(b)?),
            (2, Wire::Varint(x)) => Value::Bool(x != 0),
            (3, Wire::Varint(x)) => Value::Int(x as i64),
            (4, Wire::I64(x)) => Value::Double(f64::from_bits(x)),
            (5, Wire::Len(b)) => Value::Array(b),
            (6, Wire::Len(b)) => Value::KvList(b),
            (7, Wire::Len(b)) => Value::Bytes(b),
            (8, Wire::Varint(_)) => Value::Empty,
            (1..=8, _) => return Err(Unusual),
            _ => continue,
        };
        if seen {
            return Err(Unusual);
        }
        seen = true;
        value = v;
    }
    Ok(value)
}

/// One attribute, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kv<'a> {
    /// UTF-8, checked.
    pub key: &'a [u8],
    pub value: Value<'a>,
}

/// Reads a `KeyValue` body. An array or kvlist value is returned unread: whoever
/// renders it reads (and so checks) its items.
#[inline]
pub fn kv(body: &[u8]) -> Result<Kv<'_>> {
    // Fast path: key then value, as every encoder writes them.
    let mut f = Fields::new(body);
    if let Some(key) = f.len_field(0x0a) {
        if f.is_empty() {
            return Ok(Kv {
                key: utf8(key)?,
                value: Value::Empty,
            });
        }
        if let Some(v) = f.len_field(0x12)
            && f.is_empty()
        {
            return Ok(Kv {
                key: utf8(key)?,
                value: any_value(v)?,
            });
        }
    }
    kv_general(body)
}

/// A `KeyValue` body's key only (its value is not read, so not checked): for a caller that
/// looks for keys and reads a value only when its key is one it wants. The same key as
/// [`kv`]'s for every body [`kv`] takes.
#[inline]
pub fn kv_key(body: &[u8]) -> Result<&[u8]> {
    let mut f = Fields::new(body);
    if let Some(key) = f.len_field(0x0a)
        && (f.is_empty() || (f.len_field(0x12).is_some() && f.is_empty()))
    {
        return utf8(key);
    }
    Ok(kv_general(body)?.key)
}

fn kv_general(body: &[u8]) -> Result<Kv<'_>> {
    let mut key: &[u8] = b"";
    let mut value = None;
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::Len(b)) => key = utf8(b)?,
            (2, Wire::Len(b)) => {
                if value.is_some() {
                    return Err(Unusual);
                }
                value = Some(any_value(b)?);
            }
            (3, Wire::Varint(_)) => {}
            (1..=3, _) => return Err(Unusual),
            _ => {}
        }
    }
    Ok(Kv {
        key,
        value: value.unwrap_or(Value::Empty),
    })
}

/// Checks attribute bodies that no column reads (scope attributes) as rendering
/// checks the others.
fn check_kvs(bodies: &[&[u8]]) -> Result<()> {
    for b in bodies {
        check_value(kv(b)?.value, SCOPE_VALUE_DEPTH)?;
    }
    Ok(())
}

/// A resource: its attribute bodies.
#[derive(Debug, Default)]
pub struct ResourceView<'a> {
    pub attrs: Vec<&'a [u8]>,
}

fn resource<'a>(body: &'a [u8], out: &mut ResourceView<'a>) -> Result<()> {
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::Len(b)) => out.attrs.push(b),
            (2, Wire::Varint(_)) => {}
            (3, Wire::Len(b)) => {
                EntityRef::decode(b).map_err(|_| Unusual)?;
            }
            (1..=3, _) => return Err(Unusual),
            _ => {}
        }
    }
    Ok(())
}

/// `ResourceSpans`: the resource (parsed) and the `ScopeSpans` bodies.
pub fn resource_spans<'a>(
    body: &'a [u8],
    res: &mut ResourceView<'a>,
    scopes: &mut Vec<&'a [u8]>,
) -> Result<()> {
    res.attrs.clear();
    scopes.clear();
    let mut seen_resource = false;
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::Len(b)) => {
                if seen_resource {
                    return Err(Unusual);
                }
                seen_resource = true;
                resource(b, res)?;
            }
            (2, Wire::Len(b)) => scopes.push(b),
            (3, Wire::Len(b)) => {
                utf8(b)?;
            }
            (1..=3, _) => return Err(Unusual),
            _ => {}
        }
    }
    Ok(())
}

/// The `ResourceSpans` bodies of a request.
pub fn request<'a>(body: &'a [u8], out: &mut Vec<&'a [u8]>) -> Result<()> {
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::Len(b)) => out.push(b),
            (1, _) => return Err(Unusual),
            _ => {}
        }
    }
    Ok(())
}

/// `ScopeSpans`: the scope's name and version and the `Span` bodies.
#[derive(Debug, Default)]
pub struct ScopeView<'a> {
    pub name: &'a [u8],
    pub version: &'a [u8],
    pub spans: Vec<&'a [u8]>,
}

fn scope<'a>(body: &'a [u8], out: &mut ScopeView<'a>, attrs: &mut Vec<&'a [u8]>) -> Result<()> {
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::Len(b)) => out.name = utf8(b)?,
            (2, Wire::Len(b)) => out.version = utf8(b)?,
            (3, Wire::Len(b)) => attrs.push(b),
            (4, Wire::Varint(_)) => {}
            (1..=4, _) => return Err(Unusual),
            _ => {}
        }
    }
    Ok(())
}

pub fn scope_spans<'a>(body: &'a [u8], out: &mut ScopeView<'a>) -> Result<()> {
    out.name = b"";
    out.version = b"";
    out.spans.clear();
    let mut seen_scope = false;
    let mut scope_attrs = Vec::new();
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::Len(b)) => {
                if seen_scope {
                    return Err(Unusual);
                }
                seen_scope = true;
                scope(b, out, &mut scope_attrs)?;
            }
            (2, Wire::Len(b)) => out.spans.push(b),
            (3, Wire::Len(b)) => {
                utf8(b)?;
            }
            (1..=3, _) => return Err(Unusual),
            _ => {}
        }
    }
    check_kvs(&scope_attrs)
}

/// One span's fields, borrowed (strings as checked UTF-8 bytes); its attributes, events and links are ranges into the
/// vectors of [`SpanScratch`].
#[derive(Debug, Clone, Default)]
pub struct SpanView<'a> {
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub parent_span_id: &'a [u8],
    pub trace_state: &'a [u8],
    pub name: &'a [u8],
    pub kind: i32,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub status_message: &'a [u8],
    pub status_code: i32,
    pub attrs: Range<usize>,
    pub events: Range<usize>,
    pub links: Range<usize>,
}

#[derive(Debug, Clone, Default)]
pub struct EventView<'a> {
    pub time_unix_nano: u64,
    pub name: &'a [u8],
    /// Into [`SpanScratch::event_attrs`].
    pub attrs: Range<usize>,
}

#[derive(Debug, Clone, Default)]
pub struct LinkView<'a> {
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub trace_state: &'a [u8],
    /// Into [`SpanScratch::link_attrs`].
    pub attrs: Range<usize>,
}

/// Where the spans of one record keep their lists (cleared per span by [`span`]).
#[derive(Debug, Default)]
pub struct SpanScratch<'a> {
    pub attrs: Vec<&'a [u8]>,
    pub events: Vec<EventView<'a>>,
    pub event_attrs: Vec<&'a [u8]>,
    pub links: Vec<LinkView<'a>>,
    pub link_attrs: Vec<&'a [u8]>,
}

fn event<'a>(body: &'a [u8], attrs: &mut Vec<&'a [u8]>) -> Result<EventView<'a>> {
    let mut e = EventView {
        attrs: attrs.len()..attrs.len(),
        ..Default::default()
    };
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::I64(t)) => e.time_unix_nano = t,
            (2, Wire::Len(b)) => e.name = utf8(b)?,
            (3, Wire::Len(b)) => attrs.push(b),
            (4, Wire::Varint(_)) => {}
            (1..=4, _) => return Err(Unusual),
            _ => {}
        }
    }
    e.attrs.end = attrs.len();
    Ok(e)
}

fn link<'a>(body: &'a [u8], attrs: &mut Vec<&'a [u8]>) -> Result<LinkView<'a>> {
    let mut l = LinkView {
        attrs: attrs.len()..attrs.len(),
        ..Default::default()
    };
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::Len(b)) => l.trace_id = b,
            (2, Wire::Len(b)) => l.span_id = b,
            (3, Wire::Len(b)) => l.trace_state = utf8(b)?,
            (4, Wire::Len(b)) => attrs.push(b),
            (5, Wire::Varint(_)) | (6, Wire::I32(_)) => {}
            (1..=6, _) => return Err(Unusual),
            _ => {}
        }
    }
    l.attrs.end = attrs.len();
    Ok(l)
}

fn status<'a>(body: &'a [u8], s: &mut SpanView<'a>) -> Result<()> {
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (2, Wire::Len(b)) => s.status_message = utf8(b)?,
            (3, Wire::Varint(c)) => s.status_code = c as i32,
            (2 | 3, _) => return Err(Unusual),
            _ => {}
        }
    }
    Ok(())
}

/// Reads a `Span` body; its lists go to `scratch`, which is cleared first.
pub fn span<'a>(body: &'a [u8], scratch: &mut SpanScratch<'a>) -> Result<SpanView<'a>> {
    scratch.attrs.clear();
    scratch.events.clear();
    scratch.event_attrs.clear();
    scratch.links.clear();
    scratch.link_attrs.clear();
    let mut s = SpanView::default();
    let mut seen_status = false;
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field()? {
        match (tag, w) {
            (1, Wire::Len(b)) => s.trace_id = b,
            (2, Wire::Len(b)) => s.span_id = b,
            (3, Wire::Len(b)) => s.trace_state = utf8(b)?,
            (4, Wire::Len(b)) => s.parent_span_id = b,
            (5, Wire::Len(b)) => s.name = utf8(b)?,
            (6, Wire::Varint(k)) => s.kind = k as i32,
            (7, Wire::I64(t)) => s.start_time_unix_nano = t,
            (8, Wire::I64(t)) => s.end_time_unix_nano = t,
            (9, Wire::Len(b)) => scratch.attrs.push(b),
            (11, Wire::Len(b)) => {
                let e = event(b, &mut scratch.event_attrs)?;
                scratch.events.push(e);
            }
            (13, Wire::Len(b)) => {
                let l = link(b, &mut scratch.link_attrs)?;
                scratch.links.push(l);
            }
            (15, Wire::Len(b)) => {
                if seen_status {
                    return Err(Unusual);
                }
                seen_status = true;
                status(b, &mut s)?;
            }
            (10 | 12 | 14, Wire::Varint(_)) | (16, Wire::I32(_)) => {}
            (1..=16, _) => return Err(Unusual),
            _ => {}
        }
    }
    s.attrs = 0..scratch.attrs.len();
    s.events = 0..scratch.events.len();
    s.links = 0..scratch.links.len();
    Ok(s)
}

#[cfg(test)]
#[path = "proto_tests.rs"]
mod tests;
