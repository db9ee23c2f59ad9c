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
use std::sync::Arc;

use crate::bundle::BundleDesc;

/// Prefix of the commit metadata that names batch ends only.
const METADATA_PREFIX: &str = "th1:";
/// Prefix of the commit metadata that also describes bundles ([`crate::bundle`]): written
/// only while a bundle is pending, so a partition without bundles reads as before.
const METADATA_PREFIX_BUNDLES: &str = "th2:";
/// Kafka's default `offset.metadata.max.bytes` is 4096; stay well below it.
pub const MAX_METADATA_BYTES: usize = 3000;

/// One batch: records `first..=last` of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchRange {
    pub first: i64,
    pub last: i64,
}

impl BatchRange {
    pub fn contains(&self, offset: i64) -> bool {
        self.first <= offset && offset <= self.last
    }
}

#[derive(Debug)]
struct Pending {
    range: BatchRange,
    acked: bool,
    /// The bundle the batch is inserted in, if any: its description is part of the intent.
    bundle: Option<Arc<BundleDesc>>,
}

/// The ledger of one assigned partition.
#[derive(Debug)]
pub struct PartitionLedger {
    partition: i32,
    /// Next offset after the acknowledged prefix: what a commit stores.
    committed: i64,
    /// Whether `committed` moved since the last commit was issued.
    dirty: bool,
    /// In offset order.
    pending: VecDeque<Pending>,
    /// Batch ends inherited from a previous owner's intent, still ahead of us.
    recorded_cuts: VecDeque<i64>,
    /// Bundles inherited from a previous owner's intent, not yet handed out for replay.
    recorded_bundles: Vec<Arc<BundleDesc>>,
    /// This partition's ranges of the bundles being replayed: the consumer's own records
    /// in them are not batched again (the replay reads them).
    replayed: Vec<BatchRange>,
}

impl PartitionLedger {
    /// A ledger of `topic`'s `partition` starting at the committed offset `start`, with the
    /// previous owner's intent.
    pub fn new(start: i64, metadata: Option<&str>, topic: &Arc<str>, partition: i32) -> Self {
        let (ends, bundles) = metadata.map_or_else(Default::default, |m| parse_entries(m, topic));
        let recorded_bundles: Vec<Arc<BundleDesc>> = bundles
            .into_iter()
            .filter(|b| b.range_of(partition).is_some_and(|r| r.last >= start))
            .map(Arc::new)
            .collect();
        let recorded_cuts = ends
            .into_iter()
            .filter(|&end| end >= start)
            .filter(|&end| {
                !recorded_bundles
                    .iter()
                    .any(|b| b.range_of(partition).is_some_and(|r| r.contains(end)))
            })
            .collect();
        Self {
            partition,
            committed: start,
            dirty: false,
            pending: VecDeque::new(),
            recorded_cuts,
            recorded_bundles,
            replayed: Vec::new(),
        }
    }

    pub fn committed(&self) -> i64 {
        self.committed
    }

    /// The previous owner's bundles this partition is in, to be replayed whole: each is
    /// registered as pending at once (its acknowledgement moves the commit like any batch's)
    /// and the consumer's own records in it are skipped from now on ([`Self::replays`]).
    pub fn take_replays(&mut self) -> Vec<Arc<BundleDesc>> {
        let bundles = std::mem::take(&mut self.recorded_bundles);
        for b in &bundles {
            let range = b.range_of(self.partition).expect("filtered on load");
            self.replayed.push(range);
            self.insert_pending(Pending {
                range,
                acked: false,
                bundle: Some(b.clone()),
            });
        }
        bundles
    }

    /// Whether `offset` lies in a bundle being replayed (the replay reads it).
    pub fn replays(&self, offset: i64) -> bool {
        self.replayed.iter().any(|r| r.contains(offset))
    }

    /// The end offset a batch starting at `first` must stop at to replay an earlier cut,
    /// if one is known: a recorded end, or the offset before a replayed bundle's range. The
    /// caller closes the batch when it reaches this offset.
    pub fn recorded_cut(&mut self, first: i64) -> Option<i64> {
        while self.recorded_cuts.front().is_some_and(|&end| end < first) {
            self.recorded_cuts.pop_front();
        }
        let before_replay = self
            .replayed
            .iter()
            .filter(|r| r.first > first)
            .map(|r| r.first - 1)
            .min();
        match (self.recorded_cuts.front().copied(), before_replay) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn insert_pending(&mut self, p: Pending) {
        let at = self
            .pending
            .iter()
            .position(|q| q.range.first > p.range.first)
            .unwrap_or(self.pending.len());
        self.pending.insert(at, p);
    }

    /// Register a closed batch that is about to be sent. Returns the intent metadata to
    /// commit (with the unchanged committed offset) before the insert goes out.
    pub fn open(&mut self, range: BatchRange) -> String {
        self.open_in(range, None)
    }

    /// Register a closed batch that goes out in `bundle`; see [`Self::open`].
    pub fn open_bundled(&mut self, range: BatchRange, bundle: Arc<BundleDesc>) -> String {
        self.open_in(range, Some(bundle))
    }

    fn open_in(&mut self, range: BatchRange, bundle: Option<Arc<BundleDesc>>) -> String {
        debug_assert!(
            self.pending
                .iter()
                .all(|p| p.range.last < range.first || p.range.first > range.last)
        );
        if self.recorded_cuts.front() == Some(&range.last) {
            self.recorded_cuts.pop_front();
        }
        self.insert_pending(Pending {
            range,
            acked: false,
            bundle,
        });
        self.intent()
    }

    /// The bundle of the pending batch `range` was never sent (Kafka did not take its
    /// description): the batch goes out alone. Returns the intent that says so.
    pub fn dissolve(&mut self, range: BatchRange) -> String {
        if let Some(p) = self.pending.iter_mut().find(|p| p.range == range) {
            p.bundle = None;
        }
        self.intent()
    }

    /// Whether a bundle entry of `entry_bytes` still fits this partition's metadata beside
    /// the bundles already pending (ends alone may be left out; descriptions may not).
    pub fn fits_bundle(&self, entry_bytes: usize) -> bool {
        let bundles: usize = self
            .pending
            .iter()
            .filter_map(|p| p.bundle.as_ref())
            .map(|b| b.render().len() + 1)
            .sum();
        METADATA_PREFIX_BUNDLES.len() + bundles + entry_bytes < MAX_METADATA_BYTES
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
            self.replayed.retain(|r| *r != p.range);
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
    /// and the description of every bundle pending or still to replay, so a successor
    /// replays the same cuts. Descriptions are never left out; ends past the limit are.
    fn intent(&self) -> String {
        let bundles: Vec<&Arc<BundleDesc>> = self
            .pending
            .iter()
            .filter_map(|p| p.bundle.as_ref())
            .chain(self.recorded_bundles.iter())
            .collect();
        let ends = self
            .pending
            .iter()
            .filter(|p| p.bundle.is_none())
            .map(|p| p.range.last)
            .chain(self.recorded_cuts.iter().copied());
        let mut out = String::from(if bundles.is_empty() {
            METADATA_PREFIX
        } else {
            METADATA_PREFIX_BUNDLES
        });
        let mut first = true;
        for b in bundles {
            if !first {
                out.push(',');
            }
            out.push_str(&b.render());
            first = false;
        }
        for end in ends {
            let piece = if first {
                end.to_string()
            } else {
                format!(",{end}")
            };
            if out.len() + piece.len() > MAX_METADATA_BYTES {
                break; // later ends are only an optimisation for dedup; never exceed Kafka's limit
            }
            out.push_str(&piece);
            first = false;
        }
        out
    }
}

/// Parse intent metadata into batch ends and bundle descriptions; unknown or damaged
/// metadata (or a damaged entry) means no known cuts.
pub fn parse_entries(metadata: &str, topic: &Arc<str>) -> (Vec<i64>, Vec<BundleDesc>) {
    let list = match (
        metadata.strip_prefix(METADATA_PREFIX),
        metadata.strip_prefix(METADATA_PREFIX_BUNDLES),
    ) {
        (Some(l), _) | (_, Some(l)) => l,
        _ => return Default::default(),
    };
    let mut ends = Vec::new();
    let mut bundles = Vec::new();
    for entry in list.split(',') {
        if entry.contains(':') {
            bundles.extend(BundleDesc::parse(topic, entry));
        } else if let Ok(end) = entry.trim().parse() {
            ends.push(end);
        }
    }
    ends.sort_unstable();
    ends.dedup();
    (ends, bundles)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: i64, last: i64) -> BatchRange {
        BatchRange { first, last }
    }

    fn t() -> Arc<str> {
        "t".into()
    }

    #[test]
    fn commit_moves_only_over_the_acknowledged_prefix() {
        let mut l = PartitionLedger::new(100, None, &t(), 0);
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
        let mut l = PartitionLedger::new(0, None, &t(), 0);
        assert_eq!(l.open(r(0, 9)), "th1:9");
        assert_eq!(l.open(r(10, 24)), "th1:9,24");
    }

    #[test]
    fn a_successor_replays_the_same_cuts() {
        let mut l = PartitionLedger::new(10, Some("th1:24,9,40"), &t(), 0);
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
        let ends = |m: &str| parse_entries(m, &t()).0;
        assert!(ends("").is_empty());
        assert!(ends("something else").is_empty());
        assert_eq!(ends("th1:5,x,3"), vec![3, 5]);
    }

    #[test]
    fn acks_for_unknown_batches_are_ignored() {
        let mut l = PartitionLedger::new(0, None, &t(), 0);
        l.open(r(0, 9));
        assert!(!l.ack(r(0, 8)));
        assert_eq!(l.committed(), 0);
    }

    #[test]
    fn metadata_never_exceeds_the_kafka_limit() {
        let mut l = PartitionLedger::new(0, None, &t(), 0);
        for i in 0..2000 {
            l.open(r(i * 1_000_000_000, i * 1_000_000_000 + 999_999_999));
        }
        assert!(l.intent().len() <= MAX_METADATA_BYTES);
    }

    fn bundle(members: &[(i32, i64, i64)]) -> Arc<BundleDesc> {
        Arc::new(BundleDesc {
            topic: t(),
            members: members.iter().map(|&(p, a, b)| (p, r(a, b))).collect(),
        })
    }

    #[test]
    fn a_pending_bundle_is_described_whole_in_the_intent() {
        let mut l = PartitionLedger::new(0, None, &t(), 3);
        l.open(r(0, 9));
        let b = bundle(&[(1, 50, 60), (3, 10, 19)]);
        assert_eq!(l.open_bundled(r(10, 19), b), "th2:1:50-60+3:10-19,9");
        assert!(l.ack(r(0, 9)));
        assert_eq!(
            l.take_commit(),
            Some((10, "th2:1:50-60+3:10-19".to_string()))
        );
        assert!(l.ack(r(10, 19)));
        assert_eq!(
            l.take_commit(),
            Some((20, "th1:".to_string())),
            "without bundles the metadata reads as before"
        );
    }

    #[test]
    fn a_successor_replays_a_recorded_bundle_and_skips_its_own_records_in_it() {
        let meta = "th2:1:50-60+3:10-19,9,30";
        let mut l = PartitionLedger::new(0, Some(meta), &t(), 3);
        let replays = l.take_replays();
        assert_eq!(replays, vec![bundle(&[(1, 50, 60), (3, 10, 19)])]);
        assert_eq!(
            l.recorded_cut(0),
            Some(9),
            "the batch before it ends where it did"
        );
        l.open(r(0, 9));
        assert!(l.replays(10) && l.replays(19) && !l.replays(20));
        assert_eq!(l.recorded_cut(20), Some(30));
        assert_eq!(
            l.current_commit(),
            (0, "th2:1:50-60+3:10-19,9,30".to_string())
        );
        // Acknowledged out of order: the bundle first, then the batch before it.
        assert!(!l.ack(r(10, 19)));
        assert!(l.ack(r(0, 9)));
        assert_eq!(l.committed(), 20);
        assert!(!l.replays(15));
    }

    #[test]
    fn a_recorded_bundle_before_the_committed_offset_is_done() {
        let mut l = PartitionLedger::new(20, Some("th2:1:50-60+3:10-19,30"), &t(), 3);
        assert!(l.take_replays().is_empty());
        assert_eq!(l.recorded_cut(20), Some(30));
        let damaged =
            PartitionLedger::new(0, Some("th2:1:50-x+3:10-19,30"), &t(), 3).take_replays();
        assert!(
            damaged.is_empty(),
            "a damaged description is no description"
        );
    }

    #[test]
    fn a_dissolved_bundle_leaves_its_batch_alone() {
        let mut l = PartitionLedger::new(0, None, &t(), 3);
        l.open_bundled(r(0, 9), bundle(&[(3, 0, 9), (4, 5, 5)]));
        assert_eq!(l.dissolve(r(0, 9)), "th1:9");
    }

    #[test]
    fn descriptions_are_never_cut_short() {
        let mut l = PartitionLedger::new(0, None, &t(), 0);
        let members: Vec<(i32, i64, i64)> =
            (0..40).map(|p| (p, 1_000_000_000, 1_000_000_999)).collect();
        let b = bundle(&members);
        let entry = b.render().len();
        let mut n = 0;
        while l.fits_bundle(entry) {
            l.open_bundled(r(n * 10, n * 10 + 9), b.clone());
            n += 1;
        }
        assert!(n >= 2, "a few large bundles fit");
        for i in 0..500 {
            l.open(r(1_000_000 + i * 10, 1_000_000 + i * 10 + 9));
        }
        let intent = l.current_commit().1;
        assert!(intent.len() <= MAX_METADATA_BYTES);
        let t = t();
        assert_eq!(parse_entries(&intent, &t).1.len() as i64, n);
    }
}
