//! The sampling draw: the OpenTelemetry Collector's `probabilistic_sampler` in `hash_seed`
//! mode, so that a fleet of tracehouse gateways and Collectors with the same percentage and
//! seed keep the same traces.
//!
//! FNV-1a (32 bits) over the seed's four bytes (little-endian) then the trace id's sixteen;
//! its low 14 bits are the trace's bucket among 16 384; the trace is kept when the bucket is
//! below `percent × 16 384 / 100` (truncated). The process module's rule 4: the trace id is
//! all it reads.

/// 2¹⁴ buckets, as the Collector's `numHashBuckets`.
const BUCKETS: u32 = 0x4000;

#[derive(Debug, Clone)]
pub struct Sampler {
    seed: u32,
    /// Buckets below this are kept.
    threshold: u32,
}

impl Sampler {
    pub fn new(percent: f64, seed: u32) -> Self {
        Self {
            seed,
            threshold: (percent * (BUCKETS as f64 / 100.0)) as u32,
        }
    }

    /// Whether the trace is kept.
    pub fn keeps(&self, trace_id: &[u8]) -> bool {
        bucket(trace_id, self.seed) < self.threshold
    }
}

/// The trace's bucket: FNV-1a over `seed` (little-endian) then the trace id, low 14 bits.
pub fn bucket(trace_id: &[u8], seed: u32) -> u32 {
    fnv1a32(&seed.to_le_bytes(), trace_id) & (BUCKETS - 1)
}

fn fnv1a32(a: &[u8], b: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &byte in a.iter().chain(b) {
        h ^= byte as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}
