//! Attributes for the `JSON` variant: paths and binary `Dynamic` values, ready for
//! ClickHouse's native binary JSON encoding.
//!
//! The OTel exporter sends `json.Marshal(attributes.AsRaw())` as text and lets the
//! server type it. The same rows are produced here without text, following what the
//! server does with that text (checked on the real engine, see
//! `tests/golden_clickhouse.rs`):
//!
//! - a dotted key is a path (`http.method`); a kvlist is flattened into dotted paths
//!   below its key; an empty kvlist and an empty (null) value store nothing;
//! - string → `String`, int → `Int64`, double → `Float64`, bool → `Bool`, bytes →
//!   `String` (standard base64, as Go marshals `[]byte`; no bytes are `null`, as Go
//!   marshals pdata's nil copy of them);
//! - arrays get the type the server infers for them: `Array(Nullable(T))` when the
//!   elements share one scalar type (ints mixed with doubles are `Float64`; empty or
//!   all-null arrays are `Array(Nullable(String))`), nested arrays likewise
//!   (`Array(Array(Nullable(Int64)))`), arrays of kvlists `Array(JSON(…))`, anything
//!   else `Array(Dynamic)` with each element typed on its own;
//! - a path present twice (a repeated key, or `a.b` next to `a: {b: …}`) keeps the
//!   value given last: the server would refuse the whole insert otherwise.
//!
//! Deliberate differences from the exporter's text path, all because binary keeps
//! what text loses (listed in collector/README.md, "Differences from the OpenTelemetry
//! Collector", and checked against the real collector by `tests/e2e_conformance.rs`): an
//! integral double stays `Float64` (Go writes `1.0` as `1`, which the server reads as
//! `Int64`); an array mixing bools and numbers is `Array(Dynamic)` (the server would turn
//! `true` into `1`); an empty array is always `Array(Nullable(String))` (the server types
//! the exporter's `[]` like the arrays it met before in the same insert); NaN and ±Inf are
//! stored as `Float64` (Go's `json.Marshal` fails and the exporter drops the whole batch).
//!
//! The `*Keys` columns (`ResourceAttributesKeys`, `SpanAttributesKeys`) are the
//! exporter's `UniqueFlattenedAttributes`: every flattened path, null values included,
//! sorted bytewise and de-duplicated — the paths of [`JsonObject`].

use std::ops::Range;

use crate::decode::proto::{self, Value, array_items, kvlist_items};
use crate::rows::as_string::push_base64;
use crate::wire::{put_f64, put_i64, put_str, put_varint};

/// The value as pdata's `AsRaw` hands it to Go's `json.Marshal`: no bytes are a nil
/// slice, marshalled as `null`, so they are stored as nothing, like an empty value.
fn as_raw(v: Value<'_>) -> Value<'_> {
    match v {
        Value::Bytes([]) => Value::Empty,
        v => v,
    }
}

/// Binary type tags of ClickHouse's data-type encoding (used inside `Dynamic`).
pub mod tag {
    pub const NOTHING: u8 = 0x00;
    pub const INT64: u8 = 0x0a;
    pub const FLOAT64: u8 = 0x0e;
    pub const STRING: u8 = 0x15;
    pub const ARRAY: u8 = 0x1e;
    pub const NULLABLE: u8 = 0x23;
    pub const DYNAMIC: u8 = 0x2b;
    pub const BOOL: u8 = 0x2d;
    pub const JSON: u8 = 0x30;
}

/// `Dynamic(max_types=32)`: the element type the server gives mixed arrays.
const DYNAMIC_TYPE: [u8; 2] = [tag::DYNAMIC, 32];
/// `JSON(max_dynamic_types=16, max_dynamic_paths=256)`: the element type the server
/// gives arrays of objects. Serialization version 0, var-int 256, u8 16, then no typed
/// paths, no skipped paths, no skipped path regexps.
const ARRAY_ELEMENT_JSON_TYPE: [u8; 8] = [tag::JSON, 0, 0x80, 0x02, 16, 0, 0, 0];

/// One object's flattened attributes, reusable from span to span.
#[derive(Debug, Default)]
pub struct JsonObject {
    /// All paths, back to back (UTF-8).
    paths: Vec<u8>,
    /// All binary `Dynamic` values (type, then value), back to back.
    values: Vec<u8>,
    entries: Vec<Entry>,
    /// The path being built while descending into kvlists.
    prefix: Vec<u8>,
    nulls: usize,
    /// The last sort's outcome, reused while objects keep the same paths in the same
    /// order (spans of one instrumentation usually do).
    memo: SortMemo,
    /// Scratch for reordering `entries`.
    sorted: Vec<Entry>,
}

/// A path sequence and the order [`JsonObject::sort_and_dedup`] gave it: indexes into
/// the entries as flattened, sorted by path, only the last of equal paths kept.
#[derive(Debug, Default)]
struct SortMemo {
    paths: Vec<u8>,
    /// End of each entry's path in `paths`: with equal `paths`, equal ends mean the same
    /// sequence of paths.
    ends: Vec<usize>,
    order: Vec<u32>,
}

impl SortMemo {
    fn matches(&self, paths: &[u8], entries: &[Entry]) -> bool {
        self.ends.len() == entries.len()
            && self.paths == paths
            && self
                .ends
                .iter()
                .zip(entries)
                .all(|(&end, e)| end == e.path.end)
    }
}

#[derive(Debug, Clone)]
struct Entry {
    /// The path's first 8 bytes, big-endian, zero-padded: orders most pairs of paths
    /// without comparing the paths themselves.
    head: u64,
    path: Range<usize>,
    /// Empty for a null value (kept for the keys, not stored in the object).
    value: Range<usize>,
}

impl JsonObject {
    /// Replaces the content with the flattened `attrs` (`KeyValue` bodies whose values
    /// are at message depth `depth`).
    pub fn fill(&mut self, attrs: &[&[u8]], depth: usize) -> proto::Result<()> {
        self.clear();
        for body in attrs {
            let kv = proto::kv(body)?;
            self.flatten(kv, depth)?;
        }
        self.sort_and_dedup();
        Ok(())
    }

    /// Replaces the content with the flattened entries of a `KeyValueList` body, the
    /// value of an `AnyValue` at message depth `depth`.
    fn fill_kvlist(&mut self, body: &[u8], depth: usize) -> proto::Result<()> {
        self.clear();
        proto::at_depth(depth + 1)?;
        for kv in kvlist_items(body) {
            proto::at_depth(depth + 2)?;
            self.flatten(kv?, depth + 3)?;
        }
        self.sort_and_dedup();
        Ok(())
    }

    fn clear(&mut self) {
        self.paths.clear();
        self.values.clear();
        self.entries.clear();
        self.prefix.clear();
        self.nulls = 0;
    }

    fn sort_and_dedup(&mut self) {
        if !self.memo.matches(&self.paths, &self.entries) {
            self.memo.paths.clone_from(&self.paths);
            self.memo.ends.clear();
            self.memo
                .ends
                .extend(self.entries.iter().map(|e| e.path.end));
            let order = &mut self.memo.order;
            order.clear();
            order.extend(0..u32::try_from(self.entries.len()).unwrap_or(u32::MAX));
            let (paths, entries) = (&self.paths, &self.entries);
            let path = |i: u32| &paths[entries[i as usize].path.clone()];
            // Stable: among equal paths the last one given stays last, and wins below.
            order.sort_by(|&a, &b| {
                entries[a as usize]
                    .head
                    .cmp(&entries[b as usize].head)
                    .then_with(|| path(a).cmp(path(b)))
            });
            let mut keep = 0;
            for i in 0..order.len() {
                let last_of_its_path = order
                    .get(i + 1)
                    .is_none_or(|&next| path(next) != path(order[i]));
                if last_of_its_path {
                    order[keep] = order[i];
                    keep += 1;
                }
            }
            order.truncate(keep);
        }
        self.sorted.clear();
        self.sorted.extend(
            self.memo
                .order
                .iter()
                .map(|&i| self.entries[i as usize].clone()),
        );
        std::mem::swap(&mut self.entries, &mut self.sorted);
        self.nulls = self.entries.iter().filter(|e| e.value.is_empty()).count();
    }

    /// Adds one attribute below the current prefix; kvlists become dotted paths.
    /// `depth`: the message depth of the attribute's `AnyValue`.
    fn flatten(&mut self, mut kv: proto::Kv<'_>, depth: usize) -> proto::Result<()> {
        kv.value = as_raw(kv.value);
        if kv.value != Value::Empty {
            proto::at_depth(depth)?;
        }
        let saved = self.prefix.len();
        // Go's `UniqueFlattenedAttributes` joins with "." only below a non-empty prefix.
        if saved > 0 {
            self.prefix.push(b'.');
        }
        self.prefix.extend_from_slice(kv.key);
        if let Value::KvList(body) = kv.value {
            proto::at_depth(depth + 1)?;
            for inner in kvlist_items(body) {
                proto::at_depth(depth + 2)?;
                self.flatten(inner?, depth + 3)?;
            }
        } else {
            let start = self.paths.len();
            if saved == 0 {
                // Top level (the common case): the key is the path.
                self.paths.extend_from_slice(kv.key);
            } else {
                self.paths.extend_from_slice(&self.prefix);
            }
            let path = start..self.paths.len();
            let vstart = self.values.len();
            if kv.value != Value::Empty {
                put_dynamic(kv.value, &mut self.values, depth)?;
            }
            self.entries.push(Entry {
                head: head_of(&self.paths[path.clone()]),
                path,
                value: vstart..self.values.len(),
            });
        }
        self.prefix.truncate(saved);
        Ok(())
    }

    /// Every path, sorted and unique, null values included: the `*Keys` column.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.entries.iter().map(|e| &self.paths[e.path.clone()])
    }

    /// Number of paths stored in the object (null values are not).
    pub fn stored_len(&self) -> usize {
        self.entries.len() - self.nulls
    }

    /// `(path, binary Dynamic value)` of every stored path, sorted by path.
    pub fn stored(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.entries
            .iter()
            .filter(|e| !e.value.is_empty())
            .map(|e| (&self.paths[e.path.clone()], &self.values[e.value.clone()]))
    }

    /// Appends the object in ClickHouse's binary JSON encoding (RowBinary and inside
    /// `Dynamic`): var-int number of paths, then each path and its `Dynamic` value.
    pub fn write_binary(&self, out: &mut Vec<u8>) {
        put_varint(out, self.stored_len() as u64);
        for (path, value) in self.stored() {
            put_str(out, path);
            out.extend_from_slice(value);
        }
    }
}

/// The first 8 bytes of `path` as a big-endian number (shorter paths padded with
/// zeros), so that comparing heads agrees with comparing the paths bytewise whenever
/// the heads differ.
pub(crate) fn head_of(path: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = path.len().min(8);
    b[..n].copy_from_slice(&path[..n]);
    u64::from_be_bytes(b)
}

/// The type the server infers for a value inside an array.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    Null,
    Bool,
    Int,
    Float,
    Str,
    Array(Box<Ty>),
    Object,
    Dynamic,
}

/// `depth`: the message depth of `v`'s `AnyValue`.
fn infer(v: Value<'_>, depth: usize) -> proto::Result<Ty> {
    let v = as_raw(v);
    if v != Value::Empty {
        proto::at_depth(depth)?;
    }
    Ok(match v {
        Value::Empty => Ty::Null,
        Value::Bool(_) => Ty::Bool,
        Value::Int(_) => Ty::Int,
        Value::Double(_) => Ty::Float,
        Value::Str(_) | Value::Bytes(_) => Ty::Str,
        Value::Array(b) => Ty::Array(Box::new(element_type(b, depth)?.0)),
        Value::KvList(_) => Ty::Object,
    })
}

fn unify(a: Ty, b: Ty) -> Ty {
    match (a, b) {
        (a, b) if a == b => a,
        (Ty::Null, t) | (t, Ty::Null) => t,
        (Ty::Int, Ty::Float) | (Ty::Float, Ty::Int) => Ty::Float,
        (Ty::Array(a), Ty::Array(b)) => match unify(*a, *b) {
            Ty::Dynamic => Ty::Dynamic,
            t => Ty::Array(Box::new(t)),
        },
        _ => Ty::Dynamic,
    }
}

/// The element type of an `ArrayValue` body (the value of an `AnyValue` at message depth
/// `depth`), and its number of items. Every item is read (and so checked), also after
/// the type is known to be `Dynamic`.
fn element_type(array: &[u8], depth: usize) -> proto::Result<(Ty, usize)> {
    proto::at_depth(depth + 1)?;
    let mut t = Ty::Null;
    let mut n = 0;
    for item in array_items(array) {
        let item = item?;
        n += 1;
        if t == Ty::Dynamic {
            proto::check_value(item, depth + 2)?;
        } else {
            t = unify(t, infer(item, depth + 2)?);
        }
    }
    Ok((t, n))
}

/// Appends the binary encoding of an array element type.
fn put_element_type(t: &Ty, out: &mut Vec<u8>) {
    match t {
        Ty::Null | Ty::Str => out.extend_from_slice(&[tag::NULLABLE, tag::STRING]),
        Ty::Bool => out.extend_from_slice(&[tag::NULLABLE, tag::BOOL]),
        Ty::Int => out.extend_from_slice(&[tag::NULLABLE, tag::INT64]),
        Ty::Float => out.extend_from_slice(&[tag::NULLABLE, tag::FLOAT64]),
        Ty::Array(inner) => {
            out.push(tag::ARRAY);
            put_element_type(inner, out);
        }
        Ty::Object => out.extend_from_slice(&ARRAY_ELEMENT_JSON_TYPE),
        Ty::Dynamic => out.extend_from_slice(&DYNAMIC_TYPE),
    }
}

/// Appends an array element's value, encoded for element type `t`; `depth`: the message
/// depth of `v`'s `AnyValue`.
fn put_element(v: Value<'_>, t: &Ty, out: &mut Vec<u8>, depth: usize) -> proto::Result<()> {
    let v = as_raw(v);
    match t {
        Ty::Dynamic => match v {
            Value::Empty => out.push(tag::NOTHING),
            v => put_dynamic(v, out, depth)?,
        },
        Ty::Array(inner) => {
            // An array cannot be null; a null among arrays becomes [] as in the server.
            match v {
                Value::Array(b) => {
                    let n = array_items(b).count();
                    put_varint(out, n as u64);
                    for item in array_items(b) {
                        put_element(item?, inner, out, depth + 2)?;
                    }
                }
                _ => put_varint(out, 0),
            }
        }
        Ty::Object => {
            let mut obj = JsonObject::default();
            if let Value::KvList(b) = v {
                obj.fill_kvlist(b, depth)?;
            }
            obj.write_binary(out);
        }
        // Nullable(T): a null flag, then the value.
        Ty::Null | Ty::Bool | Ty::Int | Ty::Float | Ty::Str => match v {
            Value::Empty => out.push(1),
            v => {
                out.push(0);
                put_scalar(v, *t == Ty::Float, out);
            }
        },
    }
    Ok(())
}

/// Appends a scalar's value without its type (`as_float`: an int in a Float64 array).
fn put_scalar(v: Value<'_>, as_float: bool, out: &mut Vec<u8>) {
    match v {
        Value::Str(s) => put_str(out, s),
        Value::Bytes(b) => put_base64(b, out),
        Value::Bool(b) => out.push(u8::from(b)),
        Value::Int(i) if as_float => put_f64(out, i as f64),
        Value::Int(i) => put_i64(out, i),
        Value::Double(d) => put_f64(out, d),
        // Never asked for: inference only calls this for scalars.
        Value::Empty | Value::Array(_) | Value::KvList(_) => {}
    }
}

/// A `String` value holding the base64 of `b`, written without a temporary string.
fn put_base64(b: &[u8], out: &mut Vec<u8>) {
    put_varint(out, base64::encoded_len(b.len(), true).unwrap_or(0) as u64);
    push_base64(b, out);
}

/// Appends one (non-empty) value as a binary `Dynamic`: its type, then the value;
/// `depth`: the message depth of `v`'s `AnyValue`.
fn put_dynamic(v: Value<'_>, out: &mut Vec<u8>, depth: usize) -> proto::Result<()> {
    match v {
        Value::Str(_) | Value::Bytes(_) => out.push(tag::STRING),
        Value::Int(_) => out.push(tag::INT64),
        Value::Double(_) => out.push(tag::FLOAT64),
        Value::Bool(_) => out.push(tag::BOOL),
        Value::Array(b) => {
            let (t, n) = element_type(b, depth)?;
            out.push(tag::ARRAY);
            put_element_type(&t, out);
            put_varint(out, n as u64);
            for item in array_items(b) {
                put_element(item?, &t, out, depth + 2)?;
            }
            return Ok(());
        }
        Value::KvList(b) => {
            // Only reached inside Array(Dynamic): a nested object as a JSON value.
            out.extend_from_slice(&ARRAY_ELEMENT_JSON_TYPE);
            let mut obj = JsonObject::default();
            obj.fill_kvlist(b, depth)?;
            obj.write_binary(out);
            return Ok(());
        }
        Value::Empty => out.push(tag::NOTHING),
    }
    put_scalar(v, false, out);
    Ok(())
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
