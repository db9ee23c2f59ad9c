//! Unit tests of the OTLP/JSON reader.

use super::*;
use any_value::Value as V;

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> &'a V {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
        .unwrap_or_else(|| panic!("no attribute {key}"))
}

/// What the OpenTelemetry Collector's kafka exporter writes with
/// `encoding: otlp_json` (pdata's JSON marshaler: camelCase keys, hex ids,
/// 64-bit integers as strings, enums as numbers, empty fields omitted).
const COLLECTOR_SAMPLE: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}},{"key":"host.cpus","value":{"intValue":"8"}}]},"scopeSpans":[{"scope":{"name":"io.opentelemetry.http","version":"1.2.3"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173","traceState":"k=v","name":"GET /cart","kind":2,"startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712661000000000","attributes":[{"key":"http.status_code","value":{"intValue":"200"}},{"key":"ratio","value":{"doubleValue":0.25}},{"key":"ok","value":{"boolValue":true}},{"key":"blob","value":{"bytesValue":"AQID"}},{"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"},{"stringValue":"b"}]}}},{"key":"nested","value":{"kvlistValue":{"values":[{"key":"x","value":{"intValue":"1"}}]}}}],"droppedAttributesCount":1,"events":[{"timeUnixNano":"1544712660500000000","name":"exception","attributes":[{"key":"exception.type","value":{"stringValue":"E"}}]}],"links":[{"traceId":"5b8efff798038103d269b633813fc60d","spanId":"eee19b7ec3c1b175","traceState":"a=b","attributes":[{"key":"link.kind","value":{"stringValue":"follows"}}],"flags":256}],"status":{"message":"boom","code":2},"flags":257}]}],"schemaUrl":"https://opentelemetry.io/schemas/1.21.0"}]}"#;

#[test]
fn reads_what_the_collector_kafka_exporter_writes() {
    let req = decode(COLLECTOR_SAMPLE.as_bytes()).unwrap();
    let rs = &req.resource_spans[0];
    assert_eq!(rs.schema_url, "https://opentelemetry.io/schemas/1.21.0");
    let res = rs.resource.as_ref().unwrap();
    assert_eq!(
        attr(&res.attributes, "service.name"),
        &V::StringValue("checkout".into())
    );
    assert_eq!(attr(&res.attributes, "host.cpus"), &V::IntValue(8));
    let ss = &rs.scope_spans[0];
    assert_eq!(ss.scope.as_ref().unwrap().version, "1.2.3");
    let span = &ss.spans[0];
    assert_eq!(
        span.trace_id,
        [
            0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33, 0x81, 0x3f,
            0xc6, 0x0c
        ]
    );
    assert_eq!(
        span.span_id,
        [0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74]
    );
    assert_eq!(span.parent_span_id[7], 0x73);
    assert_eq!(span.trace_state, "k=v");
    assert_eq!(span.kind, SpanKind::Server as i32);
    assert_eq!(span.start_time_unix_nano, 1_544_712_660_000_000_000);
    assert_eq!(span.end_time_unix_nano, 1_544_712_661_000_000_000);
    assert_eq!(span.flags, 257);
    assert_eq!(span.dropped_attributes_count, 1);
    assert_eq!(
        attr(&span.attributes, "http.status_code"),
        &V::IntValue(200)
    );
    assert_eq!(attr(&span.attributes, "ratio"), &V::DoubleValue(0.25));
    assert_eq!(attr(&span.attributes, "ok"), &V::BoolValue(true));
    assert_eq!(
        attr(&span.attributes, "blob"),
        &V::BytesValue(vec![1, 2, 3])
    );
    let V::ArrayValue(tags) = attr(&span.attributes, "tags") else {
        panic!()
    };
    assert_eq!(tags.values.len(), 2);
    let V::KvlistValue(nested) = attr(&span.attributes, "nested") else {
        panic!()
    };
    assert_eq!(attr(&nested.values, "x"), &V::IntValue(1));
    assert_eq!(span.events[0].time_unix_nano, 1_544_712_660_500_000_000);
    assert_eq!(span.events[0].name, "exception");
    assert_eq!(span.links[0].span_id[7], 0x75);
    assert_eq!(span.links[0].flags, 256);
    let status = span.status.as_ref().unwrap();
    assert_eq!((status.code, status.message.as_str()), (2, "boom"));
}

#[test]
fn accepts_enum_names_numbers_as_numbers_and_snake_case_keys() {
    let json = r#"{"resource_spans":[{"scope_spans":[{"spans":[
        {"trace_id":"5B8EFFF798038103D269B633813FC60C","kind":"SPAN_KIND_CLIENT",
         "start_time_unix_nano":1544712660000000000,"end_time_unix_nano":"1544712660000000001",
         "status":{"code":"STATUS_CODE_ERROR"},
         "attributes":[{"key":"i","value":{"int_value":-42}},
                       {"key":"big","value":{"intValue":"-9223372036854775808"}},
                       {"key":"nan","value":{"doubleValue":"NaN"}},
                       {"key":"inf","value":{"doubleValue":"-Infinity"}},
                       {"key":"exp","value":{"doubleValue":1e-7}},
                       {"key":"url","value":{"bytesValue":"-_8"}},
                       {"key":"empty","value":{}},
                       {"key":"nullv","value":null}]}]}]}]}"#;
    let req = decode(json.as_bytes()).unwrap();
    let span = &req.resource_spans[0].scope_spans[0].spans[0];
    assert_eq!(span.trace_id[0], 0x5b);
    assert_eq!(span.kind, SpanKind::Client as i32);
    assert_eq!(span.start_time_unix_nano, 1_544_712_660_000_000_000);
    assert_eq!(span.end_time_unix_nano, 1_544_712_660_000_000_001);
    assert_eq!(span.status.as_ref().unwrap().code, StatusCode::Error as i32);
    assert_eq!(attr(&span.attributes, "i"), &V::IntValue(-42));
    assert_eq!(attr(&span.attributes, "big"), &V::IntValue(i64::MIN));
    assert!(matches!(attr(&span.attributes, "nan"), V::DoubleValue(d) if d.is_nan()));
    assert_eq!(
        attr(&span.attributes, "inf"),
        &V::DoubleValue(f64::NEG_INFINITY)
    );
    assert_eq!(attr(&span.attributes, "exp"), &V::DoubleValue(1e-7));
    assert_eq!(
        attr(&span.attributes, "url"),
        &V::BytesValue(vec![0xfb, 0xff])
    );
    let empty = span.attributes.iter().find(|kv| kv.key == "empty").unwrap();
    assert_eq!(empty.value, Some(AnyValue { value: None }));
    let nullv = span.attributes.iter().find(|kv| kv.key == "nullv").unwrap();
    assert_eq!(nullv.value, None);
}

#[test]
fn ignores_unknown_fields_and_reads_null_as_default() {
    let json = r#"{"resourceSpans":[{"resource":null,"future":{"a":[1,2]},
        "scopeSpans":[{"scope":null,"spans":[{"name":null,"events":null,"x":1}]}]}],
        "extra":true}"#;
    let req = decode(json.as_bytes()).unwrap();
    let rs = &req.resource_spans[0];
    assert!(rs.resource.is_none());
    assert_eq!(rs.scope_spans[0].spans[0], Span::default());
}

#[test]
fn errors_name_the_field_that_failed() {
    let cases = [
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}"#,
            "traceId: invalid hex",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"abc"}]}]}]}"#,
            "spanId: invalid hex",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":"SERVER"}]}]}]}"#,
            "kind: unknown enum value",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"-1"}]}]}]}"#,
            "startTimeUnixNano: -1 is out of range",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"flags":4294967296}]}]}]}"#,
            "flags: 4294967296 is out of range",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":{"intValue":"1.5"}}]}]}]}]}"#,
            "intValue: \"1.5\" is not an integer",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":{"bytesValue":"%%"}}]}]}]}]}"#,
            "bytesValue: invalid base64",
        ),
        (
            r#"{"resourceSpans":{}}"#,
            "array of OTLP/JSON ResourceSpans",
        ),
        (r#"{"resourceSpans":[]} trailing"#, "trailing characters"),
    ];
    for (json, want) in cases {
        let err = decode(json.as_bytes()).unwrap_err().to_string();
        assert!(err.contains(want), "{json}\n  got: {err}\n  want: {want}");
    }
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    let mut json = String::from(
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":"#,
    );
    let depth = 5000;
    for _ in 0..depth {
        json.push_str(r#"{"arrayValue":{"values":["#);
    }
    for _ in 0..depth {
        json.push_str("]}}");
    }
    json.push_str("}]}]}]}]}");
    let err = decode(json.as_bytes()).unwrap_err().to_string();
    assert!(err.contains("recursion limit"), "{err}");
}
