//! ClickHouse down under load: the collector pauses within its byte budget, lag grows,
//! nothing is dropped, and everything lands once ClickHouse is back.
//! (Its own test binary: it stops the shared ClickHouse server.)
#![cfg(feature = "stack-tests")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn stack(args: &[&str]) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(root.join("e2e/stack"))
        .args(args)
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(status.success(), "e2e/stack {args:?} failed");
}

/// Restarts ClickHouse even when the test fails half-way.
struct RestartOnDrop;
impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        stack(&["up", "clickhouse"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_outage_builds_lag_within_budget_and_loses_nothing() {
    let w = World::new("outage", Attributes::Map);
    // A 48 MiB budget: far below what the topic will hold while ClickHouse is away.
    let mut c = w.start_collector(&[
        "--config",
        "tests/configs/outage.yaml",
        "--shutdown-deadline-ms",
        "5000",
    ]);
    w.produce(5_000, 4, 11).await;
    assert_eq!(
        w.wait_rows(5_000, Duration::from_secs(120)).await,
        5_000,
        "{}",
        c.log_tail()
    );

    let _guard = RestartOnDrop;
    stack(&["down", "clickhouse"]);
    let during = format!("{}_during", w.generator);
    w.produce_as(&during, 150_000, 4, 12).await; // ≈ 150 MB of OTLP records, 3× the budget

    // Lag builds, partitions pause, memory stays bounded.
    let mut peak_rss = 0.0f64;
    let mut saw_pause = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut lag = 0.0;
    while tokio::time::Instant::now() < deadline {
        let m = c.metrics().await;
        lag = sum_metric(&m, "tracehouse_consumer_lag_records");
        peak_rss = peak_rss.max(sum_metric(&m, "tracehouse_process_resident_memory_bytes"));
        saw_pause |= sum_metric(&m, "tracehouse_paused_partitions") > 0.0;
        let inflight = sum_metric(&m, "tracehouse_inflight_bytes");
        assert!(
            inflight <= 48.0 * 1048576.0 + 4.0 * 1048576.0,
            "in-flight {inflight} over budget"
        );
        if saw_pause && lag >= 1000.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        saw_pause,
        "partitions must pause when the budget is spent\n{}",
        c.log_tail()
    );
    assert!(
        lag >= 1000.0,
        "lag in records must grow while ClickHouse is down (lag {lag})"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let m = c.metrics().await;
    peak_rss = peak_rss.max(sum_metric(&m, "tracehouse_process_resident_memory_bytes"));
    assert!(
        sum_metric(&m, "tracehouse_consumer_lag_seconds") > 0.0,
        "lag in seconds grows too"
    );
    assert!(
        sum_metric(&m, "tracehouse_insert_retries_total") > 0.0,
        "inserts are retried"
    );
    let rss_mib = peak_rss / 1048576.0;
    eprintln!("peak RSS while ClickHouse was down: {rss_mib:.1} MiB");
    assert!(
        rss_mib < 256.0,
        "RSS {rss_mib:.1} MiB exceeds 256 MiB with a 48 MiB budget"
    );

    // SIGTERM while ClickHouse is still down: the collector gives up on its in-flight
    // batches within the deadline (they stay uncommitted) instead of hanging.
    c.sigterm();
    let (took, status) = c
        .wait_exit(Duration::from_secs(10))
        .expect("exits while ClickHouse is down");
    assert!(
        status.success() && took <= Duration::from_secs(6),
        "took {took:?}, {status}\n{}",
        c.log_tail()
    );

    stack(&["up", "clickhouse"]);
    let c = w.start_collector(&["--config", "tests/configs/outage.yaml"]);
    let rows = w.wait_rows(155_000, Duration::from_secs(300)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (first, second) = (w.verify(5_000).await, w.verify_as(&during, 150_000).await);
    assert!(
        first.is_exact() && second.is_exact(),
        "{first:?} {second:?}"
    );
    assert_eq!(
        w.count_rows().await,
        155_000,
        "rows {rows}\n{}",
        c.log_tail()
    );
}
