//! The machine's bundles (rules 6 and 7) driven without a broker, with the stand-in Kafka
//! and owners of [`super`].

use super::*;
use crate::batch::LogId;

#[test]
fn time_cuts_of_every_partition_go_out_as_one_bundle_recorded_in_each_member() {
    let mut o = Owner::new(bundling(100), 1 << 20);
    for p in 0..3 {
        o.assign(p);
    }
    o.deliver(0, 0..5, b"1");
    o.deliver(1, 10..12, b"1");
    o.deliver(2, 7..8, b"1");
    o.linger_at(Instant::now() + LINGER);
    assert_eq!(o.kafka.bundles.len(), 1, "one insert for three partitions");
    let desc = &o.kafka.bundles[0];
    assert_eq!(desc.render(), "0:0-4+1:10-11+2:7-7");
    assert_eq!(
        o.kafka.sync_commits, 1,
        "all intents in one synchronous commit"
    );
    for p in 0..3 {
        let (_, meta) = &o.kafka.committed[&id(p)];
        assert_eq!(meta, &format!("th2:{}", desc.render()), "partition {p}");
    }
    // Each member is acknowledged on its own; the commit moves past it.
    let sent = o.kafka.sent.clone();
    for b in &sent {
        o.ack(b);
    }
    assert_eq!(o.committed(0), Some(5));
    assert_eq!(o.committed(1), Some(12));
    assert_eq!(o.kafka.committed[&id(2)], (8, "th1:".to_string()));
}

#[test]
fn size_cuts_stay_per_partition() {
    let mut o = Owner::new(bundling(3), 1 << 20);
    o.assign(0);
    o.assign(1);
    o.deliver(0, 0..3, b"1");
    assert!(o.kafka.bundles.is_empty());
    assert_eq!(o.kafka.ranges(), vec![range(0, 2)]);
    assert_eq!(
        o.kafka.durable,
        vec![false],
        "a size cut replays from the data"
    );
}

#[test]
fn open_batches_that_fill_a_batch_together_go_out_as_one_durable_bundle() {
    let mut o = Owner::new(bundling(5), 1 << 20);
    for p in 0..3 {
        o.assign(p);
    }
    o.deliver(0, 0..2, b"1");
    o.deliver(1, 10..12, b"1");
    assert!(o.kafka.sent.is_empty(), "4 records between them: not yet");
    o.deliver(2, 7..8, b"1");
    assert_eq!(
        o.kafka.bundles.len(),
        1,
        "the fifth record fills the bundle"
    );
    assert_eq!(o.kafka.bundles[0].render(), "0:0-1+1:10-11+2:7-7");
    assert_eq!(o.kafka.sync_commits, 1, "recorded before the insert");
    assert_eq!(o.kafka.durable, vec![true, true, true]);
    // Nothing is left open, so the next records start new batches.
    o.deliver(0, 2..4, b"1");
    assert_eq!(o.kafka.sent.len(), 3);
}

#[test]
fn the_open_batches_total_is_followed_in_steps_of_a_sixty_fourth_of_a_batch() {
    // 640 records a batch: the total is summed every 10 records batched.
    let mut o = Owner::new(bundling(640), 1 << 20);
    o.assign(0);
    o.assign(1);
    o.deliver(0, 0..5, b"1");
    o.linger_at(Instant::now() + LINGER);
    assert_eq!(
        o.kafka.ranges(),
        vec![range(0, 4)],
        "a time cut of 5 records"
    );
    // From here the sums fall 5 records out of step with the open batches.
    o.deliver(0, 5..305, b"1");
    o.deliver(1, 0..340, b"1");
    assert!(
        o.kafka.bundles.is_empty(),
        "640 open, but not summed since 635"
    );
    o.deliver(1, 340..345, b"1");
    assert_eq!(o.kafka.bundles.len(), 1, "the next sum saw 645");
    assert_eq!(o.kafka.bundles[0].render(), "0:5-304+1:0-344");
}

#[test]
fn a_batch_replaying_its_recorded_cut_does_not_count_toward_a_bundle() {
    let mut a = Owner::new(config(3), 1 << 20);
    a.assign(0);
    a.deliver(0, 0..3, b"1");
    // The first owner cut 0..=2 by size and never got it acknowledged.
    let mut b = Owner::after(&a, bundling(4));
    b.assign(0);
    b.assign(1);
    b.deliver(0, 0..2, b"1");
    b.deliver(1, 5..7, b"1");
    assert!(
        b.kafka.sent.is_empty(),
        "partition 0's two records replay a recorded cut: only partition 1's count"
    );
    b.deliver(0, 2..3, b"1");
    assert_eq!(
        b.kafka.ranges(),
        vec![range(0, 2)],
        "the recorded cut, alone"
    );
}

#[test]
fn a_new_owner_replays_a_recorded_bundle_whole_and_does_not_batch_its_records_again() {
    let mut a = Owner::new(bundling(100), 1 << 20);
    a.assign(0);
    a.assign(1);
    a.deliver(0, 0..5, b"1");
    a.deliver(1, 0..3, b"1");
    a.linger_at(Instant::now() + LINGER);
    let desc = a.kafka.bundles[0].clone();
    // `a` dies before ClickHouse answered. `b` takes partition 0 only.
    let mut b = Owner::after(&a, bundling(100));
    b.assign(0);
    b.deliver(0, 0..8, b"1");
    assert_eq!(b.kafka.replays.len(), 1);
    let (replayed, member, generation) = b.kafka.replays[0].clone();
    assert_eq!(replayed, desc, "the same bundle, so the same token");
    assert_eq!(member, id(0));
    assert!(b.m.holds(&id(0), generation));
    // Records 0..=4 are the replay's; 5..=7 are batched anew.
    b.linger_at(Instant::now() + LINGER);
    assert_eq!(b.kafka.ranges(), vec![range(5, 7)]);
    // The replay's acknowledgement (the replayer's batch covers the member's range).
    let replay = Arc::new(RecordBatch::empty(
        T.into(),
        LogId::legacy(),
        0,
        generation,
        range(0, 4),
    ));
    b.ack(&replay);
    assert_eq!(b.committed(0), Some(5));
    let sent = b.kafka.sent.clone();
    b.ack(&sent[0]);
    assert_eq!(b.kafka.committed[&id(0)], (8, "th1:".to_string()));
}

#[test]
fn a_replayed_bundle_stays_recorded_until_acknowledged() {
    let mut a = Owner::new(bundling(100), 1 << 20);
    a.assign(0);
    a.assign(1);
    a.deliver(0, 0..2, b"1");
    a.deliver(1, 0..2, b"1");
    a.linger_at(Instant::now() + LINGER);
    let desc = a.kafka.bundles[0].clone();
    // `b` takes over and is itself replaced before the replay was acknowledged.
    let mut b = Owner::after(&a, bundling(100));
    b.assign(1);
    b.deliver(1, 0..2, b"1");
    b.shutdown();
    let mut c = Owner::after(&b, bundling(100));
    c.assign(1);
    c.deliver(1, 0..1, b"1");
    assert_eq!(c.kafka.replays.len(), 1);
    assert_eq!(c.kafka.replays[0].0, desc);
}

#[test]
fn a_bundle_kafka_refused_is_dissolved_into_time_cuts_of_their_own() {
    let mut o = Owner::new(bundling(100), 1 << 20);
    o.assign(0);
    o.assign(1);
    o.deliver(0, 0..2, b"1");
    o.deliver(1, 5..7, b"1");
    o.m.linger(Instant::now() + LINGER, &mut o.out);
    let Some(Command::SendBundle { bundle, .. }) = o.out.pop() else {
        panic!("a bundle")
    };
    let solo = o.m.dissolve(bundle);
    let metas: Vec<String> = solo.iter().map(|(c, _)| c.metadata.clone()).collect();
    assert_eq!(metas, vec!["th1:1".to_string(), "th1:6".to_string()]);
    let ranges: Vec<BatchRange> = solo.iter().map(|(_, b)| b.range).collect();
    assert_eq!(ranges, vec![range(0, 1), range(5, 6)]);
}

#[test]
fn many_partitions_make_a_few_bundles_each_within_the_description_limit() {
    let mut o = Owner::new(bundling(100), 64 << 20);
    for p in 0..256 {
        o.assign(p);
        o.deliver(p, [1_000_000_000_000], b"1");
    }
    o.linger_at(Instant::now() + LINGER);
    let n = o.kafka.bundles.len();
    assert!((2..=12).contains(&n), "{n} bundles for 256 partitions");
    for d in &o.kafka.bundles {
        assert!(d.render().len() <= crate::bundle::MAX_DESCRIPTION_BYTES);
    }
    let members: usize = o.kafka.bundles.iter().map(|d| d.members.len()).sum();
    assert_eq!(
        members, 256,
        "every partition's batch in exactly one bundle"
    );
}

#[test]
fn a_replay_acknowledged_before_the_consumer_reached_its_records_keeps_them_out() {
    let mut a = Owner::new(bundling(100), 1 << 20);
    a.assign(0);
    a.assign(1);
    a.deliver(0, 0..10, b"1");
    a.deliver(1, 0..10, b"1");
    a.linger_at(Instant::now() + LINGER);
    let mut b = Owner::after(&a, bundling(100));
    b.assign(0);
    // The first record loads the ledger; the replay is acknowledged while the consumer (say,
    // paused by the budget the replay fills) is still at offset 1.
    b.deliver(0, 0..1, b"1");
    let (_, _, generation) = b.kafka.replays[0].clone();
    let replay = Arc::new(RecordBatch::empty(
        T.into(),
        LogId::legacy(),
        0,
        generation,
        range(0, 9),
    ));
    b.ack(&replay);
    assert_eq!(b.committed(0), Some(10));
    // The rest of the bundle's records arrive now: none is batched again.
    b.deliver(0, 1..12, b"1");
    b.linger_at(Instant::now() + LINGER);
    assert_eq!(
        b.kafka.ranges(),
        vec![range(10, 11)],
        "only the records after the bundle"
    );
}

/// Issue 41, finding 2: a successor replays a dead owner's bundle before its own earlier
/// batch is even open (the group consumer slowed, as a busy or budget-held one is). The
/// replay's acknowledgement must not carry the commit past records not yet in ClickHouse,
/// and the later acknowledgement of the batch before it must not move the commit back.
#[test]
fn a_replay_acknowledged_before_the_batch_in_front_of_it_holds_the_commit() {
    let mut a = Owner::new(bundling(20), 1 << 20);
    a.assign(0);
    a.assign(1);
    a.deliver(1, 0..20, b"1"); // a size cut: [0..19] alone, recorded
    a.deliver(1, 20..25, b"1");
    a.deliver(0, 50..53, b"1");
    a.linger_at(Instant::now() + LINGER); // a bundle with partition 1's [20..24]
    let (offset, meta) = a.kafka.committed[&id(1)].clone();
    assert_eq!(offset, 0);
    assert!(meta.starts_with("th2:") && meta.ends_with(",19"), "{meta}");
    // `a` dies before any insert landed. `b` takes partition 1; its consumer delivers one
    // record, then stalls.
    let mut b = Owner::after(&a, bundling(20));
    b.assign(1);
    b.deliver(1, 0..1, b"1");
    let (desc, member, generation) = b.kafka.replays[0].clone();
    assert_eq!(member, id(1));
    let replay = Arc::new(RecordBatch::empty(
        T.into(),
        desc.log.clone(),
        1,
        generation,
        range(20, 24),
    ));
    b.ack(&replay);
    assert_eq!(
        b.committed(1),
        Some(0),
        "records 0..=19 are not in ClickHouse yet: the commit stays"
    );
    // The consumer catches up: [0..19] is cut where `a` cut it, the replay's own records
    // are passed over, and the commit moves once, over both.
    b.deliver(1, 1..25, b"1");
    assert_eq!(b.kafka.ranges(), vec![range(0, 19)]);
    let sent = b.kafka.sent.clone();
    b.ack(&sent[0]);
    assert_eq!(b.committed(1), Some(25));
    // Kafka's stand-in asserts on every commit that it never moved back.
}

/// A record below the committed offset outside every replay is a rewind (a recreated
/// topic's log read from its start): the machine does not drop it, it asks the shell; a new
/// log starts every partition of the topic over, an unchanged one passes over it.
#[test]
fn a_record_below_the_committed_offset_is_a_rewind_for_the_shell_to_judge() {
    let mut o = Owner::new(config(5), 1 << 20);
    o.assign(0);
    o.assign(1);
    o.deliver(0, 0..10, b"r");
    o.deliver(1, 0..5, b"r");
    for b in o.kafka.sent.clone() {
        o.ack(&b);
    }
    assert_eq!(o.committed(0), Some(10));
    let rec = |offset| Record {
        topic: T,
        partition: 0,
        offset,
        timestamp_ms: 0,
        payload: Some(b"new".as_slice()),
    };
    assert_eq!(
        o.m.record(rec(0), &mut o.out),
        Fed::Rewound { committed: 10 }
    );
    assert!(o.out.is_empty(), "nothing batched");
    // The log is unchanged: passed over.
    o.m.pass(T, 0, 0);
    // The log changed: both partitions start over in new generations, without ledgers.
    let old: Vec<_> = o.m.held().collect();
    let ids = o.m.reincarnate(T);
    assert_eq!(ids.len(), 2);
    for (id, generation) in old {
        assert!(!o.m.holds(&id, generation), "the old generation is gone");
        assert!(o.m.needs_ledger(&id.topic, id.partition));
    }
    let fresh = PartitionLedger::new(0, None, &Arc::from(T), 0);
    o.m.load_ledger(T, 0, fresh, &mut o.out);
    assert_eq!(o.m.record(rec(0), &mut o.out), Fed::Taken);
    // A late acknowledgement of the old log's batch does not count.
    let old_batch = o.kafka.sent[0].clone();
    o.m.acknowledged(Ack::new(old_batch));
    o.m.take_commits(&mut o.out);
    assert!(o.out.is_empty());
}
