//! The source machine driven through rebalances, acknowledgements, restarts, pauses and
//! shutdown without a broker. A small [`Kafka`] stands in for the consumer: it keeps what
//! was committed, so a second machine can take over the partition as a new owner would.
//! Named cases follow Redpanda Connect's checkpointer and at-least-once tests.

use std::collections::HashMap;

use super::linger_timer::linger_due;
use super::*;
use crate::batch::BatchRange;

const T: &str = "spans";
const LINGER: Duration = Duration::from_millis(200);

fn config(max_records: usize) -> MachineConfig {
    MachineConfig {
        cut: CutPolicy {
            max_bytes: 1 << 20,
            max_records,
        },
        backlog_cut: CutPolicy {
            max_bytes: 1 << 20,
            max_records,
        },
        linger: LINGER,
        max_linger: LINGER,
        max_record_bytes: 64,
        keep_skipped_payloads: true,
        bundle: false,
    }
}

/// [`config`] with time cuts bundled across partitions (rule 6).
fn bundling(max_records: usize) -> MachineConfig {
    MachineConfig {
        bundle: true,
        ..config(max_records)
    }
}

fn id(partition: i32) -> PartitionId {
    PartitionId::new(T, partition)
}

fn range(first: i64, last: i64) -> BatchRange {
    BatchRange { first, last }
}

/// What the shell would do with the machine's commands, and what Kafka would remember.
#[derive(Default)]
struct Kafka {
    /// Committed offset and metadata per partition.
    committed: HashMap<PartitionId, (i64, String)>,
    /// Batches handed to the workers, in order.
    sent: Vec<Arc<RecordBatch>>,
    /// Whether each sent batch's intent was committed synchronously.
    durable: Vec<bool>,
    sync_commits: usize,
    /// Bundles handed to the workers (their batches are in `sent` too).
    bundles: Vec<Arc<crate::bundle::BundleDesc>>,
    /// Replays asked for: the bundle and the member this owner holds.
    replays: Vec<(Arc<crate::bundle::BundleDesc>, PartitionId, u64)>,
    paused: Vec<PartitionId>,
    resumed: Vec<PartitionId>,
}

impl Kafka {
    fn run(&mut self, out: &mut Vec<Command>) {
        for cmd in out.drain(..) {
            match cmd {
                Command::Send {
                    intent,
                    batch,
                    durable,
                } => {
                    assert_eq!(
                        intent.partition,
                        PartitionId::new(&batch.topic, batch.partition)
                    );
                    self.commit(intent);
                    self.sent.push(Arc::new(batch));
                    self.durable.push(durable);
                }
                Command::Commit { offsets, sync } => {
                    self.sync_commits += usize::from(sync);
                    offsets.into_iter().for_each(|c| self.commit(c));
                }
                Command::SendBundle { intents, bundle } => {
                    self.sync_commits += 1;
                    assert_eq!(intents.len(), bundle.batches.len());
                    intents.into_iter().for_each(|c| self.commit(c));
                    self.bundles.push(bundle.desc);
                    for b in bundle.batches {
                        self.sent.push(Arc::new(b));
                        self.durable.push(true);
                    }
                }
                Command::Replay {
                    desc,
                    partition,
                    generation,
                } => self.replays.push((desc, partition, generation)),
                Command::Pause(ids) => self.paused.extend(ids),
                Command::Resume(ids) => self.resumed.extend(ids),
            }
        }
    }

    fn commit(&mut self, c: CommitOffset) {
        let before = self.committed.get(&c.partition).map_or(i64::MIN, |x| x.0);
        assert!(c.offset >= before, "a commit never moves back");
        self.committed.insert(c.partition, (c.offset, c.metadata));
    }

    /// The ledger a new owner of `p` reads (a fresh partition starts at `start`).
    fn ledger(&self, p: &PartitionId, start: i64) -> PartitionLedger {
        match self.committed.get(p) {
            Some((offset, metadata)) => {
                PartitionLedger::new(*offset, Some(metadata), &p.topic, p.partition)
            }
            None => PartitionLedger::new(start, None, &p.topic, p.partition),
        }
    }

    fn ranges(&self) -> Vec<BatchRange> {
        self.sent.iter().map(|b| b.range).collect()
    }
}

/// A machine with its own budget and stand-in Kafka.
struct Owner {
    m: Machine,
    budget: Arc<Budget>,
    kafka: Kafka,
    out: Vec<Command>,
}

impl Owner {
    fn new(cfg: MachineConfig, budget_bytes: usize) -> Self {
        let budget = Budget::new(budget_bytes);
        Self {
            m: Machine::new(cfg, budget.clone(), None),
            budget,
            kafka: Kafka::default(),
            out: Vec::new(),
        }
    }

    /// Take over from a previous owner: what it committed is what this one reads.
    fn after(previous: &Owner, cfg: MachineConfig) -> Self {
        let mut next = Owner::new(cfg, previous.budget.max());
        next.kafka.committed = previous.kafka.committed.clone();
        next
    }

    fn assign(&mut self, p: i32) {
        self.m.assign(id(p));
    }

    /// Deliver records `offsets` of partition `p`, each `payload`, as the shell does.
    fn deliver(&mut self, p: i32, offsets: impl IntoIterator<Item = i64>, payload: &[u8]) {
        for offset in offsets {
            if self.m.needs_ledger(T, p) {
                let ledger = self.kafka.ledger(&id(p), offset);
                self.m.load_ledger(T, p, ledger, &mut self.out);
            }
            assert_eq!(
                self.m.record(
                    Record {
                        topic: T,
                        partition: p,
                        offset,
                        timestamp_ms: 1_000 + offset,
                        payload: Some(payload),
                    },
                    &mut self.out,
                ),
                Fed::Taken
            );
            self.kafka.run(&mut self.out);
        }
    }

    fn ack(&mut self, batch: &Arc<RecordBatch>) {
        self.m.acknowledged(Ack::new(batch.clone()));
        self.m.take_commits(&mut self.out);
        self.kafka.run(&mut self.out);
    }

    fn committed(&self, p: i32) -> Option<i64> {
        self.kafka.committed.get(&id(p)).map(|c| c.0)
    }

    fn check_budget_at(&mut self, now: Instant) {
        self.m.check_budget(now, &mut self.out);
        self.kafka.run(&mut self.out);
    }

    fn linger_at(&mut self, now: Instant) {
        self.m.linger(now, &mut self.out);
        self.kafka.run(&mut self.out);
    }

    fn shutdown(&mut self) {
        self.m.close_for_shutdown(&mut self.out);
        self.out.extend(self.m.final_commit());
        self.kafka.run(&mut self.out);
    }
}

#[test]
fn checkpoint_capture_after_nacks_commits_only_the_acknowledged_prefix() {
    let mut o = Owner::new(config(10), 1 << 20);
    o.assign(0);
    o.deliver(0, 0..30, b"r");
    let b = o.kafka.sent.clone();
    assert_eq!(
        o.kafka.ranges(),
        [range(0, 9), range(10, 19), range(20, 29)]
    );
    // Intents went out before each batch: the commit itself has not moved.
    assert_eq!(o.committed(0), Some(0));

    // The middle and last batches are acknowledged, the first is still failing (a nack).
    o.ack(&b[2]);
    o.ack(&b[1]);
    assert_eq!(
        o.committed(0),
        Some(0),
        "nothing past an unacknowledged batch"
    );
    assert_eq!(o.m.in_flight(), 1);
    o.ack(&b[0]);
    assert_eq!(o.committed(0), Some(30));
    assert_eq!(o.m.in_flight(), 0);
}

#[test]
fn every_tenth_batch_nacked_holds_the_commit_and_the_next_owner_replays_the_same_cuts() {
    let mut first = Owner::new(config(5), 1 << 20);
    first.assign(0);
    first.deliver(0, 0..100, b"r");
    let sent = first.kafka.sent.clone();
    assert_eq!(sent.len(), 20);
    for (i, b) in sent.iter().enumerate() {
        if i % 10 != 9 {
            first.ack(b);
        }
    }
    // Batch 9 (records 45..=49) never got through: the commit stops there.
    assert_eq!(first.committed(0), Some(45));
    first.shutdown();
    assert_eq!(first.committed(0), Some(45));

    // At least once after restart: the next owner (cutting at 7 records, not 5) reads from
    // 45 and replays exactly the previous cuts, so every re-sent batch has its old token.
    let mut next = Owner::after(&first, config(7));
    next.assign(0);
    next.deliver(0, 45..100, b"r");
    let replayed: Vec<BatchRange> = next.kafka.ranges();
    let before: Vec<BatchRange> = sent[9..].iter().map(|b| b.range).collect();
    assert_eq!(replayed, before);
    for b in next.kafka.sent.clone() {
        next.ack(&b);
    }
    assert_eq!(next.committed(0), Some(100));
}

#[test]
fn a_lingered_cut_is_durable_and_replayed_even_past_the_linger_time() {
    let mut first = Owner::new(config(100), 1 << 20);
    first.assign(0);
    first.deliver(0, 20..29, b"r");
    let opened = Instant::now();
    first.linger_at(opened + LINGER * 2);
    assert_eq!(first.kafka.ranges(), [range(20, 28)]);
    assert_eq!(
        first.kafka.durable,
        [true],
        "a time cut is committed before it is sent"
    );
    first.deliver(0, 29..35, b"r");
    first.linger_at(Instant::now() + LINGER * 2);
    assert_eq!(first.kafka.ranges(), [range(20, 28), range(29, 34)]);
    // Killed here: nothing acknowledged, no final commit. The intents are in Kafka.

    let mut next = Owner::after(&first, config(100));
    next.assign(0);
    next.deliver(0, 20..25, b"r");
    // The timer says close, the recorded cut says wait for record 28.
    next.linger_at(Instant::now() + LINGER * 10);
    assert!(next.kafka.sent.is_empty());
    next.deliver(0, 25..32, b"r");
    assert_eq!(next.kafka.ranges(), [range(20, 28)]);
    assert_eq!(
        next.kafka.durable,
        [false],
        "a replayed cut is already recorded"
    );
    // Past the recorded cuts the timer is back in charge — after REPLAY_LINGER at most.
    next.linger_at(Instant::now() + LINGER * 10);
    assert_eq!(
        next.kafka.ranges().len(),
        1,
        "29..=31 waits for its cut at 34"
    );
    next.linger_at(Instant::now() + REPLAY_LINGER + LINGER);
    assert_eq!(next.kafka.ranges(), [range(20, 28), range(29, 31)]);
}

#[test]
fn a_recorded_cut_that_a_record_jumps_over_closes_the_open_batch_first() {
    let mut first = Owner::new(config(100), 1 << 20);
    first
        .kafka
        .committed
        .insert(id(0), (10, "th1:19,29".into()));
    let mut o = Owner::after(&first, config(100));
    o.assign(0);
    o.deliver(0, 10..16, b"r");
    // Offsets 16..=21 are gone (compaction, transaction markers): 19 is never seen.
    o.deliver(0, [22], b"r");
    assert_eq!(o.kafka.ranges(), [range(10, 15)]);
    o.deliver(0, 23..30, b"r");
    assert_eq!(o.kafka.ranges(), [range(10, 15), range(22, 29)]);
}

#[test]
fn a_revoke_drops_the_open_batch_commits_progress_and_stale_acks_are_ignored() {
    let mut o = Owner::new(config(10), 1 << 20);
    o.assign(0);
    o.deliver(0, 0..25, b"abcd");
    let b = o.kafka.sent.clone();
    // Acknowledged, not yet committed, when the group takes the partition away.
    o.m.acknowledged(Ack::new(b[0].clone()));
    assert_eq!(
        o.budget.used(),
        25 * 4,
        "sent batches hold their bytes until dropped"
    );

    assert!(o.m.holds(&id(0), b[0].generation));
    o.m.revoke(&[id(0)], &mut o.out);
    assert!(
        !o.m.holds(&id(0), b[0].generation),
        "a batch cut before the revoke is no longer ours to send"
    );
    assert!(matches!(&o.out[..], [Command::Commit { sync: true, .. }]));
    o.kafka.run(&mut o.out);
    assert_eq!(o.committed(0), Some(10));
    assert_eq!(o.kafka.sync_commits, 1);
    assert_eq!(
        o.budget.used(),
        20 * 4,
        "the dropped open batch gave its bytes back"
    );
    assert_eq!(
        o.m.record(
            Record {
                topic: T,
                partition: 0,
                offset: 25,
                timestamp_ms: 0,
                payload: Some(b"late"),
            },
            &mut o.out
        ),
        Fed::NotHeld
    );
    assert!(o.m.assigned().next().is_none());

    // Given back: a new generation. The acknowledgement of the old batch 10..=19 arrives
    // late and must not count — the new owner's replay of it will.
    o.assign(0);
    assert!(
        !o.m.holds(&id(0), b[0].generation),
        "not in the new generation either"
    );
    o.deliver(0, 10..20, b"abcd");
    o.ack(&b[1]);
    assert_eq!(o.committed(0), Some(10), "stale acknowledgement ignored");
    let replay = o.kafka.sent.last().unwrap().clone();
    assert_eq!(replay.range, range(10, 19));
    o.ack(&replay);
    assert_eq!(o.committed(0), Some(20));

    drop((b, replay));
    o.kafka.sent.clear();
    assert_eq!(o.budget.used(), 0, "every byte comes back");
}

/// Finding 4: a shutdown cut is made by time, so it is not reproducible — it must be
/// recorded before the rows go out (the shell holds it while Kafka does not take it).
#[test]
fn a_shutdown_cut_is_durable() {
    let mut o = Owner::new(config(100), 1 << 20);
    o.assign(0);
    o.deliver(0, 0..5, b"r");
    o.shutdown();
    assert_eq!(o.kafka.ranges(), [range(0, 4)]);
    assert_eq!(o.kafka.durable, [true]);
}

/// Finding 4: the asynchronous intent of a size cut was lost in a rebalance, nothing was
/// acknowledged since, and the revoke committed nothing: the next owner, with other batch
/// settings, cut the same records elsewhere and inserted them again under other tokens.
#[test]
fn a_revoke_records_the_cuts_in_flight_even_when_the_offset_did_not_move() {
    let mut o = Owner::new(config(5), 1 << 20);
    o.assign(0);
    o.deliver(0, 0..5, b"r"); // a size cut at 4, sent
    assert_eq!(o.kafka.ranges(), [range(0, 4)]);
    o.kafka.committed.clear(); // its asynchronous intent commit failed
    o.m.revoke(&[id(0)], &mut o.out);
    o.kafka.run(&mut o.out);
    assert_eq!(o.kafka.committed[&id(0)], (0, "th1:4".to_string()));
    assert_eq!(o.kafka.sync_commits, 1);

    // The next owner batches by 3 records now, yet replays the cut at 4 first.
    let mut next = Owner::after(&o, config(3));
    next.assign(0);
    next.deliver(0, 0..8, b"r");
    assert_eq!(next.kafka.ranges(), [range(0, 4), range(5, 7)]);
}

#[test]
fn shutdown_sends_what_is_open_but_leaves_a_replayed_batch_to_the_next_owner() {
    let mut first = Owner::new(config(100), 1 << 20);
    first.kafka.committed.insert(id(1), (0, "th1:9".into()));
    let mut o = Owner::after(&first, config(100));
    o.assign(0);
    o.assign(1);
    o.deliver(0, 0..5, b"r");
    o.deliver(1, 0..5, b"r");
    o.shutdown();
    assert_eq!(
        o.kafka.ranges(),
        [range(0, 4)],
        "partition 1's 0..=4 waits for 9"
    );
    assert_eq!(o.m.in_flight(), 1);
    // The final commit still tells the next owner both partitions' cuts.
    assert_eq!(o.kafka.committed[&id(0)], (0, "th1:4".to_string()));
    assert_eq!(o.kafka.committed[&id(1)], (0, "th1:9".to_string()));
}

#[test]
fn oversized_and_empty_records_are_skipped_with_their_reason_and_keep_what_the_dlq_needs() {
    let mut o = Owner::new(config(3), 1 << 20);
    o.assign(0);
    o.deliver(0, [0], &[b'z'; 65]);
    o.deliver(0, [1], b"");
    assert_eq!(
        o.budget.used(),
        65,
        "the oversized payload is kept for the dead letters"
    );
    o.deliver(0, [2], b"ok");
    let b = &o.kafka.sent[0];
    assert_eq!(b.range, range(0, 2));
    assert_eq!(b.records.len(), 1);
    let reasons: Vec<_> = b.skipped.iter().map(|s| (s.offset, s.reason)).collect();
    assert_eq!(
        reasons,
        [(0, SkipReason::Oversized), (1, SkipReason::Empty)]
    );
    assert!(b.skipped[0].detail.contains("limits.max_record_bytes = 64"));
    assert_eq!(b.budget_bytes(), 67);
}

#[test]
fn lag_reports_the_oldest_unacknowledged_record_per_partition() {
    let mut o = Owner::new(config(5), 1 << 20);
    o.assign(0);
    o.assign(1);
    o.deliver(0, 0..7, b"r");
    let lag: Vec<_> = o.m.lag().collect();
    assert_eq!(lag[0].committed, Some(0));
    assert_eq!(lag[0].oldest_unacknowledged_ms, Some(1_000));
    assert_eq!(lag[1].committed, None);
    assert_eq!(lag[1].oldest_unacknowledged_ms, None);
    let b = o.kafka.sent[0].clone();
    o.ack(&b);
    let lag: Vec<_> = o.m.lag().collect();
    assert_eq!(lag[0].committed, Some(5));
    assert_eq!(
        lag[0].oldest_unacknowledged_ms,
        Some(1_005),
        "the open batch's first"
    );
}

#[test]
fn the_linger_timer_waits_for_a_recorded_cut() {
    let mut b = BatchBuilder::new("spans".into(), 0, 1);
    b.push(20, 0, b"record 20");
    let opened = b.opened_at().expect("a pushed record opens the batch");
    let due = |cut: Option<i64>, after: Duration| linger_due(&b, cut, LINGER, opened + after);
    assert!(!due(None, Duration::from_millis(100)));
    assert!(due(None, Duration::from_secs(1)));
    assert!(!due(Some(29), Duration::from_secs(1)));
    assert!(!due(Some(29), REPLAY_LINGER / 2));
    assert!(due(Some(29), REPLAY_LINGER));
    let empty = BatchBuilder::new("spans".into(), 0, 1);
    assert!(!linger_due(
        &empty,
        Some(29),
        LINGER,
        opened + REPLAY_LINGER * 2
    ));
}

#[test]
fn an_acknowledgement_takes_over_the_permit_of_its_last_holder_and_frees_the_payload() {
    let mut o = Owner::new(config(2), 1 << 20);
    o.assign(0);
    o.deliver(0, 0..2, b"abcd");
    let batch = o.kafka.sent.pop().unwrap();
    assert_eq!(o.budget.used(), 8);
    let ack = Ack::new(batch);
    assert_eq!(
        o.budget.used(),
        8,
        "held by the acknowledgement in its channel"
    );
    o.m.acknowledged(ack);
    assert_eq!(o.budget.used(), 0, "given back once the machine took it");
    assert_eq!(o.m.in_flight(), 0);
}

/// The in-flight budget: hold, pause, resume.
#[path = "machine_budget_tests.rs"]
mod budget;

/// Rules 6 and 7: bundles.
#[path = "machine_bundle_tests.rs"]
mod bundles;

#[path = "machine_backlog_tests.rs"]
mod backlog;

/// At a low rate the linger stretches (small time cuts double it up to `max_linger`), and
/// every cut stays a durable, replayable time cut whatever its length.
#[test]
fn small_time_cuts_stretch_the_linger_and_stay_durable() {
    let cfg = MachineConfig {
        max_linger: LINGER * 4,
        ..bundling(1_000)
    };
    let mut o = Owner::new(cfg, 1 << 20);
    o.assign(0);
    o.assign(1);
    let mut cuts = Vec::new();
    let mut next = 0;
    for round in 0..4 {
        o.deliver(0, next..next + 2, b"r");
        o.deliver(1, next..next + 2, b"r");
        next += 2;
        let opened = Instant::now();
        let linger = o.m.current_linger();
        // Not yet due just before the current linger...
        o.linger_at(opened + linger - Duration::from_millis(20));
        assert_eq!(o.kafka.sent.len(), round * 2, "round {round}: cut early");
        // ...due at it: both partitions cut together, recorded before they are sent.
        o.linger_at(opened + linger + Duration::from_millis(1));
        assert_eq!(o.kafka.sent.len(), (round + 1) * 2, "round {round}: no cut");
        cuts.push(linger.as_millis());
    }
    assert_eq!(cuts, [200, 400, 800, 800]);
    assert!(o.kafka.durable.iter().all(|d| *d), "time cuts are durable");
}
