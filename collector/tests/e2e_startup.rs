//! The collector's start-up check on the real stack: a deduplication window too small for
//! the topic's partitions is reported with both numbers, and a table that does not exist
//! yet is waited for — nothing is consumed, nothing lost — until the migrations create it.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_too_small_for_the_partitions_is_reported_with_both_numbers() {
    // `schema apply` without --partitions keeps the old default window of 1 000 blocks;
    // 8 partitions at the default 200 ms linger need 2 × 2 × 8 × 450 = 14 400.
    let w = World::new("startwin", Attributes::Map);
    w.produce(800, 8, 1).await;
    let c = w.start_collector(&[]);
    c.wait_metrics("window metrics", Duration::from_secs(60), |m| {
        sum_metric(m, "tracehouse_dedup_window_blocks") == 1000.0
            && sum_metric(m, "tracehouse_dedup_window_needed_blocks") == 14400.0
    })
    .await;
    assert!(
        c.log_tail().contains("needs at least 14400"),
        "{}",
        c.log_tail()
    );
    // A warning, not a stop: the rows go in.
    assert_eq!(w.wait_rows(800, Duration::from_secs(60)).await, 800);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_is_waited_for_then_every_span_goes_in_once() {
    tracehouse_collector::insert::sink::install_crypto_provider();
    let w = World::new("startmissing", Attributes::Map);
    query(&format!("DROP DATABASE {}", w.database)).await;
    w.produce(1_000, 2, 2).await;
    let c = w.start_collector(&[]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        c.log_tail().contains("does not exist; waiting for it"),
        "{}",
        c.log_tail()
    );
    let m = c.metrics().await;
    assert_eq!(
        sum_metric(&m, "tracehouse_records_consumed_total"),
        0.0,
        "{m}"
    );
    // The migrations run (as the operator would, a little later): the collector starts.
    create_table(&w.database, &w.table, Attributes::Map);
    assert_eq!(w.wait_rows(1_000, Duration::from_secs(60)).await, 1_000);
    assert!(w.verify(1_000).await.is_exact());
}
