//! The ledger's rules, tested without a broker.

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
        log: LogId::legacy(),
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
    assert!(
        l.replays(15),
        "until the consumer passed the replayed records"
    );
    l.passed(19);
    assert!(!l.replays(15));
}

#[test]
fn a_recorded_bundle_before_the_committed_offset_is_done() {
    let mut l = PartitionLedger::new(20, Some("th2:1:50-60+3:10-19,30"), &t(), 3);
    assert!(l.take_replays().is_empty());
    assert_eq!(l.recorded_cut(20), Some(30));
    let damaged = PartitionLedger::new(0, Some("th2:1:50-x+3:10-19,30"), &t(), 3).take_replays();
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

fn named() -> LogId {
    LogId::named("kq3YZHEvRSm3n9hQzKVWhA")
}

fn view<'a>(log: &'a LogId, topic: &'a Arc<str>, high: Option<i64>) -> LogView<'a> {
    LogView {
        topic,
        partition: 3,
        log,
        first_seen: 0,
        high,
        trust_unnamed: true,
        write_legacy: false,
    }
}

#[test]
fn a_replay_acknowledged_before_the_records_in_front_of_it_waits_for_them() {
    // The group offsets: committed 0, an own size cut [0..19], then a bundle
    // member [20..24] in flight when the owner died.
    let mut l = PartitionLedger::new(0, Some("th2:1:50-60+3:20-24,19"), &t(), 3);
    assert_eq!(l.take_replays().len(), 1);
    assert!(!l.ack(r(20, 24)), "records 0..=19 were never closed");
    assert_eq!(l.committed(), 0);
    assert_eq!(l.recorded_cut(0), Some(19));
    l.open(r(0, 19));
    assert!(l.ack(r(0, 19)));
    assert_eq!(l.committed(), 25, "over both, once");
    assert!(!l.ack(r(0, 19)), "an acknowledgement counts once");
    assert_eq!(l.committed(), 25, "and never moves the commit back");
}

#[test]
fn a_gap_between_batches_does_not_hold_the_commit() {
    // Transaction markers and compacted records leave offsets no record has.
    let mut l = PartitionLedger::new(0, None, &t(), 0);
    l.open(r(0, 9));
    l.open(r(11, 20));
    assert!(!l.ack(r(11, 20)));
    assert!(l.ack(r(0, 9)));
    assert_eq!(l.committed(), 21);
}

#[test]
fn a_named_log_writes_its_id_and_marks_what_replays_a_legacy_cut() {
    let (log, topic) = (named(), t());
    // Recorded by a collector before logs had names: two cuts and a bundle.
    let (mut l, dropped) = PartitionLedger::load(
        Some((10, "th2:1:50-60+3:30-39,19,29")),
        &view(&log, &topic, None),
    );
    assert!(dropped.is_empty());
    let replays = l.take_replays();
    assert!(replays[0].log.is_legacy(), "replayed under its old token");
    assert_eq!(l.log_for(r(10, 19)), LogId::legacy());
    assert_eq!(
        l.open(r(10, 19)),
        "th3:kq3YZHEvRSm3n9hQzKVWhA;L1:50-60+3:30-39,L19,L29"
    );
    assert_eq!(l.log_for(r(20, 29)), LogId::legacy());
    l.open(r(20, 29));
    // Past the legacy cuts, batches are the named log's.
    assert_eq!(l.log_for(r(40, 49)), log);
    let intent = l.open(r(40, 49));
    assert_eq!(
        intent,
        "th3:kq3YZHEvRSm3n9hQzKVWhA;L1:50-60+3:30-39,L19,L29,49"
    );
    // A successor reads it back the same way.
    let (mut s, dropped) = PartitionLedger::load(Some((10, &intent)), &view(&log, &topic, None));
    assert!(dropped.is_empty());
    assert!(s.take_replays()[0].log.is_legacy());
    assert_eq!(s.log_for(r(10, 19)), LogId::legacy());
    assert_eq!(s.recorded_cut(10), Some(19));
    s.open(r(10, 19));
    s.open(r(20, 29));
    assert_eq!(s.recorded_cut(40), Some(49));
    assert_eq!(s.log_for(r(40, 49)), log);
}

#[test]
fn metadata_of_another_log_is_dropped_with_its_offset() {
    let (log, topic) = (named(), t());
    let other = "th3:OTHERxxxxxxxxxxxxxxxxx;19,29";
    let (l, dropped) = PartitionLedger::load(Some((30, other)), &view(&log, &topic, Some(100)));
    assert_eq!(l.committed(), 0, "starts at the first record seen");
    assert_eq!(
        dropped,
        vec![Dropped::OtherLog {
            recorded: "OTHERxxxxxxxxxxxxxxxxx".into(),
            committed: 30
        }]
    );
    // Unnamed metadata after this process saw the topic recreated: also the old log's.
    let mut v = view(&log, &topic, Some(100));
    v.trust_unnamed = false;
    let (l, dropped) = PartitionLedger::load(Some((30, "th1:39")), &v);
    assert_eq!((l.committed(), dropped[0].reason()), (0, "other_log"));
}

#[test]
fn offsets_and_cuts_beyond_the_log_are_dropped_and_no_batch_waits_for_them() {
    let (log, topic) = (LogId::legacy(), t());
    // MirrorMaker's offset sync: a translated offset, the upstream's cuts verbatim.
    let (mut l, dropped) = PartitionLedger::load(
        Some((40, "th2:1:900-950+3:5000-5100,59,4000,4100")),
        &view(&log, &topic, Some(60)),
    );
    assert_eq!(l.committed(), 40);
    assert!(l.take_replays().is_empty());
    assert_eq!(l.recorded_cut(40), Some(59), "the cut within the log stays");
    assert_eq!(
        dropped,
        vec![Dropped::CutsBeyondLog {
            count: 3,
            last: 5100,
            high: 60
        }]
    );
    let (l, dropped) =
        PartitionLedger::load(Some((5000, "th1:5100")), &view(&log, &topic, Some(60)));
    assert_eq!(l.committed(), 0);
    assert_eq!(
        dropped,
        vec![Dropped::OffsetBeyondLog {
            committed: 5000,
            high: 60
        }]
    );
}

#[test]
fn tokens_name_the_log() {
    let range = r(7, 9);
    assert_eq!(
        crate::batch::dedup_token("spans", &LogId::legacy(), 3, range),
        "spans-3-7-9"
    );
    assert_eq!(
        crate::batch::dedup_token("spans", &named(), 3, range),
        "spans#kq3YZHEvRSm3n9hQzKVWhA-3-7-9"
    );
    assert_ne!(
        crate::batch::dedup_token("spans", &named(), 3, range),
        crate::batch::dedup_token("spans", &LogId::named("another"), 3, range),
    );
}

/// Rule 5: with `kafka.commit_format: th2` new cuts are legacy (old tokens, `th1:`/`th2:`
/// metadata, what an older collector reads), cuts recorded in this log still replay under
/// its name, and the metadata turns legacy once none of those is left.
#[test]
fn the_th2_format_names_new_cuts_in_the_legacy_log_and_finishes_the_named_ones() {
    let (log, topic) = (named(), t());
    let staged = |high| LogView {
        write_legacy: true,
        ..view(&log, &topic, high)
    };
    // Nothing recorded: new cuts are legacy from the start.
    let (mut fresh, _) = PartitionLedger::load(None, &staged(None));
    assert_eq!(fresh.log_for(r(0, 9)), LogId::legacy());
    assert_eq!(fresh.open(r(0, 9)), "th1:9");
    assert_eq!(fresh.writes(), &LogId::legacy());

    // A th3 collector left a named cut at 19 and a bundle in flight.
    let recorded = "th3:kq3YZHEvRSm3n9hQzKVWhA;1:50-60+3:20-29,19";
    let (mut l, dropped) = PartitionLedger::load(Some((10, recorded)), &staged(Some(100)));
    assert!(dropped.is_empty());
    let replays = l.take_replays();
    assert_eq!(replays[0].log, log, "the bundle replays under its name");
    assert_eq!(l.log_for(r(10, 19)), log, "so does the recorded cut");
    assert_eq!(
        l.open(r(10, 19)),
        "th3:kq3YZHEvRSm3n9hQzKVWhA;1:50-60+3:20-29,19"
    );
    assert_eq!(l.log_for(r(30, 39)), LogId::legacy(), "a new cut is legacy");
    assert_eq!(
        l.open(r(30, 39)),
        "th3:kq3YZHEvRSm3n9hQzKVWhA;1:50-60+3:20-29,19,L39",
        "named while named entries are in flight, the legacy ones marked"
    );
    assert!(!l.ack(r(30, 39)));
    assert!(l.ack(r(10, 19)));
    assert_eq!(
        l.current_commit().1,
        "th3:kq3YZHEvRSm3n9hQzKVWhA;1:50-60+3:20-29,L39",
        "the named bundle is still in flight (and the batch behind it)"
    );
    assert!(l.writes_named());
    assert!(l.ack(r(20, 29)));
    assert!(!l.writes_named());
    let (committed, intent) = l.current_commit();
    assert_eq!(committed, 40);
    assert_eq!(intent, "th1:", "nothing named left: the old format");
}
