//! Rows: what each column of a span's row holds, exactly as the OpenTelemetry
//! Collector's ClickHouse exporter writes it (`docs/compat-notes.md` §2–3).
//!
//! Pure functions and reusable buffers only; the encoders in [`crate::encode`] call
//! them while writing each row straight into the wire format, so no intermediate row
//! struct is built per span.
//!
//! | column | value |
//! |---|---|
//! | `Timestamp`, `Events.Timestamp` | start / event time in ns ([`timestamp_ns`]) |
//! | `TraceId`, `SpanId`, `ParentSpanId`, `Links.*Id` | lower-case hex; empty or all-zero → `""` ([`push_hex_id`]) |
//! | `SpanKind`, `StatusCode` | `Server`, `Error`, … ([`span_kind`], [`status_code`]) |
//! | `ServiceName` | resource `service.name` as string, else `""` ([`service_name`]) |
//! | attributes | Map: [`MapAttrs`] (`AsString`, [`as_string`]); JSON: [`json::JsonObject`] |
//! | `Duration` | end − start in ns, 0 when end < start ([`duration_ns`]) |

pub mod as_string;
pub mod json;

use std::ops::Range;

use crate::decode::proto;

pub use as_string::push_value_as_string;
pub use json::JsonObject;

/// `SpanKind` as pdata's `SpanKind.String()` spells it; `""` for values outside the enum.
pub fn span_kind(kind: i32) -> &'static str {
    match kind {
        0 => "Unspecified",
        1 => "Internal",
        2 => "Server",
        3 => "Client",
        4 => "Producer",
        5 => "Consumer",
        _ => "",
    }
}

/// `StatusCode` as pdata's `StatusCode.String()` spells it; `""` outside the enum.
pub fn status_code(code: i32) -> &'static str {
    match code {
        0 => "Unset",
        1 => "Ok",
        2 => "Error",
        _ => "",
    }
}

/// `Duration`: end − start in nanoseconds.
///
/// A span that ends before it starts (clock skew between hosts, or an unset end time)
/// gets 0. The Go exporter subtracts unsigned integers and stores the wrapped value,
/// about 584 years, which breaks every latency percentile and the `Duration` min-max
/// index; 0 keeps the span visible without poisoning aggregates.
pub fn duration_ns(start: u64, end: u64) -> u64 {
    end.saturating_sub(start)
}

/// A `DateTime64(9)` value from unsigned epoch nanoseconds. Times past the year 2262
/// (beyond `i64`) are clamped to the largest representable instant.
pub fn timestamp_ns(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// Whether an id is "empty" for pdata: no bytes, or all zero bytes.
pub fn is_empty_id(id: &[u8]) -> bool {
    id.iter().all(|&b| b == 0)
}

/// Appends an id as lower-case hex, or nothing when it is empty or all zero
/// (pdata's `TraceID.String()` / `SpanID.String()`).
///
/// Ids of a length other than 16 / 8 bytes are hex-encoded as they are: pdata would
/// reject the whole record while decoding, but nothing is lost by keeping them.
pub fn push_hex_id(id: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if is_empty_id(id) {
        return;
    }
    // Through a stack buffer: one copy into `out` per 32 bytes of id instead of a
    // capacity check per hex digit.
    let mut buf = [0u8; 64];
    for chunk in id.chunks(32) {
        for (pair, &b) in buf.chunks_exact_mut(2).zip(chunk) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0xf)];
        }
        out.extend_from_slice(&buf[..chunk.len() * 2]);
    }
}

/// Hex length of an id as [`push_hex_id`] writes it.
pub fn hex_id_len(id: &[u8]) -> usize {
    if is_empty_id(id) { 0 } else { id.len() * 2 }
}

/// The id as a `String` (tests and cold paths).
pub fn hex_id(id: &[u8]) -> String {
    let mut out = Vec::new();
    push_hex_id(id, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// `ServiceName`: the first `service.name` resource attribute as text, else `""`
/// (pdata's `Map.Get` returns the first match). `resource_attrs` are `KeyValue` bodies.
pub fn service_name(resource_attrs: &[&[u8]], out: &mut Vec<u8>) -> proto::Result<()> {
    out.clear();
    for body in resource_attrs {
        let kv = proto::kv(body)?;
        if kv.key == b"service.name" {
            return push_value_as_string(kv.value, out, proto::RESOURCE_VALUE_DEPTH);
        }
    }
    Ok(())
}

/// One attribute list as `Map(String, String)` entries, reusable from span to span.
///
/// Keys and values are copied into one buffer so the encoders can hold them without
/// borrowing the request. Entries are sorted by key, bytewise, as the exporter's
/// `orderedmap.CollectN` sorts them before the insert; a repeated key is kept, every
/// time, in input order (the exporter does not de-duplicate either, and Go's sort is an
/// insertion sort, so stable, up to 12 entries; `map['k']` returns the first).
#[derive(Debug, Default)]
pub struct MapAttrs {
    /// Counts fills: two equal generations of one `MapAttrs` mean the same content.
    generation: u64,
    buf: Vec<u8>,
    entries: Vec<MapEntry>,
}

/// One `(key, value)` of [`MapAttrs`]: ranges into its buffer.
#[derive(Debug, Clone)]
struct MapEntry {
    /// The key's first 8 bytes, big-endian, zero-padded ([`json::head_of`]): orders most
    /// pairs of keys without comparing the keys themselves (the sort was ~5 % of the
    /// collector's CPU on full spans, most of it in `memcmp` calls).
    head: u64,
    key: Range<usize>,
    value: Range<usize>,
}

impl MapAttrs {
    /// Replaces the content with `attrs` (`KeyValue` bodies whose values are at message
    /// depth `depth`), values in their `AsString` text.
    pub fn fill(&mut self, attrs: &[&[u8]], depth: usize) -> proto::Result<()> {
        self.generation += 1;
        self.buf.clear();
        self.entries.clear();
        for body in attrs {
            let kv = proto::kv(body)?;
            let k = self.buf.len();
            self.buf.extend_from_slice(kv.key);
            let v = self.buf.len();
            push_value_as_string(kv.value, &mut self.buf, depth)?;
            self.entries.push(MapEntry {
                head: json::head_of(kv.key),
                key: k..v,
                value: v..self.buf.len(),
            });
        }
        let buf = &self.buf;
        // Bytewise key order: the heads decide unless they are equal.
        let order = |a: &MapEntry, b: &MapEntry| {
            a.head
                .cmp(&b.head)
                .then_with(|| buf[a.key.clone()].cmp(&buf[b.key.clone()]))
        };
        // Instrumentations often emit their attributes sorted already: skip the sort then.
        if !self.entries.is_sorted_by(|a, b| order(a, b).is_le()) {
            // Stable: repeated keys stay in input order.
            self.entries.sort_by(order);
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Changes with every [`Self::fill`].
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(key, value)` pairs sorted by key, repeated keys in input order (UTF-8 bytes).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        self.entries
            .iter()
            .map(|e| (&self.buf[e.key.clone()], &self.buf[e.value.clone()]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
    use prost::Message;

    fn kv(k: &str, value: Value) -> Vec<u8> {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn bodies(kvs: &[Vec<u8>]) -> Vec<&[u8]> {
        kvs.iter().map(Vec::as_slice).collect()
    }

    #[test]
    fn kinds_and_codes_use_the_short_names() {
        let kinds: Vec<&str> = (0..=6).map(span_kind).collect();
        assert_eq!(
            kinds,
            [
                "Unspecified",
                "Internal",
                "Server",
                "Client",
                "Producer",
                "Consumer",
                ""
            ]
        );
        assert_eq!(span_kind(-1), "");
        let codes: Vec<&str> = (0..=3).map(status_code).collect();
        assert_eq!(codes, ["Unset", "Ok", "Error", ""]);
    }

    #[test]
    fn ids_are_lower_hex_and_empty_or_zero_ids_are_empty_strings() {
        assert_eq!(hex_id(&[0xab, 0x01, 0xff, 0x00]), "ab01ff00");
        assert_eq!(hex_id(&[0x5b; 16]).len(), 32);
        assert_eq!(hex_id(&[]), "");
        assert_eq!(hex_id(&[0; 16]), "");
        assert_eq!(hex_id(&[0; 8]), "");
        assert_eq!(hex_id_len(&[0; 8]), 0);
        assert_eq!(hex_id_len(&[1; 8]), 16);
        // Odd lengths are kept rather than dropped.
        assert_eq!(hex_id(&[0, 0, 1]), "000001");
        // Longer than one stack buffer of digits.
        let long: Vec<u8> = (1..=40).collect();
        let want: String = long.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex_id(&long), want);
    }

    #[test]
    fn duration_is_zero_when_the_span_ends_before_it_starts() {
        assert_eq!(duration_ns(100, 250), 150);
        assert_eq!(duration_ns(250, 100), 0);
        assert_eq!(duration_ns(1_700_000_000_000_000_000, 0), 0);
        assert_eq!(duration_ns(0, u64::MAX), u64::MAX);
    }

    #[test]
    fn timestamps_past_2262_clamp() {
        assert_eq!(
            timestamp_ns(1_700_000_000_123_456_789),
            1_700_000_000_123_456_789
        );
        assert_eq!(timestamp_ns(u64::MAX), i64::MAX);
    }

    #[test]
    fn service_name_is_the_first_match_as_text_or_empty() {
        let mut out = b"stale".to_vec();
        let host = [kv("host.name", Value::StringValue("h".into()))];
        service_name(&bodies(&host), &mut out).unwrap();
        assert_eq!(out, b"");
        let two = [
            kv("service.name", Value::IntValue(42)),
            kv("service.name", Value::StringValue("second".into())),
        ];
        service_name(&bodies(&two), &mut out).unwrap();
        assert_eq!(out, b"42");
    }

    #[test]
    fn map_attrs_are_sorted_by_key_and_keep_repeats_in_input_order() {
        let mut m = MapAttrs::default();
        let kvs = [
            kv("b", Value::BoolValue(true)),
            kv("a", Value::DoubleValue(1e21)),
            kv("b", Value::IntValue(7)),
        ];
        m.fill(&bodies(&kvs), proto::SPAN_VALUE_DEPTH).unwrap();
        let pairs: Vec<(&[u8], &[u8])> = m.iter().collect();
        let want: [(&[u8], &[u8]); 3] = [(b"a", b"1e+21"), (b"b", b"true"), (b"b", b"7")];
        assert_eq!(pairs, want);
        m.fill(&[], proto::SPAN_VALUE_DEPTH).unwrap();
        assert!(m.is_empty());
    }

    #[test]
    fn map_attrs_order_is_bytewise_also_past_the_eight_byte_head() {
        let keys = [
            "http.response.status_code",
            "http.request.method",
            "http.req",
            "http.request",
            "ab\0",
            "ab",
            "http.request.method",
            "",
            "zz",
            "http.res",
            "é",
        ];
        let kvs: Vec<Vec<u8>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| kv(k, Value::IntValue(i as i64)))
            .collect();
        let mut m = MapAttrs::default();
        m.fill(&bodies(&kvs), proto::SPAN_VALUE_DEPTH).unwrap();
        let mut want: Vec<(Vec<u8>, Vec<u8>)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_bytes().to_vec(), i.to_string().into_bytes()))
            .collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        let got: Vec<(Vec<u8>, Vec<u8>)> =
            m.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(got, want);
    }
}
