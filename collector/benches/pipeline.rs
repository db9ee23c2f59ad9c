//! The collector's CPU path per span: Kafka payload → decode → rows → encode → LZ4,
//! for RowBinary and Native, Map and JSON attributes, reported in spans per second
//! (criterion "elements"). One bench thread = one core. Each format also runs without
//! compression, which prints what LZ4 alone costs per span.
//!
//! Two data sets, each run on its own:
//! - `loadgen`: the records `tracehouse-loadgen` produces for `e2e/bench` (100 spans per
//!   record, about 1.08 KB of protobuf per span, every attribute kind, random text);
//! - `realistic`: [`realistic`], one trace of 100 spans per record over 4 services
//!   (about 750 B per span, more repetitive).
//!
//! `cargo bench -p tracehouse-collector --bench pipeline -- --quick`
//! (`BENCH_DATA=loadgen` or `BENCH_DATA=realistic` runs one set only,
//! `BENCH_FORMAT=Map/Native` one attributes/format pair only).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use tracehouse_collector::decode::{Encoding, decode};
use tracehouse_collector::encode::{Compression, Encoder, EncoderOptions};
use tracehouse_schema::{Attributes, InsertFormat};

mod common;
mod realistic;
use common::{table, thread_cpu_secs};
use realistic::record;
use tracehouse_loadgen::generate::{Generator, GeneratorConfig};

const RECORDS: usize = 20;

/// Spans per CPU-second of `work` (which handles `spans` spans per call), over at
/// least two CPU-seconds.
fn spans_per_cpu_second(spans: u64, mut work: impl FnMut()) -> f64 {
    work(); // warm-up: buffers grown, caches filled
    let start = thread_cpu_secs();
    let mut done = 0;
    while thread_cpu_secs() - start < 2.0 {
        work();
        done += spans;
    }
    done as f64 / (thread_cpu_secs() - start)
}

fn pipeline(c: &mut Criterion) {
    let only = std::env::var("BENCH_DATA").ok();
    let mut generator = Generator::new(GeneratorConfig {
        seed: 1,
        ..GeneratorConfig::default()
    });
    let sets: [(&str, Vec<Vec<u8>>); 2] = [
        (
            "loadgen",
            (0..RECORDS)
                .map(|_| generator.next_record().encode_to_vec())
                .collect(),
        ),
        (
            "realistic",
            (0..RECORDS as u64)
                .map(|n| record(n + 1).encode_to_vec())
                .collect(),
        ),
    ];
    for (name, records) in sets {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        data_set(c, name, &records);
    }
}

fn data_set(c: &mut Criterion, name: &str, records: &[Vec<u8>]) {
    let spans: u64 = records
        .iter()
        .map(|r| {
            tracehouse_collector::decode::span_count(&decode(r, Encoding::OtlpProto).unwrap())
                as u64
        })
        .sum();
    let record_bytes: usize = records.iter().map(Vec::len).sum();
    eprintln!(
        "[{name}] {} records, {spans} spans, {record_bytes} protobuf bytes ({} per span)",
        records.len(),
        record_bytes as u64 / spans
    );

    let mut group = c.benchmark_group(format!("pipeline_{name}"));
    group.throughput(Throughput::Elements(spans));

    if std::env::var("BENCH_FORMAT").is_err() {
        let rate = spans_per_cpu_second(spans, || {
            for r in records {
                black_box(decode(r, Encoding::OtlpProto).unwrap());
            }
        });
        eprintln!(
            "[{name}] prost decode only: {:.0} spans per CPU-second",
            rate
        );

        group.bench_function("decode_only", |b| {
            b.iter(|| {
                for r in records {
                    black_box(decode(r, Encoding::OtlpProto).unwrap());
                }
            })
        });
    }

    for (attributes, format) in [
        (Attributes::Map, InsertFormat::RowBinary),
        (Attributes::Map, InsertFormat::Native),
        (Attributes::Json, InsertFormat::RowBinary),
    ] {
        let label = format!("{attributes:?}/{format:?}");
        if std::env::var("BENCH_FORMAT").is_ok_and(|f| f != label) {
            continue;
        }
        let t = table(attributes);
        let mut enc = Encoder::new(&t, format).unwrap();
        // Report the body size per span once.
        for r in records {
            enc.push_record(r, Encoding::OtlpProto).unwrap();
        }
        let body = enc.finish();
        // The same rows uncompressed: the bytes LZ4 goes through.
        let mut plain = Encoder::with_options(
            &t,
            EncoderOptions {
                compression: Compression::None,
                ..enc.options()
            },
        )
        .unwrap();
        for r in records {
            plain.push_record(r, Encoding::OtlpProto).unwrap();
        }
        let raw = plain.finish().len() as u64;
        let rate = spans_per_cpu_second(spans, || {
            for r in records {
                enc.push_record(r, Encoding::OtlpProto).unwrap();
            }
            black_box(enc.finish());
        });
        let plain_rate = spans_per_cpu_second(spans, || {
            for r in records {
                plain.push_record(r, Encoding::OtlpProto).unwrap();
            }
            black_box(plain.finish());
        });
        // What LZ4 alone costs per span: the difference of the two paths' CPU per span.
        let lz4_ns = 1e9 / rate - 1e9 / plain_rate;
        eprintln!(
            "[{name}] {attributes:?}/{format:?}: {} bytes per span uncompressed, {} compressed, \
             {rate:.0} spans per CPU-second (decode + rows + encode + LZ4); without LZ4 \
             {plain_rate:.0}, so LZ4 takes {lz4_ns:.0} ns of {:.0} ns per span",
            raw / spans,
            body.len() as u64 / spans,
            1e9 / rate
        );
        group.bench_function(format!("{attributes:?}_{format:?}").to_lowercase(), |b| {
            b.iter(|| {
                for r in records {
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
