//! Span freshness: how long after a span ended its row was acknowledged by ClickHouse —
//! the per-batch sketch of end times the encoder fills, and the histogram it is poured into
//! when the insert of that batch is acknowledged (`tracehouse_span_freshness_seconds`).
//!
//! Why a sketch: end times are only seen in the fused decode → encode pass, span by span,
//! and the acknowledgement comes later, once per insert. So the encoder counts each span's
//! age at a reference time ([`EndTimes::base_ns`], read once per batch) into a fixed array
//! of log-linear slots — a shift, a `leading_zeros` and an increment per span, no lock, no
//! clock read — and the insert stage adds `ack − base` to every slot when ClickHouse
//! acknowledged the rows.
//!
//! Why not prometheus-client's `Histogram`: its `observe` takes a lock and adds one value;
//! a batch holds up to hundreds of thousands of spans, and there is no way to add a value
//! `n` times. [`Freshness`] is a classic histogram whose `observe_n` adds a value with a
//! count, one lock per acknowledged insert, encoded by prometheus-client like its own.
//!
//! Invariants:
//! - a span is counted once per acknowledged insert of its row (a replayed batch counts
//!   again, as its rows are inserted again); spans with no end time (0) are not counted;
//! - a slot's value is within 1/16 of the age it stands for (8 slots per power of two),
//!   plus half a slot's unit (2^20 ns ≈ 1 ms) for ages under 8 ms;
//! - an end time after the reference (a clock ahead of ours) counts as age 0: freshness is
//!   then `ack − base`, a lower bound.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Ages are counted in units of 2^20 ns (≈ 1.05 ms): a shift instead of a division.
const UNIT_SHIFT: u32 = 20;
/// Slots per power of two (2^SUB_BITS).
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Slots for every age a u64 of nanoseconds can hold: ages below `SUB` units one slot per
/// unit, then `SUB` slots per power of two up to 2^(64 − UNIT_SHIFT) units.
pub const SLOTS: usize = (SUB as usize) * (64 - UNIT_SHIFT as usize - SUB_BITS as usize + 1);

/// The slot of an age in nanoseconds.
#[inline]
fn slot(age_ns: u64) -> usize {
    let u = age_ns >> UNIT_SHIFT;
    if u < SUB {
        return u as usize;
    }
    let e = 63 - u.leading_zeros(); // ≥ SUB_BITS
    let sub = (u >> (e - SUB_BITS)) & (SUB - 1);
    ((e - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The age a slot stands for (the middle of its range), in nanoseconds.
fn slot_mid_ns(slot: usize) -> f64 {
    let s = slot as u64;
    let (low, width) = if s < SUB {
        (s, 1)
    } else {
        let e = s / SUB + SUB_BITS as u64 - 1;
        let width = 1u64 << (e - SUB_BITS as u64);
        ((SUB + s % SUB) * width, width)
    };
    (low as f64 + width as f64 / 2.0) * (1u64 << UNIT_SHIFT) as f64
}

/// Nanoseconds since the Unix epoch now (0 if the clock is before it).
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The end times of one batch's spans, as ages at [`Self::base_ns`] counted in slots.
#[derive(Debug, Clone)]
pub struct EndTimes {
    base_ns: u64,
    spans: u64,
    counts: Box<[u32; SLOTS]>,
}

impl Default for EndTimes {
    /// Not started: the first [`Self::record_all`] sets the reference time.
    fn default() -> Self {
        Self::starting_at(0)
    }
}

impl EndTimes {
    /// A sketch whose ages are taken at `base_ns` (Unix nanoseconds).
    pub fn starting_at(base_ns: u64) -> Self {
        Self {
            base_ns,
            spans: 0,
            counts: Box::new([0; SLOTS]),
        }
    }

    /// The reference time the ages are taken at; 0 until the first span.
    pub fn base_ns(&self) -> u64 {
        self.base_ns
    }

    /// Spans counted.
    pub fn spans(&self) -> u64 {
        self.spans
    }

    /// Counts the end times (Unix nanoseconds; 0 = none) of one record's spans. The
    /// reference time is `now()`, read once, if this is the batch's first record.
    #[inline]
    pub fn record_all(&mut self, ends: &[u64], now: impl FnOnce() -> u64) {
        if ends.is_empty() {
            return;
        }
        if self.base_ns == 0 {
            self.base_ns = now();
        }
        for &end in ends {
            if end != 0 {
                self.counts[slot(self.base_ns.saturating_sub(end))] += 1;
                self.spans += 1;
            }
        }
    }

    /// (seconds, spans) for every non-empty slot: the freshness of its spans if their rows
    /// were acknowledged at `ack_ns`.
    pub fn freshness_at(&self, ack_ns: u64) -> impl Iterator<Item = (f64, u64)> + '_ {
        let later = ack_ns.saturating_sub(self.base_ns) as f64;
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(move |(s, n)| ((slot_mid_ns(s) + later) / 1e9, u64::from(*n)))
    }
}

/// Upper bounds (seconds) of `tracehouse_span_freshness_seconds`: fine around the
/// seconds a gateway should deliver in, coarse out to a day of backlog.
pub const FRESHNESS_BUCKETS: [f64; 20] = [
    0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 300.0, 900.0,
    3600.0, 21600.0, 86400.0,
];

/// A classic Prometheus histogram that adds a value `n` times under one lock.
#[derive(Debug, Clone)]
pub struct Freshness {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    sum: f64,
    count: u64,
    /// (upper bound, observations in this bucket alone); the last bound is +Inf.
    buckets: Vec<(f64, u64)>,
}

impl Default for Freshness {
    fn default() -> Self {
        Self::new(&FRESHNESS_BUCKETS)
    }
}

impl Freshness {
    /// A histogram with these finite, increasing upper bounds, and +Inf.
    pub fn new(bounds: &[f64]) -> Self {
        let buckets = bounds
            .iter()
            .copied()
            .filter(|b| b.is_finite())
            .chain([f64::INFINITY])
            .map(|b| (b, 0))
            .collect();
        Self {
            inner: Arc::new(Mutex::new(Inner {
                sum: 0.0,
                count: 0,
                buckets,
            })),
        }
    }

    /// Pours a batch's end times in, its rows acknowledged at `ack_ns`: one lock.
    pub fn observe_acknowledged(&self, ends: &EndTimes, ack_ns: u64) {
        if ends.spans() == 0 {
            return;
        }
        let mut h = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for (v, n) in ends.freshness_at(ack_ns) {
            h.observe_n(v, n);
        }
    }

    /// Adds `v` (finite, seconds) `n` times.
    pub fn observe_n(&self, v: f64, n: u64) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe_n(v, n);
    }

    /// (sum, count, per-bucket counts): what a scrape shows.
    pub fn get(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let h = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        (h.sum, h.count, h.buckets.clone())
    }
}

impl Inner {
    fn observe_n(&mut self, v: f64, n: u64) {
        // The last bound is +Inf, so a finite `v` always has a bucket.
        let i = self.buckets.partition_point(|(bound, _)| *bound < v);
        let i = i.min(self.buckets.len() - 1);
        self.buckets[i].1 += n;
        self.sum += v * n as f64;
        self.count += n;
    }
}

impl TypedMetric for Freshness {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Freshness {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.get();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    #[test]
    fn a_slot_stands_for_its_ages_within_a_sixteenth() {
        let mut age = 0u64;
        while age < u64::MAX / 3 {
            let mid = slot_mid_ns(slot(age));
            let err = (mid - age as f64).abs();
            let unit = (1u64 << UNIT_SHIFT) as f64;
            assert!(
                err <= age as f64 / 16.0 + unit / 2.0 + 1.0,
                "age {age}: slot {} mid {mid}",
                slot(age)
            );
            age = age / 8 * 9 + 12_345;
        }
        assert_eq!(slot(u64::MAX), SLOTS - 1);
        // Slots are increasing in age.
        for s in 1..SLOTS {
            assert!(slot_mid_ns(s) > slot_mid_ns(s - 1));
            assert_eq!(slot(slot_mid_ns(s) as u64), s);
        }
    }

    #[test]
    fn ages_are_taken_at_the_first_records_clock_and_moved_to_the_ack() {
        let base = 1_700_000_000 * S;
        let mut t = EndTimes::default();
        let mut reads = 0;
        t.record_all(&[base - 200 * MS, base - 3 * S], || {
            reads += 1;
            base
        });
        // The second record neither reads the clock nor moves the reference; a span with no
        // end time is not counted; one ending after the reference counts as age 0.
        t.record_all(&[0, base + 5 * S], || unreachable!());
        assert_eq!((reads, t.base_ns(), t.spans()), (1, base, 3));

        let mut got: Vec<(f64, u64)> = t.freshness_at(base + S).collect();
        got.sort_by(|a, b| a.0.total_cmp(&b.0));
        let want = [1.0, 1.2, 4.0];
        assert_eq!(got.len(), 3);
        for ((v, n), w) in got.iter().zip(want) {
            assert_eq!(*n, 1);
            assert!((v - w).abs() <= (w - 1.0) / 16.0 + 0.001, "{v} vs {w}");
        }
    }

    #[test]
    fn a_batch_is_poured_into_the_buckets_with_its_counts() {
        let base = 1_700_000_000 * S;
        let mut t = EndTimes::starting_at(base);
        let ends: Vec<u64> = (0..1000).map(|_| base - 100 * MS).collect();
        t.record_all(&ends, || unreachable!());
        t.record_all(&[base - 10 * S], || unreachable!());
        let h = Freshness::new(&[0.5, 2.0, 30.0]);
        h.observe_acknowledged(&t, base + 500 * MS);
        h.observe_acknowledged(&EndTimes::default(), base);
        let (sum, count, buckets) = h.get();
        assert_eq!(count, 1001);
        assert_eq!(
            buckets,
            vec![(0.5, 0), (2.0, 1000), (30.0, 1), (f64::INFINITY, 0)]
        );
        assert!((sum - (1000.0 * 0.6 + 10.5)).abs() < 1000.0 * 0.6 / 16.0 + 1.0);
    }

    #[test]
    fn observe_n_puts_a_bound_in_its_own_bucket_and_the_rest_in_inf() {
        let h = Freshness::new(&[1.0, 2.0]);
        h.observe_n(1.0, 2);
        h.observe_n(2.5, 3);
        let (_, count, buckets) = h.get();
        assert_eq!(count, 5);
        assert_eq!(buckets, vec![(1.0, 2), (2.0, 0), (f64::INFINITY, 3)]);
    }
}
