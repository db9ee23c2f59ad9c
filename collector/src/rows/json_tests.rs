//! Unit tests of `json.rs`.

use super::*;
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
fn obj(attrs: &[KeyValue]) -> JsonObject {
    let bodies: Vec<Vec<u8>> = attrs.iter().map(Message::encode_to_vec).collect();
    let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    let mut o = JsonObject::default();
    o.fill(&refs, proto::SPAN_VALUE_DEPTH).unwrap();
    o
}

#[test]
fn kvlists_flatten_to_dotted_paths_sorted_with_null_paths_only_in_keys() {
    let o = obj(&[
        kv("service.name", s("checkout")),
        kv(
            "k8s",
            kvl(vec![
                kv("pod", kvl(vec![kv("name", s("p-1"))])),
                kv("ns", s("prod")),
            ]),
        ),
        kv("empty.map", kvl(vec![])),
        KeyValue {
            key: "nothing".into(),
            value: None,
            ..Default::default()
        },
        kv("also.nothing", AnyValue { value: None }),
    ]);
    let keys: Vec<&str> = o.keys().map(|k| std::str::from_utf8(k).unwrap()).collect();
    assert_eq!(
        keys,
        [
            "also.nothing",
            "k8s.ns",
            "k8s.pod.name",
            "nothing",
            "service.name"
        ]
    );
    let stored: Vec<&str> = o
        .stored()
        .map(|(p, _)| std::str::from_utf8(p).unwrap())
        .collect();
    assert_eq!(stored, ["k8s.ns", "k8s.pod.name", "service.name"]);
    assert_eq!(o.stored_len(), 3);
}

#[test]
fn no_bytes_are_null_as_go_marshals_them() {
    let none = v(Value::BytesValue(vec![]));
    let o = obj(&[kv("b", none.clone())]);
    assert_eq!(o.keys().collect::<Vec<_>>(), [b"b".as_slice()]);
    assert_eq!(o.stored_len(), 0);
    assert_eq!(
        array_type(vec![none, s("x")]),
        [tag::ARRAY, tag::NULLABLE, tag::STRING, 2, 1, 0, 1, b'x']
    );
}

#[test]
fn a_repeated_path_keeps_the_last_value() {
    let o = obj(&[
        kv("a.b", i(1)),
        kv("x", s("first")),
        kv("a", kvl(vec![kv("b", i(2))])),
        kv("x", s("second")),
    ]);
    let stored: Vec<(&str, Vec<u8>)> = o
        .stored()
        .map(|(p, v)| (std::str::from_utf8(p).unwrap(), v.to_vec()))
        .collect();
    let mut want_b = vec![tag::INT64];
    want_b.extend_from_slice(&2i64.to_le_bytes());
    let mut want_x = vec![tag::STRING, 6];
    want_x.extend_from_slice(b"second");
    assert_eq!(stored, [("a.b", want_b), ("x", want_x)]);
}

/// One object filled with each of `sets` in turn: what it holds after each fill.
fn refill(sets: &[Vec<KeyValue>]) -> Vec<(Vec<Vec<u8>>, Vec<u8>)> {
    let mut o = JsonObject::default();
    sets.iter()
        .map(|attrs| {
            let bodies: Vec<Vec<u8>> = attrs.iter().map(Message::encode_to_vec).collect();
            let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
            o.fill(&refs, proto::SPAN_VALUE_DEPTH).unwrap();
            let mut binary = Vec::new();
            o.write_binary(&mut binary);
            (o.keys().map(<[u8]>::to_vec).collect(), binary)
        })
        .collect()
}

#[test]
fn a_reused_object_sorts_each_fill_as_a_fresh_one() {
    // The same paths in the same order (the sort is reused, the values differ), a
    // sequence of the same bytes cut differently, another order, a repeated path,
    // and the first sequence again.
    let sets = vec![
        vec![kv("z", i(1)), kv("a.b", s("x")), kv("m", i(3))],
        vec![kv("z", i(7)), kv("a.b", s("yy")), kv("m", i(9))],
        vec![kv("za", i(1)), kv(".b", s("x")), kv("m", i(3))],
        vec![kv("m", i(3)), kv("z", i(1)), kv("a.b", s("x"))],
        vec![
            kv("z", i(1)),
            kv("a", kvl(vec![kv("b", i(5))])),
            kv("z", i(2)),
        ],
        vec![
            kv("z", i(1)),
            kv("a", kvl(vec![kv("b", i(6))])),
            kv("z", i(4)),
        ],
        vec![kv("z", i(2)), kv("a.b", s("w")), kv("m", i(0))],
    ];
    let reused = refill(&sets);
    for (set, got) in sets.iter().zip(&reused) {
        let fresh = obj(set);
        let mut binary = Vec::new();
        fresh.write_binary(&mut binary);
        let keys: Vec<Vec<u8>> = fresh.keys().map(<[u8]>::to_vec).collect();
        assert_eq!(got, &(keys, binary), "{set:?}");
    }
    // The repeated path keeps its last value also when the sort is reused.
    let mut want = vec![tag::INT64];
    want.extend_from_slice(&4i64.to_le_bytes());
    assert!(reused[5].1.ends_with(&want));
}

#[test]
fn scalars_are_typed_dynamic_values() {
    let o = obj(&[
        kv("b", v(Value::BoolValue(true))),
        kv("d", v(Value::DoubleValue(1.0))),
        kv("i", i(-1)),
        kv("s", s("é")),
        kv("y", v(Value::BytesValue(vec![1, 2, 3]))),
    ]);
    let mut out = Vec::new();
    o.write_binary(&mut out);
    let mut want = vec![5];
    want.extend_from_slice(&[1, b'b', tag::BOOL, 1]);
    want.extend_from_slice(&[1, b'd', tag::FLOAT64]);
    want.extend_from_slice(&1.0f64.to_le_bytes());
    want.extend_from_slice(&[1, b'i', tag::INT64]);
    want.extend_from_slice(&(-1i64).to_le_bytes());
    want.extend_from_slice(&[1, b's', tag::STRING, 2, 0xc3, 0xa9]);
    want.extend_from_slice(&[1, b'y', tag::STRING, 4, b'A', b'Q', b'I', b'D']);
    assert_eq!(out, want);
}

fn array_type(values: Vec<AnyValue>) -> Vec<u8> {
    let o = obj(&[kv("a", arr(values))]);
    let (_, value) = o.stored().next().unwrap();
    value.to_vec()
}

#[test]
fn arrays_get_the_type_the_server_infers() {
    // Byte strings below are what the engine itself writes for these arrays
    // (SELECT '{"a":[…]}'::JSON FORMAT RowBinary).
    assert_eq!(
        array_type(vec![s("x"), AnyValue { value: None }]),
        [tag::ARRAY, tag::NULLABLE, tag::STRING, 2, 0, 1, b'x', 1]
    );
    assert_eq!(
        array_type(vec![]),
        [tag::ARRAY, tag::NULLABLE, tag::STRING, 0]
    );
    let ints = array_type(vec![i(1), i(2)]);
    assert_eq!(&ints[..4], [tag::ARRAY, tag::NULLABLE, tag::INT64, 2]);
    let mixed_numbers = array_type(vec![i(1), v(Value::DoubleValue(2.5))]);
    assert_eq!(
        &mixed_numbers[..5],
        [tag::ARRAY, tag::NULLABLE, tag::FLOAT64, 2, 0]
    );
    assert_eq!(&mixed_numbers[5..13], 1.0f64.to_le_bytes());
    assert_eq!(
        array_type(vec![s("x"), i(1)]),
        [
            [
                tag::ARRAY,
                tag::DYNAMIC,
                32,
                2,
                tag::STRING,
                1,
                b'x',
                tag::INT64
            ]
            .as_slice(),
            &1i64.to_le_bytes()
        ]
        .concat()
    );
    let nested = array_type(vec![arr(vec![i(1)]), arr(vec![])]);
    assert_eq!(
        &nested[..6],
        [tag::ARRAY, tag::ARRAY, tag::NULLABLE, tag::INT64, 2, 1]
    );
    assert_eq!(
        array_type(vec![kvl(vec![kv("k", i(1))])]),
        [
            [tag::ARRAY].as_slice(),
            &ARRAY_ELEMENT_JSON_TYPE,
            &[1, 1, 1, b'k', tag::INT64],
            &1i64.to_le_bytes()
        ]
        .concat()
    );
}
