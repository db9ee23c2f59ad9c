//! Rule 8, the backlog cut: a partition that is behind grows its batch past the size cut up to
//! the backlog cut, durably; a caught-up one cuts as before; a successor replays a grown cut
//! exactly; bundles grow the same way.

use super::*;

/// A live cut of 10 records, a backlog cut of 40.
fn growing(bundle: bool) -> MachineConfig {
    let live = CutPolicy {
        max_bytes: 1 << 20,
        max_records: 10,
    };
    MachineConfig {
        cut: live,
        backlog_cut: backlog_policy(live, 4 << 20),
        bundle,
        ..config(10)
    }
}

fn high(o: &mut Owner, marks: &[(i32, i64)]) {
    let marks = marks.iter().map(|&(p, h)| (id(p), h)).collect();
    o.m.high_watermarks(&marks);
}

#[test]
fn backlog_policy_scales_records_with_bytes_and_never_shrinks() {
    let live = CutPolicy {
        max_bytes: 8 << 20,
        max_records: 50_000,
    };
    let grown = backlog_policy(live, 16 << 20);
    assert_eq!((grown.max_bytes, grown.max_records), (16 << 20, 100_000));
    let same = backlog_policy(live, 4 << 20);
    assert_eq!((same.max_bytes, same.max_records), (8 << 20, 50_000));
}

#[test]
fn a_caught_up_partition_cuts_at_the_size_cut_as_before() {
    let mut o = Owner::new(growing(false), 1 << 20);
    o.assign(0);
    // No watermark read yet: never behind.
    o.deliver(0, 0..25, b"r");
    // Caught up: the log ends where the consumer is.
    high(&mut o, &[(0, 25)]);
    o.deliver(0, 25..30, b"r");
    assert_eq!(
        o.kafka.ranges(),
        [range(0, 9), range(10, 19), range(20, 29)]
    );
    assert_eq!(
        o.kafka.durable,
        [false, false, false],
        "size cuts replay from the data"
    );
}

#[test]
fn a_partition_behind_grows_its_batch_to_the_backlog_cut_durably() {
    let mut o = Owner::new(growing(false), 1 << 20);
    o.assign(0);
    high(&mut o, &[(0, 1_000)]);
    o.deliver(0, 0..100, b"r");
    assert_eq!(
        o.kafka.ranges(),
        [range(0, 39), range(40, 79)],
        "40 records a batch while 1 000 wait"
    );
    assert_eq!(
        o.kafka.durable,
        [true, true],
        "a grown cut depends on the backlog"
    );
}

#[test]
fn growth_stops_when_the_waiting_records_no_longer_fill_another_batch() {
    let mut o = Owner::new(growing(false), 1 << 20);
    o.assign(0);
    // 30 records in the log: at record 9 (10 held) 20 wait, so it grows; at record 14
    // (15 held) 15 wait, still; at record 15 (16 held) 14 wait: cut there.
    high(&mut o, &[(0, 30)]);
    o.deliver(0, 0..30, b"r");
    assert_eq!(o.kafka.ranges(), [range(0, 15), range(16, 25)]);
    assert_eq!(o.kafka.durable, [true, false]);
}

#[test]
fn a_successor_replays_a_grown_cut_exactly_whatever_its_own_backlog() {
    let mut first = Owner::new(growing(false), 1 << 20);
    first.assign(0);
    high(&mut first, &[(0, 1_000)]);
    first.deliver(0, 0..40, b"r");
    assert_eq!(first.kafka.ranges(), [range(0, 39)]);
    // The grown batch was sent, never acknowledged; a caught-up successor (no watermark)
    // with the live cut only still ends its first batch where the recorded cut says.
    let mut next = Owner::after(&first, config(10));
    next.assign(0);
    next.deliver(0, 0..50, b"r");
    assert_eq!(
        next.kafka.ranges()[0],
        range(0, 39),
        "the recorded cut, not 10 records"
    );
}

#[test]
fn a_bundle_of_partitions_behind_grows_to_the_backlog_cut() {
    let mut o = Owner::new(growing(true), 1 << 20);
    for p in 0..4 {
        o.assign(p);
    }
    high(&mut o, &[(0, 1_000), (1, 1_000), (2, 1_000), (3, 1_000)]);
    // Interleaved, 3 records each at a time: no partition reaches 10 on its own before the
    // bundle would close at 10 between them; behind, the bundle grows to 40.
    for round in 0..4 {
        for p in 0..4 {
            o.deliver(p, round * 3..round * 3 + 3, b"r");
        }
    }
    let held: usize = o
        .kafka
        .sent
        .iter()
        .map(|b| b.range.last - b.range.first + 1)
        .sum::<i64>() as usize;
    assert_eq!(o.kafka.bundles.len(), 1, "one bundle");
    assert!(
        held >= 40,
        "the bundle held {held} records, at least the backlog cut"
    );

    // Caught up: bundles close at the live cut again.
    let mut live = Owner::new(growing(true), 1 << 20);
    for p in 0..4 {
        live.assign(p);
    }
    for round in 0..4 {
        for p in 0..4 {
            live.deliver(p, round * 3..round * 3 + 3, b"r");
        }
    }
    assert!(
        live.kafka.bundles.len() >= 2,
        "{} bundles",
        live.kafka.bundles.len()
    );
}
