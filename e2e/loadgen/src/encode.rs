//! Record payloads: `otlp_proto` and `otlp_json`, byte for byte as the OpenTelemetry
//! Collector's kafka exporter writes them.
//!
//! `otlp_proto` is the prost encoding of the `ExportTraceServiceRequest`.
//!
//! `otlp_json` follows the Collector's `pdata` JSON marshaler (the one behind the kafka
//! exporter's `otlp_json` encoding), which implements the OTLP/JSON mapping:
//! lowerCamelCase field names; trace and span ids as lower-case hex, 64-bit integers
//! (`startTimeUnixNano`, `intValue`, …) as decimal strings; 32-bit integers and enums
//! (`kind`, `status.code`, `flags`) as numbers; bytes as standard base64; fields equal to
//! their default (empty string or list, 0, all-zero id) left out, while the message-typed
//! `resource`, `scope`, `status` and `value` are always written (possibly `{}`); doubles
//! in Go's shortest form (`1e+21`, `1.5e-7`, `0.25`, `100`).
//!
//! Why not the `with-serde` feature of `opentelemetry-proto`: it writes every field, defaults
//! included (`"traceState":""`, `"parentSpanId":""` on roots, `"droppedAttributesCount":0`),
//! turns NaN and infinities into `null`, and turning it on would rebuild the collector's
//! copy of the crate with serde for no use there. The writer below is small and exact.
//! Non-finite doubles (never generated) are written as the OTLP/JSON strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"`.

use std::fmt::Write as _;

use base64::Engine as _;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, InstrumentationScope, KeyValue, any_value::Value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message as _;

/// Payload encoding of a Kafka record (the exporter's `encoding` setting): the
/// collector's own definition, so both spell it the same.
pub use tracehouse_contract::Encoding;

/// The record payload for `req` in `encoding`.
pub fn encode(req: &ExportTraceServiceRequest, encoding: Encoding) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(req, encoding, &mut out);
    out
}

/// [`encode`] into `out` (cleared first), reusing its allocation: payloads are about
/// 100 KiB, and allocating and freeing one per record shows in the allocator's profile.
pub fn encode_into(req: &ExportTraceServiceRequest, encoding: Encoding, out: &mut Vec<u8>) {
    out.clear();
    match encoding {
        Encoding::OtlpProto => {
            out.reserve(req.encoded_len());
            // Cannot fail: a Vec grows as needed.
            let _ = req.encode(out);
        }
        Encoding::OtlpJson => {
            // The writer works on a String: lend it this buffer (empty, so valid UTF-8).
            let buf = String::from_utf8(std::mem::take(out)).unwrap_or_default();
            *out = write_json(req, buf).into_bytes();
        }
    }
}

/// The OTLP/JSON text of `req` (see the module docs for the exact rules).
pub fn to_otlp_json(req: &ExportTraceServiceRequest) -> String {
    write_json(req, String::new())
}

fn write_json(req: &ExportTraceServiceRequest, mut buf: String) -> String {
    buf.clear();
    buf.reserve(req.encoded_len() * 2);
    let mut w = Json {
        out: buf,
        first: Vec::with_capacity(16),
    };
    w.open();
    w.array("resourceSpans", &req.resource_spans, Json::resource_spans);
    w.close();
    w.out
}

/// A JSON object writer that tracks whether a comma is needed, like pdata's stream.
struct Json {
    out: String,
    /// Per open object/array: has a member been written yet?
    first: Vec<bool>,
}

impl Json {
    fn open(&mut self) {
        self.out.push('{');
        self.first.push(true);
    }

    fn close(&mut self) {
        self.out.push('}');
        self.first.pop();
    }

    /// Writes `"name":` preceded by a comma when needed.
    fn field(&mut self, name: &str) {
        self.comma();
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str("\":");
    }

    fn comma(&mut self) {
        if let Some(first) = self.first.last_mut() {
            if *first {
                *first = false;
            } else {
                self.out.push(',');
            }
        }
    }

    /// A non-empty list as `"name":[…]`; an empty one is left out.
    fn array<T>(&mut self, name: &str, items: &[T], each: fn(&mut Self, &T)) {
        if items.is_empty() {
            return;
        }
        self.field(name);
        self.out.push('[');
        self.first.push(true);
        for item in items {
            self.comma();
            each(self, item);
        }
        self.first.pop();
        self.out.push(']');
    }

    fn str_field(&mut self, name: &str, value: &str) {
        if !value.is_empty() {
            self.field(name);
            self.string(value);
        }
    }

    fn u32_field(&mut self, name: &str, value: u32) {
        if value != 0 {
            self.field(name);
            let _ = write!(self.out, "{value}");
        }
    }

    /// 64-bit integers are strings in OTLP/JSON.
    fn u64_field(&mut self, name: &str, value: u64) {
        if value != 0 {
            self.field(name);
            let _ = write!(self.out, "\"{value}\"");
        }
    }

    /// Ids as lower-case hex; empty or all-zero ids are left out (pdata's `IsEmpty`).
    fn id_field(&mut self, name: &str, id: &[u8]) {
        if id.iter().any(|&b| b != 0) {
            self.field(name);
            self.out.push('"');
            self.out.push_str(&crate::generate::hex(id));
            self.out.push('"');
        }
    }

    /// A JSON string, escaped as Go's jsoniter does without HTML escaping.
    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    /// Go's `strconv.AppendFloat(x, 'f' or 'e', -1, 64)` as jsoniter picks it: plain
    /// shortest digits, exponent form below 1e-6 and from 1e21 (`1e+21`, `1.5e-7`).
    fn double(&mut self, x: f64) {
        if x.is_nan() {
            self.out.push_str("\"NaN\"");
        } else if x.is_infinite() {
            self.out.push_str(if x > 0.0 {
                "\"Infinity\""
            } else {
                "\"-Infinity\""
            });
        } else if x == 0.0 || (1e-6..1e21).contains(&x.abs()) {
            let _ = write!(self.out, "{x}");
        } else {
            let start = self.out.len();
            let _ = write!(self.out, "{x:e}");
            // Rust writes `1e21`, Go `1e+21`; negative exponents already agree (`1.5e-7`).
            if let Some(e) = self.out[start..].find('e') {
                let at = start + e + 1;
                if self.out.as_bytes().get(at) != Some(&b'-') {
                    self.out.insert(at, '+');
                }
            }
        }
    }

    fn resource_spans(&mut self, rs: &ResourceSpans) {
        self.open();
        self.field("resource");
        self.resource(rs.resource.as_ref());
        self.array("scopeSpans", &rs.scope_spans, Self::scope_spans);
        self.str_field("schemaUrl", &rs.schema_url);
        self.close();
    }

    fn resource(&mut self, r: Option<&Resource>) {
        self.open();
        if let Some(r) = r {
            self.array("attributes", &r.attributes, Self::key_value);
            self.u32_field("droppedAttributesCount", r.dropped_attributes_count);
        }
        self.close();
    }

    fn scope_spans(&mut self, ss: &ScopeSpans) {
        self.open();
        self.field("scope");
        self.scope(ss.scope.as_ref());
        self.array("spans", &ss.spans, Self::span);
        self.str_field("schemaUrl", &ss.schema_url);
        self.close();
    }

    fn scope(&mut self, s: Option<&InstrumentationScope>) {
        self.open();
        if let Some(s) = s {
            self.str_field("name", &s.name);
            self.str_field("version", &s.version);
            self.array("attributes", &s.attributes, Self::key_value);
            self.u32_field("droppedAttributesCount", s.dropped_attributes_count);
        }
        self.close();
    }

    fn span(&mut self, s: &Span) {
        self.open();
        self.id_field("traceId", &s.trace_id);
        self.id_field("spanId", &s.span_id);
        self.str_field("traceState", &s.trace_state);
        self.id_field("parentSpanId", &s.parent_span_id);
        self.u32_field("flags", s.flags);
        self.str_field("name", &s.name);
        if s.kind != 0 {
            self.field("kind");
            let _ = write!(self.out, "{}", s.kind);
        }
        self.u64_field("startTimeUnixNano", s.start_time_unix_nano);
        self.u64_field("endTimeUnixNano", s.end_time_unix_nano);
        self.array("attributes", &s.attributes, Self::key_value);
        self.u32_field("droppedAttributesCount", s.dropped_attributes_count);
        self.array("events", &s.events, Self::event);
        self.u32_field("droppedEventsCount", s.dropped_events_count);
        self.array("links", &s.links, Self::link);
        self.u32_field("droppedLinksCount", s.dropped_links_count);
        self.field("status");
        self.status(s.status.as_ref());
        self.close();
    }

    fn status(&mut self, s: Option<&Status>) {
        self.open();
        if let Some(s) = s {
            self.str_field("message", &s.message);
            if s.code != 0 {
                self.field("code");
                let _ = write!(self.out, "{}", s.code);
            }
        }
        self.close();
    }

    fn event(&mut self, e: &Event) {
        self.open();
        self.u64_field("timeUnixNano", e.time_unix_nano);
        self.str_field("name", &e.name);
        self.array("attributes", &e.attributes, Self::key_value);
        self.u32_field("droppedAttributesCount", e.dropped_attributes_count);
        self.close();
    }

    fn link(&mut self, l: &Link) {
        self.open();
        self.id_field("traceId", &l.trace_id);
        self.id_field("spanId", &l.span_id);
        self.str_field("traceState", &l.trace_state);
        self.array("attributes", &l.attributes, Self::key_value);
        self.u32_field("droppedAttributesCount", l.dropped_attributes_count);
        self.u32_field("flags", l.flags);
        self.close();
    }

    fn key_value(&mut self, kv: &KeyValue) {
        self.open();
        self.str_field("key", &kv.key);
        self.field("value");
        self.any_value(kv.value.as_ref());
        self.close();
    }

    fn any_value(&mut self, v: Option<&AnyValue>) {
        self.open();
        match v.and_then(|v| v.value.as_ref()) {
            None => {}
            Some(Value::StringValue(s)) => {
                self.field("stringValue");
                self.string(s);
            }
            Some(Value::BoolValue(b)) => {
                self.field("boolValue");
                self.out.push_str(if *b { "true" } else { "false" });
            }
            Some(Value::IntValue(i)) => {
                self.field("intValue");
                let _ = write!(self.out, "\"{i}\"");
            }
            Some(Value::DoubleValue(d)) => {
                self.field("doubleValue");
                self.double(*d);
            }
            Some(Value::BytesValue(b)) => {
                self.field("bytesValue");
                self.out.push('"');
                base64::engine::general_purpose::STANDARD.encode_string(b, &mut self.out);
                self.out.push('"');
            }
            Some(Value::ArrayValue(a)) => {
                self.field("arrayValue");
                self.open();
                self.array("values", &a.values, |w, v| w.any_value(Some(v)));
                self.close();
            }
            Some(Value::KvlistValue(l)) => {
                self.field("kvlistValue");
                self.open();
                self.array("values", &l.values, Self::key_value);
                self.close();
            }
            // Profiles-only string-table index (never in traces); int32, so a number.
            Some(Value::StringValueStrindex(i)) => {
                self.field("stringValueStrindex");
                let _ = write!(self.out, "{i}");
            }
        }
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
    use serde_json::{Value as J, json};

    use super::*;
    use crate::generate::{Generator, GeneratorConfig};

    fn sample() -> ExportTraceServiceRequest {
        let cfg = GeneratorConfig {
            generator_id: "enc".into(),
            seed: 4,
            start_time_unix_nano: 1_700_000_000_000_000_000,
            ..GeneratorConfig::default()
        };
        Generator::new(cfg).next_request(250)
    }

    #[test]
    fn proto_round_trips() {
        let req = sample();
        let bytes = encode(&req, Encoding::OtlpProto);
        assert_eq!(
            ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap(),
            req
        );
    }

    #[test]
    fn json_is_valid_and_has_the_otlp_json_shape() {
        let req = sample();
        let text = String::from_utf8(encode(&req, Encoding::OtlpJson)).unwrap();
        let doc: J = serde_json::from_str(&text).expect("valid JSON");
        let rs = &doc["resourceSpans"];
        assert_eq!(rs.as_array().unwrap().len(), req.resource_spans.len());
        let first = &req.resource_spans[0].scope_spans[0].spans[0];
        let span = &rs[0]["scopeSpans"][0]["spans"][0];
        // Ids: lower-case hex of the bytes.
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(span["traceId"], json!(hex(&first.trace_id)));
        assert_eq!(span["spanId"], json!(hex(&first.span_id)));
        // 64-bit integers as strings, enums and 32-bit integers as numbers.
        assert_eq!(
            span["startTimeUnixNano"],
            json!(first.start_time_unix_nano.to_string())
        );
        assert_eq!(
            span["endTimeUnixNano"],
            json!(first.end_time_unix_nano.to_string())
        );
        assert_eq!(span["kind"], json!(first.kind));
        assert_eq!(span["flags"], json!(first.flags));
        assert!(span["status"].is_object());
        let seq = span["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|kv| kv["key"] == "loadgen.seq")
            .unwrap();
        assert!(
            seq["value"]["intValue"].is_string(),
            "intValue must be a string: {seq}"
        );
        // camelCase everywhere, no snake_case key anywhere in the document.
        assert!(!text.contains("_unix_nano") && !text.contains("resource_spans"));
        assert!(text.contains("\"scopeSpans\"") && text.contains("\"kvlistValue\""));
        assert!(text.contains("\"bytesValue\"") && text.contains("\"arrayValue\""));
        assert!(text.contains("\"timeUnixNano\""), "events are written");
        // Defaults are left out: no dropped counts are generated, roots have no parent.
        assert!(
            !text.contains("droppedAttributesCount") && !text.contains("\"parentSpanId\":\"\"")
        );
        assert!(!text.contains("\"traceState\":\"\""));
    }

    #[test]
    fn json_matches_pdata_for_a_hand_built_span() {
        let kv = |k: &str, v: Value| KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        };
        let span = Span {
            trace_id: (1..=16).collect(),
            span_id: (0x11..=0x18).collect(),
            parent_span_id: vec![0; 8],
            name: "testSpan".into(),
            kind: 3,
            start_time_unix_nano: 1_700_000_000_000_000_001,
            end_time_unix_nano: 1_700_000_000_000_000_002,
            attributes: vec![
                kv("s", Value::StringValue("a\"b\\c\td\u{1}é".into())),
                kv("b", Value::BoolValue(false)),
                kv("i", Value::IntValue(-42)),
                kv("d1", Value::DoubleValue(100.0)),
                kv("d2", Value::DoubleValue(1e21)),
                kv("d3", Value::DoubleValue(1.5e-7)),
                kv("d4", Value::DoubleValue(0.1)),
                kv("bytes", Value::BytesValue(b"foo".to_vec())),
                kv(
                    "arr",
                    Value::ArrayValue(ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(Value::IntValue(1)),
                            },
                            AnyValue { value: None },
                        ],
                    }),
                ),
                kv(
                    "kv",
                    Value::KvlistValue(KeyValueList {
                        values: vec![kv("n", Value::IntValue(7))],
                    }),
                ),
            ],
            status: Some(Status {
                message: String::new(),
                code: 2,
            }),
            ..Default::default()
        };
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: None,
                scope_spans: vec![ScopeSpans {
                    scope: None,
                    spans: vec![span],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let want = concat!(
            r#"{"resourceSpans":[{"resource":{},"scopeSpans":[{"scope":{},"spans":[{"#,
            r#""traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"1112131415161718","#,
            r#""name":"testSpan","kind":3,"#,
            r#""startTimeUnixNano":"1700000000000000001","endTimeUnixNano":"1700000000000000002","#,
            r#""attributes":["#,
            r#"{"key":"s","value":{"stringValue":"a\"b\\c\td\u0001é"}},"#,
            r#"{"key":"b","value":{"boolValue":false}},"#,
            r#"{"key":"i","value":{"intValue":"-42"}},"#,
            r#"{"key":"d1","value":{"doubleValue":100}},"#,
            r#"{"key":"d2","value":{"doubleValue":1e+21}},"#,
            r#"{"key":"d3","value":{"doubleValue":1.5e-7}},"#,
            r#"{"key":"d4","value":{"doubleValue":0.1}},"#,
            r#"{"key":"bytes","value":{"bytesValue":"Zm9v"}},"#,
            r#"{"key":"arr","value":{"arrayValue":{"values":[{"intValue":"1"},{}]}}},"#,
            r#"{"key":"kv","value":{"kvlistValue":{"values":[{"key":"n","value":{"intValue":"7"}}]}}}"#,
            r#"],"status":{"code":2}}]}]}]}"#,
        );
        assert_eq!(to_otlp_json(&req), want);
        assert_eq!(to_otlp_json(&ExportTraceServiceRequest::default()), "{}");
    }

    #[test]
    fn encode_into_a_reused_buffer_gives_the_same_bytes() {
        let req = sample();
        let mut buf = b"stale bytes".to_vec();
        for e in [Encoding::OtlpJson, Encoding::OtlpProto, Encoding::OtlpJson] {
            encode_into(&req, e, &mut buf);
            assert_eq!(buf, encode(&req, e), "{e}");
        }
    }
}
