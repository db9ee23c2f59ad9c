//! Unit tests of the flattened `JSON` writer: byte for byte what the engine writes for the
//! same rows (ClickHouse 26.9, `SELECT … FORMAT Native SETTINGS
//! output_format_native_use_flattened_dynamic_and_json_serialization = 1` of the rows given
//! as JSON text), and rows taken back.

use super::*;
use crate::decode::proto;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, KeyValueList};
use prost::Message;

fn v(value: Value) -> AnyValue {
    AnyValue { value: Some(value) }
}
fn s(x: &str) -> AnyValue {
    v(Value::StringValue(x.into()))
}
fn i(x: i64) -> AnyValue {
    v(Value::IntValue(x))
}
fn arr(values: Vec<AnyValue>) -> AnyValue {
    v(Value::ArrayValue(ArrayValue { values }))
}
fn kvl(values: Vec<KeyValue>) -> AnyValue {
    v(Value::KvlistValue(KeyValueList { values }))
}
fn kv(k: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(value),
        ..Default::default()
    }
}
pub(super) fn obj(attrs: &[KeyValue]) -> JsonObject {
    let bodies: Vec<Vec<u8>> = attrs.iter().map(Message::encode_to_vec).collect();
    let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    let mut o = JsonObject::default();
    o.fill(&refs, proto::SPAN_VALUE_DEPTH).unwrap();
    o
}

/// Expected bytes, spelled out.
#[derive(Default)]
struct Bytes(Vec<u8>);

impl Bytes {
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64s(mut self, vs: &[i64]) -> Self {
        for v in vs {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        self
    }
    fn f64(mut self, v: f64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn strs(mut self, ss: &[&str]) -> Self {
        for s in ss {
            put_str(&mut self.0, s.as_bytes());
        }
        self
    }
    /// A flattened `Dynamic` prefix: version 3 and the type names.
    fn types(self, names: &[&str]) -> Self {
        self.u64(3).bytes(&[names.len() as u8]).strs(names)
    }
}

fn written(c: &JsonColumn) -> Vec<u8> {
    let mut out = Vec::new();
    c.write_prefix(&mut out);
    c.write_data(&mut out);
    out
}

/// `{"a":[{"k":1},{"k":"x","m":[1,2]}],"b":["a",1,null],"c":[[1],[2,3]],"d":1.5}` and `{}`.
fn two_rows() -> JsonColumn {
    let mut c = JsonColumn::default();
    let first = obj(&[
        kv(
            "a",
            arr(vec![
                kvl(vec![kv("k", i(1))]),
                kvl(vec![kv("k", s("x")), kv("m", arr(vec![i(1), i(2)]))]),
            ]),
        ),
        kv("b", arr(vec![s("a"), i(1), AnyValue { value: None }])),
        kv("c", arr(vec![arr(vec![i(1)]), arr(vec![i(2), i(3)])])),
        kv("d", v(Value::DoubleValue(1.5))),
    ]);
    c.push_object(&first).unwrap();
    c.push_object(&obj(&[])).unwrap();
    c
}

#[test]
fn a_block_is_written_as_the_engine_writes_it_flattened() {
    let want = Bytes::default()
        // JSON: version 3, the paths, then each path's Dynamic prefix.
        .u64(3)
        .bytes(&[4])
        .strs(&["a", "b", "c", "d"])
        .types(&["Array(JSON(max_dynamic_types=16, max_dynamic_paths=256))"])
        // the nested JSON's own prefix: its paths k and m, their types
        .u64(3)
        .bytes(&[2])
        .strs(&["k", "m"])
        .types(&["Int64", "String"])
        .types(&["Array(Nullable(Int64))"])
        // b: the array's Dynamic elements, types in order of their names
        .types(&["Array(Dynamic)"])
        .types(&["Int64", "String"])
        .types(&["Array(Array(Nullable(Int64)))"])
        .types(&["Float64"])
        // a: row 0 has the one type, row 1 is NULL; one array of two objects
        .bytes(&[0, 1])
        .u64(2)
        .bytes(&[0, 1]) // k: Int64, String
        .i64s(&[1])
        .strs(&["x"])
        .bytes(&[1, 0]) // m: NULL, the array
        .u64(2)
        .bytes(&[0, 0])
        .i64s(&[1, 2])
        // b: ["a", 1, null]: String, Int64, NULL among the two types
        .bytes(&[0, 1])
        .u64(3)
        .bytes(&[1, 0, 2])
        .i64s(&[1])
        .strs(&["a"])
        // c: [[1], [2, 3]]
        .bytes(&[0, 1])
        .u64(2)
        .u64(1)
        .u64(3)
        .bytes(&[0, 0, 0])
        .i64s(&[1, 2, 3])
        // d
        .bytes(&[0, 1])
        .f64(1.5);
    assert_eq!(written(&two_rows()), want.0);
}

#[test]
fn objects_of_an_array_are_rows_of_one_column() {
    // Array(JSON) `[{"x":1},{"y":"s"}]`: the elements' column, as the engine writes it
    // after the array's offsets.
    let mut c = JsonColumn::default();
    c.push_object(&obj(&[kv("x", i(1))])).unwrap();
    c.push_object(&obj(&[kv("y", s("s"))])).unwrap();
    let mut prefix = Vec::new();
    c.write_prefix(&mut prefix);
    let mut data = Vec::new();
    c.write_data(&mut data);
    let want_prefix = Bytes::default()
        .u64(3)
        .bytes(&[2])
        .strs(&["x", "y"])
        .types(&["Int64"])
        .types(&["String"]);
    assert_eq!(prefix, want_prefix.0);
    assert_eq!(
        data,
        [&[0u8, 1][..], &1i64.to_le_bytes(), &[1, 0], b"\x01s"].concat()
    );
}

#[test]
fn paths_are_written_in_bytewise_order_whatever_order_they_came_in() {
    let mut c = JsonColumn::default();
    c.push_object(&obj(&[kv("zeta", i(1))])).unwrap();
    c.push_object(&obj(&[kv("alpha", i(2)), kv("Zeta", i(3))]))
        .unwrap();
    let mut prefix = Vec::new();
    c.write_prefix(&mut prefix);
    let want = Bytes::default()
        .u64(3)
        .bytes(&[3])
        .strs(&["Zeta", "alpha", "zeta"]);
    assert_eq!(&prefix[..want.0.len()], want.0);
}

#[test]
fn rows_taken_back_leave_the_block_as_if_never_written() {
    let mut c = two_rows();
    let mut marks = Vec::new();
    c.mark(&mut marks);
    // New paths, new types of known paths, nested objects: all after the mark.
    c.push_object(&obj(&[
        kv("d", s("now a string")),
        kv("e", arr(vec![kvl(vec![kv("deep", i(7))])])),
    ]))
    .unwrap();
    c.push_object(&obj(&[kv("b", arr(vec![i(9)]))])).unwrap();
    c.rollback(&mut marks.iter().copied());
    assert_eq!(written(&c), written(&two_rows()));
    // And the column goes on from there as a fresh one would.
    let mut fresh = two_rows();
    for col in [&mut c, &mut fresh] {
        col.push_object(&obj(&[kv("d", i(4))])).unwrap();
    }
    assert_eq!(written(&c), written(&fresh));
}

#[test]
fn a_path_given_twice_in_one_row_is_refused() {
    let mut c = JsonColumn::default();
    let mut body = Vec::new();
    put_varint(&mut body, 2);
    for _ in 0..2 {
        put_str(&mut body, b"p");
        body.extend_from_slice(&[crate::rows::json::tag::INT64]);
        body.extend_from_slice(&1i64.to_le_bytes());
    }
    assert_eq!(c.push_binary(&mut &body[..]), Err(Malformed));
}

#[test]
fn a_cleared_column_starts_a_new_block() {
    let mut c = two_rows();
    c.clear();
    c.push_object(&obj(&[kv("x", i(1))])).unwrap();
    let mut fresh = JsonColumn::default();
    fresh.push_object(&obj(&[kv("x", i(1))])).unwrap();
    assert_eq!(written(&c), written(&fresh));
    assert!(c.data_len() > 0);
}
