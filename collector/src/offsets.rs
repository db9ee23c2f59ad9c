//! Per-partition offset ledger: which batches are in flight, which are acknowledged, and
//! what may be committed.
//!
//! Exactly-once needs four things from this file:
//! 1. a partition's committed offset only ever moves past records whose rows ClickHouse
//!    acknowledged, and never back: acknowledgements may arrive out of order (only the
//!    contiguous prefix counts), and an acknowledged batch counts only once every record
//!    before it was closed into a batch ("closed to"): a bundle replayed for a previous
//!    owner may be acknowledged before the consumer has even read the records in front of
//!    it, and must not carry the commit past them;
//! 2. after a crash the replay cuts batches at exactly the same offsets as before, so every
//!    re-sent batch carries the same `insert_deduplication_token` and ClickHouse drops it as a
//!    duplicate. Batch ends are therefore written *before* the insert is sent, as the metadata
//!    of the partition's committed offset (the "intent"), and read back on assignment;
//! 3. offsets, cuts and tokens name the log they count in ([`LogId`]: the topic's id), so
//!    another incarnation of the topic or another cluster's topic of the same name is never
//!    taken for this one; cuts recorded before logs had names (`th1:`/`th2:`) replay under
//!    their old tokens and are written back marked as such (`L`);
//! 4. recorded metadata is checked at load against the log it claims to describe: a
//!    committed offset or a cut beyond the log's end, or metadata naming another log, is
//!    dropped and reported ([`Dropped`]), so no batch waits for a cut that cannot come;
//! 5. the format is staged: with `write_legacy` (`kafka.commit_format: th2`) new cuts are
//!    named in the legacy log (legacy tokens) while cuts recorded in this log still replay
//!    under its name, and the metadata is written as `th1:`/`th2:` once no entry of this
//!    log is left, so a collector that knows only those formats can take the partition over
//!    exactly (a rollback, or a rollout from such a release).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::batch::{BatchRange, LogId};
use crate::bundle::BundleDesc;

/// Prefix of legacy metadata that names batch ends only.
const METADATA_PREFIX: &str = "th1:";
/// Prefix of legacy metadata that also describes bundles ([`crate::bundle`]).
const METADATA_PREFIX_BUNDLES: &str = "th2:";
/// Prefix of the metadata of a named log: `th3:<log id>;` then the entries, bundles first;
/// an entry recorded in the legacy log (before an upgrade) starts with [`LEGACY_MARK`].
const METADATA_PREFIX_NAMED: &str = "th3:";
const LEGACY_MARK: char = 'L';
/// Kafka's default `offset.metadata.max.bytes` is 4096; stay well below it.
pub const MAX_METADATA_BYTES: usize = 3000;

#[derive(Debug)]
struct Pending {
    range: BatchRange,
    acked: bool,
    /// The bundle the batch is inserted in, if any: its description is part of the intent.
    bundle: Option<Arc<BundleDesc>>,
    /// Replays a cut recorded in the legacy log: inserted under its legacy token.
    legacy: bool,
}

/// A batch end recorded by a previous owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cut {
    end: i64,
    legacy: bool,
}

/// What the shell knows of a partition when it loads the partition's ledger.
#[derive(Debug, Clone)]
pub struct LogView<'a> {
    pub topic: &'a Arc<str>,
    pub partition: i32,
    /// The log the partition is in now.
    pub log: &'a LogId,
    /// The first offset the consumer delivered.
    pub first_seen: i64,
    /// The partition's high watermark (`None`: unknown, nothing is checked against it).
    pub high: Option<i64>,
    /// Whether a committed offset whose metadata names no log may count in this one:
    /// false once this process saw the topic recreated (such an offset counts in the old).
    pub trust_unnamed: bool,
    /// Name new cuts in the legacy log (`kafka.commit_format: th2`, rule 5): for a rollout
    /// or a rollback with collectors that know only `th1:`/`th2:`.
    pub write_legacy: bool,
}

/// Recorded metadata that cannot describe the log, dropped at load (rule 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    /// The metadata names another log: another incarnation of the topic, or another
    /// cluster's topic of the same name (offsets copied by MirrorMaker, restored ones).
    OtherLog { recorded: String, committed: i64 },
    /// The committed offset lies beyond the log's end.
    OffsetBeyondLog { committed: i64, high: i64 },
    /// Recorded cuts or bundle ranges beyond the log's end.
    CutsBeyondLog { count: usize, last: i64, high: i64 },
}

impl Dropped {
    /// A low-cardinality label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Dropped::OtherLog { .. } => "other_log",
            Dropped::OffsetBeyondLog { .. } => "offset_beyond_log",
            Dropped::CutsBeyondLog { .. } => "cuts_beyond_log",
        }
    }
}

/// Every [`Dropped::reason`], for metrics that must exist before the first drop.
pub const DROPPED_REASONS: [&str; 3] = ["other_log", "offset_beyond_log", "cuts_beyond_log"];

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::OtherLog {
                recorded,
                committed,
            } => write!(
                f,
                "the committed offset {committed} and its cuts were recorded in log {recorded:?}, not this one"
            ),
            Dropped::OffsetBeyondLog { committed, high } => write!(
                f,
                "the committed offset {committed} lies beyond the log's end {high}"
            ),
            Dropped::CutsBeyondLog { count, last, high } => write!(
                f,
                "{count} recorded cuts reach past the log's end {high} (the last at {last})"
            ),
        }
    }
}

/// The ledger of one assigned partition.
#[derive(Debug)]
pub struct PartitionLedger {
    partition: i32,
    /// The log this partition's offsets count in.
    log: LogId,
    /// The log new cuts are named in: `log`, or the legacy log (rule 5).
    writes: LogId,
    /// Next offset after the acknowledged prefix: what a commit stores.
    committed: i64,
    /// Next offset after every record closed into a batch or passed over (rule 1): an
    /// acknowledged batch moves the commit only if it starts at or below this.
    closed_to: i64,
    /// Whether `committed` moved since the last commit was issued.
    dirty: bool,
    /// In offset order.
    pending: VecDeque<Pending>,
    /// Batch ends inherited from a previous owner's intent, still ahead of us.
    recorded_cuts: VecDeque<Cut>,
    /// Bundles inherited from a previous owner's intent, not yet handed out for replay.
    recorded_bundles: Vec<Arc<BundleDesc>>,
    /// This partition's ranges of the bundles being replayed: the consumer's own records
    /// in them are not batched again (the replay reads them), until the consumer passed them.
    replayed: Vec<BatchRange>,
}

impl PartitionLedger {
    /// A ledger of the legacy log starting at the committed offset `start`, with the previous
    /// owner's intent, nothing checked against the log (tests and a shell without a view).
    pub fn new(start: i64, metadata: Option<&str>, topic: &Arc<str>, partition: i32) -> Self {
        let view = LogView {
            topic,
            partition,
            log: &LogId::legacy(),
            first_seen: start,
            high: None,
            trust_unnamed: true,
            write_legacy: false,
        };
        Self::load(metadata.map(|m| (start, m)), &view).0
    }

    /// The ledger of `view`'s partition from its committed offset and metadata (`None`:
    /// nothing committed, start at the first record seen), with what had to be dropped
    /// because it cannot describe this log (rule 4).
    pub fn load(committed: Option<(i64, &str)>, view: &LogView<'_>) -> (Self, Vec<Dropped>) {
        let mut dropped = Vec::new();
        let mut ledger = Self::empty(view.first_seen, view.log.clone(), view.partition);
        if view.write_legacy {
            ledger.writes = LogId::legacy();
        }
        let Some((start, metadata)) = committed else {
            return (ledger, dropped);
        };
        let recorded = parse(metadata, view.topic, view.log);
        match &recorded.log {
            Recorded::Other(id) => {
                dropped.push(Dropped::OtherLog {
                    recorded: id.clone(),
                    committed: start,
                });
                return (ledger, dropped);
            }
            Recorded::Unnamed if !view.trust_unnamed => {
                dropped.push(Dropped::OtherLog {
                    recorded: "(unnamed, before the topic was recreated)".into(),
                    committed: start,
                });
                return (ledger, dropped);
            }
            _ => {}
        }
        if let Some(high) = view.high
            && start > high
        {
            dropped.push(Dropped::OffsetBeyondLog {
                committed: start,
                high,
            });
            return (ledger, dropped);
        }
        ledger.committed = start;
        ledger.closed_to = start;
        // A cut or a range at or past the high watermark names records this log never had.
        let within = |end: i64| view.high.is_none_or(|h| end < h);
        let mut beyond: Vec<i64> = Vec::new();
        for b in recorded.bundles {
            let Some(r) = b.range_of(view.partition) else {
                continue;
            };
            if r.last < start {
                continue;
            }
            if within(r.last) {
                ledger.recorded_bundles.push(Arc::new(b));
            } else {
                beyond.push(r.last);
            }
        }
        for cut in recorded.cuts {
            if cut.end < start {
                continue;
            }
            if !within(cut.end) {
                beyond.push(cut.end);
                continue;
            }
            let in_bundle = ledger.recorded_bundles.iter().any(|b| {
                b.range_of(view.partition)
                    .is_some_and(|r| r.contains(cut.end))
            });
            if !in_bundle {
                ledger.recorded_cuts.push_back(cut);
            }
        }
        if let (Some(high), Some(&last)) = (view.high, beyond.iter().max()) {
            dropped.push(Dropped::CutsBeyondLog {
                count: beyond.len(),
                last,
                high,
            });
        }
        (ledger, dropped)
    }

    fn empty(start: i64, log: LogId, partition: i32) -> Self {
        Self {
            partition,
            writes: log.clone(),
            log,
            committed: start,
            closed_to: start,
            dirty: false,
            pending: VecDeque::new(),
            recorded_cuts: VecDeque::new(),
            recorded_bundles: Vec::new(),
            replayed: Vec::new(),
        }
    }

    pub fn committed(&self) -> i64 {
        self.committed
    }

    /// The log new cuts are named in (rule 5): what a new bundle's token names.
    pub fn writes(&self) -> &LogId {
        &self.writes
    }

    /// The previous owner's bundles this partition is in, to be replayed whole: each is
    /// registered as pending at once (its acknowledgement moves the commit like any batch's,
    /// once the records before it were closed: rule 1) and the consumer's own records in it
    /// are skipped from now on ([`Self::replays`]).
    pub fn take_replays(&mut self) -> Vec<Arc<BundleDesc>> {
        let bundles = std::mem::take(&mut self.recorded_bundles);
        for b in &bundles {
            let range = b.range_of(self.partition).expect("filtered on load");
            self.replayed.push(range);
            self.insert_pending(Pending {
                range,
                acked: false,
                bundle: Some(b.clone()),
                legacy: b.log.is_legacy(),
            });
        }
        bundles
    }

    /// Whether `offset` lies in a bundle being replayed (the replay reads it).
    pub fn replays(&self, offset: i64) -> bool {
        self.replayed.iter().any(|r| r.contains(offset))
    }

    /// The consumer delivered `offset` and it is not batched (a replayed bundle reads it, or
    /// it is below the committed offset): every record before it is accounted for.
    pub fn passed(&mut self, offset: i64) {
        self.advance_closed(offset + 1);
    }

    fn advance_closed(&mut self, to: i64) {
        if to > self.closed_to {
            self.closed_to = to;
            let closed_to = self.closed_to;
            self.replayed.retain(|r| r.last >= closed_to);
        }
    }

    /// The end offset a batch starting at `first` must stop at to replay an earlier cut,
    /// if one is known: a recorded end, or the offset before a replayed bundle's range. The
    /// caller closes the batch when it reaches this offset.
    pub fn recorded_cut(&mut self, first: i64) -> Option<i64> {
        while self.recorded_cuts.front().is_some_and(|c| c.end < first) {
            self.recorded_cuts.pop_front();
        }
        let before_replay = self
            .replayed
            .iter()
            .filter(|r| r.first > first)
            .map(|r| r.first - 1)
            .min();
        match (self.recorded_cuts.front().map(|c| c.end), before_replay) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The log whose token a batch of `range` goes out under: the log of the cut it
    /// replays (the legacy log for an upgrade's in-flight batch), the log new cuts are named
    /// in otherwise (rule 5).
    pub fn log_for(&self, range: BatchRange) -> LogId {
        match self.recorded_cut_at(range.last) {
            Some(c) if c.legacy => LogId::legacy(),
            Some(_) => self.log.clone(),
            None => self.writes.clone(),
        }
    }

    fn recorded_cut_at(&self, last: i64) -> Option<Cut> {
        self.recorded_cuts
            .iter()
            .find(|c| c.end >= last)
            .filter(|c| c.end == last)
            .copied()
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
        let legacy = match &bundle {
            Some(b) => b.log.is_legacy(),
            None => self.log_for(range).is_legacy(),
        };
        if self.recorded_cuts.front().map(|c| c.end) == Some(range.last) {
            self.recorded_cuts.pop_front();
        }
        self.advance_closed(range.last + 1);
        self.insert_pending(Pending {
            range,
            acked: false,
            bundle,
            legacy,
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

    /// The bytes the intent's prefix takes.
    fn prefix_len(&self) -> usize {
        match self.log.name() {
            Some(id) => METADATA_PREFIX_NAMED.len() + id.len() + 1,
            None => METADATA_PREFIX_BUNDLES.len(),
        }
    }

    /// Whether a bundle entry of `entry_bytes` still fits this partition's metadata beside
    /// the bundles already pending (ends alone may be left out; descriptions may not).
    pub fn fits_bundle(&self, entry_bytes: usize) -> bool {
        let bundles: usize = self
            .pending
            .iter()
            .filter_map(|p| p.bundle.as_ref())
            .map(|b| b.render().len() + 2)
            .sum();
        self.prefix_len() + bundles + entry_bytes + 1 < MAX_METADATA_BYTES
    }

    /// Mark a batch acknowledged. Returns true when the committed offset moved: over the
    /// acknowledged batches at the front, each only once every record before it was closed
    /// (rule 1), and never backwards.
    pub fn ack(&mut self, range: BatchRange) -> bool {
        if let Some(p) = self.pending.iter_mut().find(|p| p.range == range) {
            p.acked = true;
        } else {
            return false;
        }
        let mut moved = false;
        while self
            .pending
            .front()
            .is_some_and(|p| p.acked && p.range.first <= self.closed_to)
        {
            let p = self.pending.pop_front().expect("front exists");
            let next = p.range.last + 1;
            debug_assert!(
                next >= self.committed,
                "a commit never moves back ({} -> {next})",
                self.committed
            );
            if next > self.committed {
                self.committed = next;
                moved = true;
            }
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
    /// Whether the metadata written now names this log (`th3:`): always, unless new cuts
    /// are legacy (rule 5) and no entry of this log is left.
    pub fn writes_named(&self) -> bool {
        self.log.name().is_some()
            && (!self.writes.is_legacy()
                || self.pending.iter().any(|p| !p.legacy)
                || self.recorded_cuts.iter().any(|c| !c.legacy)
                || self.recorded_bundles.iter().any(|b| !b.log.is_legacy()))
    }

    fn intent(&self) -> String {
        let named = self.log.name().filter(|_| self.writes_named());
        let mark = |legacy: bool| if legacy && named.is_some() { "L" } else { "" };
        let bundles: Vec<(&Arc<BundleDesc>, bool)> = self
            .pending
            .iter()
            .filter_map(|p| p.bundle.as_ref())
            .chain(self.recorded_bundles.iter())
            .map(|b| (b, b.log.is_legacy()))
            .collect();
        let ends = self
            .pending
            .iter()
            .filter(|p| p.bundle.is_none())
            .map(|p| (p.range.last, p.legacy))
            .chain(self.recorded_cuts.iter().map(|c| (c.end, c.legacy)));
        let mut out = match named {
            Some(id) => format!("{METADATA_PREFIX_NAMED}{id};"),
            None if bundles.is_empty() => METADATA_PREFIX.to_string(),
            None => METADATA_PREFIX_BUNDLES.to_string(),
        };
        let mut first = true;
        for (b, legacy) in bundles {
            if !first {
                out.push(',');
            }
            out.push_str(mark(legacy));
            out.push_str(&b.render());
            first = false;
        }
        for (end, legacy) in ends {
            let piece = format!("{}{}{end}", if first { "" } else { "," }, mark(legacy));
            if out.len() + piece.len() > MAX_METADATA_BYTES {
                break; // later ends are only an optimisation for dedup; never exceed Kafka's limit
            }
            out.push_str(&piece);
            first = false;
        }
        out
    }
}

/// Which log recorded metadata says it describes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Recorded {
    /// Legacy (`th1:`/`th2:`), none, or unknown: names no log.
    Unnamed,
    /// The log being loaded.
    This,
    /// Another log, by its recorded id.
    Other(String),
}

/// Recorded metadata, parsed against the log being loaded.
#[derive(Debug)]
struct Parsed {
    log: Recorded,
    /// Sorted, each end once.
    cuts: Vec<Cut>,
    bundles: Vec<BundleDesc>,
}

/// Parse intent metadata into batch ends and bundle descriptions; unknown or damaged
/// metadata (or a damaged entry) means no known cuts.
fn parse(metadata: &str, topic: &Arc<str>, log: &LogId) -> Parsed {
    let mut out = Parsed {
        log: Recorded::Unnamed,
        cuts: Vec::new(),
        bundles: Vec::new(),
    };
    let (list, named) = if let Some(rest) = metadata.strip_prefix(METADATA_PREFIX_NAMED) {
        let Some((id, list)) = rest.split_once(';') else {
            return out;
        };
        if log.name() != Some(id) {
            out.log = Recorded::Other(id.to_string());
            return out;
        }
        out.log = Recorded::This;
        (list, true)
    } else if let Some(l) = metadata
        .strip_prefix(METADATA_PREFIX)
        .or_else(|| metadata.strip_prefix(METADATA_PREFIX_BUNDLES))
    {
        (l, false)
    } else {
        return out;
    };
    for entry in list.split(',') {
        let (legacy, entry) = match entry.trim().strip_prefix(LEGACY_MARK) {
            Some(e) if named => (true, e),
            _ => (!named, entry.trim()),
        };
        let entry_log = if legacy { LogId::legacy() } else { log.clone() };
        if entry.contains(':') {
            out.bundles
                .extend(BundleDesc::parse_in(topic, &entry_log, entry));
        } else if let Ok(end) = entry.parse() {
            out.cuts.push(Cut { end, legacy });
        }
    }
    out.cuts.sort_unstable_by_key(|c| c.end);
    out.cuts.dedup_by_key(|c| c.end);
    out
}

/// The batch ends and bundle descriptions legacy metadata records.
#[cfg(test)]
fn parse_entries(metadata: &str, topic: &Arc<str>) -> (Vec<i64>, Vec<BundleDesc>) {
    let p = parse(metadata, topic, &LogId::legacy());
    (p.cuts.iter().map(|c| c.end).collect(), p.bundles)
}

#[cfg(test)]
#[path = "offsets_tests.rs"]
mod tests;
