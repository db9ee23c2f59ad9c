//! Per-partition offset ledger: which batches are in flight, which are acknowledged, and
//! what may be committed.
//!
//! At-least-once needs two things from this file:
//! 1. a partition's committed offset only ever moves past records whose rows ClickHouse
//!    acknowledged (acknowledgements may arrive out of order; only the contiguous prefix
//!    counts), and
//! 2. after a crash the replay cuts batches at exactly the same offsets as before, so every
//!    re-sent batch carries the same `insert_deduplication_token` and ClickHouse drops it as a
//!    duplicate. Batch ends are therefore written *before* the insert is sent, as the metadata
//!    of the partition's committed offset (the "intent"), and read back on assignment.

use std::collections::VecDeque;

/// Prefix of the commit metadata written by this version; anything else is ignored.
const METADATA_PREFIX: &str = "th1:";
/// Kafka's default `offset.metadata.max.bytes` is 4096; stay well below it.
pub const MAX_METADATA_BYTES: usize = 3000;

/// One batch: records `first..=last` of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRange {
    pub first: i64,
    pub last: i64,
}

#[derive(Debug)]
struct Pending {
    range: BatchRange,
    acked: bool,
}

/// The ledger of one assigned partition.
#[derive(Debug)]
pub struct PartitionLedger {
    /// Next offset after the acknowledged prefix: what a commit stores.
    committed: i64,
    /// Whether `committed` moved since the last commit was issued.
    dirty: bool,
    pending: VecDeque<Pending>,
    /// Batch ends inherited from a previous owner's intent, still ahead of us.
    recorded_cuts: VecDeque<i64>,
}

impl PartitionLedger {
    /// A ledger starting at the committed offset `start`, with the previous owner's intent.
    pub fn new(start: i64, metadata: Option<&str>) -> Self {
        let recorded_cuts = metadata
            .map(parse_intent)
            .unwrap_or_default()
            .into_iter()
            .filter(|&end| end >= start)
            .collect();
        Self {
            committed: start,
            dirty: false,
            pending: VecDeque::new(),
            recorded_cuts,
        }
    }

    pub fn committed(&self) -> i64 {
        self.committed
    }

    /// The end offset a batch starting at `first` must stop at to replay an earlier cut,
    /// if one is known. The caller closes the batch when it reaches this offset.
    pub fn recorded_cut(&mut self, first: i64) -> Option<i64> {
        while let Some(&end) = self.recorded_cuts.front() {
            if end < first {
                self.recorded_cuts.pop_front();
            } else {
                return Some(end);
            }
        }
        None
    }

    /// Register a closed batch that is about to be sent. Returns the intent metadata to
    /// commit (with the unchanged committed offset) before the insert goes out.
    pub fn open(&mut self, range: BatchRange) -> String {
        debug_assert!(
            self.pending
                .back()
                .is_none_or(|p| p.range.last < range.first)
        );
        if self.recorded_cuts.front() == Some(&range.last) {
            self.recorded_cuts.pop_front();
        }
        self.pending.push_back(Pending {
            range,
            acked: false,
        });
        self.intent()
    }

    /// Mark a batch acknowledged. Returns true when the committed offset moved.
    pub fn ack(&mut self, range: BatchRange) -> bool {
        if let Some(p) = self.pending.iter_mut().find(|p| p.range == range) {
            p.acked = true;
        } else {
            return false;
        }
        let mut moved = false;
        while self.pending.front().is_some_and(|p| p.acked) {
            let p = self.pending.pop_front().expect("front exists");
            self.committed = p.range.last + 1;
            moved = true;
        }
        self.dirty |= moved;
        moved
    }

    /// The commit to issue now, if the committed offset moved: `(offset, metadata)`.
    pub fn take_commit(&mut self) -> Option<(i64, String)> {
        if !self.dirty {
            return None;
        }
        self.dirty = false;
        Some((self.committed, self.intent()))
    }

    /// The commit that describes the ledger now, whether or not it moved.
    pub fn current_commit(&self) -> (i64, String) {
        (self.committed, self.intent())
    }

    /// Batches sent and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.pending.iter().filter(|p| !p.acked).count()
    }

    /// Metadata naming the ends of every pending batch (and inherited ends still ahead),
    /// so a successor replays the same cuts.
    fn intent(&self) -> String {
        let mut out = String::from(METADATA_PREFIX);
        let ends = self
            .pending
            .iter()
            .map(|p| p.range.last)
            .chain(self.recorded_cuts.iter().copied());
        for (i, end) in ends.enumerate() {
            let piece = if i == 0 {
                end.to_string()
            } else {
                format!(",{end}")
            };
            if out.len() + piece.len() > MAX_METADATA_BYTES {
                break; // later cuts are only an optimisation for dedup; never exceed Kafka's limit
            }
            out.push_str(&piece);
        }
        out
    }
}

/// Parse intent metadata; unknown or damaged metadata means "no known cuts".
pub fn parse_intent(metadata: &str) -> Vec<i64> {
    let Some(list) = metadata.strip_prefix(METADATA_PREFIX) else {
        return Vec::new();
    };
    let mut ends: Vec<i64> = list
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    ends.sort_unstable();
    ends.dedup();
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: i64, last: i64) -> BatchRange {
        BatchRange { first, last }
    }

    #[test]
    fn commit_moves_only_over_the_acknowledged_prefix() {
        let mut l = PartitionLedger::new(100, None);
        l.open(r(100, 149));
        l.open(r(150, 199));
        l.open(r(200, 249));
        assert!(
            !l.ack(r(150, 199)),
            "out-of-order ack must not move the commit"
        );
        assert_eq!(l.take_commit(), None);
        assert!(l.ack(r(100, 149)));
        assert_eq!(l.take_commit(), Some((200, "th1:249".to_string())));
        assert_eq!(l.take_commit(), None, "nothing new to commit");
        assert!(l.ack(r(200, 249)));
        assert_eq!(l.take_commit(), Some((250, "th1:".to_string())));
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn intent_lists_every_pending_end_before_sending() {
        let mut l = PartitionLedger::new(0, None);
        assert_eq!(l.open(r(0, 9)), "th1:9");
        assert_eq!(l.open(r(10, 24)), "th1:9,24");
    }

    #[test]
    fn a_successor_replays_the_same_cuts() {
        let mut l = PartitionLedger::new(10, Some("th1:24,9,40"));
        assert_eq!(
            l.recorded_cut(10),
            Some(24),
            "ends before the start are dropped"
        );
        l.open(r(10, 24));
        assert_eq!(l.recorded_cut(25), Some(40));
        l.open(r(25, 40));
        assert_eq!(l.recorded_cut(41), None);
    }

    #[test]
    fn unknown_or_damaged_metadata_is_ignored() {
        assert!(parse_intent("").is_empty());
        assert!(parse_intent("something else").is_empty());
        assert_eq!(parse_intent("th1:5,x,3"), vec![3, 5]);
    }

    #[test]
    fn acks_for_unknown_batches_are_ignored() {
        let mut l = PartitionLedger::new(0, None);
        l.open(r(0, 9));
        assert!(!l.ack(r(0, 8)));
        assert_eq!(l.committed(), 0);
    }

    #[test]
    fn metadata_never_exceeds_the_kafka_limit() {
        let mut l = PartitionLedger::new(0, None);
        for i in 0..2000 {
            l.open(r(i * 1_000_000_000, i * 1_000_000_000 + 999_999_999));
        }
        assert!(l.intent().len() <= MAX_METADATA_BYTES);
    }
}
