//! The rejection breaker: when ClickHouse refuses *every* record, the problem is the
//! configuration, not the data — stop skipping and say so.
//!
//! Bisection ([`crate::insert`]) isolates the records ClickHouse refuses for good and skips
//! them, so one bad record never stalls a partition. But a configuration problem that the
//! server reports with a data error code (a proxy that strips `decompress=1`, a Map table
//! written as JSON, a column type changed by hand) refuses every record alike, and
//! bisection would then skip the whole topic, record by record: total loss without a
//! dead-letter topic. The breaker tells the two apart by the one thing they differ in:
//! between a bad record and the next, good records land.
//!
//! Invariants:
//! 1. the breaker opens after `threshold` records in a row were refused alone with no
//!    insert succeeding in between (any success, of any batch, closes it);
//! 2. while it is open, a refused record is not skipped: its insert is retried with backoff
//!    (the partition waits, the data stays in Kafka) until an insert succeeds — once the
//!    configuration is fixed, the first success closes the breaker and nothing was lost;
//! 3. refusals that depend on the record's own content by construction — 252 "Too many
//!    partitions for single INSERT block", a record's spans on too many days — are not
//!    counted: a hostile producer sending only such records must not stop the pipeline.
//!
//! Pure and lock-free: a counter and a threshold.

use std::sync::atomic::{AtomicU64, Ordering};

/// Consecutive lone refusals, shared by every insert task.
#[derive(Debug)]
pub struct RejectBreaker {
    refused_in_a_row: AtomicU64,
    /// 0: never opens.
    threshold: u64,
}

impl RejectBreaker {
    pub fn new(threshold: u64) -> Self {
        Self {
            refused_in_a_row: AtomicU64::new(0),
            threshold,
        }
    }

    /// An insert went in: whatever was refused before was the data's fault.
    pub fn succeeded(&self) {
        self.refused_in_a_row.store(0, Ordering::Relaxed);
    }

    /// A record was refused alone. Returns whether the breaker is open now (then the
    /// record must not be skipped).
    pub fn refused(&self) -> bool {
        let n = self.refused_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        self.threshold > 0 && n >= self.threshold
    }

    /// Whether the breaker is open.
    pub fn is_open(&self) -> bool {
        self.threshold > 0 && self.refused_in_a_row.load(Ordering::Relaxed) >= self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_lone_refusals_in_a_row_and_any_success_closes_it() {
        let b = RejectBreaker::new(3);
        assert!(!b.refused());
        assert!(!b.refused());
        b.succeeded();
        assert!(!b.refused() && !b.refused());
        assert!(b.refused(), "the third refusal in a row opens it");
        assert!(b.is_open());
        assert!(b.refused(), "stays open");
        b.succeeded();
        assert!(!b.is_open());
    }

    #[test]
    fn a_zero_threshold_never_opens() {
        let b = RejectBreaker::new(0);
        for _ in 0..1000 {
            assert!(!b.refused());
        }
        assert!(!b.is_open());
    }
}
