//! The fast `otlp_proto` reader against `prost`: whatever shape a record comes in, the
//! rows written are those of `prost`'s decoding (see `decode::proto`).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Status;
use prost::Message;
use rand::{Rng, SeedableRng};
use tracehouse_loadgen::generate::{Generator, GeneratorConfig};
use tracehouse_schema::{Attributes, Ident, InsertFormat, TableOptions};

use super::{Compression, Encoder, EncoderOptions};
use crate::decode::proto::{Fields, Wire};
use crate::decode::{self, Encoding};

fn encoders() -> Vec<Encoder> {
    let mut out = Vec::new();
    for (attributes, format) in [
        (Attributes::Map, InsertFormat::Native),
        (Attributes::Map, InsertFormat::RowBinary),
        (Attributes::Json, InsertFormat::RowBinary),
        (Attributes::Json, InsertFormat::Native),
    ] {
        let mut t = TableOptions::new(
            Ident::new("database", "otel").unwrap(),
            Ident::new("table", "otel_traces").unwrap(),
        );
        t.attributes = attributes;
        t.attribute_keys_columns = true;
        let mut o = EncoderOptions::new(format);
        o.compression = Compression::None;
        out.push(Encoder::with_options(&t, o).unwrap());
    }
    out
}

pub(super) fn requests(n: usize) -> Vec<ExportTraceServiceRequest> {
    let mut g = Generator::new(GeneratorConfig {
        seed: 7,
        spans_per_record: 12,
        ..GeneratorConfig::default()
    });
    (0..n).map(|_| g.next_record()).collect()
}

/// Bodies of what `prost` makes of `payload`, per encoder; `None` if it refuses it.
pub(super) fn via_prost(payload: &[u8]) -> Option<Vec<Vec<u8>>> {
    let req = decode::decode(payload, Encoding::OtlpProto).ok()?;
    let canonical = req.encode_to_vec();
    Some(
        encoders()
            .into_iter()
            .map(|mut e| {
                e.push_proto(&canonical)
                    .expect("canonical bytes are read in place");
                e.finish().to_vec()
            })
            .collect(),
    )
}

/// Bodies of the in-place reader alone; `None` if it declines the record.
pub(super) fn in_place(payload: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for mut e in encoders() {
        e.push_proto(payload).ok()?;
        out.push(e.finish().to_vec());
    }
    Some(out)
}

/// Which fields of which message hold messages: (message, field) → message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Msg {
    Request,
    ResourceSpans,
    Resource,
    ScopeSpans,
    Scope,
    Span,
    Event,
    Link,
    Status,
    Kv,
    Any,
    List,
    KvList,
}

fn child(m: Msg, tag: u32) -> Option<Msg> {
    use Msg::*;
    Some(match (m, tag) {
        (Request, 1) => ResourceSpans,
        (ResourceSpans, 1) => Resource,
        (ResourceSpans, 2) => ScopeSpans,
        (Resource, 1) | (Scope, 3) | (Span, 9) | (Event, 3) | (Link, 4) | (KvList, 1) => Kv,
        (ScopeSpans, 1) => Scope,
        (ScopeSpans, 2) => Span,
        (Span, 11) => Event,
        (Span, 13) => Link,
        (Span, 15) => Status,
        (Kv, 2) | (List, 1) => Any,
        (Any, 5) => List,
        (Any, 6) => KvList,
        _ => return None,
    })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_field(out: &mut Vec<u8>, tag: u32, w: Wire<'_>) {
    let key = |wt: u64| (u64::from(tag) << 3) | wt;
    match w {
        Wire::Varint(v) => {
            put_varint(out, key(0));
            put_varint(out, v);
        }
        Wire::I64(v) => {
            put_varint(out, key(1));
            out.extend(v.to_le_bytes());
        }
        Wire::Len(b) => {
            put_varint(out, key(2));
            put_varint(out, b.len() as u64);
            out.extend_from_slice(b);
        }
        Wire::I32(v) => {
            put_varint(out, key(5));
            out.extend(v.to_le_bytes());
        }
    }
}

/// Re-writes a message legally but not canonically, at every level: fields in
/// descending field-number order (repeated fields keep their relative order), and
/// unknown fields of every wire type before and after.
fn scramble(m: Msg, body: &[u8]) -> Vec<u8> {
    let mut fields = Vec::new();
    let mut f = Fields::new(body);
    while let Some((tag, w)) = f.next_field().unwrap() {
        let w = match (child(m, tag), w) {
            (Some(c), Wire::Len(b)) => (tag, Err(scramble(c, b))),
            _ => (tag, Ok(w)),
        };
        fields.push(w);
    }
    fields.sort_by_key(|(tag, _)| std::cmp::Reverse(*tag));
    let mut out = Vec::new();
    put_field(&mut out, 900, Wire::Varint(300));
    put_field(&mut out, 901, Wire::Len(b"unknown \xff bytes"));
    for (tag, w) in &fields {
        match w {
            Ok(w) => put_field(&mut out, *tag, *w),
            Err(b) => put_field(&mut out, *tag, Wire::Len(b)),
        }
    }
    put_field(&mut out, 902, Wire::I64(1));
    put_field(&mut out, 903, Wire::I32(2));
    out
}

#[test]
fn loadgen_records_are_read_in_place_not_by_the_fallback() {
    // For canonical bytes the two paths run the same code, so what matters is that the
    // in-place reader takes the record at all (a silent fallback would cost the whole
    // speed-up) and writes a row per span.
    for req in requests(4) {
        let bytes = req.encode_to_vec();
        let spans = decode::span_count(&req);
        for mut e in encoders() {
            assert_eq!(e.push_proto(&bytes), Ok(spans), "{}", e.insert_sql());
        }
    }
}

#[test]
fn reordered_fields_and_unknown_fields_give_prosts_rows() {
    for req in requests(4) {
        let canonical = req.encode_to_vec();
        let scrambled = scramble(Msg::Request, &canonical);
        assert_ne!(scrambled, canonical);
        let fast = in_place(&scrambled).expect("a reordered record is read in place");
        assert_eq!(Some(fast), via_prost(&scrambled));
    }
}

#[test]
fn a_repeated_singular_message_is_merged_as_prost_does() {
    // The status given twice, code in the first and message in the second: prost merges
    // them into one status; the in-place reader declines and push_record falls back.
    let mut req = requests(1).remove(0);
    let span = &mut req.resource_spans[0].scope_spans[0].spans[0];
    span.status = None;
    let mut bytes = req.encode_to_vec();
    let mut doctored = Vec::new();
    let mut f = Fields::new(&bytes);
    // Rebuild the request with the first span carrying two partial statuses.
    let (_, Wire::Len(rs)) = f.next_field().unwrap().unwrap() else {
        panic!()
    };
    let rest = f.clone();
    let mut rs_out = Vec::new();
    let mut rf = Fields::new(rs);
    let mut first_span_done = false;
    while let Some((tag, w)) = rf.next_field().unwrap() {
        if let (2, Wire::Len(ss)) = (tag, w) {
            let mut ss_out = Vec::new();
            let mut sf = Fields::new(ss);
            while let Some((stag, sw)) = sf.next_field().unwrap() {
                if let (2, Wire::Len(span), false) = (stag, sw, first_span_done) {
                    first_span_done = true;
                    let mut s = span.to_vec();
                    let code = Status {
                        code: 2,
                        ..Default::default()
                    };
                    let msg = Status {
                        message: "boom".into(),
                        ..Default::default()
                    };
                    put_field(&mut s, 15, Wire::Len(&code.encode_to_vec()));
                    put_field(&mut s, 15, Wire::Len(&msg.encode_to_vec()));
                    put_field(&mut ss_out, 2, Wire::Len(&s));
                } else {
                    put_field(&mut ss_out, stag, sw);
                }
            }
            put_field(&mut rs_out, 2, Wire::Len(&ss_out));
        } else {
            put_field(&mut rs_out, tag, w);
        }
    }
    put_field(&mut doctored, 1, Wire::Len(&rs_out));
    let mut rest = rest;
    while let Some((tag, w)) = rest.next_field().unwrap() {
        put_field(&mut doctored, tag, w);
    }
    bytes.clear();

    assert_eq!(in_place(&doctored), None, "declined by the in-place reader");
    let decoded = decode::decode(&doctored, Encoding::OtlpProto).unwrap();
    let status = decoded.resource_spans[0].scope_spans[0].spans[0]
        .status
        .clone()
        .unwrap();
    assert_eq!((status.code, status.message.as_str()), (2, "boom"));
    for (mut e, want) in encoders().into_iter().zip(via_prost(&doctored).unwrap()) {
        let n = e.push_record(&doctored, Encoding::OtlpProto).unwrap();
        assert!(n > 0);
        assert_eq!(e.finish().to_vec(), want);
    }
}

#[test]
fn damaged_records_are_never_read_differently_from_prost() {
    // Random byte flips, truncations and insertions: whenever the in-place reader
    // accepts a record, prost accepts it too and the rows are the same.
    let originals: Vec<Vec<u8>> = requests(3).iter().map(Message::encode_to_vec).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let (mut accepted, mut declined) = (0, 0);
    for i in 0..3000 {
        let mut b = originals[i % originals.len()].clone();
        match rng.random_range(0..3) {
            0 => {
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(0..b.len());
                    b[at] = rng.random();
                }
            }
            1 => b.truncate(rng.random_range(0..b.len())),
            _ => {
                let at = rng.random_range(0..b.len());
                b.insert(at, rng.random());
            }
        }
        match in_place(&b) {
            Some(fast) => {
                accepted += 1;
                assert_eq!(Some(fast), via_prost(&b), "mutation {i}");
            }
            None => declined += 1,
        }
    }
    // Both outcomes must have been exercised for the test to mean something.
    assert!(accepted > 100 && declined > 100, "{accepted} / {declined}");
}

#[test]
fn a_declined_record_leaves_no_partial_rows() {
    let reqs = requests(2);
    let good = reqs[0].encode_to_vec();
    // Damage the last bytes so that the first spans are read before the problem shows.
    let mut bad = reqs[1].encode_to_vec();
    let n = bad.len();
    bad[n - 3] = 0xff;
    bad[n - 2] = 0xff;
    for mut e in encoders() {
        e.push_proto(&good).unwrap();
        let rows = e.rows();
        assert!(e.push_proto(&bad).is_err(), "the damage is noticed");
        assert_eq!(e.rows(), rows);
        let with_bad = e.finish().to_vec();
        let mut clean = encoders()
            .into_iter()
            .find(|c| c.options() == e.options() && c.insert_sql() == e.insert_sql())
            .unwrap();
        clean.push_proto(&good).unwrap();
        assert!(with_bad == clean.finish().to_vec(), "{}", e.insert_sql());
    }
}

#[test]
fn the_resource_attributes_cache_writes_what_the_plain_path_writes() {
    // Resources alternate between records, a damaged record is taken back in the
    // middle, and tiny blocks force a cut (and a new dictionary) after every record.
    // Map and JSON (whose keys column is cached too).
    let reqs = requests(6);
    let mut bad = reqs[2].encode_to_vec();
    let n = bad.len();
    bad[n - 2] = 0xff;
    for attributes in [Attributes::Map, Attributes::Json] {
        let mut t = TableOptions::new(
            Ident::new("database", "otel").unwrap(),
            Ident::new("table", "otel_traces").unwrap(),
        );
        t.attributes = attributes;
        t.attribute_keys_columns = true;
        let mut o = EncoderOptions::new(InsertFormat::Native);
        o.compression = Compression::None;
        for block_bytes in [1, EncoderOptions::DEFAULT_NATIVE_BLOCK_BYTES] {
            o.native_block_bytes = block_bytes;
            let mut cached = Encoder::with_options(&t, o).unwrap();
            let mut plain = Encoder::with_options(&t, o).unwrap();
            if let super::Rows::Native(b) = &mut plain.rows {
                b.without_repeat_cache();
            }
            for e in [&mut cached, &mut plain] {
                for (i, r) in reqs.iter().enumerate() {
                    e.push_proto(&r.encode_to_vec()).unwrap();
                    if i == 3 {
                        assert!(e.push_proto(&bad).is_err());
                    }
                }
            }
            assert!(
                cached.finish() == plain.finish(),
                "{attributes:?}, block bytes {block_bytes}"
            );
        }
    }
}

#[test]
fn nesting_is_accepted_exactly_as_deep_as_prost_reads_it() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue};
    // A span attribute's AnyValue is at message depth 5; each array adds two levels.
    // 47 arrays put the innermost AnyValue at 99 and an empty ArrayValue inside it at
    // 100, the deepest prost reads; one item in that array would be at 101.
    let nested = |innermost: Vec<AnyValue>| {
        let mut v = AnyValue {
            value: Some(V::ArrayValue(ArrayValue { values: innermost })),
        };
        for _ in 0..47 {
            v = AnyValue {
                value: Some(V::ArrayValue(ArrayValue { values: vec![v] })),
            };
        }
        let mut req = requests(1).remove(0);
        req.resource_spans[0].scope_spans[0].spans[0]
            .attributes
            .push(KeyValue {
                key: "deep".into(),
                value: Some(v),
                ..Default::default()
            });
        req.encode_to_vec()
    };
    let deepest_allowed = nested(vec![]);
    let too_deep = nested(vec![AnyValue {
        value: Some(V::IntValue(1)),
    }]);
    let fast = in_place(&deepest_allowed).expect("read in place at prost's limit");
    assert_eq!(Some(fast), via_prost(&deepest_allowed));
    assert!(decode::decode(&too_deep, Encoding::OtlpProto).is_err());
    assert_eq!(in_place(&too_deep), None);
    for mut e in encoders() {
        assert!(e.push_record(&too_deep, Encoding::OtlpProto).is_err());
    }
}

#[test]
fn a_key_over_u32_max_is_refused_as_prost_refuses_it() {
    // Found by the coverage-guided fuzz target (collector/fuzz, otlp_proto): a 6-byte key
    // varint whose value is over u32::MAX while its field number (key >> 3) still fits,
    // then a fixed32 value. prost refuses the key; the in-place reader skipped it as an
    // unknown field and accepted an empty record.
    let record = [0xf5, 0xf5, 0xff, 0xff, 0xff, 0x00, 0x00, 0x02, 0xff, 0xff];
    assert!(decode::decode(&record, Encoding::OtlpProto).is_err());
    assert_eq!(in_place(&record), None);
    for mut e in encoders() {
        assert!(e.push_record(&record, Encoding::OtlpProto).is_err());
    }
}
