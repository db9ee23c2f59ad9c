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
