//! Unit tests of the encoder: body buffers, and the expansion limit.

use super::*;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tracehouse_schema::Ident;

fn table() -> TableOptions {
    TableOptions::new(
        Ident::new("database", "otel").unwrap(),
        Ident::new("table", "otel_traces").unwrap(),
    )
}

fn request(spans: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..spans)
                    .map(|i| Span {
                        name: format!("span {i}"),
                        trace_id: vec![1; 16],
                        span_id: vec![2; 8],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Finding 3 of the exactly-once issue: a valid 0.8 MiB record — 100 resource
/// attributes of 4 KiB, 10 000 spans — expands to ~4 GiB of rows, because every row
/// repeats its resource's attributes. Refused past the limit, with the memory it took
/// bounded by the limit (plus one check interval of rows), and the encoder still usable.
#[test]
fn a_record_that_expands_past_the_limit_is_refused_and_its_rows_taken_back() {
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    let mut fat = request(10_000);
    fat.resource_spans[0].resource = Some(Resource {
        attributes: (0..100)
            .map(|i| KeyValue {
                key: format!("k{i}"),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("v".repeat(4096))),
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    let fat = fat.encode_to_vec();
    assert!(fat.len() < 1 << 20, "{} bytes", fat.len());
    let limit = 8 << 20;
    for format in [InsertFormat::RowBinary, InsertFormat::Native] {
        let options = EncoderOptions {
            max_expanded_record_bytes: limit,
            ..EncoderOptions::new(format)
        };
        let mut enc = Encoder::with_options(&table(), options).unwrap();
        let small = request(3).encode_to_vec();
        assert_eq!(enc.push_record(&small, Encoding::OtlpProto).unwrap(), 3);
        let err = enc.push_record(&fat, Encoding::OtlpProto).unwrap_err();
        let DecodeError::Expanded { bytes, limit: l } = err else {
            panic!("{format:?}: {err}")
        };
        assert_eq!(l, limit);
        assert!(bytes > limit && bytes < limit + 33 * 420_000, "{bytes}");
        assert_eq!(err.kind(), "expanded");
        assert_eq!(
            enc.rows(),
            3,
            "{format:?}: the record's rows are taken back"
        );
        assert!(enc.buffered_bytes() < 1 << 20, "{format:?}");
        // And it goes on encoding.
        assert!(enc.push_record(&small, Encoding::OtlpProto).is_ok());
        assert_eq!(enc.rows(), 6);
    }
}

#[test]
fn body_buffers_are_recycled_once_the_body_is_dropped() {
    for format in [InsertFormat::RowBinary, InsertFormat::Native] {
        let mut enc = Encoder::new(&table(), format).unwrap();
        let mut plain = Encoder::with_options(
            &table(),
            EncoderOptions {
                compression: Compression::None,
                ..EncoderOptions::new(format)
            },
        )
        .unwrap();
        let payload = request(50).encode_to_vec();
        plain.push_record(&payload, Encoding::OtlpProto).unwrap();
        let raw = plain.finish();

        enc.push_record(&payload, Encoding::OtlpProto).unwrap();
        let first = enc.finish();
        let first_ptr = first.as_ptr();
        // The body handed out, and the next one being filled.
        assert_eq!((enc.bodies.owned(), enc.bodies.idle()), (2, 0));
        drop(first);
        assert_eq!((enc.bodies.owned(), enc.bodies.idle()), (2, 1));
        // The body filled while the first was out is handed out next; the first
        // body's buffer comes out of the pool and becomes the one after.
        enc.push_record(&payload, Encoding::OtlpProto).unwrap();
        let second = enc.finish();
        assert_eq!((enc.bodies.owned(), enc.bodies.idle()), (2, 0));
        assert_ne!(second.as_ptr(), first_ptr);
        enc.push_record(&payload, Encoding::OtlpProto).unwrap();
        let third = enc.finish();
        assert_eq!(third.as_ptr(), first_ptr, "{format:?}");
        for body in [&second, &third] {
            assert_eq!(compress::decompress(body).unwrap(), raw, "{format:?}");
        }
        // Nothing appended: an empty body, and the buffer stays with the encoder.
        assert!(enc.finish().is_empty());
        assert_eq!(enc.bodies.owned(), 3);
        drop((second, third));
        assert_eq!((enc.bodies.owned(), enc.bodies.idle()), (3, 2));
    }
}

/// The encoder fills the freshness sketch ([`crate::freshness`]) in its fused pass.
mod end_times {
    use super::*;
    use crate::decode::Encoding;
    use crate::freshness::unix_now_ns;

    const S: u64 = 1_000_000_000;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use tracehouse_schema::{InsertFormat, TableOptions};

    fn encoder() -> Encoder {
        let table = TableOptions::new(
            Ident::new("database", "otel").unwrap(),
            Ident::new("table", "otel_traces").unwrap(),
        );
        Encoder::new(&table, InsertFormat::Native).unwrap()
    }

    fn span(end: u64) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            end_time_unix_nano: end,
            ..Default::default()
        }
    }

    /// A length-delimited field with a one-byte key.
    fn field(key: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![key];
        prost::encoding::encode_varint(body.len() as u64, &mut out);
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn every_appended_span_is_counted_once_and_a_refused_record_not_at_all() {
        let now = unix_now_ns();
        let mut enc = encoder();
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span(now - 2 * S), span(now - 2 * S), span(0)],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let payload = req.encode_to_vec();
        assert_eq!(enc.push_record(&payload, Encoding::OtlpProto).unwrap(), 3);
        // A good span, then one whose end time has the wrong wire type (varint): the
        // fast reader takes the record back, prost refuses it; nothing may be counted.
        let good = span(now - S).encode_to_vec();
        let mut bad = span(now - S).encode_to_vec();
        bad.extend_from_slice(&[8 << 3, 1]);
        let scope = [field(0x12, &good), field(0x12, &bad)].concat();
        let refused = field(0x0a, &field(0x12, &scope));
        assert!(enc.push_record(&refused, Encoding::OtlpProto).is_err());

        let t = enc.take_end_times();
        assert_eq!(t.spans(), 2);
        assert!(t.base_ns() >= now);
        let ages: Vec<(f64, u64)> = t.freshness_at(t.base_ns()).collect();
        assert_eq!(ages.len(), 1);
        assert_eq!(ages[0].1, 2);
        assert!((ages[0].0 - 2.0).abs() < 0.2, "{ages:?}");
        // Taken: the next batch starts empty, with a reference time of its own.
        assert_eq!(enc.take_end_times().spans(), 0);
    }
}
