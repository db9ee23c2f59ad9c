//! Batch building as the Kafka thread does it: realistic record payloads (about 75 kB
//! each) copied into a [`BatchBuilder`] until the default 16 MiB cut, the batch sent to
//! another thread that drops it (as the insert task does once ClickHouse acknowledged it),
//! with payload buffers recycled through a [`BufPool`] or, as before, allocated per batch.
//! Under the system allocator, like the binary.
//!
//! Reported: payload MB (10^6 bytes) per CPU-second of the whole process (both threads,
//! kernel time included: page faults on fresh memory are the point), then criterion's
//! wall-clock figures.
//!
//! `cargo bench -p tracehouse-collector --bench batch -- --quick`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use tracehouse_collector::batch::{BatchBuilder, CutPolicy, RecordBatch};
use tracehouse_collector::pool::BufPool;

mod common;
mod realistic;
use common::process_cpu_secs;

const POLICY: CutPolicy = CutPolicy {
    max_bytes: 16 << 20,
    max_records: 50_000,
};

/// Fills one batch from `records` (cycling from `next`), sends it off; returns its bytes.
fn one_batch(
    builder: &mut BatchBuilder,
    records: &[Vec<u8>],
    next: &mut usize,
    offset: &mut i64,
    out: &crossbeam_channel::Sender<RecordBatch>,
) -> usize {
    loop {
        let payload = &records[*next % records.len()];
        *next += 1;
        *offset += 1;
        builder.push(*offset, 0, payload);
        if builder.is_full(POLICY) {
            let batch = builder.take().unwrap();
            let bytes = batch.data.len();
            out.send(batch).unwrap();
            return bytes;
        }
    }
}

fn build(c: &mut Criterion) {
    let records: Vec<Vec<u8>> = (1..=20u64)
        .map(|n| realistic::record(n).encode_to_vec())
        .collect();
    // The insert side: batches are dropped on another thread; a few are in flight.
    let (tx, rx) = crossbeam_channel::bounded::<RecordBatch>(4);
    let dropper = std::thread::spawn(move || {
        for batch in rx {
            black_box(&batch);
        }
    });

    // Sized as the source sizes it for the default budget: 96 MiB / 16 MiB.
    let pool = BufPool::new(6, 4 * POLICY.max_bytes);
    let mut builders = [
        ("fresh_buffers", BatchBuilder::new("spans".into(), 0, 1)),
        (
            "pooled_buffers",
            BatchBuilder::new("spans".into(), 0, 1).with_pool(pool),
        ),
    ];
    let (mut next, mut offset) = (0, 0);

    // Variants take turns (8 rounds of 0.5 CPU-seconds each) so load changes around
    // fall on both alike.
    let mut secs = [0.0; 2];
    let mut bytes = [0usize; 2];
    for (_, b) in builders.iter_mut() {
        for _ in 0..8 {
            one_batch(b, &records, &mut next, &mut offset, &tx); // warm-up
        }
    }
    for _ in 0..8 {
        for (i, (_, b)) in builders.iter_mut().enumerate() {
            let start = process_cpu_secs();
            while process_cpu_secs() - start < 0.5 {
                bytes[i] += one_batch(b, &records, &mut next, &mut offset, &tx);
            }
            secs[i] += process_cpu_secs() - start;
        }
    }
    for (i, (label, _)) in builders.iter().enumerate() {
        eprintln!(
            "{label:<15} {:>7.1} MB of payloads batched per process CPU-second",
            bytes[i] as f64 / secs[i] / 1e6
        );
    }

    let mut group = c.benchmark_group("batch_build");
    let per_batch = POLICY.max_bytes as u64;
    group.throughput(Throughput::Bytes(per_batch));
    for (label, b) in builders.iter_mut() {
        group.bench_function(*label, |bench| {
            bench.iter(|| one_batch(b, &records, &mut next, &mut offset, &tx))
        });
    }
    group.finish();
    drop(tx);
    dropper.join().unwrap();
}

criterion_group!(benches, build);
criterion_main!(benches);
