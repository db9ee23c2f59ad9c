//! The collector's CPU path per span: Kafka payload → decode → rows → encode → LZ4,
//! for RowBinary and Native, Map and JSON attributes (each in both), reported in spans per second
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
//!
//! `processing` (issue 38): the same path on the `loadgen` records with the typical rule set
//! of `e2e/harness/bench/processing-typical.yaml` (two drops, two redactions, a sampler at
//! 10 %), each of its rules alone, the five with the sampler at 100 % (nothing sampled out:
//! the rules' tests without the rows they save) and that sampler alone, against no rules; it
//! prints CPU ns per input span for each and what share of spans each rule removed or changed
//! (`cargo bench -p tracehouse-collector --bench pipeline -- processing`, and
//! `BENCH_DATA=processing` for this group alone; `BENCH_FORMAT` applies, and
//! `BENCH_RULES=five` runs only the variants whose name starts so, their ratios then to the
//! first of them: for a profiler).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use tracehouse_collector::decode::{Encoding, decode};
use tracehouse_collector::encode::{Compression, Encoder, EncoderOptions};
use tracehouse_collector::process::Processor;
use tracehouse_contract::processing::{Action, ProcessingConfig};
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
        (Attributes::Json, InsertFormat::Native),
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

/// The typical rule set (`e2e/harness/bench/processing-typical.yaml`, which e2e/bench runs too).
fn typical_rules() -> ProcessingConfig {
    #[derive(serde::Deserialize)]
    struct File {
        processing: ProcessingConfig,
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../e2e/harness/bench/processing-typical.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    tracehouse_collector::yaml::from_str::<File>(&text)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .processing
}

/// What the processing rules cost the encoder per input span: no rules, the five typical
/// rules, the five with the sampler at 100 %, the sampler at 100 % alone and each typical
/// rule alone.
fn processing(c: &mut Criterion) {
    if std::env::var("BENCH_DATA").is_ok_and(|d| d != "loadgen" && d != "processing") {
        return;
    }
    let mut generator = Generator::new(GeneratorConfig {
        seed: 1,
        ..GeneratorConfig::default()
    });
    let records: Vec<Vec<u8>> = (0..RECORDS * 5)
        .map(|_| generator.next_record().encode_to_vec())
        .collect();
    let spans: u64 = records
        .iter()
        .map(|r| {
            tracehouse_collector::decode::span_count(&decode(r, Encoding::OtlpProto).unwrap())
                as u64
        })
        .sum();
    let typical = typical_rules();
    let mut keep_all = typical.clone();
    for rule in &mut keep_all.rules {
        if let Some(s) = rule.sample.as_mut() {
            s.percent = 100.0;
        }
    }
    let sampler_all = keep_all
        .rules
        .iter()
        .filter(|r| r.action == Action::Sample)
        .cloned()
        .collect();
    let mut variants: Vec<(String, ProcessingConfig)> = vec![
        ("no rules".into(), ProcessingConfig::default()),
        ("typical (five rules)".into(), typical.clone()),
        ("five, sampler at 100 %".into(), keep_all),
        (
            "sampler at 100 % alone".into(),
            ProcessingConfig {
                rules: sampler_all,
                ..ProcessingConfig::default()
            },
        ),
    ];
    for rule in &typical.rules {
        let action = match rule.action {
            Action::Drop => "drop",
            Action::Redact => "redact",
            Action::Sample => "sample",
        };
        variants.push((
            format!("{} ({action}) alone", rule.name),
            ProcessingConfig {
                rules: vec![rule.clone()],
                ..ProcessingConfig::default()
            },
        ));
    }

    if let Ok(only) = std::env::var("BENCH_RULES") {
        variants.retain(|(name, _)| name.starts_with(&only));
    }

    let mut group = c.benchmark_group("processing_loadgen");
    group.throughput(Throughput::Elements(spans));
    for (attributes, format) in [
        (Attributes::Json, InsertFormat::RowBinary),
        (Attributes::Map, InsertFormat::Native),
    ] {
        let label = format!("{attributes:?}/{format:?}");
        if std::env::var("BENCH_FORMAT").is_ok_and(|f| f != label) {
            continue;
        }
        let t = table(attributes);
        let mut base_ns = None;
        for (name, cfg) in &variants {
            let processor = Arc::new(Processor::new(cfg, None).expect("the typical rules compile"));
            let mut enc = Encoder::new(&t, format)
                .unwrap()
                .with_processor(processor.clone());
            let mut rows = 0;
            for r in &records {
                rows += enc.push_record(r, Encoding::OtlpProto).unwrap();
            }
            let body = enc.finish().len() as u64;
            let counts: Vec<_> = enc.drain_process_counts().collect();
            let rate = spans_per_cpu_second(spans, || {
                for r in &records {
                    enc.push_record(r, Encoding::OtlpProto).unwrap();
                }
                black_box(enc.finish());
            });
            enc.drain_process_counts().for_each(drop);
            let ns = 1e9 / rate;
            let base = *base_ns.get_or_insert(ns);
            let what: Vec<String> = processor
                .names()
                .iter()
                .zip(&counts)
                .map(|(rule, n)| {
                    let pct = |x: u64| 100.0 * x as f64 / spans as f64;
                    let mut parts = Vec::new();
                    if n.dropped > 0 {
                        parts.push(format!("dropped {:.1} %", pct(n.dropped)));
                    }
                    if n.sampled_out > 0 {
                        parts.push(format!("sampled out {:.1} %", pct(n.sampled_out)));
                    }
                    if n.redacted > 0 {
                        parts.push(format!("redacted {:.1} %", pct(n.redacted)));
                    }
                    if parts.is_empty() {
                        parts.push("nothing".into());
                    }
                    format!("{rule}: {}", parts.join(", "))
                })
                .collect();
            eprintln!(
                "[processing] {label} {name}: {ns:.0} ns per input span ({:.2}× no rules, \
                 {:+.0} ns), {rows} of {spans} spans written, {} body bytes per input span{}",
                ns / base,
                ns - base,
                body / spans,
                if what.is_empty() {
                    String::new()
                } else {
                    format!("; {}", what.join("; "))
                }
            );
            if name == "no rules" || name.starts_with("typical") {
                let id = format!(
                    "{}_{}",
                    label.replace('/', "_"),
                    name.split(' ').next().unwrap()
                )
                .to_lowercase();
                group.bench_function(id, |b| {
                    b.iter(|| {
                        for r in &records {
                            enc.push_record(r, Encoding::OtlpProto).unwrap();
                        }
                        black_box(enc.finish())
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, pipeline, processing);
criterion_main!(benches);
