//! LZ4 block compressors on what the encoder really compresses: the uncompressed insert
//! bodies of [`realistic`] spans (200 records, 20,000 spans: about one default 16 MiB
//! batch), cut into the 1 MiB chunks of ClickHouse's framing.
//!
//! Compared: `lz4_flex` (what `encode::compress` uses; its fast, non-`safe-encode`
//! compressor) and the C liblz4 through the `lz4` crate (`LZ4_compress_fast`) at
//! acceleration 1, 2, 4 and 8. Every output is checked to decompress to its input. For
//! each, the bench prints input MB (10^6 bytes) compressed per CPU-second of this thread
//! and the compression ratio (raw bytes / compressed bytes); criterion then reports
//! wall-clock throughput.
//!
//! A second group compares ClickHouse framing (checksums included) as it was — the LZ4
//! block compressed straight into the body after zero-filling its worst-case size, every
//! frame — with [`compress::Compressor`], which compresses into a scratch block allocated
//! once and copies only the compressed bytes.
//!
//! `cargo bench -p tracehouse-collector --features lz4-study --bench lz4 -- --quick`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use tracehouse_collector::decode::Encoding;
use tracehouse_collector::encode::compress::{self, Compressor, MAX_BLOCK};
use tracehouse_collector::encode::{Compression, Encoder, EncoderOptions};
use tracehouse_schema::{Attributes, InsertFormat};

mod common;
mod realistic;
use common::{table, thread_cpu_secs};
use realistic::record;

const RECORDS: u64 = 200;

const ROUNDS: usize = 10;
const SLICE_CPU_SECS: f64 = 0.2;

/// Input bytes per CPU-second of each of `variants` ways of doing one piece of work:
/// `work(i)` does it the `i`th way and handles `bytes`. The variants take turns,
/// [`SLICE_CPU_SECS`] each for [`ROUNDS`] rounds, so that a change in the load around
/// (other processes sharing caches and memory) falls on all of them alike.
fn bytes_per_cpu_second(bytes: usize, variants: usize, mut work: impl FnMut(usize)) -> Vec<f64> {
    let mut secs = vec![0.0; variants];
    let mut done = vec![0usize; variants];
    for i in 0..variants {
        work(i); // warm-up
    }
    for _ in 0..ROUNDS {
        for i in 0..variants {
            let start = thread_cpu_secs();
            while thread_cpu_secs() - start < SLICE_CPU_SECS {
                work(i);
                done[i] += bytes;
            }
            secs[i] += thread_cpu_secs() - start;
        }
    }
    done.iter()
        .zip(&secs)
        .map(|(&d, &s)| d as f64 / s)
        .collect()
}

/// The uncompressed insert body the encoder makes of the realistic records.
fn raw_body(attributes: Attributes, format: InsertFormat) -> Vec<u8> {
    let options = EncoderOptions {
        compression: Compression::None,
        ..EncoderOptions::new(format)
    };
    let mut enc = Encoder::with_options(&table(attributes), options).unwrap();
    for n in 1..=RECORDS {
        let payload = record(n).encode_to_vec();
        enc.push_record(&payload, Encoding::OtlpProto).unwrap();
    }
    enc.finish().to_vec()
}

/// A block compressor: compresses `input` into `out` (sized for the worst case) and
/// returns the compressed length.
type Block = fn(&[u8], &mut [u8]) -> usize;

fn flex(input: &[u8], out: &mut [u8]) -> usize {
    lz4_flex::block::compress_into(input, out).unwrap()
}

fn c_fast<const ACCELERATION: i32>(input: &[u8], out: &mut [u8]) -> usize {
    let mode = lz4::block::CompressionMode::FAST(ACCELERATION);
    lz4::block::compress_to_buffer(input, Some(mode), false, out).unwrap()
}

const COMPRESSORS: [(&str, Block); 5] = [
    ("lz4_flex", flex),
    ("liblz4_fast1", c_fast::<1>),
    ("liblz4_fast2", c_fast::<2>),
    ("liblz4_fast4", c_fast::<4>),
    ("liblz4_fast8", c_fast::<8>),
];

/// Compresses `raw` in 1 MiB chunks; returns the total compressed bytes.
fn compress_chunks(raw: &[u8], block: Block, scratch: &mut [u8]) -> usize {
    raw.chunks(MAX_BLOCK).map(|c| block(c, scratch)).sum()
}

fn blocks(c: &mut Criterion) {
    let worst = lz4_flex::block::get_maximum_output_size(MAX_BLOCK)
        .max(lz4::block::compress_bound(MAX_BLOCK).unwrap());
    let mut scratch = vec![0u8; worst];
    for (attributes, format) in [
        (Attributes::Map, InsertFormat::Native),
        (Attributes::Map, InsertFormat::RowBinary),
        (Attributes::Json, InsertFormat::RowBinary),
    ] {
        let raw = raw_body(attributes, format);
        let name = format!("{attributes:?}_{format:?}").to_lowercase();
        eprintln!(
            "{name}: {} raw bytes ({} per span) in {} chunks of at most 1 MiB",
            raw.len(),
            raw.len() as u64 / (RECORDS * 100),
            raw.len().div_ceil(MAX_BLOCK)
        );
        let mut group = c.benchmark_group(format!("lz4_block/{name}"));
        group.throughput(Throughput::Bytes(raw.len() as u64));
        let mut ratios = Vec::new();
        for (label, block) in COMPRESSORS {
            // Every output must decompress to its input (with lz4_flex: a second opinion).
            let mut compressed = 0;
            for chunk in raw.chunks(MAX_BLOCK) {
                let n = block(chunk, &mut scratch);
                let back = lz4_flex::block::decompress(&scratch[..n], chunk.len()).unwrap();
                assert!(back == chunk, "{label}: round trip");
                compressed += n;
            }
            ratios.push((raw.len() as f64 / compressed as f64, compressed));
        }
        let rates = bytes_per_cpu_second(raw.len(), COMPRESSORS.len(), |i| {
            black_box(compress_chunks(&raw, COMPRESSORS[i].1, &mut scratch));
        });
        let base = rates[0];
        for (((label, _), rate), (ratio, compressed)) in COMPRESSORS.iter().zip(&rates).zip(&ratios)
        {
            eprintln!(
                "{name} {label:<13} {:>7.1} MB/s per CPU-second ({:.2}x lz4_flex), ratio {ratio:.3} ({compressed} bytes)",
                rate / 1e6,
                rate / base,
            );
        }
        for (label, block) in COMPRESSORS {
            group.bench_function(label, |b| {
                b.iter(|| compress_chunks(&raw, block, &mut scratch))
            });
        }
        group.finish();
    }
}

/// ClickHouse framing as `encode::compress` wrote it before [`Compressor`]: the worst case
/// zero-filled in the body for every frame.
fn frames_zero_filled(raw: &[u8], out: &mut Vec<u8>) {
    for chunk in raw.chunks(MAX_BLOCK) {
        let start = out.len();
        let data = start + 25;
        out.resize(
            data + lz4_flex::block::get_maximum_output_size(chunk.len()),
            0,
        );
        let n = lz4_flex::block::compress_into(chunk, &mut out[data..]).unwrap();
        out.truncate(data + n);
        out[start + 16] = 0x82;
        out[start + 17..start + 21].copy_from_slice(&((n + 9) as u32).to_le_bytes());
        out[start + 21..start + 25].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
        let hash = cityhash_rs::cityhash_102_128(&out[start + 16..]).rotate_right(64);
        out[start..start + 16].copy_from_slice(&hash.to_le_bytes());
    }
}

fn frames(c: &mut Criterion) {
    let raw = raw_body(Attributes::Map, InsertFormat::Native);
    let mut old = Vec::new();
    frames_zero_filled(&raw, &mut old);
    let mut compressor = Compressor::default();
    let mut new = Vec::new();
    compressor.compress_into(&raw, &mut new);
    assert!(old == new, "same frames either way");
    assert!(compress::decompress(&new).unwrap() == raw);

    let mut group = c.benchmark_group("ch_frames/map_native");
    group.throughput(Throughput::Bytes(raw.len() as u64));
    // The body is reused (cleared) between runs, as the encoder's recycled bodies are.
    let mut body = Vec::with_capacity(old.len());
    let rates = bytes_per_cpu_second(raw.len(), 2, |i| {
        body.clear();
        match i {
            0 => frames_zero_filled(&raw, &mut body),
            _ => compressor.compress_into(&raw, &mut body),
        }
    });
    eprintln!(
        "frames, zero-filled worst case  {:>7.1} MB/s per CPU-second",
        rates[0] / 1e6
    );
    eprintln!(
        "frames, Compressor scratch      {:>7.1} MB/s per CPU-second ({:.3}x)",
        rates[1] / 1e6,
        rates[1] / rates[0]
    );
    group.bench_function("zero_filled", |b| {
        b.iter(|| {
            body.clear();
            frames_zero_filled(&raw, &mut body);
        })
    });
    group.bench_function("compressor", |b| {
        b.iter(|| {
            body.clear();
            compressor.compress_into(&raw, &mut body);
        })
    });
    group.finish();
}

criterion_group!(benches, blocks, frames);
criterion_main!(benches);
