//! The schema lock and concurrent appliers on the real engine: tasks and processes
//! racing `apply` end with every migration applied exactly once; the lock excludes,
//! expires, times out and reports loss as designed.
#![cfg(feature = "stack-tests")]

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Ch, connect};
use tracehouse_schema::lock::{LockConfig, SchemaLock, create_lock_table};
use tracehouse_schema::{ApplyOptions, Error, LATEST_VERSION, TableOptions, apply, ddl};

const CHILD_DB_ENV: &str = "TRACEHOUSE_SCHEMA_TEST_CHILD_DB";

/// Each version's number of ledger rows, as `version:count` pairs.
async fn ledger_counts(ch: &Ch) -> Vec<String> {
    ch.text(&format!(
        "SELECT version, count() FROM `{}`.tracehouse_schema_migrations GROUP BY version ORDER BY version",
        ch.db
    ))
    .await
    .lines()
    .map(|l| l.replace('\t', ":"))
    .collect()
}

fn exactly_once() -> Vec<String> {
    (1..=LATEST_VERSION).map(|v| format!("{v}:1")).collect()
}

async fn prepare_lock_table(ch: &Ch, opts: &TableOptions) {
    ch.exec(&ddl::create_database(opts)).await;
    ch.exec(&create_lock_table(opts)).await;
}

fn quick(lease: Duration, timeout: Duration) -> LockConfig {
    LockConfig {
        lease,
        timeout,
        poll: Duration::from_millis(20),
        keep_alive: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_applies_in_one_process_apply_each_migration_exactly_once() {
    let ch = connect("race_tasks");
    let opts = ch.opts();
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            // Separate clients, so the requests really run side by side.
            let server = connect("unused").server;
            let opts = opts.clone();
            tokio::spawn(async move {
                let options = ApplyOptions {
                    applied_by: format!("task-{i}"),
                    ..ApplyOptions::default()
                };
                apply(&server, &opts, &options).await
            })
        })
        .collect();
    let mut applied_counts = Vec::new();
    for t in tasks {
        let report = t
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("apply failed: {e}"));
        assert!(report.status.is_up_to_date());
        applied_counts.push(report.applied.len());
    }
    applied_counts.sort();
    // One applier did everything while holding the lock; the others found it done.
    assert_eq!(applied_counts, vec![0, 0, 0, LATEST_VERSION as usize]);
    assert_eq!(ledger_counts(&ch).await, exactly_once());
    ch.cleanup().await;
}

/// Helper for the two-process test: one `apply`, run in a child process.
#[tokio::test]
#[ignore = "helper process of two_processes_applying_at_once_apply_each_migration_exactly_once"]
async fn child_process_applier() {
    let db = std::env::var(CHILD_DB_ENV)
        .unwrap_or_else(|_| panic!("only run by the two-process test, which sets {CHILD_DB_ENV}"));
    let mut ch = connect("child");
    ch.db = db;
    let options = ApplyOptions {
        applied_by: format!("process-{}", std::process::id()),
        ..ApplyOptions::default()
    };
    let report = apply(&ch.server, &ch.opts(), &options)
        .await
        .unwrap_or_else(|e| panic!("apply failed: {e}"));
    println!("CHILD_APPLIED={}", report.applied.len());
}

#[tokio::test]
async fn two_processes_applying_at_once_apply_each_migration_exactly_once() {
    let ch = connect("race_procs");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "child_process_applier",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                ])
                .env(CHILD_DB_ENV, &ch.db)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut applied = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n: usize = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CHILD_APPLIED="))
            .unwrap_or_else(|| panic!("child did not report:\n{stdout}"))
            .parse()
            .unwrap();
        applied.push(n);
    }
    applied.sort();
    assert_eq!(applied, vec![0, LATEST_VERSION as usize]);
    assert_eq!(ledger_counts(&ch).await, exactly_once());
    ch.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lock_admits_one_holder_at_a_time() {
    let ch = connect("lock_excl");
    let opts = ch.opts();
    prepare_lock_table(&ch, &opts).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let entries = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let server = connect("unused").server;
            let (opts, inside, max_inside, entries) = (
                opts.clone(),
                inside.clone(),
                max_inside.clone(),
                entries.clone(),
            );
            tokio::spawn(async move {
                for round in 0..3 {
                    let cfg = quick(Duration::from_secs(30), Duration::from_secs(120));
                    let lock = SchemaLock::acquire(&server, &opts, &format!("t{i}/r{round}"), &cfg)
                        .await
                        .unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    lock.verify().await.unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    entries.fetch_add(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 15);
    assert_eq!(max_inside.load(Ordering::SeqCst), 1, "two holders at once");
    // Every epoch has exactly one row: the deduplication that makes claims exclusive.
    let dupes = ch
        .count(&format!(
            "SELECT count() FROM (SELECT epoch FROM `{}`.tracehouse_schema_lock GROUP BY epoch HAVING count() > 1)",
            ch.db
        ))
        .await;
    assert_eq!(dupes, 0);
    ch.cleanup().await;
}

#[tokio::test]
async fn a_busy_lock_times_out_naming_its_holder_and_is_free_after_release() {
    let ch = connect("lock_timeout");
    let opts = ch.opts();
    prepare_lock_table(&ch, &opts).await;
    let long = quick(Duration::from_secs(60), Duration::from_secs(5));
    let holder = SchemaLock::acquire(&ch.server, &opts, "holder-A", &long)
        .await
        .unwrap();
    let started = Instant::now();
    let err = SchemaLock::acquire(
        &ch.server,
        &opts,
        "waiter-B",
        &quick(Duration::from_secs(60), Duration::from_secs(1)),
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() >= Duration::from_secs(1));
    match &err {
        Error::LockTimeout { holder, .. } => assert_eq!(holder, "holder-A"),
        other => panic!("expected a lock timeout, got {other:?}"),
    }
    assert!(err.to_string().contains("held by holder-A"), "{err}");

    holder.release().await.unwrap();
    let b = SchemaLock::acquire(&ch.server, &opts, "waiter-B", &long)
        .await
        .unwrap();
    b.release().await.unwrap();
    ch.cleanup().await;
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_old_holder_learns_it_lost() {
    let ch = connect("lock_expiry");
    let opts = ch.opts();
    prepare_lock_table(&ch, &opts).await;
    // A takes a one-second lease and "stalls" (a stopped process: nothing renews).
    let mut a = SchemaLock::acquire(
        &ch.server,
        &opts,
        "stalled-A",
        &LockConfig {
            keep_alive: false,
            ..quick(Duration::from_secs(1), Duration::from_secs(5))
        },
    )
    .await
    .unwrap();
    let started = Instant::now();
    let b = SchemaLock::acquire(
        &ch.server,
        &opts,
        "B",
        &quick(Duration::from_secs(60), Duration::from_secs(10)),
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "B did not wait for the lease"
    );
    // A must not carry on: renewing tells it the lock is gone, and to whom.
    match a.renew().await {
        Err(Error::LockLost { holder, .. }) => assert_eq!(holder, "B"),
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(matches!(a.verify().await, Err(Error::LockLost { .. })));
    // A's late release must not free B's lock.
    a.release().await.unwrap();
    b.verify().await.unwrap();
    b.release().await.unwrap();
    ch.cleanup().await;
}
