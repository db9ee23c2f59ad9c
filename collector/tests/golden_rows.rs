//! Golden rows: the golden request, encoded, read back by an independent reader of
//! the wire formats (written here from the ClickHouse format docs, driven only by the
//! schema crate's column types) and compared with the hand-written expected rows.

mod golden_fixture;

use golden_fixture::{Variant, assert_rows_eq, expected_rows, request};
use serde_json::{Value as J, json};
use tracehouse_collector::encode::{Compression, EncodeError, Encoder, EncoderOptions, compress};
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

impl Reader<'_> {
    fn native_prefix(&mut self, t: &T) {
        match t {
            T::LowCardinality(_) => assert_eq!(self.u64(), 1, "LowCardinality key version"),
            T::Array(inner) => self.native_prefix(inner),
            T::Map(k, v) => {
                self.native_prefix(k);
                self.native_prefix(v);
            }
            _ => {}
        }
    }

    fn native_data(&mut self, t: &T, n: usize) -> Vec<J> {
        match t {
            T::String => (0..n).map(|_| json!(self.string())).collect(),
            T::DateTime64(9) => (0..n).map(|_| json!(self.i64())).collect(),
            T::UInt64 => (0..n).map(|_| json!(self.u64())).collect(),
            T::LowCardinality(inner) if **inner == T::String => {
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
            T::Array(inner) => {
                let offsets: Vec<u64> = (0..n).map(|_| self.u64()).collect();
                let items = self.native_data(inner, offsets.last().copied().unwrap_or(0) as usize);
                split(&offsets, items)
            }
            T::Map(k, v) => {
                let offsets: Vec<u64> = (0..n).map(|_| self.u64()).collect();
                let total = offsets.last().copied().unwrap_or(0) as usize;
                let keys = self.native_data(k, total);
                let values = self.native_data(v, total);
                let pairs = keys
                    .into_iter()
                    .zip(values)
                    .map(|(k, v)| json!([k, v]))
                    .collect();
                split(&offsets, pairs)
            }
            other => panic!("native reader does not know {other}"),
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
            r.native_prefix(&c.ch_type);
            columns.push(r.native_data(&c.ch_type, nrows));
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
fn native_rows_match_the_golden_rows_for_the_map_variant() {
    let t = table(Variant::Map, false);
    let body = encode(&t, InsertFormat::Native, Compression::None);
    let got = read_native(&t, &body);
    assert_rows_eq(&got, &expected_rows(Variant::Map, false), "Native Map");
}

#[test]
fn native_cuts_blocks_by_size_and_every_block_carries_the_schema_header() {
    let t = table(Variant::Map, false);
    let mut options = EncoderOptions::new(InsertFormat::Native);
    options.compression = Compression::None;
    options.native_block_bytes = 1;
    let mut enc = Encoder::with_options(&t, options).unwrap();
    // 256 copies: the size check runs every 256 rows, so several blocks are cut.
    let req = request();
    for _ in 0..60 {
        enc.push_request(&req).unwrap();
    }
    let body = enc.finish();
    let got = read_native(&t, &body);
    assert_eq!(got.len(), 300);
    let want = expected_rows(Variant::Map, false);
    for (i, row) in got.chunks(5).enumerate() {
        assert_rows_eq(row, &want, &format!("copy {i}"));
    }
}

#[test]
fn native_json_is_refused_when_the_encoder_is_built() {
    let err = Encoder::new(&table(Variant::Json, true), InsertFormat::Native).unwrap_err();
    assert_eq!(err, EncodeError::NativeJson);
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
