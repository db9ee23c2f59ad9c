//! Unit tests of `proto.rs`.

use super::*;
use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};

fn any(v: V) -> Vec<u8> {
    AnyValue { value: Some(v) }.encode_to_vec()
}

#[test]
fn scalar_values_are_read_in_place() {
    assert_eq!(
        any_value(&any(V::StringValue("é".into()))).unwrap(),
        Value::Str("é".as_bytes())
    );
    assert_eq!(
        any_value(&any(V::BoolValue(true))).unwrap(),
        Value::Bool(true)
    );
    assert_eq!(any_value(&any(V::IntValue(-5))).unwrap(), Value::Int(-5));
    assert_eq!(
        any_value(&any(V::DoubleValue(1.5))).unwrap(),
        Value::Double(1.5)
    );
    assert_eq!(
        any_value(&any(V::BytesValue(vec![0, 1]))).unwrap(),
        Value::Bytes(&[0, 1])
    );
    assert_eq!(any_value(&[]).unwrap(), Value::Empty);
    assert_eq!(
        any_value(&any(V::StringValueStrindex(3))).unwrap(),
        Value::Empty
    );
}

#[test]
fn unusual_shapes_are_left_to_prost() {
    // Two values in one AnyValue.
    let mut two = any(V::IntValue(1));
    two.extend(any(V::IntValue(2)));
    assert_eq!(any_value(&two), Err(Unusual));
    // A string that is not UTF-8.
    assert_eq!(any_value(&[0x0a, 1, 0xff]), Err(Unusual));
    // A known field with the wrong wire type (string_value as a varint).
    assert_eq!(any_value(&[0x08, 1]), Err(Unusual));
    // A truncated length.
    assert_eq!(any_value(&[0x0a, 5, b'a']), Err(Unusual));
    // A group.
    assert!(Fields::new(&[0x0b]).next_field().is_err());
    // An overlong varint.
    let mut f = Fields::new(&[
        0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
    ]);
    assert!(f.next_field().is_err());
}

#[test]
fn unknown_fields_are_skipped() {
    // Field 20 (varint), field 21 (fixed64), field 22 (len), field 23 (fixed32), then
    // the string value.
    let mut b = vec![0xa0, 0x01, 7, 0xa9, 0x01];
    b.extend([0; 8]);
    b.extend([0xb2, 0x01, 2, b'x', b'y', 0xbd, 0x01, 0, 0, 0, 0]);
    b.extend(any(V::StringValue("v".into())));
    assert_eq!(any_value(&b).unwrap(), Value::Str(b"v"));
}

#[test]
fn arrays_and_kvlists_are_read_when_rendered_or_checked() {
    use opentelemetry_proto::tonic::common::v1::ArrayValue;
    let ok = KeyValue {
        key: "a".into(),
        value: Some(AnyValue {
            value: Some(V::ArrayValue(ArrayValue {
                values: vec![AnyValue {
                    value: Some(V::IntValue(1)),
                }],
            })),
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let got = kv(&ok).unwrap();
    assert_eq!(got.key, b"a");
    assert!(matches!(got.value, Value::Array(_)));
    assert_eq!(check_kvs(&[&ok]), Ok(()));
    // An array whose element holds a string that is not UTF-8: refused when read.
    let bad = [0x0a, 1, b'a', 0x12, 7, 0x2a, 5, 0x0a, 3, 0x0a, 1, 0xff];
    assert!(matches!(kv(&bad).unwrap().value, Value::Array(_)));
    assert_eq!(check_kvs(&[&bad]), Err(Unusual));
}

#[test]
fn the_key_alone_is_the_key_kv_reads() {
    let plain = KeyValue {
        key: "http.route".into(),
        value: Some(AnyValue {
            value: Some(V::StringValue("/x".into())),
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let bodies: Vec<Vec<u8>> = vec![
        plain.clone(),
        // Key only.
        vec![0x0a, 1, b'k'],
        // Value first, then the key: the general path.
        [&plain[12..], &plain[..12]].concat(),
        // The key twice: the last one counts, as in prost.
        [&plain[..12], &[0x0a, 1, b'z'][..]].concat(),
        // Nothing at all: the empty key.
        vec![],
    ];
    for b in &bodies {
        assert_eq!(kv_key(b).unwrap(), kv(b).unwrap().key, "{b:?}");
    }
    // A key that is not UTF-8 is refused, as kv refuses it.
    assert!(kv_key(&[0x0a, 1, 0xff]).is_err());
}
