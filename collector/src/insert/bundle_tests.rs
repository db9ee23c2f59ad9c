//! The insert stage with bundles (rule 6) and bodies a proxy refuses (HTTP 413,
//! `clickhouse.max_body_bytes`), against the stand-ins of [`super::tests`].

use std::sync::atomic::AtomicUsize;

use super::tests::*;
use super::*;
use crate::batch::BatchBuilder;
use crate::workers::testing::CountingEncoder;

/// A bundle of partitions 0 and 1 (generation 1), one record per payload each.
fn bundled(p0: &[&[u8]], p1: &[&[u8]]) -> workers::EncodedBundle {
    let batch = |partition: i32, payloads: &[&[u8]]| {
        let mut b = BatchBuilder::new("spans".into(), partition, 1);
        for (i, p) in payloads.iter().enumerate() {
            b.push(100 + i as i64, 0, p);
        }
        b.take().unwrap()
    };
    let batches = vec![batch(0, p0), batch(1, p1)];
    let desc = Arc::new(crate::bundle::BundleDesc {
        topic: "spans".into(),
        log: crate::batch::LogId::legacy(),
        members: batches.iter().map(|b| (b.partition, b.range)).collect(),
    });
    let mut enc = CountingEncoder::default();
    workers::encode_bundle(&mut enc, crate::bundle::Bundle { desc, batches })
}

#[tokio::test]
async fn a_bundle_is_one_insert_under_its_token_and_each_member_is_acknowledged() {
    let ch = Arc::new(FakeClickHouse {
        transient: AtomicUsize::new(1),
        ..Default::default()
    });
    let (stage, acks) = stage(&ch, None);
    let b = bundled(&[b"1", b"2"], &[b"3"]);
    let token = b.desc.token();
    stage.insert_bundle(b).await;
    assert_eq!(ch.tokens(), vec![token.clone()], "one insert");
    assert_eq!(*ch.attempts.lock().unwrap(), vec![token.clone(), token]);
    assert_eq!(ch.landed(), ["1", "2", "3"]);
    let mut acked: Vec<i32> = acks.try_iter().map(|a| a.partition.partition).collect();
    acked.sort();
    assert_eq!(acked, vec![0, 1]);
    assert_eq!(stage.metrics.inserts.get(), 1);
}

/// A bundle whose records hold no rows (the processing rules dropped every span): no
/// request at all, and every member acknowledged.
#[tokio::test]
async fn a_bundle_without_rows_is_not_sent_and_each_member_is_acknowledged() {
    let ch = Arc::new(FakeClickHouse::default());
    let (stage, acks) = stage(&ch, None);
    stage.insert_bundle(bundled(&[b"0", b"0"], &[b"0"])).await;
    assert!(ch.attempts.lock().unwrap().is_empty(), "no request");
    assert_eq!(acks.try_iter().count(), 2);
}

#[tokio::test]
async fn a_refused_bundle_goes_out_one_batch_at_a_time_under_their_own_tokens() {
    let ch = Arc::new(FakeClickHouse {
        refuse: Some("13"),
        ..Default::default()
    });
    let (stage, acks) = stage(&ch, None);
    stage
        .insert_bundle(bundled(&[b"1", b"2"], &[b"13", b"4"]))
        .await;
    assert_eq!(ch.landed(), ["1", "2", "4"]);
    assert_eq!(
        ch.tokens(),
        ["spans-0-100-101", "spans-1-101-101"],
        "partition 0 whole, then partition 1 bisected"
    );
    assert_eq!(acks.try_iter().count(), 2);
    assert_eq!(reason(&stage, "skipped", "rejected"), 1);
}

#[tokio::test]
async fn only_the_members_held_are_acknowledged_and_a_bundle_nobody_holds_stops() {
    let ch = Arc::new(FakeClickHouse::default());
    let (mut stage, acks) = stage(&ch, None);
    let holdings = Holdings::new();
    holdings.publish([(crate::source::PartitionId::new("spans", 1), 1)]);
    stage.holdings = holdings.clone();
    stage.insert_bundle(bundled(&[b"1"], &[b"2"])).await;
    assert_eq!(ch.landed(), ["1", "2"], "the bundle goes in whole");
    let acked: Vec<i32> = acks.try_iter().map(|a| a.partition.partition).collect();
    assert_eq!(
        acked,
        vec![1],
        "partition 0's owner acknowledges its own replay"
    );

    holdings.publish([]);
    stage.insert_bundle(bundled(&[b"5"], &[b"6"])).await;
    assert_eq!(ch.landed(), ["1", "2"], "nobody holds it: not inserted");
    assert_eq!(reason(&stage, "dropped", "revoked"), 2);
}

/// Issue 41, finding 4: a proxy's 413 used to be a transport error, retried forever.
#[tokio::test]
async fn a_proxy_s_413_splits_the_insert_until_the_bodies_pass_and_nothing_is_skipped() {
    let ch = Arc::new(FakeClickHouse {
        max_body: Some(7),
        ..Default::default()
    });
    let (stage, acks) = stage(&ch, None);
    stage
        .insert_batch(encoded(&[b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8"]))
        .await;
    assert_eq!(ch.landed(), ["1", "2", "3", "4", "5", "6", "7", "8"]);
    assert_eq!(
        ch.tokens(),
        [
            "spans-0-100-101",
            "spans-0-102-103",
            "spans-0-104-105",
            "spans-0-106-107"
        ],
        "each body under its own range's token"
    );
    assert!(acks.try_recv().is_ok());
    assert_eq!(reason(&stage, "skipped", "rejected"), 0);
    assert_eq!(reason(&stage, "splits", "body_too_large"), 3);
    assert_eq!(
        reason(&stage, "retries", "body_too_large"),
        0,
        "never retried whole"
    );
}

#[tokio::test]
async fn a_body_over_max_body_bytes_is_split_before_it_is_sent() {
    let ch = Arc::new(FakeClickHouse::default());
    let (mut stage, acks) = stage(&ch, None);
    stage.max_body_bytes = 7;
    stage
        .insert_batch(encoded(&[b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8"]))
        .await;
    assert_eq!(ch.landed().len(), 8);
    assert_eq!(
        ch.attempts.lock().unwrap().len(),
        4,
        "only bodies within the limit went out"
    );
    assert!(acks.try_recv().is_ok());
    assert_eq!(reason(&stage, "splits", "max_body_bytes"), 3);
}

#[tokio::test]
async fn one_record_too_large_for_the_proxy_is_dead_lettered_without_opening_the_breaker() {
    let ch = Arc::new(FakeClickHouse {
        max_body: Some(7),
        ..Default::default()
    });
    let dlq = Arc::new(FakeDeadLetters::default());
    let (stage, acks) = stage(&ch, Some(&dlq));
    stage
        .insert_batch(encoded(&[b"1", b"1234567890123456"]))
        .await;
    assert_eq!(ch.landed(), ["1"]);
    let parked = dlq.parked.lock().unwrap().clone();
    assert_eq!((parked[0].0, parked[0].1), (101, SkipReason::Rejected));
    assert!(parked[0].2.contains("HTTP 413"), "{}", parked[0].2);
    assert!(acks.try_recv().is_ok());
    assert_eq!(stage.metrics.reject_breaker_open.get(), 0);
}
