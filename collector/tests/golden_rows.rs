//! Golden rows: the golden request, encoded, read back by an independent reader of
//! the wire formats (written here from the ClickHouse format docs, driven only by the
//! schema crate's column types) and compared with the hand-written expected rows.

mod golden_fixture;

use golden_fixture::{Variant, assert_rows_eq, expected_rows, request};
use serde_json::{Value as J, json};
use tracehouse_collector::encode::{Compression, Encoder, EncoderOptions, compress};
use tracehouse_schema::{
    Attributes, ClickHouseType as T, Ident, InsertFormat, TableOptions, insert_columns,
};

fn table(variant: Variant, keys: bool) -> TableOptions {
    let mut t = TableOptions::new(
        Ident::new("database", "otel").unwrap(),
        Ident::new("table", "otel_traces").unwrap(),
    );
    t.attributes = match variant {
        Variant::Map => Attributes::Map,
        Variant::Json => Attributes::Json,
    };
    t.attribute_keys_columns = keys;
    t
}

fn encode(t: &TableOptions, format: InsertFormat, compression: Compression) -> Vec<u8> {
    let mut options = EncoderOptions::new(format);
    options.compression = compression;
    let mut enc = Encoder::with_options(t, options).unwrap();
    assert_eq!(enc.push_request(&request()).unwrap(), 5);
    assert_eq!(enc.rows(), 5);
    let body = enc.finish().to_vec();
    assert_eq!(enc.rows(), 0);
    body
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn f64(&mut self) -> J {
        let f = f64::from_le_bytes(self.take(8).try_into().unwrap());
        match f {
            f if f.is_nan() => json!("nan"),
            f if f == f64::INFINITY => json!("inf"),
            f if f == f64::NEG_INFINITY => json!("-inf"),
            f => json!(f),
        }
    }
    fn varint(&mut self) -> u64 {
        let mut v = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8();
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        v
    }
    fn string(&mut self) -> String {
        let n = self.varint() as usize;
        String::from_utf8(self.take(n).to_vec()).expect("utf-8 string")
    }

    /// One RowBinary value of column type `t`.
    fn row_value(&mut self, t: &T) -> J {
        match t {
            T::String => json!(self.string()),
            T::LowCardinality(inner) if **inner == T::String => json!(self.string()),
            T::DateTime64(9) | T::Int64 => json!(self.i64()),
            T::UInt64 => json!(self.u64()),
            T::Array(inner) => {
                let n = self.varint();
                J::Array((0..n).map(|_| self.row_value(inner)).collect())
            }
            T::Map(k, v) => {
                let n = self.varint();
                J::Array(
                    (0..n)
                        .map(|_| json!([self.row_value(k), self.row_value(v)]))
                        .collect(),
                )
            }
            T::Json => self.json_object(),
            other => panic!("reader does not know {other}"),
        }
    }

    /// Binary JSON: var-int paths, then each path and its Dynamic value.
    fn json_object(&mut self) -> J {
        let n = self.varint();
        let mut o = serde_json::Map::new();
        for _ in 0..n {
            let path = self.string();
            let (ty, value) = self.dynamic();
            assert!(
                o.insert(path.clone(), json!([ty, value])).is_none(),
                "path {path} twice"
            );
        }
        J::Object(o)
    }

    /// A binary-encoded data type, as its name and a reader for its values.
    fn data_type(&mut self) -> Ty {
        match self.u8() {
            0x00 => Ty::Nothing,
            0x0a => Ty::Int64,
            0x0e => Ty::Float64,
            0x15 => Ty::String,
            0x2d => Ty::Bool,
            0x1e => Ty::Array(Box::new(self.data_type())),
            0x23 => Ty::Nullable(Box::new(self.data_type())),
            0x2b => {
                self.u8();
                Ty::Dynamic
            }
            0x30 => {
                assert_eq!(self.u8(), 0, "JSON serialization version");
                let paths = self.varint();
                let types = self.u8();
                assert_eq!((self.varint(), self.varint(), self.varint()), (0, 0, 0));
                Ty::Json(paths, types)
            }
            other => panic!("unknown type tag {other:#x}"),
        }
    }

    fn dynamic(&mut self) -> (String, J) {
        let ty = self.data_type();
        let value = self.typed(&ty);
        (ty.name(), value)
    }

    fn typed(&mut self, ty: &Ty) -> J {
        match ty {
            Ty::Nothing => J::Null,
            Ty::Int64 => json!(self.i64()),
            Ty::Float64 => self.f64(),
            Ty::String => json!(self.string()),
            Ty::Bool => json!(self.u8() != 0),
            Ty::Array(inner) => {
                let n = self.varint();
                J::Array((0..n).map(|_| self.typed(inner)).collect())
            }
            Ty::Nullable(inner) => {
                if self.u8() == 1 {
                    J::Null
                } else {
                    self.typed(inner)
                }
            }
            Ty::Dynamic => {
                let (t, v) = self.dynamic();
                json!([t, v])
            }
            Ty::Json(..) => self.json_object(),
        }
    }
}

enum Ty {
    Nothing,
    Int64,
    Float64,
    String,
    Bool,
    Array(Box<Ty>),
    Nullable(Box<Ty>),
    Dynamic,
    Json(u64, u8),
}

impl Ty {
    /// A type's name as Native writes it (the inverse of [`Ty::name`]).
    fn parse(name: &str) -> Ty {
        let inner = |prefix: &str| {
            name.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix(')'))
                .map(|r| Box::new(Ty::parse(r)))
        };
        if let Some(t) = inner("Array(") {
            return Ty::Array(t);
        }
        if let Some(t) = inner("Nullable(") {
            return Ty::Nullable(t);
        }
        if let Some(params) = name
            .strip_prefix("JSON(max_dynamic_types=")
            .and_then(|r| r.strip_suffix(')'))
        {
            let (types, paths) = params.split_once(", max_dynamic_paths=").unwrap();
            return Ty::Json(paths.parse().unwrap(), types.parse().unwrap());
        }
        match name {
            "Int64" => Ty::Int64,
            "Float64" => Ty::Float64,
            "String" => Ty::String,
            "Bool" => Ty::Bool,
            "Dynamic" => Ty::Dynamic,
            other => panic!("unknown type name {other}"),
        }
    }

    fn name(&self) -> String {
        match self {
            Ty::Nothing => "Nothing".into(),
            Ty::Int64 => "Int64".into(),
            Ty::Float64 => "Float64".into(),
            Ty::String => "String".into(),
            Ty::Bool => "Bool".into(),
            Ty::Array(t) => format!("Array({})", t.name()),
            Ty::Nullable(t) => format!("Nullable({})", t.name()),
            Ty::Dynamic => "Dynamic".into(),
            Ty::Json(p, t) => format!("JSON(max_dynamic_types={t}, max_dynamic_paths={p})"),
        }
    }
}

/// Reads a RowBinary body with the schema's insert columns of `t`.
fn read_rowbinary(t: &TableOptions, body: &[u8]) -> Vec<J> {
    let cols = insert_columns(t);
    let mut r = Reader { buf: body, pos: 0 };
    let mut rows = Vec::new();
    while r.pos < body.len() {
        let mut o = serde_json::Map::new();
        for c in &cols {
            o.insert(c.name().to_string(), r.row_value(&c.ch_type));
        }
        rows.push(J::Object(o));
    }
    rows
}

/// What a Native column's state prefix said: needed to read its data.
enum Prefix {
    None,
    Inner(Box<Prefix>),
    Map(Box<Prefix>, Box<Prefix>),
    /// A flattened `JSON`: its paths, each with its flattened `Dynamic`.
    Json(Vec<(String, Prefix)>),
    /// A flattened `Dynamic`: its types, each with its own prefix.
    Dynamic(Vec<(Ty, Prefix)>),
}

impl Reader<'_> {
    fn native_prefix(&mut self, t: &T) -> Prefix {
        match t {
            T::LowCardinality(_) => {
                assert_eq!(self.u64(), 1, "LowCardinality key version");
                Prefix::None
            }
            T::Array(inner) => Prefix::Inner(Box::new(self.native_prefix(inner))),
            T::Map(k, v) => Prefix::Map(
                Box::new(self.native_prefix(k)),
                Box::new(self.native_prefix(v)),
            ),
            T::Json => self.json_prefix(),
            _ => Prefix::None,
        }
    }

    /// `u64 3` (flattened), the paths, each path's `Dynamic` prefix.
    fn json_prefix(&mut self) -> Prefix {
        assert_eq!(self.u64(), 3, "JSON serialization: flattened");
        let paths: Vec<String> = (0..self.varint()).map(|_| self.string()).collect();
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted, "paths in bytewise order");
        Prefix::Json(
            paths
                .into_iter()
                .map(|p| (p, self.dynamic_prefix()))
                .collect(),
        )
    }

    /// `u64 3` (flattened), the type names, each type's prefix.
    fn dynamic_prefix(&mut self) -> Prefix {
        assert_eq!(self.u64(), 3, "Dynamic serialization: flattened");
        let types: Vec<Ty> = (0..self.varint())
            .map(|_| Ty::parse(&self.string()))
            .collect();
        let names: Vec<String> = types.iter().map(Ty::name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "types in order of their names");
        Prefix::Dynamic(
            types
                .into_iter()
                .map(|t| {
                    let p = self.typed_prefix(&t);
                    (t, p)
                })
                .collect(),
        )
    }

    fn typed_prefix(&mut self, t: &Ty) -> Prefix {
        match t {
            Ty::Array(inner) | Ty::Nullable(inner) => {
                Prefix::Inner(Box::new(self.typed_prefix(inner)))
            }
            Ty::Dynamic => self.dynamic_prefix(),
            Ty::Json(..) => self.json_prefix(),
            _ => Prefix::None,
        }
    }

    fn native_data(&mut self, t: &T, p: &Prefix, n: usize) -> Vec<J> {
        match (t, p) {
            (T::String, _) => (0..n).map(|_| json!(self.string())).collect(),
            (T::DateTime64(9), _) => (0..n).map(|_| json!(self.i64())).collect(),
            (T::UInt64, _) => (0..n).map(|_| json!(self.u64())).collect(),
            (T::LowCardinality(inner), _) if **inner == T::String => {
                if n == 0 {
                    return Vec::new();
                }
                let flags = self.u64();
                assert_eq!(flags & !0xff, (1 << 9) | (1 << 10), "LowCardinality flags");
                let keys: Vec<String> = (0..self.u64()).map(|_| self.string()).collect();
                assert_eq!(self.u64() as usize, n, "LowCardinality rows");
                let width = 1 << (flags & 0xff);
                (0..n)
                    .map(|_| {
                        let mut b = [0u8; 8];
                        b[..width].copy_from_slice(self.take(width));
                        json!(keys[u64::from_le_bytes(b) as usize])
                    })
                    .collect()
            }
            (T::Array(inner), Prefix::Inner(p)) => {
                let offsets: Vec<u64> = (0..n).map(|_| self.u64()).collect();
                let items =
                    self.native_data(inner, p, offsets.last().copied().unwrap_or(0) as usize);
                split(&offsets, items)
            }
            (T::Map(k, v), Prefix::Map(pk, pv)) => {
                let offsets: Vec<u64> = (0..n).map(|_| self.u64()).collect();
                let total = offsets.last().copied().unwrap_or(0) as usize;
                let keys = self.native_data(k, pk, total);
                let values = self.native_data(v, pv, total);
                let pairs = keys
                    .into_iter()
                    .zip(values)
                    .map(|(k, v)| json!([k, v]))
                    .collect();
                split(&offsets, pairs)
            }
            (T::Json, p) => self.json_data(p, n),
            (other, _) => panic!("native reader does not know {other}"),
        }
    }

    /// `n` rows of a flattened `JSON` column, each `{path: [type, value]}` of its non-NULL
    /// paths (as the RowBinary reader gives them).
    fn json_data(&mut self, p: &Prefix, n: usize) -> Vec<J> {
        let Prefix::Json(paths) = p else {
            panic!("JSON data without a JSON prefix")
        };
        let mut rows = vec![serde_json::Map::new(); n];
        for (path, dynamic) in paths {
            let mut present = 0;
            for (row, value) in rows.iter_mut().zip(self.dynamic_data(dynamic, n)) {
                if value[0] != "Nothing" {
                    row.insert(path.clone(), value);
                    present += 1;
                }
            }
            assert!(present > 0, "path {path} with no value in the block");
        }
        rows.into_iter().map(J::Object).collect()
    }

    /// `n` rows of a flattened `Dynamic` column, each `[type, value]` (`["Nothing", null]`
    /// for NULL, as the RowBinary reader gives them).
    fn dynamic_data(&mut self, p: &Prefix, n: usize) -> Vec<J> {
        let Prefix::Dynamic(types) = p else {
            panic!("Dynamic data without a Dynamic prefix")
        };
        let width = match types.len() {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        };
        let discriminators: Vec<usize> = (0..n)
            .map(|_| {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(self.take(width));
                u64::from_le_bytes(b) as usize
            })
            .collect();
        let mut columns: Vec<std::vec::IntoIter<J>> = types
            .iter()
            .enumerate()
            .map(|(i, (t, p))| {
                let count = discriminators.iter().filter(|&&d| d == i).count();
                assert!(count > 0, "type {} with no value", t.name());
                self.typed_data(t, p, count).into_iter()
            })
            .collect();
        discriminators
            .into_iter()
            .map(|d| match types.get(d) {
                Some((t, _)) => json!([t.name(), columns[d].next().unwrap()]),
                None => {
                    assert_eq!(d, types.len(), "NULL is the number of types");
                    json!(["Nothing", null])
                }
            })
            .collect()
    }

    fn typed_data(&mut self, t: &Ty, p: &Prefix, n: usize) -> Vec<J> {
        match (t, p) {
            (Ty::Int64, _) => (0..n).map(|_| json!(self.i64())).collect(),
            (Ty::Float64, _) => (0..n).map(|_| self.f64()).collect(),
            (Ty::String, _) => (0..n).map(|_| json!(self.string())).collect(),
            (Ty::Bool, _) => (0..n).map(|_| json!(self.u8() != 0)).collect(),
            (Ty::Nullable(inner), Prefix::Inner(p)) => {
                let nulls: Vec<bool> = (0..n).map(|_| self.u8() == 1).collect();
                let values = self.typed_data(inner, p, n);
                nulls
                    .into_iter()
                    .zip(values)
                    .map(|(null, v)| if null { J::Null } else { v })
                    .collect()
            }
            (Ty::Array(inner), Prefix::Inner(p)) => {
                let offsets: Vec<u64> = (0..n).map(|_| self.u64()).collect();
                let items =
                    self.typed_data(inner, p, offsets.last().copied().unwrap_or(0) as usize);
                split(&offsets, items)
            }
            (Ty::Dynamic, p) => self.dynamic_data(p, n),
            (Ty::Json(..), p) => self.json_data(p, n),
            (t, _) => panic!("no Native column of {}", t.name()),
        }
    }
}

fn split(offsets: &[u64], items: Vec<J>) -> Vec<J> {
    let mut items = items.into_iter();
    let mut prev = 0;
    offsets
        .iter()
        .map(|&end| {
            let row = items.by_ref().take((end - prev) as usize).collect();
            prev = end;
            J::Array(row)
        })
        .collect()
}

/// Reads a Native body: every block's header must list exactly the schema's insert
/// columns, names and types, in order.
fn read_native(t: &TableOptions, body: &[u8]) -> Vec<J> {
    let cols = insert_columns(t);
    let mut r = Reader { buf: body, pos: 0 };
    let mut rows = Vec::new();
    while r.pos < body.len() {
        let ncols = r.varint() as usize;
        let nrows = r.varint() as usize;
        let header: Vec<(String, String)> = cols
            .iter()
            .map(|c| (c.name().to_string(), c.ch_type.to_string()))
            .collect();
        let mut got_header = Vec::new();
        let mut columns = Vec::new();
        for c in &cols {
            let name = r.string();
            let ty = r.string();
            got_header.push((name, ty));
            let prefix = r.native_prefix(&c.ch_type);
            columns.push(r.native_data(&c.ch_type, &prefix, nrows));
        }
        assert_eq!(ncols, cols.len());
        assert_eq!(got_header, header, "Native header vs schema insert columns");
        for i in 0..nrows {
            let mut o = serde_json::Map::new();
            for (c, values) in cols.iter().zip(&columns) {
                o.insert(c.name().to_string(), values[i].clone());
            }
            rows.push(J::Object(o));
        }
    }
    rows
}

#[test]
fn rowbinary_rows_match_the_golden_rows_for_every_variant() {
    for (variant, keys) in [
        (Variant::Map, false),
        (Variant::Json, true),
        (Variant::Json, false),
    ] {
        let t = table(variant, keys);
        let body = encode(&t, InsertFormat::RowBinary, Compression::None);
        let got = read_rowbinary(&t, &body);
        assert_rows_eq(
            &got,
            &expected_rows(variant, keys),
            &format!("RowBinary {variant:?} keys={keys}"),
        );
    }
}

#[test]
fn native_rows_match_the_golden_rows_for_every_variant() {
    for (variant, keys) in [
        (Variant::Map, false),
        (Variant::Json, true),
        (Variant::Json, false),
    ] {
        let t = table(variant, keys);
        let body = encode(&t, InsertFormat::Native, Compression::None);
        let got = read_native(&t, &body);
        assert_rows_eq(
            &got,
            &expected_rows(variant, keys),
            &format!("Native {variant:?} keys={keys}"),
        );
    }
}

#[test]
fn native_cuts_blocks_by_size_and_every_block_carries_the_schema_header() {
    for variant in [Variant::Map, Variant::Json] {
        let t = table(variant, false);
        let mut options = EncoderOptions::new(InsertFormat::Native);
        options.compression = Compression::None;
        options.native_block_bytes = 1;
        let mut enc = Encoder::with_options(&t, options).unwrap();
        // A block is cut after every record.
        let req = request();
        for _ in 0..60 {
            enc.push_request(&req).unwrap();
        }
        let body = enc.finish();
        let got = read_native(&t, &body);
        assert_eq!(got.len(), 300);
        let want = expected_rows(variant, false);
        for (i, row) in got.chunks(5).enumerate() {
            assert_rows_eq(row, &want, &format!("{variant:?} copy {i}"));
        }
    }
}

#[test]
fn lz4_body_decompresses_to_the_plain_body() {
    for format in [InsertFormat::RowBinary, InsertFormat::Native] {
        let t = table(Variant::Map, false);
        let plain = encode(&t, format, Compression::None);
        let compressed = encode(&t, format, Compression::Lz4);
        assert!(compressed.len() < plain.len(), "{format:?}");
        assert_eq!(
            compress::decompress(&compressed).unwrap(),
            plain,
            "{format:?}"
        );
    }
}

#[test]
fn finish_starts_a_new_independent_body() {
    let t = table(Variant::Json, true);
    let mut options = EncoderOptions::new(InsertFormat::RowBinary);
    options.compression = Compression::None;
    let mut enc = Encoder::with_options(&t, options).unwrap();
    assert!(enc.finish().is_empty());
    enc.push_request(&request()).unwrap();
    let first = enc.finish();
    enc.push_request(&request()).unwrap();
    let second = enc.finish();
    assert_eq!(first, second);
    assert_eq!(read_rowbinary(&t, &first).len(), 5);
}

#[test]
fn insert_sql_names_the_schema_columns_and_format() {
    let t = table(Variant::Map, false);
    let enc = Encoder::new(&t, InsertFormat::Native).unwrap();
    assert_eq!(
        enc.insert_sql(),
        tracehouse_schema::insert_sql(&t, InsertFormat::Native)
    );
    assert!(enc.insert_sql().ends_with("FORMAT Native"));
    let cols: Vec<(&str, String)> = enc.columns().map(|(n, t)| (n, t.to_string())).collect();
    let schema: Vec<(&str, String)> = insert_columns(&t)
        .iter()
        .map(|c| (c.name(), c.ch_type.to_string()))
        .collect();
    assert_eq!(cols, schema);
}
