//! The machine at a spent in-flight budget (`machine_budget.rs`, rule 5) driven without a
//! broker, with the stand-in Kafka and owners of [`super`].

use super::*;

#[test]
fn a_spent_budget_holds_intake_then_pauses_every_partition_and_resumes_below_three_quarters() {
    let mut o = Owner::new(config(4), 100);
    o.assign(0);
    o.assign(1);
    o.deliver(0, 0..4, &[b'x'; 10]); // one full batch of 40 bytes, sent
    o.deliver(1, 0..3, &[b'y'; 10]); // 30 bytes open
    o.deliver(0, 4..7, &[b'x'; 10]); // 30 bytes open
    assert_eq!(o.budget.used(), 100);
    let spent = Instant::now();
    o.check_budget_at(spent);
    assert!(o.m.holding(spent), "the shell takes no records");
    assert!(
        o.kafka.paused.is_empty(),
        "no pause yet: it drops the prefetched records"
    );
    assert_eq!(o.kafka.sent.len(), 1, "the hold closes nothing");

    // Still spent after the hold: now the partitions pause, and the shell polls again.
    let later = spent + BUDGET_HOLD;
    o.check_budget_at(later);
    assert_eq!(o.kafka.paused, [id(0), id(1)]);
    assert_eq!(o.m.paused(), 2);
    // What was open went out (durably: a budget cut is a time cut), so memory can drain.
    assert_eq!(o.kafka.sent.len(), 3);
    assert_eq!(o.kafka.durable, [false, true, true]);
    assert!(!o.m.holding(later));
    o.check_budget_at(later);
    assert!(o.out.is_empty(), "paused once, not again");

    // Acknowledged and dropped: the budget is free again.
    let sent = std::mem::take(&mut o.kafka.sent);
    o.ack(&sent[0]);
    drop(sent);
    assert_eq!(o.budget.used(), 0);
    o.check_budget_at(later);
    assert_eq!(o.kafka.resumed, [id(0), id(1)]);
    assert_eq!(o.m.paused(), 0);
}

#[test]
fn a_budget_freed_within_the_hold_pauses_nothing() {
    let mut o = Owner::new(config(4), 80);
    o.assign(0);
    o.deliver(0, 0..8, &[b'x'; 10]); // two full batches, sent: the budget is spent
    let spent = Instant::now();
    o.check_budget_at(spent);
    assert!(o.m.holding(spent));
    let sent = std::mem::take(&mut o.kafka.sent);
    o.ack(&sent[0]);
    drop(sent);
    let soon = spent + BUDGET_HOLD / 2;
    o.check_budget_at(soon);
    assert!(!o.m.holding(soon), "an acknowledgement ended the hold");
    o.check_budget_at(spent + BUDGET_HOLD * 2);
    assert!(o.kafka.paused.is_empty());
    assert_eq!(o.m.paused(), 0);
}

#[test]
fn a_pause_does_not_close_a_batch_that_replays_a_recorded_cut() {
    let mut first = Owner::new(config(100), 50);
    first.kafka.committed.insert(id(0), (0, "th1:9".into()));
    let mut o = Owner::after(&first, config(100));
    o.assign(0);
    o.deliver(0, 0..5, &[b'x'; 10]);
    let spent = Instant::now();
    o.check_budget_at(spent);
    o.check_budget_at(spent + BUDGET_HOLD);
    assert!(
        o.kafka.sent.is_empty(),
        "0..=4 must reach its recorded cut at 9"
    );
}

/// Finding 5 of the exactly-once issue: replaying batches filled the budget, every
/// partition was paused, nothing was in flight to free it, and after REPLAY_LINGER the
/// batches were closed at new ends — their rows went in a second time.
#[test]
fn replaying_batches_that_fill_the_budget_still_reach_their_recorded_cuts() {
    let mut first = Owner::new(config(100), 150);
    for p in 0..3 {
        first.kafka.committed.insert(id(p), (0, "th1:9".into()));
    }
    // Three recorded batches of 100 bytes each, a budget of 150 (lowered since, or shared
    // by more busy partitions than it fits).
    let mut o = Owner::after(&first, config(100));
    for p in 0..3 {
        o.assign(p);
    }
    let mut now = Instant::now();
    for offset in 0..10 {
        for p in 0..3 {
            // The shell checks the budget between records, takes none while it holds, and
            // a paused partition gets none.
            o.check_budget_at(now);
            if o.m.holding(now) {
                now += BUDGET_HOLD;
                o.check_budget_at(now);
            }
            if o.kafka.paused.contains(&id(p)) && !o.kafka.resumed.contains(&id(p)) {
                continue;
            }
            o.deliver(p, offset..offset + 1, &[b'x'; 10]);
        }
    }
    assert_eq!(
        o.kafka.ranges(),
        [range(0, 9), range(0, 9), range(0, 9)],
        "every replayed batch ends at its recorded cut"
    );
    // Once they are out, the spent budget pauses the partitions as usual.
    o.check_budget_at(now);
    o.check_budget_at(now + BUDGET_HOLD);
    assert_eq!(o.m.paused(), 3);
}
