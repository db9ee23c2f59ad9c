//! The collector's CPU path per span: Kafka payload → decode → rows → encode → LZ4,
//! for RowBinary and Native, Map and JSON attributes, reported in spans per second
//! (criterion "elements"). One bench thread = one core.
//!
//! Records come from [`realistic`]: one trace of 100 spans per record over 4 services
//! with attributes of every kind, events and links.
//!
//! `cargo bench -p tracehouse-collector --bench pipeline -- --quick`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use tracehouse_collector::decode::{Encoding, decode};
use tracehouse_collector::encode::{Encoder, Format};
use tracehouse_schema::{Attributes, Ident, TableOptions};

mod realistic;
use realistic::{SPANS_PER_RECORD, record};

const RECORDS: usize = 20;

fn table(attributes: Attributes) -> TableOptions {
    let mut t = TableOptions::new(
        Ident::new("database", "otel").unwrap(),
        Ident::new("table", "otel_traces").unwrap(),
    );
    t.attributes = attributes;
    t.attribute_keys_columns = true;
    t
}

fn pipeline(c: &mut Criterion) {
    let records: Vec<Vec<u8>> = (0..RECORDS as u64)
        .map(|n| record(n + 1).encode_to_vec())
        .collect();
    let spans = (RECORDS * SPANS_PER_RECORD) as u64;
    let record_bytes: usize = records.iter().map(Vec::len).sum();
    eprintln!(
        "{RECORDS} records, {spans} spans, {record_bytes} protobuf bytes ({} per span)",
        record_bytes as u64 / spans
    );

    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(spans));

    group.bench_function("decode_only", |b| {
        b.iter(|| {
            for r in &records {
                black_box(decode(r, Encoding::OtlpProto).unwrap());
            }
        })
    });

    for (attributes, format) in [
        (Attributes::Map, Format::RowBinary),
        (Attributes::Map, Format::Native),
        (Attributes::Json, Format::RowBinary),
    ] {
        let t = table(attributes);
        let mut enc = Encoder::new(&t, format).unwrap();
        // Report the body size per span once.
        for r in &records {
            enc.push_record(r, Encoding::OtlpProto).unwrap();
        }
        let body = enc.finish();
        eprintln!(
            "{attributes:?}/{format:?}: {} compressed bytes per span",
            body.len() as u64 / spans
        );
        group.bench_function(format!("{attributes:?}_{format:?}").to_lowercase(), |b| {
            b.iter(|| {
                for r in &records {
                    enc.push_record(r, Encoding::OtlpProto).unwrap();
                }
                black_box(enc.finish())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
