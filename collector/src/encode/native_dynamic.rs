//! Native: `Dynamic` columns, and the typed columns inside them, in ClickHouse's
//! `FLATTENED` serialization (what the engine writes with
//! `output_format_native_use_flattened_dynamic_and_json_serialization = 1`, and reads in any
//! Native input from 25.6 on), built from values in the binary `Dynamic` encoding that
//! [`crate::rows::json`] writes for RowBinary.
//!
//! Transcoding RowBinary's values, rather than typing the attributes a second time, is what
//! keeps the two formats' rows identical: every type and every value the server stores is the
//! one [`crate::rows::json`] decided, and this file only changes how it is laid out.
//!
//! A `Dynamic` column of a block, flattened:
//! - state prefix: `u64 3`, var-int number of types, each type's name, then each type's own
//!   prefix (a nested `Dynamic` or `JSON` has one; scalars, `Nullable`, `Array` pass theirs on);
//! - data: one discriminator per row (the type's index; the number of types for NULL) as
//!   `u8` below 256 types, `u16` below 65 536, else `u32`; then, type after type, a column of
//!   the rows that have it.
//!
//! Typed columns as Native writes them: `Int64`/`Float64` 8 bytes and `Bool` 1 byte per row;
//! `String` var-int length and bytes (the same bytes as RowBinary); `Nullable(T)` a null map
//! (1 = NULL) then T's column with a default value in NULL rows; `Array(T)` cumulative `u64`
//! end offsets then T's column of every element; `JSON` see [`super::native_json`].

use super::JsonColumn;
use crate::rows::json::tag;
use crate::wire::{put_u64, put_varint, read_varint};

/// `FLATTENED`: the serialization version of a flattened `Dynamic` and `JSON` column.
pub(in crate::encode) const FLATTENED: u64 = 3;

/// A value the transcoder cannot read: never written by [`crate::rows::json`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::encode) struct Malformed;

pub(in crate::encode) type Result<T> = std::result::Result<T, Malformed>;

/// Takes `n` bytes off the front of `r`.
fn take<'a>(r: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if r.len() < n {
        return Err(Malformed);
    }
    let (head, rest) = r.split_at(n);
    *r = rest;
    Ok(head)
}

/// Takes a var-int off the front of `r`.
pub(in crate::encode) fn varint(r: &mut &[u8]) -> Result<u64> {
    let mut pos = 0;
    let v = read_varint(r, &mut pos).ok_or(Malformed)?;
    *r = &r[pos..];
    Ok(v)
}

/// Takes a `String` value off the front of `r`: its var-int length and bytes, as one slice
/// (which is also its Native `String` column bytes) and the bytes alone.
pub(in crate::encode) fn string<'a>(r: &mut &'a [u8]) -> Result<(&'a [u8], &'a [u8])> {
    let whole = *r;
    let len = usize::try_from(varint(r)?).map_err(|_| Malformed)?;
    let header = whole.len() - r.len();
    let bytes = take(r, len)?;
    Ok((&whole[..header + len], bytes))
}

/// The length of the binary type encoding at the front of `t` (the types
/// [`crate::rows::json`] writes; a `JSON` with typed or skipped paths is not one of them).
fn type_len(t: &[u8]) -> Result<usize> {
    let mut r = t;
    skip_type(&mut r)?;
    Ok(t.len() - r.len())
}

fn skip_type(r: &mut &[u8]) -> Result<()> {
    match take(r, 1)?[0] {
        tag::NOTHING | tag::INT64 | tag::FLOAT64 | tag::STRING | tag::BOOL => Ok(()),
        tag::NULLABLE | tag::ARRAY => skip_type(r),
        tag::DYNAMIC => take(r, 1).map(drop),
        tag::JSON => json_params(r).map(drop),
        _ => Err(Malformed),
    }
}

/// Takes the parameters of a `JSON` type encoding off the front of `r`:
/// `(max_dynamic_types, max_dynamic_paths)`. Typed and skipped paths are refused.
fn json_params(r: &mut &[u8]) -> Result<(u8, u64)> {
    take(r, 1)?; // serialization version
    let paths = varint(r)?;
    let types = take(r, 1)?[0];
    for _ in 0..3 {
        // typed paths, skipped paths, skipped path regexps
        if varint(r)? != 0 {
            return Err(Malformed);
        }
    }
    Ok((types, paths))
}

/// Appends the ClickHouse name of the type encoded in `t` (as `DataTypeFactory` reads it).
fn put_type_name(t: &mut &[u8], out: &mut String) -> Result<()> {
    let code = take(t, 1)?[0];
    match code {
        tag::INT64 => out.push_str("Int64"),
        tag::FLOAT64 => out.push_str("Float64"),
        tag::STRING => out.push_str("String"),
        tag::BOOL => out.push_str("Bool"),
        tag::NULLABLE | tag::ARRAY => {
            out.push_str(if code == tag::NULLABLE {
                "Nullable("
            } else {
                "Array("
            });
            put_type_name(t, out)?;
            out.push(')');
        }
        tag::DYNAMIC => {
            let max_types = take(t, 1)?[0];
            out.push_str("Dynamic");
            if max_types != 32 {
                out.push_str(&format!("(max_types={max_types})"));
            }
        }
        tag::JSON => {
            let (types, paths) = json_params(t)?;
            out.push_str(&format!(
                "JSON(max_dynamic_types={types}, max_dynamic_paths={paths})"
            ));
        }
        _ => return Err(Malformed),
    }
    Ok(())
}

/// The column of one type inside a `Dynamic` (or inside another typed column).
#[derive(Debug)]
pub(in crate::encode) enum Typed {
    /// `Int64`, `Float64` (8 bytes), `Bool` (1 byte): the value's bytes.
    Fixed {
        width: usize,
        data: Vec<u8>,
    },
    /// Var-int length and bytes per row.
    Str(Vec<u8>),
    Nullable {
        nulls: Vec<u8>,
        inner: Box<Typed>,
    },
    Array {
        offsets: Vec<u64>,
        inner: Box<Typed>,
    },
    Dynamic(DynamicColumn),
    Json(JsonColumn),
}

impl Typed {
    /// The column for the type encoded at the front of `t`, consuming the encoding.
    fn for_type(t: &mut &[u8]) -> Result<Self> {
        let fixed = |width| Typed::Fixed {
            width,
            data: Vec::new(),
        };
        let code = take(t, 1)?[0];
        Ok(match code {
            tag::INT64 | tag::FLOAT64 => fixed(8),
            tag::BOOL => fixed(1),
            tag::STRING => Typed::Str(Vec::new()),
            tag::NULLABLE => Typed::Nullable {
                nulls: Vec::new(),
                inner: Box::new(Typed::for_type(t)?),
            },
            tag::ARRAY => Typed::Array {
                offsets: Vec::new(),
                inner: Box::new(Typed::for_type(t)?),
            },
            tag::DYNAMIC => {
                take(t, 1)?;
                Typed::Dynamic(DynamicColumn::default())
            }
            tag::JSON => {
                json_params(t)?;
                Typed::Json(JsonColumn::default())
            }
            _ => return Err(Malformed),
        })
    }

    /// Reads one value of this column's type, in its RowBinary encoding, off the front of `r`.
    pub(in crate::encode) fn push_value(&mut self, r: &mut &[u8]) -> Result<()> {
        match self {
            Typed::Fixed { width, data } => data.extend_from_slice(take(r, *width)?),
            Typed::Str(data) => data.extend_from_slice(string(r)?.0),
            Typed::Nullable { nulls, inner } => {
                let null = take(r, 1)?[0];
                nulls.push(null);
                if null == 0 {
                    inner.push_value(r)?;
                } else {
                    inner.push_default();
                }
            }
            Typed::Array { offsets, inner } => {
                let n = varint(r)?;
                for _ in 0..n {
                    inner.push_value(r)?;
                }
                let end = offsets.last().copied().unwrap_or(0) + n;
                offsets.push(end);
            }
            Typed::Dynamic(d) => d.push_value(r)?,
            Typed::Json(j) => j.push_binary(r)?,
        }
        Ok(())
    }

    /// The value a NULL row holds in a `Nullable`'s inner column.
    fn push_default(&mut self) {
        match self {
            Typed::Fixed { width, data } => data.resize(data.len() + *width, 0),
            Typed::Str(data) => data.push(0),
            Typed::Nullable { nulls, inner } => {
                nulls.push(1);
                inner.push_default();
            }
            Typed::Array { offsets, .. } => offsets.push(offsets.last().copied().unwrap_or(0)),
            Typed::Dynamic(d) => d.push_null(),
            Typed::Json(j) => j.push_empty(),
        }
    }

    pub(in crate::encode) fn write_prefix(&self, out: &mut Vec<u8>) {
        match self {
            Typed::Fixed { .. } | Typed::Str(_) => {}
            Typed::Nullable { inner, .. } | Typed::Array { inner, .. } => inner.write_prefix(out),
            Typed::Dynamic(d) => d.write_prefix(out),
            Typed::Json(j) => j.write_prefix(out),
        }
    }

    pub(in crate::encode) fn write_data(&self, out: &mut Vec<u8>) {
        match self {
            Typed::Fixed { data, .. } | Typed::Str(data) => out.extend_from_slice(data),
            Typed::Nullable { nulls, inner } => {
                out.extend_from_slice(nulls);
                inner.write_data(out);
            }
            Typed::Array { offsets, inner } => {
                out.reserve(offsets.len() * 8);
                for &o in offsets {
                    put_u64(out, o);
                }
                inner.write_data(out);
            }
            Typed::Dynamic(d) => d.write_data(out, d.discriminators.len()),
            Typed::Json(j) => j.write_data(out),
        }
    }

    pub(in crate::encode) fn data_len(&self) -> usize {
        match self {
            Typed::Fixed { data, .. } | Typed::Str(data) => data.len(),
            Typed::Nullable { nulls, inner } => nulls.len() + inner.data_len(),
            Typed::Array { offsets, inner } => offsets.len() * 8 + inner.data_len(),
            Typed::Dynamic(d) => d.data_len(),
            Typed::Json(j) => j.data_len(),
        }
    }

    pub(in crate::encode) fn mark(&self, out: &mut Vec<usize>) {
        match self {
            Typed::Fixed { data, .. } | Typed::Str(data) => out.push(data.len()),
            Typed::Nullable { nulls, inner } => {
                out.push(nulls.len());
                inner.mark(out);
            }
            Typed::Array { offsets, inner } => {
                out.push(offsets.len());
                inner.mark(out);
            }
            Typed::Dynamic(d) => d.mark(out),
            Typed::Json(j) => j.mark(out),
        }
    }

    pub(in crate::encode) fn rollback(&mut self, marks: &mut impl Iterator<Item = usize>) {
        let mut next = || marks.next().unwrap_or(0);
        match self {
            Typed::Fixed { data, .. } | Typed::Str(data) => data.truncate(next()),
            Typed::Nullable { nulls, inner } => {
                nulls.truncate(next());
                inner.rollback(marks);
            }
            Typed::Array { offsets, inner } => {
                offsets.truncate(next());
                inner.rollback(marks);
            }
            Typed::Dynamic(d) => d.rollback(marks),
            Typed::Json(j) => j.rollback(marks),
        }
    }
}

/// Marks a NULL row in [`DynamicColumn::discriminators`].
const NULL: u32 = u32::MAX;

/// A type met in a [`DynamicColumn`]: its binary encoding, its name and its column.
#[derive(Debug)]
struct TypeColumn {
    encoding: Box<[u8]>,
    name: String,
    column: Typed,
}

/// A `Dynamic` column of one block.
#[derive(Debug, Default)]
pub(in crate::encode) struct DynamicColumn {
    /// The types met in this block, in order of appearance.
    types: Vec<TypeColumn>,
    /// Per row, the index of its value's type in `types`, or [`NULL`]. Rows past the end (a
    /// JSON path absent from the last rows of the block) are NULL too.
    discriminators: Vec<u32>,
}

impl DynamicColumn {
    /// Rows so far (NULL rows past the end not counted).
    pub(in crate::encode) fn len(&self) -> usize {
        self.discriminators.len()
    }

    /// NULL rows until the column has `rows` rows.
    pub(in crate::encode) fn pad_to(&mut self, rows: usize) {
        if self.discriminators.len() < rows {
            self.discriminators.resize(rows, NULL);
        }
    }

    pub(in crate::encode) fn push_null(&mut self) {
        self.discriminators.push(NULL);
    }

    /// Reads one value in the binary `Dynamic` encoding (its type, then the value) off the
    /// front of `r`; `Nothing` is NULL.
    pub(in crate::encode) fn push_value(&mut self, r: &mut &[u8]) -> Result<()> {
        let n = type_len(r)?;
        let (t, value) = r.split_at(n);
        *r = value;
        if t == [tag::NOTHING] {
            self.push_null();
            return Ok(());
        }
        // A path's values usually share one type, or a few: a linear search.
        let i = match self.types.iter().position(|c| *c.encoding == *t) {
            Some(i) => i,
            None => {
                let mut name = String::new();
                put_type_name(&mut &t[..], &mut name)?;
                let column = Typed::for_type(&mut &t[..])?;
                self.types.push(TypeColumn {
                    encoding: t.into(),
                    name,
                    column,
                });
                self.types.len() - 1
            }
        };
        self.types[i].column.push_value(r)?;
        self.discriminators.push(i as u32);
        Ok(())
    }

    /// The types' indexes in order of their names: the order the engine writes them in (a
    /// `Variant`'s own order), and so the one written here.
    fn sorted(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.types.len()).collect();
        order.sort_unstable_by(|&a, &b| self.types[a].name.cmp(&self.types[b].name));
        order
    }

    pub(in crate::encode) fn write_prefix(&self, out: &mut Vec<u8>) {
        let order = self.sorted();
        put_u64(out, FLATTENED);
        put_varint(out, order.len() as u64);
        for &i in &order {
            crate::wire::put_str(out, self.types[i].name.as_bytes());
        }
        for &i in &order {
            self.types[i].column.write_prefix(out);
        }
    }

    /// Writes the discriminators of `rows` rows (NULL past the end) and each type's column.
    pub(in crate::encode) fn write_data(&self, out: &mut Vec<u8>, rows: usize) {
        let order = self.sorted();
        // Discriminator of each type: its place in the written order; NULL is the count.
        let mut written = vec![0u32; order.len() + 1];
        for (place, &i) in order.iter().enumerate() {
            written[i] = place as u32;
        }
        let null = order.len();
        written[null] = null as u32;
        // NULL must fit: measured on the engine, 255 types take one byte per row and 256 two.
        let width = match null {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        };
        let padding = rows.saturating_sub(self.discriminators.len());
        out.reserve(rows * width);
        let all = self
            .discriminators
            .iter()
            .copied()
            .chain(std::iter::repeat_n(NULL, padding));
        for d in all {
            let d = written[if d == NULL { null } else { d as usize }];
            out.extend_from_slice(&d.to_le_bytes()[..width]);
        }
        for &i in &order {
            self.types[i].column.write_data(out);
        }
    }

    pub(in crate::encode) fn data_len(&self) -> usize {
        self.discriminators.len()
            + self
                .types
                .iter()
                .map(|c| c.column.data_len())
                .sum::<usize>()
    }

    pub(in crate::encode) fn mark(&self, out: &mut Vec<usize>) {
        out.extend([self.discriminators.len(), self.types.len()]);
        for c in &self.types {
            c.column.mark(out);
        }
    }

    pub(in crate::encode) fn rollback(&mut self, marks: &mut impl Iterator<Item = usize>) {
        self.discriminators.truncate(marks.next().unwrap_or(0));
        // Types first met after the mark only have values after it.
        self.types.truncate(marks.next().unwrap_or(0));
        for c in &mut self.types {
            c.column.rollback(marks);
        }
    }
}

#[cfg(test)]
#[path = "native_dynamic_tests.rs"]
mod tests;
