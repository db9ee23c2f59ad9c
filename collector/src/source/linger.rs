//! How long the linger timer waits before it cuts: `batch.linger_ms` while time cuts carry
//! a good insert's worth, stretched up to `batch.max_linger_ms` while they carry little.
//!
//! Why: every time cut is an INSERT (a part on the server, merged later) and a synchronous
//! commit to Kafka (rule 3 of [`super::machine`]). At 1 000 spans/s a 200 ms linger makes
//! five small inserts a second of ~200 rows each, where ClickHouse asks for about one insert
//! per second per table, and the server's cost per span of a small insert is several times
//! that of a large one. Stretching only while the cuts are small keeps the freshness of the
//! rates where cuts are large anyway (and where size cuts come before any linger).
//!
//! The rule, pure and deterministic: a time cut that closed less than [`SMALL_CUT_BYTES`] of
//! records doubles the linger, up to the maximum; a larger one halves it, down to the base.
//! So a steady low rate reaches the maximum after a few cuts, and a burst returns to the base
//! after a few. Any linger is safe for exactly-once: time cuts are recorded before their
//! insert, whatever their length.

use std::time::Duration;

/// A time cut with fewer bytes of records than this is small: the linger stretches. About a
/// thousand full spans, or several thousand minimal ones, as the exporters batch them.
pub const SMALL_CUT_BYTES: usize = 1 << 20;

/// The linger timer's length now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linger {
    base: Duration,
    max: Duration,
    now: Duration,
}

impl Linger {
    /// Starts at `base`; `max` below `base` means no stretching.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            now: base,
        }
    }

    pub fn current(&self) -> Duration {
        self.now
    }

    /// A time cut closed `bytes` of records (over every partition it closed).
    pub fn cut(&mut self, bytes: usize) {
        self.now = if bytes < SMALL_CUT_BYTES {
            (self.now * 2).min(self.max)
        } else {
            (self.now / 2).max(self.base)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn small_cuts_stretch_the_linger_up_to_the_maximum() {
        let mut l = Linger::new(200 * MS, 1000 * MS);
        assert_eq!(l.current(), 200 * MS);
        let mut seen = Vec::new();
        for _ in 0..5 {
            l.cut(40_000);
            seen.push(l.current().as_millis());
        }
        assert_eq!(seen, [400, 800, 1000, 1000, 1000]);
    }

    #[test]
    fn large_cuts_bring_it_back_to_the_base() {
        let mut l = Linger::new(200 * MS, 1000 * MS);
        for _ in 0..3 {
            l.cut(1);
        }
        let mut seen = Vec::new();
        for _ in 0..4 {
            l.cut(SMALL_CUT_BYTES);
            seen.push(l.current().as_millis());
        }
        assert_eq!(seen, [500, 250, 200, 200]);
    }

    #[test]
    fn a_maximum_at_or_below_the_base_never_stretches() {
        for max in [0, 200] {
            let mut l = Linger::new(200 * MS, max * MS);
            l.cut(0);
            assert_eq!(l.current(), 200 * MS);
        }
    }
}
