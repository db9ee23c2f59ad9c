//! Exactly-once across logs, on the real stack (issue 41): a topic deleted and created
//! again, two Kafka clusters carrying a topic of the same name into one table, group offsets
//! whose metadata describes another offset space (a mirror's), and a successor replaying a
//! dead owner's bundle before its own earlier batch. Every case is judged by `loadgen
//! verify`: each generator's spans exactly once.
//!
//! Small batches (20 records) over a pre-fill cut every round of one partition at the same
//! offsets: before tokens named the log, the second round's tokens equalled the first's and
//! ClickHouse dropped its rows as duplicates. With several partitions, bundles make the cuts
//! depend on how partitions interleave, so collisions are a matter of timing: each case runs
//! on one partition and on four.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

const SMALL_BATCHES: &[&str] = &["--config", "tests/configs/small-batches.yaml"];

async fn delete_topic_on(brokers: &str, topic: &str) {
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()
            .expect("admin client");
    let _ = admin
        .delete_topics(&[topic], &rdkafka::admin::AdminOptions::new())
        .await;
    // Deletion is asynchronous in the controller: wait until the name is free.
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("consumer");
    for _ in 0..100 {
        let gone = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map(|m| m.topics().iter().all(|t| t.partitions().is_empty()))
            .unwrap_or(false);
        if gone {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("topic {topic} still exists on {brokers}");
}

/// Verify `generator`'s spans until all arrived (or two minutes passed), then once more
/// after a pause, so a late duplicate shows too.
async fn wait_exact(w: &World, c: &Collector, generator: &str, expected: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !w.verify_as(generator, expected).await.is_exact() && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = w.verify_as(generator, expected).await;
    assert!(
        report.is_exact(),
        "{generator}: {report:?}\ncollector log:\n{}",
        c.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_recreated_under_its_name_loses_nothing_with_a_new_group_or_the_same_collector() {
    for partitions in [1, 4] {
        recreated(partitions).await;
    }
}

async fn recreated(partitions: i32) {
    let mut w = World::new(&format!("recreated{partitions}"), Attributes::Map);
    let brokers = var("KAFKA_BROKERS");
    // Round 1, delivered; then the topic is deleted and created again with other spans at
    // the same offsets, read by a new group.
    let first = format!("{}_a", w.generator);
    w.produce_as(&first, 8_000, partitions, 1).await;
    let mut c = w.start_collector(SMALL_BATCHES);
    wait_exact(&w, &c, &first, 8_000).await;
    c.sigterm();
    c.wait_exit(Duration::from_secs(30));
    delete_topic_on(&brokers, &w.topic).await;
    let second = format!("{}_b", w.generator);
    w.produce_as(&second, 8_000, partitions, 2).await;
    w.group = format!("{}_2", w.group);
    let c2 = w.start_collector(SMALL_BATCHES);
    wait_exact(&w, &c2, &second, 8_000).await;

    // Round 3: the same collector and group keep running across a delete and a create.
    delete_topic_on(&brokers, &w.topic).await;
    let third = format!("{}_c", w.generator);
    w.produce_as(&third, 8_000, partitions, 3).await;
    wait_exact(&w, &c2, &third, 8_000).await;
    assert!(c2.metric_sum("tracehouse_topic_recreations_total").await >= 1.0);
    wait_exact(&w, &c2, &first, 8_000).await;
    wait_exact(&w, &c2, &second, 8_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_with_one_topic_name_fill_one_table_exactly_once() {
    for partitions in [1, 4] {
        two_clusters(partitions).await;
    }
}

async fn two_clusters(partitions: i32) {
    let w = World::new(&format!("two_clusters{partitions}"), Attributes::Map);
    let (one, two) = (var("KAFKA_BROKERS"), var("KAFKA2_BROKERS"));
    let (a, b) = (format!("{}_a", w.generator), format!("{}_b", w.generator));
    // The same shape on both clusters: the same offsets, the same cuts.
    w.produce_to(&one, &a, 6_000, partitions, 1).await;
    w.produce_to(&two, &b, 6_000, partitions, 2).await;
    let c1 = w.start_collector(SMALL_BATCHES);
    let mut args = SMALL_BATCHES.to_vec();
    args.extend(["--kafka-brokers", &two]);
    let c2 = w.start_collector(&args);
    wait_exact(&w, &c1, &a, 6_000).await;
    wait_exact(&w, &c2, &b, 6_000).await;
    assert_eq!(w.count_rows().await, 12_000);
    drop((c1, c2));
    delete_topic_on(&two, &w.topic).await;
}

/// Commit `offsets` (`partition → (offset, metadata)`) for `group` as a dead owner left them.
fn commit_as_left(brokers: &str, group: &str, topic: &str, offsets: &[(i32, i64, &str)]) {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for (p, offset, metadata) in offsets {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*offset))
            .unwrap();
        tpl.find_partition(topic, *p)
            .unwrap()
            .set_metadata(*metadata);
    }
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_metadata_of_another_offset_space_is_dropped_and_nothing_waits_for_it() {
    let w = World::new("mirrored", Attributes::Map);
    w.produce(4_000, 4, 1).await; // 10 records per partition
    // What MirrorMaker 2's offset sync leaves: offsets translated into this log, the
    // upstream's cuts and bundles verbatim, far beyond this log's end.
    let upstream = "th2:0:90000-90040+1:90000-90040,95000,99000";
    let left: Vec<(i32, i64, &str)> = (0..4).map(|p| (p, 0, upstream)).collect();
    commit_as_left(&var("KAFKA_BROKERS"), &w.group, &w.topic, &left);
    let started = std::time::Instant::now();
    let c = w.start_collector(&[]);
    wait_exact(&w, &c, &w.generator, 4_000).await;
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "a batch waited for a cut beyond the log: {:?}",
        started.elapsed()
    );
    let dropped = c
        .metric_sum("tracehouse_commit_metadata_dropped_total{reason=\"cuts_beyond_log\"}")
        .await;
    assert_eq!(dropped, 4.0, "one drop per partition\n{}", c.log_tail());
}

/// Group offsets as a kill -9 leaves them: partition 1 committed at 0 with an own size cut
/// `[0..19]` and a bundle member `[20..24]` in flight. Whatever order the successor's replay
/// and its own batch are acknowledged in, every span lands once and the commit ends at the
/// log's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_replaying_a_bundle_before_its_own_batch_lands_each_span_once() {
    let w = World::new("successor", Attributes::Map);
    w.produce(5_000, 2, 1).await; // 25 records per partition
    let bundle = "0:0-4+1:20-24";
    commit_as_left(
        &var("KAFKA_BROKERS"),
        &w.group,
        &w.topic,
        &[
            (0, 0, &format!("th2:{bundle}")),
            (1, 0, &format!("th2:{bundle},19")),
        ],
    );
    let c = w.start_collector(SMALL_BATCHES);
    wait_exact(&w, &c, &w.generator, 5_000).await;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", var("KAFKA_BROKERS"))
        .set("group.id", &w.group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&w.topic, 0);
    tpl.add_partition(&w.topic, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = consumer
            .committed_offsets(tpl.clone(), Duration::from_secs(10))
            .unwrap();
        let offsets: Vec<Offset> = got.elements().iter().map(|e| e.offset()).collect();
        if offsets == vec![Offset::Offset(25), Offset::Offset(25)] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "committed {offsets:?}\n{}",
            c.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
