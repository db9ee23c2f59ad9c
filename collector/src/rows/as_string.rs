//! Attribute values as the strings the OTel exporter stores in `Map(String, String)`.
//!
//! The exporter calls pdata's `Value.AsString()` (pdata v1.61, the one the OpenTelemetry
//! Collector v0.155 builds with); this file reproduces it byte for byte, as the
//! differential test against the real collector (`tests/e2e_conformance.rs`) checks:
//!
//! | value | text |
//! |---|---|
//! | string | as is |
//! | bool | `true` / `false` |
//! | int | decimal |
//! | double | ES6 number-to-string (`float64AsString`): shortest round-trip digits, plain below 1e21 and from 1e-6, else exponent form `1e+21`, `1e-7`; `-0` for negative zero; NaN and ±Inf become `NaN`, `Infinity`, `-Infinity` |
//! | bytes | standard base64 |
//! | array, kvlist | Go's `json.Encoder` with HTML escaping off, of the raw value: map keys sorted and de-duplicated (last wins), `<`, `>`, `&` as they are, U+2028/U+2029 escaped, bytes as base64 strings (no bytes: `null`); if it holds a NaN or ±Inf, encoding fails and the text is `""` |
//! | empty | `""` |

use std::io::Write as _;

use base64::Engine as _;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use prost::Message;

use crate::decode::proto::{self, Value, array_items, kvlist_items};

/// Appends the `AsString` text of an attribute value whose `AnyValue` is at message
/// depth `depth` (see [`proto::MAX_MESSAGE_DEPTH`]).
pub fn push_value_as_string(
    value: Value<'_>,
    out: &mut Vec<u8>,
    depth: usize,
) -> proto::Result<()> {
    match value {
        Value::Empty => {}
        Value::Str(s) => out.extend_from_slice(s),
        Value::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        Value::Int(i) => push_int(i, out),
        Value::Double(d) => push_double_as_string(d, out),
        Value::Bytes(b) => push_base64(b, out),
        Value::Array(_) | Value::KvList(_) => {
            let start = out.len();
            match push_go_json(value, out, depth) {
                Ok(()) => {}
                // Go: `jsonStr, _ := json.Marshal(...)` — the error is dropped, the text is empty.
                Err(JsonError::NonFinite) => out.truncate(start),
                Err(JsonError::Unusual) => return Err(proto::Unusual),
            }
        }
    }
    Ok(())
}

/// The `AsString` text of a `prost` value, as a new `String` (tests and cold paths;
/// `None`: the empty value).
pub fn as_string(value: Option<&AnyValue>) -> String {
    let bytes = value.map(Message::encode_to_vec).unwrap_or_default();
    let mut out = Vec::new();
    if let Ok(v) = proto::any_value(&bytes) {
        let _ = push_value_as_string(v, &mut out, 0);
    }
    String::from_utf8(out).unwrap_or_default()
}

fn push_int(i: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
}

/// Appends standard base64 of `b` (how Go marshals `[]byte`).
pub(crate) fn push_base64(b: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    let n = base64::encoded_len(b.len(), true).unwrap_or(0);
    out.resize(start + n, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(b, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
}

/// pdata's `float64AsString`, including its spelling of the values JSON cannot
/// represent (the OTLP/JSON spelling: `NaN`, `Infinity`, `-Infinity`).
pub fn push_double_as_string(d: f64, out: &mut Vec<u8>) {
    if d.is_finite() {
        push_es6_float(d, out);
    } else if d.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if d > 0.0 {
        out.extend_from_slice(b"Infinity");
    } else {
        out.extend_from_slice(b"-Infinity");
    }
}

/// Go's `encoding/json` float format (ES6): `strconv.AppendFloat(f, 'f' or 'e', -1, 64)`
/// with the exponent form below 1e-6 and from 1e21, and `e-07` shortened to `e-7`.
///
/// Rust's `{}` and `{:e}` print the same shortest round-trip digits as Go's `-1`
/// precision; only the exponent spelling differs (`1e21` vs `1e+21`).
pub fn push_es6_float(d: f64, out: &mut Vec<u8>) {
    let abs = d.abs();
    // Writing to a Vec cannot fail.
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let start = out.len();
        let _ = write!(out, "{d:e}");
        if let Some(e) = out[start..].iter().position(|&c| c == b'e') {
            let at = start + e + 1;
            if out.get(at) != Some(&b'-') {
                out.insert(at, b'+');
            }
        }
    } else {
        let _ = write!(out, "{d}");
    }
}

/// Why Go's `json.Marshal` text could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonError {
    /// A NaN or ±Inf somewhere in the value: Go's `json.Marshal` refuses it.
    NonFinite,
    /// The value's bytes are not in the shape the in-place reader takes.
    Unusual,
}

impl From<proto::Unusual> for JsonError {
    fn from(_: proto::Unusual) -> Self {
        Self::Unusual
    }
}

/// Appends Go's `json.Marshal(value.AsRaw())`; `depth`: the message depth of the
/// value's `AnyValue`.
pub fn push_go_json(value: Value<'_>, out: &mut Vec<u8>, depth: usize) -> Result<(), JsonError> {
    if value != Value::Empty {
        proto::at_depth(depth)?;
    }
    match value {
        Value::Empty => out.extend_from_slice(b"null"),
        Value::Str(s) => push_go_json_string(s, out),
        Value::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        Value::Int(i) => push_int(i, out),
        Value::Double(d) => {
            if !d.is_finite() {
                return Err(JsonError::NonFinite);
            }
            push_es6_float(d, out);
        }
        // pdata's `AsRaw` copies bytes with `append(nil, b...)`: no bytes give a nil slice,
        // which Go marshals as `null`.
        Value::Bytes([]) => out.extend_from_slice(b"null"),
        Value::Bytes(b) => {
            out.push(b'"');
            push_base64(b, out);
            out.push(b'"');
        }
        Value::Array(body) => {
            proto::at_depth(depth + 1)?;
            out.push(b'[');
            for (i, item) in array_items(body).enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_go_json(item?, out, depth + 2)?;
            }
            out.push(b']');
        }
        Value::KvList(body) => push_go_json_object(body, out, depth)?,
    }
    Ok(())
}

/// A Go `map[string]any` marshalled: keys sorted bytewise, a repeated key keeps its
/// last value (later map assignments win in `AsRaw`).
fn push_go_json_object(body: &[u8], out: &mut Vec<u8>, depth: usize) -> Result<(), JsonError> {
    proto::at_depth(depth + 1)?;
    let entries = kvlist_items(body).collect::<proto::Result<Vec<_>>>()?;
    if !entries.is_empty() {
        proto::at_depth(depth + 2)?;
    }
    let mut order: Vec<usize> = (0..entries.len()).collect();
    // Stable, so among equal keys the last one stays last.
    order.sort_by(|&a, &b| entries[a].key.cmp(entries[b].key));
    out.push(b'{');
    let mut first = true;
    for (n, &i) in order.iter().enumerate() {
        if order
            .get(n + 1)
            .is_some_and(|&next| entries[next].key == entries[i].key)
        {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        push_go_json_string(entries[i].key, out);
        out.push(b':');
        push_go_json(entries[i].value, out, depth + 3)?;
    }
    out.push(b'}');
    Ok(())
}

/// Go's `json.Marshal` of a `prost` value, `None` when Go would fail (tests).
pub fn go_json(value: &AnyValue) -> Option<String> {
    let bytes = value.encode_to_vec();
    let v = proto::any_value(&bytes).ok()?;
    let mut out = Vec::new();
    push_go_json(v, &mut out, 0).ok()?;
    String::from_utf8(out).ok()
}

/// A JSON string as Go's `encoding/json` writes it with HTML escaping off (pdata's
/// `marshalJSONNoHTMLEscape`, Go ≥ 1.22): `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`,
/// other control bytes as `\u00XX`, and U+2028/U+2029 as `\u2028`/`\u2029` (Go escapes
/// those two unconditionally); `<`, `>`, `&` as they are. `s` is UTF-8.
pub fn push_go_json_string(s: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s;
    let mut done = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            _ => None,
        };
        let (skip, needs) = if escape.is_some() || b < 0x20 {
            (1, true)
        } else if b == 0xe2
            && bytes.get(i + 1) == Some(&0x80)
            && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9))
        {
            (3, true)
        } else {
            (1, false)
        };
        if needs {
            out.extend_from_slice(&s[done..i]);
            match escape {
                Some(e) => out.extend_from_slice(e),
                None if skip == 3 => out.extend_from_slice(if bytes[i + 2] == 0xa8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                }),
                None => {
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
            }
            done = i + skip;
        }
        i += skip;
    }
    out.extend_from_slice(&s[done..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{
        ArrayValue, KeyValue, KeyValueList, any_value::Value,
    };

    fn v(value: Value) -> AnyValue {
        AnyValue { value: Some(value) }
    }
    fn s(x: &str) -> AnyValue {
        v(Value::StringValue(x.into()))
    }
    fn kv(k: &str, value: AnyValue) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(value),
            ..Default::default()
        }
    }
    fn text(value: AnyValue) -> String {
        as_string(Some(&value))
    }
    fn double(d: f64) -> String {
        text(v(Value::DoubleValue(d)))
    }

    #[test]
    fn scalars_follow_pdata_as_string() {
        assert_eq!(text(s("héllo ✓")), "héllo ✓");
        assert_eq!(text(v(Value::BoolValue(true))), "true");
        assert_eq!(text(v(Value::BoolValue(false))), "false");
        assert_eq!(
            text(v(Value::IntValue(-9_223_372_036_854_775_808))),
            "-9223372036854775808"
        );
        assert_eq!(
            text(v(Value::BytesValue(vec![0, 1, 2, 0xfb, 0xff]))),
            "AAEC+/8="
        );
        assert_eq!(text(AnyValue { value: None }), "");
        assert_eq!(as_string(None), "");
    }

    #[test]
    fn doubles_use_the_es6_form_with_go_exponents() {
        // Values checked against Go 1.22 `strconv.AppendFloat` / pdata `AsString`.
        assert_eq!(double(0.0), "0");
        assert_eq!(double(-0.0), "-0");
        assert_eq!(double(1.0), "1");
        assert_eq!(double(0.1), "0.1");
        assert_eq!(double(2.75), "2.75");
        assert_eq!(double(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(double(-2.5), "-2.5");
        assert_eq!(double(1e20), "100000000000000000000");
        assert_eq!(double(123456789012345680000.0), "123456789012345680000");
        assert_eq!(double(1e21), "1e+21");
        assert_eq!(double(1.5e300), "1.5e+300");
        assert_eq!(double(f64::MAX), "1.7976931348623157e+308");
        assert_eq!(double(1e-6), "0.000001");
        assert_eq!(double(1e-7), "1e-7");
        assert_eq!(double(-1.234e-7), "-1.234e-7");
        assert_eq!(double(5e-324), "5e-324");
        assert_eq!(double(1e-100), "1e-100");
        assert_eq!(double(0.000123), "0.000123");
        // pdata v1.61 `float64AsString`; what the real collector stores
        // (tests/e2e_conformance.rs).
        assert_eq!(double(f64::NAN), "NaN");
        assert_eq!(double(f64::INFINITY), "Infinity");
        assert_eq!(double(f64::NEG_INFINITY), "-Infinity");
    }

    #[test]
    fn arrays_and_kvlists_are_go_json_with_sorted_unique_keys() {
        let arr = v(Value::ArrayValue(ArrayValue {
            values: vec![
                s("a"),
                v(Value::IntValue(1)),
                v(Value::DoubleValue(1.5)),
                v(Value::DoubleValue(2.0)),
                v(Value::BoolValue(true)),
                AnyValue { value: None },
                v(Value::BytesValue(vec![1, 2, 3])),
                v(Value::ArrayValue(ArrayValue::default())),
            ],
        }));
        assert_eq!(text(arr), r#"["a",1,1.5,2,true,null,"AQID",[]]"#);
        // No bytes are a nil slice for pdata's AsRaw: `null` (checked against the real
        // collector by tests/e2e_conformance.rs); on their own they are "".
        let no_bytes = v(Value::BytesValue(vec![]));
        assert_eq!(text(no_bytes.clone()), "");
        assert_eq!(
            text(v(Value::ArrayValue(ArrayValue {
                values: vec![no_bytes]
            }))),
            "[null]"
        );

        let nested = v(Value::KvlistValue(KeyValueList {
            values: vec![
                kv("z", s("last")),
                kv("a", v(Value::KvlistValue(KeyValueList::default()))),
                kv("m", s("first")),
                kv("m", s("second")),
                kv(
                    "b",
                    v(Value::KvlistValue(KeyValueList {
                        values: vec![kv("y", s("1")), kv("x", s("2"))],
                    })),
                ),
            ],
        }));
        assert_eq!(
            text(nested),
            r#"{"a":{},"b":{"x":"2","y":"1"},"m":"second","z":"last"}"#
        );
    }

    #[test]
    fn non_finite_numbers_inside_json_make_the_whole_text_empty() {
        let arr = v(Value::ArrayValue(ArrayValue {
            values: vec![s("a"), v(Value::DoubleValue(f64::NAN))],
        }));
        assert_eq!(text(arr), "");
        let obj = v(Value::KvlistValue(KeyValueList {
            values: vec![kv("inf", v(Value::DoubleValue(f64::INFINITY)))],
        }));
        assert_eq!(text(obj), "");
    }

    #[test]
    fn json_strings_are_escaped_like_go() {
        let mut out = Vec::new();
        push_go_json_string(
            "a\"b\\c\u{8}\u{c}\n\r\t\u{1}\u{1f}<>&\u{2028}\u{2029}é✓\u{7f}".as_bytes(),
            &mut out,
        );
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            r#""a\"b\\c\b\f\n\r\t\u0001\u001f<>&\u2028\u2029é✓"#.to_string() + "\u{7f}\""
        );
        let mut plain = Vec::new();
        push_go_json_string(b"plain text", &mut plain);
        assert_eq!(plain, b"\"plain text\"");
    }
}
