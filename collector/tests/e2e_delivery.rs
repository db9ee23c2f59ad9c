//! End-to-end delivery on the real stack: spans from Kafka reach ClickHouse exactly once —
//! across crashes, poison records and graceful shutdowns.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;

/// Small batches make many inserts in flight, so a crash lands mid-stream.
const SMALL_BATCHES: &[&str] = &["--config", "tests/configs/small-batches.yaml"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_spans_become_exactly_n_rows() {
    let w = World::new("exact", Attributes::Map);
    w.produce(20_000, 4, 1).await;
    let c = w.start_collector(&[]);
    let rows = w.wait_rows(20_000, Duration::from_secs(120)).await;
    assert_eq!(rows, 20_000, "collector log:\n{}", c.log_tail());
    let report = w.verify(20_000).await;
    assert!(report.is_exact(), "{report:?}");

    // Everything was acknowledged, so the lag falls to zero and commits happened.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let m = c.metrics().await;
        let lag = sum_metric(&m, "tracehouse_consumer_lag_records");
        if lag == 0.0 && sum_metric(&m, "tracehouse_rows_inserted_total") == 20_000.0 {
            assert!(sum_metric(&m, "tracehouse_commits_total") > 0.0);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lag stays at {lag}:\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_attributes_table_gets_exactly_n_rows() {
    let w = World::new("exact_json", Attributes::Json);
    w.produce(5_000, 2, 2).await;
    let c = w.start_collector(&[]);
    let rows = w.wait_rows(5_000, Duration::from_secs(120)).await;
    assert_eq!(rows, 5_000, "collector log:\n{}", c.log_tail());
    let report = w.verify(5_000).await;
    assert!(report.is_exact(), "{report:?}");
}

/// `clickhouse.compression: none`: the server takes the bodies as they are encoded, on
/// both table variants (Native for Map, RowBinary for JSON), every span once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncompressed_inserts_land_exactly_once() {
    for (name, attributes) in [
        ("plain_map", Attributes::Map),
        ("plain_json", Attributes::Json),
    ] {
        let w = World::new(name, attributes);
        w.produce(3_000, 2, 3).await;
        let c = w.start_collector(&["--config", "tests/configs/uncompressed.yaml"]);
        let rows = w.wait_rows(3_000, Duration::from_secs(120)).await;
        assert_eq!(rows, 3_000, "collector log:\n{}", c.log_tail());
        let report = w.verify(3_000).await;
        assert!(report.is_exact(), "{attributes:?}: {report:?}");
        assert_eq!(c.metric_sum("tracehouse_insert_errors_total").await, 0.0);
        // The bodies went as encoded: over 1 000 bytes a loadgen span (LZ4 makes ~350).
        let per_row = c.metric_sum("tracehouse_bytes_inserted_total").await / 3_000.0;
        assert!(per_row > 900.0, "{per_row} body bytes per row");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_then_restart_loses_and_duplicates_nothing() {
    let w = World::new("kill9", Attributes::Map);
    kill_9_mid_stream_then_restart(&w, 60_000, 3, 5_000, SMALL_BATCHES).await;
}

/// A user's counting view on the traces table (a RED-metrics rollup) counts each span once
/// across kill -9 replays: a block the table drops as a duplicate is not written into its
/// views either (`deduplicate_blocks_in_dependent_materialized_views=1`, sent with every
/// insert: the default only since 26.2, so on 24.7–26.1 servers the view counted replays).
/// The view's target table needs a window of its own: without `non_replicated_deduplication_window`
/// this view counted 46 000 and 51 000 spans for 30 000 in two runs here. On this stack's 26.9
/// engine the setting's default holds too, so the test cannot fail without the collector
/// sending it; it shows what a user's view needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counting_view_counts_each_span_once_across_kill_9_replays() {
    let w = World::new("kill9_view", Attributes::Map);
    let view = format!("`{}`.span_counts", w.database);
    query(&format!(
        "CREATE MATERIALIZED VIEW {view} ENGINE = SummingMergeTree ORDER BY ServiceName \
         SETTINGS non_replicated_deduplication_window = 10000 \
         AS SELECT ServiceName, count() AS spans FROM `{}`.`{}` GROUP BY ServiceName",
        w.database, w.table
    ))
    .await;
    kill_9_mid_stream_then_restart(&w, 30_000, 5, 3_000, SMALL_BATCHES).await;
    let counted: u64 = query(&format!("SELECT sum(spans) FROM {view}"))
        .await
        .trim()
        .parse()
        .unwrap();
    assert_eq!(counted, 30_000, "the view counted a replayed block");
}

/// A collector killed mid-stream while compressing its inserts, replaced by one that sends
/// them uncompressed (the setting changed in a rollout): what the first had in flight is
/// sent again under the same deduplication tokens in the other framing, and the server
/// keeps each span once (the token, not the body's bytes, identifies a batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compression_change_across_a_crash_loses_and_duplicates_nothing() {
    let w = World::new("kill9_plain", Attributes::Map);
    let uncompressed = &["--config", "tests/configs/small-batches-uncompressed.yaml"];
    kill_9_mid_stream_then_restart(&w, 30_000, 4, 3_000, uncompressed).await;
}

/// Produces `spans` spans over 4 partitions, kills a small-batch collector with SIGKILL once
/// `kill_at` rows are in, starts one with `restart` flags, and asserts that every span is in
/// the table exactly once.
async fn kill_9_mid_stream_then_restart(
    w: &World,
    spans: u64,
    seed: u64,
    kill_at: u64,
    restart: &[&str],
) {
    w.produce(spans, 4, seed).await;
    let mut c = w.start_collector(SMALL_BATCHES);
    let seen = w.wait_rows(kill_at, Duration::from_secs(120)).await;
    c.kill9();
    assert!(
        seen > 0 && seen < spans,
        "the crash must land mid-stream (rows at kill: {seen})"
    );

    let c = w.start_collector(restart);
    let rows = w.wait_rows(spans, Duration::from_secs(180)).await;
    // Give any straggling duplicate the time to show up before judging.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let report = w.verify(spans).await;
    assert!(
        report.is_exact(),
        "{report:?} (rows {rows})\ncollector log:\n{}",
        c.log_tail()
    );
    assert_eq!(w.count_rows().await, spans);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_are_skipped_counted_and_dead_lettered() {
    let w = World::new("poison", Attributes::Map);
    let dlq = format!("{}_dlq", w.topic);
    w.produce(3_000, 2, 4).await;
    // Garbage, truncated protobuf, an empty record and an oversized one, among good data.
    let oversized = vec![0x0a; 2 << 20];
    w.produce_raw(
        0,
        &[
            b"\xff\xff\xff not protobuf".to_vec(),
            vec![0x0a, 0xff, 0x01],
            vec![],
            oversized,
        ],
    )
    .await;
    let second = format!("{}_after", w.generator);
    w.produce_as(&second, 2_000, 2, 5).await;
    let c = w.start_collector(&[
        "--dead-letter-topic",
        &dlq,
        "--config",
        "tests/configs/poison.yaml",
    ]);
    let rows = w.wait_rows(5_000, Duration::from_secs(120)).await;
    assert_eq!(rows, 5_000, "every good row lands; log:\n{}", c.log_tail());
    let (before, after) = (w.verify(3_000).await, w.verify_as(&second, 2_000).await);
    assert!(
        before.is_exact() && after.is_exact(),
        "{before:?} {after:?}"
    );

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let m = c.metrics().await;
        let decode = sum_metric(
            &m,
            "tracehouse_records_skipped_total{reason=\"decode_error\"}",
        );
        let oversized = sum_metric(&m, "tracehouse_records_skipped_total{reason=\"oversized\"}");
        let empty = sum_metric(&m, "tracehouse_records_skipped_total{reason=\"empty\"}");
        let lag = sum_metric(&m, "tracehouse_consumer_lag_records");
        let dead = sum_metric(&m, "tracehouse_records_dead_lettered_total");
        if decode == 2.0 && oversized == 1.0 && empty == 1.0 && dead == 3.0 && lag == 0.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "decode {decode} oversized {oversized} empty {empty} dead-lettered {dead} lag {lag}\n{}",
            c.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_exits_within_the_deadline_and_resumes_without_loss() {
    let w = World::new("sigterm", Attributes::Map);
    w.produce(40_000, 4, 6).await;
    let mut c = w.start_collector(&[
        "--config",
        "tests/configs/small-batches.yaml",
        "--shutdown-deadline-ms",
        "8000",
    ]);
    let seen = w.wait_rows(3_000, Duration::from_secs(120)).await;
    assert!(seen < 40_000, "SIGTERM must land under load (rows: {seen})");
    c.sigterm();
    let (took, status) = c
        .wait_exit(Duration::from_secs(12))
        .expect("collector exits after SIGTERM");
    assert!(status.success(), "exit status {status}\n{}", c.log_tail());
    assert!(took <= Duration::from_secs(9), "took {took:?}");
    let log = std::fs::read_to_string(&c.log).unwrap();
    assert!(log.contains("SIGTERM received"), "{log}");

    let c = w.start_collector(SMALL_BATCHES);
    w.wait_rows(40_000, Duration::from_secs(180)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let report = w.verify(40_000).await;
    assert!(report.is_exact(), "{report:?}\n{}", c.log_tail());
}
