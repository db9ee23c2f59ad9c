//! Short builders of OTLP attribute values for the test fixtures (the golden rows and the
//! conformance edge cases): `kv("k", arr(vec![s("a"), i(1)]))`.
#![allow(dead_code)] // each test binary uses a different subset

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, KeyValueList};

pub fn v(value: Value) -> AnyValue {
    AnyValue { value: Some(value) }
}
pub fn s(x: &str) -> AnyValue {
    v(Value::StringValue(x.into()))
}
pub fn i(x: i64) -> AnyValue {
    v(Value::IntValue(x))
}
pub fn d(x: f64) -> AnyValue {
    v(Value::DoubleValue(x))
}
pub fn b(x: bool) -> AnyValue {
    v(Value::BoolValue(x))
}
pub fn bytes(x: &[u8]) -> AnyValue {
    v(Value::BytesValue(x.to_vec()))
}
pub fn empty() -> AnyValue {
    AnyValue { value: None }
}
pub fn arr(values: Vec<AnyValue>) -> AnyValue {
    v(Value::ArrayValue(ArrayValue { values }))
}
pub fn kvl(values: Vec<KeyValue>) -> AnyValue {
    v(Value::KvlistValue(KeyValueList { values }))
}
pub fn kv(k: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(value),
        ..Default::default()
    }
}
