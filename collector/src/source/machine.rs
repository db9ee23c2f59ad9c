//! The Kafka source's pure core: a state machine over the assigned partitions.
//!
//! Events in — assigned, revoked, a record, an acknowledgement, a budget check, a timer
//! tick, shutdown — and [`Command`]s out: send a batch (after recording its cut), commit,
//! pause, resume. The machine does no IO: the rdkafka shell ([`super::kafka`]) feeds it
//! what the consumer delivers and carries out what it answers, so rebalances, stale
//! acknowledgements, replayed cuts, pause/resume and shutdown are unit-tested here
//! without a broker.
//!
//! The at-least-once invariants it keeps (with [`crate::offsets`]):
//! 1. a commit only covers batches ClickHouse acknowledged, in this assignment generation
//!    (an acknowledgement from before a revoke is dropped: the new owner replays it);
//! 2. every batch's cut is committed as intent metadata before the batch is sent, and a
//!    batch that replays a previous owner's recorded cut ends exactly at that cut — no
//!    timer, pause or shutdown closes it earlier — so its token deduplicates. (The shell
//!    holds a batch whose time cut Kafka did not take: [`super::unsent`].)
//! 3. every cut made by time — the linger timer, a budget pause, *shutdown* — is durable:
//!    Kafka has it before the rows can reach ClickHouse (a shutdown with Kafka unreachable
//!    therefore sends nothing new: the next owner cuts those records its own way);
//! 4. a revoke commits every revoked partition's ledger synchronously — the acknowledged
//!    offset *and* the cuts of every batch still in flight — whether or not the offset
//!    moved, so the next owner replays the old owner's cuts even when an asynchronous intent
//!    commit was lost in the rebalance or the batch settings changed between owners;
//! 5. the budget never holds back a batch that replays a recorded cut: such a partition is
//!    not paused until the batch reached its cut (were it paused, nothing might free the
//!    budget, and [`REPLAY_LINGER`] would close it at a new end: a duplicate). The memory
//!    this takes past the budget is bounded by the recorded batches, which the previous
//!    owner held within its own budget;
//! 6. time cuts are made for every partition at once and bundled across partitions
//!    ([`crate::bundle`], with `batch.bundle`): each member's ledger names the whole bundle,
//!    and all members' intents go to Kafka in one synchronous commit before the insert.
//!    The open batches are also closed together, as a bundle, once they hold a batch's
//!    worth between them (`batch.max_bytes` or `max_records`): a cut that depends on how
//!    the partitions' records interleaved, so it is durable like a time cut (rule 3);
//! 7. a bundle recorded by a previous owner is replayed whole ([`Command::Replay`]): the
//!    partition's own records in it are not batched again, and its acknowledgement moves
//!    the commit like any batch's;
//! 8. while a partition is behind (another batch's worth of records waiting in Kafka), its
//!    batch — and with bundling the bundle — grows past the size cut up to the backlog cut
//!    (`batch.backlog_max_bytes`): fewer, larger parts. That cut depends on the backlog, not
//!    on the data alone, so it is durable like a time cut (rule 3; `machine_backlog.rs`).
//!
//! Memory: every open batch holds its bytes against the [`Budget`] through a permit that
//! the batch carries; when the budget is spent the shell first stops taking records, and
//! only a budget spent for [`BUDGET_HOLD`] pauses all partitions (but for rule 5), resumed
//! below [`RESUME_FRACTION`] (`machine_budget.rs`).
//!
//! Why one file of ~650 lines: every handler below reads and changes the same private
//! partition table under the numbered rules above, and they are checked against each other
//! when read together; what could leave did (bundling: `machine_bundles.rs`; the linger timer:
//! `machine_linger.rs`; the budget:
//! `machine_budget.rs`; the backlog cut: `machine_backlog.rs`; the acknowledgement ledger: `unsent.rs`; the tests:
//! `machine_tests.rs`, `machine_budget_tests.rs`, `machine_bundle_tests.rs`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::batch::{BatchBuilder, BatchRange, CutPolicy, RecordBatch, SkipReason, Skipped};
use crate::budget::{Budget, BudgetPermit};
use crate::bundle::{Bundle, BundleDesc};
use crate::offsets::PartitionLedger;
use crate::pool::BufPool;

use super::linger::Linger;

/// How long a batch replaying a previous owner's recorded cut waits for the records up to
/// that cut before the linger timer closes it anyway (and a replay of it may then insert
/// rows a second time, under another token).
pub const REPLAY_LINGER: Duration = Duration::from_secs(30);

pub use budget::{BUDGET_HOLD, RESUME_FRACTION};

/// What cuts batches and what to do with records that will not be decoded.
#[derive(Debug, Clone, Copy)]
pub struct MachineConfig {
    pub cut: CutPolicy,
    /// The size cut while a partition is behind (rule 8); equal to `cut`: never grows.
    pub backlog_cut: CutPolicy,
    pub linger: Duration,
    /// How far the linger stretches while time cuts are small ([`Linger`]); at or below
    /// `linger`: never.
    pub max_linger: Duration,
    pub max_record_bytes: usize,
    /// Keep skipped payloads for the dead-letter topic.
    pub keep_skipped_payloads: bool,
    /// Bundle the time cuts of all partitions into one insert (rule 6).
    pub bundle: bool,
}

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionId {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl PartitionId {
    pub fn new(topic: &str, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

/// An offset to commit for a partition, with the intent metadata that names its cuts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffset {
    pub partition: PartitionId,
    pub offset: i64,
    pub metadata: String,
}

/// What the shell must do, in this order.
#[derive(Debug)]
pub enum Command {
    /// Commit `intent` (the batch's cut, with the unchanged committed offset), then hand
    /// `batch` to the workers. `durable`: the cut came from time (the linger timer, a
    /// pause), not from the data, so it cannot be made again on replay: commit it
    /// synchronously before the rows can reach ClickHouse.
    Send {
        intent: CommitOffset,
        batch: RecordBatch,
        durable: bool,
    },
    /// Commit acknowledged progress. `sync` on revoke and at shutdown: the next owner must
    /// see it.
    Commit {
        offsets: Vec<CommitOffset>,
        sync: bool,
    },
    /// Commit every member's intent (each naming the whole bundle) synchronously in one
    /// request, then hand the bundle to the workers. If Kafka refuses, dissolve it
    /// ([`Machine::dissolve`]) and send its batches one by one as held time cuts.
    SendBundle {
        intents: Vec<CommitOffset>,
        bundle: Bundle,
    },
    /// Read the records of every member of `desc` again and insert them as that bundle;
    /// `partition` (held in `generation`) is the member this process acknowledges.
    Replay {
        desc: Arc<BundleDesc>,
        partition: PartitionId,
        generation: u64,
    },
    Pause(Vec<PartitionId>),
    Resume(Vec<PartitionId>),
}

/// ClickHouse acknowledged every row of a batch (or skipped records for a stated reason).
/// The acknowledgement carries the batch's budget permit until the machine has taken it, so
/// acknowledgements waiting in their channel are bounded by the budget like the batches
/// themselves; the batch's payload chunks go back to their pool at once.
#[derive(Debug)]
pub struct Ack {
    pub partition: PartitionId,
    pub generation: u64,
    pub range: BatchRange,
    /// Held, not read: dropped when the machine has taken the acknowledgement.
    _permit: BudgetPermit,
}

impl Ack {
    /// The acknowledgement of `batch`, taking its permit when this is the batch's last
    /// holder (the insert stage's case; otherwise the permit stays with the other holders).
    pub fn new(batch: Arc<RecordBatch>) -> Self {
        let partition = PartitionId::new(&batch.topic, batch.partition);
        let (generation, range) = (batch.generation, batch.range);
        let permit = match Arc::try_unwrap(batch) {
            Ok(mut b) => std::mem::take(&mut b.permit),
            Err(_) => BudgetPermit::default(),
        };
        Self {
            partition,
            generation,
            range,
            _permit: permit,
        }
    }
}

/// A record as the consumer delivered it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub payload: Option<&'a [u8]>,
}

/// What became of a record handed to [`Machine::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// Batched, or passed over as a replayed bundle reads it.
    Taken,
    /// Its partition is not assigned (revoked between fetch and delivery: the next owner
    /// reads it).
    NotHeld,
    /// It lies below the committed offset outside every replayed bundle: the consumer went
    /// back (librdkafka resets to the log's start when the committed offset is not in the
    /// log — a recreated topic). Not taken: the shell checks the topic's log
    /// ([`Machine::reincarnate`] if it changed, [`Machine::pass`] if not) and feeds it again.
    Rewound { committed: i64 },
}

/// How far behind one partition is, for the lag metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionLag<'a> {
    pub partition: &'a PartitionId,
    /// The committed offset (none before the first record's ledger was loaded).
    pub committed: Option<i64>,
    /// Kafka timestamp (ms) of the oldest record not yet acknowledged.
    pub oldest_unacknowledged_ms: Option<i64>,
    /// When the oldest batch not yet committed was first sent: its token must still be in
    /// the table's deduplication window when a successor replays it.
    pub oldest_sent: Option<Instant>,
}

#[derive(Debug)]
struct Partition {
    id: PartitionId,
    generation: u64,
    /// Loaded by the shell before the partition's first record ([`Machine::needs_ledger`]).
    ledger: Option<PartitionLedger>,
    builder: BatchBuilder,
    /// First offset, Kafka timestamp and send time of each sent, uncommitted batch, oldest
    /// first.
    pending_ts: VecDeque<(i64, i64, Instant)>,
    paused: bool,
    /// The partition's high watermark as the shell last read it (rule 8).
    high_watermark: Option<i64>,
    /// The open batch grew past the size cut (rule 8): its cut will be durable.
    grown: bool,
}

impl Partition {
    /// The previous owner's recorded cut that the open batch must end at, if any.
    fn recorded_cut(&mut self) -> Option<i64> {
        let first = self.builder.first_offset()?;
        self.ledger.as_mut()?.recorded_cut(first)
    }

    /// Close the open batch and register it in the ledger: the command that sends it.
    fn close(&mut self, durable: bool) -> Option<Command> {
        let batch = self.builder.take()?;
        Some(self.send(batch, durable))
    }

    /// Register a closed batch in the ledger: the command that sends it alone.
    fn send(&mut self, mut batch: RecordBatch, durable: bool) -> Command {
        let ledger = self
            .ledger
            .as_mut()
            .expect("a partition with records has a ledger");
        batch.log = ledger.log_for(batch.range);
        let metadata = ledger.open(batch.range);
        self.pending_ts
            .push_back((batch.range.first, batch.first_timestamp_ms, Instant::now()));
        Command::Send {
            intent: CommitOffset {
                partition: self.id.clone(),
                offset: ledger.committed(),
                metadata,
            },
            batch,
            durable,
        }
    }
}

/// Add a record to `builder` as the source batches it: to decode, or skipped as oversized
/// or empty (the bundle replayer batches the records it reads again the same way).
pub fn push_record(builder: &mut BatchBuilder, r: &Record<'_>, cfg: &MachineConfig) {
    match r.payload {
        Some(bytes) if bytes.len() > cfg.max_record_bytes => builder.push_skipped(
            r.offset,
            r.timestamp_ms,
            Skipped {
                offset: r.offset,
                reason: SkipReason::Oversized,
                detail: format!(
                    "record of {} bytes exceeds limits.max_record_bytes = {}",
                    bytes.len(),
                    cfg.max_record_bytes
                ),
                payload: cfg.keep_skipped_payloads.then(|| bytes.to_vec()),
            },
        ),
        Some(bytes) if !bytes.is_empty() => builder.push(r.offset, r.timestamp_ms, bytes),
        _ => builder.push_skipped(
            r.offset,
            r.timestamp_ms,
            Skipped {
                offset: r.offset,
                reason: SkipReason::Empty,
                detail: "record has no payload".into(),
                payload: None,
            },
        ),
    }
}

/// The assigned partitions and their open batches, ledgers and pause state.
#[derive(Debug)]
pub struct Machine {
    cfg: MachineConfig,
    budget: Arc<Budget>,
    /// Where open batches take their payload chunks (none: plain allocations).
    pool: Option<BufPool>,
    partitions: Vec<Partition>,
    next_generation: u64,
    /// Since when the budget has been spent without a pause (see [`Self::check_budget`]).
    spent_since: Option<Instant>,
    /// Bytes and records batched since the open batches' total was last checked against the
    /// cut policy (see [`Self::check_bundle_size`]).
    unchecked: (usize, usize),
    /// The linger timer's length now: stretched while time cuts are small ([`Linger`]).
    linger: Linger,
}

impl Machine {
    pub fn new(cfg: MachineConfig, budget: Arc<Budget>, pool: Option<BufPool>) -> Self {
        Self {
            cfg,
            budget,
            pool,
            partitions: Vec::new(),
            next_generation: 0,
            spent_since: None,
            linger: Linger::new(cfg.linger, cfg.max_linger),
            unchecked: (0, 0),
        }
    }

    fn find(&mut self, topic: &str, partition: i32) -> Option<&mut Partition> {
        self.partitions
            .iter_mut()
            .find(|p| p.id.partition == partition && &*p.id.topic == topic)
    }

    /// The group gave us `id` (again: a partition already held keeps its state).
    pub fn assign(&mut self, id: PartitionId) {
        if self.find(&id.topic, id.partition).is_some() {
            return;
        }
        self.next_generation += 1;
        let generation = self.next_generation;
        let mut builder =
            BatchBuilder::new(id.topic.clone(), id.partition, generation).with_budget(&self.budget);
        if let Some(pool) = &self.pool {
            builder = builder.with_pool(pool.clone());
        }
        tracing::info!(topic = %id.topic, partition = id.partition, generation, "partition assigned");
        self.partitions.push(Partition {
            id,
            generation,
            ledger: None,
            builder,
            pending_ts: VecDeque::new(),
            paused: false,
            high_watermark: None,
            grown: false,
        });
    }

    /// The group takes `ids` away. Their open batches were never sent: they are dropped
    /// (their records go back to Kafka for the next owner, their budget comes back). The
    /// acknowledged progress and the cuts of the batches in flight are committed
    /// synchronously, moved or not (rule 4), so the next owner starts there and cuts alike.
    pub fn revoke(&mut self, ids: &[PartitionId], out: &mut Vec<Command>) {
        let mut offsets = Vec::new();
        for id in ids {
            let Some(idx) = self.partitions.iter().position(|p| p.id == *id) else {
                continue;
            };
            let mut p = self.partitions.swap_remove(idx);
            if let Some((offset, metadata)) = p.ledger.as_mut().map(|l| {
                l.take_commit();
                l.current_commit()
            }) {
                offsets.push(CommitOffset {
                    partition: p.id.clone(),
                    offset,
                    metadata,
                });
            }
            tracing::info!(topic = %p.id.topic, partition = p.id.partition, in_flight = p.ledger.as_ref().map_or(0, PartitionLedger::in_flight), "partition revoked");
        }
        if !offsets.is_empty() {
            out.push(Command::Commit {
                offsets,
                sync: true,
            });
        }
    }

    /// Whether `id` is still held in assignment `generation`: a batch cut in an earlier
    /// generation, or of a partition given away since, must not be sent any more (the
    /// current owner replays its records).
    pub fn holds(&self, id: &PartitionId, generation: u64) -> bool {
        self.partitions
            .iter()
            .any(|p| p.id == *id && p.generation == generation)
    }

    /// Whether the shell must read the committed offset and recorded cuts of this
    /// partition ([`Machine::load_ledger`]) before handing it the partition's record.
    pub fn needs_ledger(&self, topic: &str, partition: i32) -> bool {
        self.partitions
            .iter()
            .any(|p| p.id.partition == partition && &*p.id.topic == topic && p.ledger.is_none())
    }

    /// The committed offset and the previous owner's recorded cuts of an assigned partition;
    /// the bundles it recorded are replayed (rule 7).
    pub fn load_ledger(
        &mut self,
        topic: &str,
        partition: i32,
        mut ledger: PartitionLedger,
        out: &mut Vec<Command>,
    ) {
        if let Some(p) = self.find(topic, partition) {
            for desc in ledger.take_replays() {
                tracing::info!(topic, partition, bundle = %desc.render(), "replaying a bundle a previous owner recorded");
                out.push(Command::Replay {
                    desc,
                    partition: p.id.clone(),
                    generation: p.generation,
                });
            }
            p.ledger = Some(ledger);
        }
    }

    /// A record arrived ([`Fed`] says what became of it).
    pub fn record(&mut self, r: Record<'_>, out: &mut Vec<Command>) -> Fed {
        let cfg = self.cfg;
        let Some(p) = self.find(r.topic, r.partition) else {
            return Fed::NotHeld;
        };
        if p.ledger.is_none() {
            // The shell loads ledgers first; without one, start here with no known cuts.
            debug_assert!(false, "record before its partition's ledger was loaded");
            p.ledger = Some(PartitionLedger::new(
                r.offset,
                None,
                &p.id.topic,
                p.id.partition,
            ));
        }
        // A recorded cut that lies before this record closes the open batch first.
        if p.recorded_cut().is_some_and(|end| end < r.offset) {
            out.extend(p.close(false));
        }
        // Rule 7: a replayed bundle reads its records itself (its acknowledgement may come
        // before the consumer reached them: they stay passed over until it has). Any other
        // record below the committed offset means the consumer went back: the shell decides.
        if let Some(l) = p.ledger.as_mut() {
            if l.replays(r.offset) {
                l.passed(r.offset);
                return Fed::Taken;
            }
            if r.offset < l.committed() {
                return Fed::Rewound {
                    committed: l.committed(),
                };
            }
        }
        push_record(&mut p.builder, &r, &cfg);
        let size = match p.recorded_cut() {
            Some(end) if end == r.offset => SizeCut::Close { durable: false },
            Some(_) => SizeCut::Open,
            None => p.size_cut(r.offset, cfg.cut, cfg.backlog_cut),
        };
        match size {
            SizeCut::Close { durable } => out.extend(p.close(durable)),
            SizeCut::Open if cfg.bundle => {
                self.check_bundle_size(r.payload.map_or(0, <[u8]>::len), out);
            }
            SizeCut::Open => {}
        }
        Fed::Taken
    }

    /// The shell found the log of a [`Fed::Rewound`] record unchanged: the record is in
    /// ClickHouse already (acknowledged in this log); pass over it.
    pub fn pass(&mut self, topic: &str, partition: i32, offset: i64) {
        if let Some(l) = self.find(topic, partition).and_then(|p| p.ledger.as_mut()) {
            l.passed(offset);
        }
    }

    /// `topic` names another log now (it was deleted and created again): every partition of
    /// it starts over in a new generation, without a ledger, so the next record loads one
    /// against the new log. The old log's open batches are dropped and its in-flight batches'
    /// acknowledgements will not count (their generation is gone); nothing of the new log
    /// was batched yet (its first record came back as [`Fed::Rewound`]).
    pub fn reincarnate(&mut self, topic: &str) -> Vec<PartitionId> {
        let ids: Vec<PartitionId> = self
            .partitions
            .iter()
            .filter(|p| &*p.id.topic == topic)
            .map(|p| p.id.clone())
            .collect();
        self.partitions.retain(|p| &*p.id.topic != topic);
        for id in &ids {
            self.assign(id.clone());
        }
        ids
    }

    /// ClickHouse acknowledged a batch. One from an earlier assignment generation of its
    /// partition (or of a partition no longer held) is dropped: the current owner replays
    /// those records and its own acknowledgement will count.
    pub fn acknowledged(&mut self, ack: Ack) {
        let Some(p) = self.find(&ack.partition.topic, ack.partition.partition) else {
            return;
        };
        if p.generation != ack.generation {
            return;
        }
        if let Some(l) = p.ledger.as_mut()
            && l.ack(ack.range)
        {
            while p
                .pending_ts
                .front()
                .is_some_and(|(first, _, _)| *first < l.committed())
            {
                p.pending_ts.pop_front();
            }
        }
    }

    /// Commit what acknowledgements moved (asynchronously: a lost commit is redone by the
    /// next one, and a replay deduplicates).
    pub fn take_commits(&mut self, out: &mut Vec<Command>) {
        let offsets: Vec<CommitOffset> = self
            .partitions
            .iter_mut()
            .filter_map(|p| {
                let (offset, metadata) = p.ledger.as_mut()?.take_commit()?;
                Some(CommitOffset {
                    partition: p.id.clone(),
                    offset,
                    metadata,
                })
            })
            .collect();
        if !offsets.is_empty() {
            out.push(Command::Commit {
                offsets,
                sync: false,
            });
        }
    }

    /// Held partitions whose commit metadata names the log (`th3:`) although new cuts are
    /// legacy (`kafka.commit_format: th2`): 0 once an older collector may take them over.
    pub fn named_while_legacy(&self) -> usize {
        self.partitions
            .iter()
            .filter_map(|p| p.ledger.as_ref())
            .filter(|l| l.writes().is_legacy() && l.writes_named())
            .count()
    }

    /// Shutdown begins: send what is open, durably (rule 3: a shutdown cut is a time cut);
    /// batches replaying a recorded cut stay unsent.
    pub fn close_for_shutdown(&mut self, out: &mut Vec<Command>) {
        let all: Vec<usize> = (0..self.partitions.len()).collect();
        self.close_together(&all, out);
    }

    /// The commit that describes `id`'s ledger now (the acknowledged offset and the cuts of
    /// everything in flight): what a held cut is recorded with, so a late recording never
    /// moves the committed offset back.
    pub fn current_commit(&self, id: &PartitionId) -> Option<CommitOffset> {
        let p = self.partitions.iter().find(|p| p.id == *id)?;
        let (offset, metadata) = p.ledger.as_ref()?.current_commit();
        Some(CommitOffset {
            partition: p.id.clone(),
            offset,
            metadata,
        })
    }

    /// The partitions held now with their assignment generations ([`super::Holdings`]).
    pub fn held(&self) -> impl Iterator<Item = (PartitionId, u64)> + '_ {
        self.partitions.iter().map(|p| (p.id.clone(), p.generation))
    }

    /// Batches sent and not yet acknowledged, over all partitions.
    pub fn in_flight(&self) -> usize {
        self.partitions
            .iter()
            .filter_map(|p| p.ledger.as_ref())
            .map(PartitionLedger::in_flight)
            .sum()
    }

    /// The last commit before leaving the group: every partition's acknowledged progress
    /// and the cuts of whatever is still pending, synchronously.
    pub fn final_commit(&self) -> Option<Command> {
        let offsets: Vec<CommitOffset> = self
            .partitions
            .iter()
            .filter_map(|p| {
                let (offset, metadata) = p.ledger.as_ref()?.current_commit();
                Some(CommitOffset {
                    partition: p.id.clone(),
                    offset,
                    metadata,
                })
            })
            .collect();
        (!offsets.is_empty()).then_some(Command::Commit {
            offsets,
            sync: true,
        })
    }

    /// The partitions held now.
    pub fn assigned(&self) -> impl Iterator<Item = &PartitionId> {
        self.partitions.iter().map(|p| &p.id)
    }

    /// How many partitions are paused.
    pub fn paused(&self) -> usize {
        self.partitions.iter().filter(|p| p.paused).count()
    }

    /// Lag facts of every held partition.
    pub fn lag(&self) -> impl Iterator<Item = PartitionLag<'_>> {
        self.partitions.iter().map(|p| PartitionLag {
            partition: &p.id,
            committed: p.ledger.as_ref().map(PartitionLedger::committed),
            oldest_unacknowledged_ms: p
                .pending_ts
                .front()
                .map(|(_, ts, _)| *ts)
                .or(p.builder.first_timestamp_ms()),
            oldest_sent: p.pending_ts.front().map(|(_, _, sent)| *sent),
        })
    }
}

/// What a spent in-flight budget does: hold intake, then pause.
#[path = "machine_budget.rs"]
mod budget;

#[path = "machine_linger.rs"]
mod linger_timer;

/// Rule 6: how time cuts are bundled (and a refused bundle dissolved).
#[path = "machine_bundles.rs"]
mod bundles;

/// Rule 8: the backlog cut.
#[path = "machine_backlog.rs"]
mod backlog;
use backlog::SizeCut;
pub use backlog::backlog_policy;

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
