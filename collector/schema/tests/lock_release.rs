//! The schema lock never leaks (issue 30, finding 7), on the real engine: an `apply`
//! dropped while it holds the lock (a deadline around it, a shutdown) releases it, so the
//! next attempt proceeds at once; a held lease is renewed while the holder works; a
//! restarted process of the same identity (the same pod) takes its dead predecessor's
//! claim back at once, while another identity still waits.
#![cfg(feature = "stack-tests")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Ch, connect};
use tracehouse_schema::lock::{LockConfig, SchemaLock, create_lock_table};
use tracehouse_schema::{ApplyOptions, Error, LATEST_VERSION, TableOptions, apply, ddl};

const CHILD_DB_ENV: &str = "TRACEHOUSE_SCHEMA_TEST_LOCK_CHILD_DB";
const CHILD_IDENTITY_ENV: &str = "TRACEHOUSE_SCHEMA_TEST_LOCK_CHILD_IDENTITY";

async fn prepare_lock_table(ch: &Ch, opts: &TableOptions) {
    ch.exec(&ddl::create_database(opts)).await;
    ch.exec(&create_lock_table(opts)).await;
}

/// A two-minute lease (the default) and a short wait: a leaked lock fails the waiter.
fn short_wait(timeout: Duration) -> LockConfig {
    LockConfig {
        timeout,
        poll: Duration::from_millis(20),
        ..LockConfig::default()
    }
}

/// The latest row of the lock table: `kind` and `holder`.
async fn latest_lock_row(ch: &Ch) -> Option<(String, String)> {
    let text = ch
        .text(&format!(
            "SELECT kind, holder FROM `{}`.tracehouse_schema_lock ORDER BY epoch DESC LIMIT 1",
            ch.db
        ))
        .await;
    let (kind, holder) = text.split_once('\t')?;
    Some((kind.to_string(), holder.to_string()))
}

/// Waits (bounded) for the latest lock row to be a `release`. The bounds the tests give
/// (20 s) are far below the 120 s lease a leaked lock would wait out, with room for a busy
/// shared server (5 s once failed with four test binaries' worth of load beside it).
async fn wait_released(ch: &Ch, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if latest_lock_row(ch)
            .await
            .is_some_and(|(k, _)| k == "release")
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "the lock was not released within {within:?}: latest row {:?}",
            latest_lock_row(ch).await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_dropped_while_holding_the_lock_releases_it_and_the_next_apply_proceeds_at_once() {
    let ch = connect("lock_drop_apply");
    let opts = ch.opts();
    let options = ApplyOptions {
        lock: short_wait(Duration::from_secs(10)),
        applied_by: "first-applier".into(),
        ..ApplyOptions::default()
    };
    // The deadline fires while the lock is held: as soon as the claim is visible, the
    // apply future is dropped in the middle of its migrations (what a timeout does).
    let watcher = async {
        let db = &ch.db;
        loop {
            let held = ch
                .text(&format!(
                    "SELECT count() FROM system.tables WHERE database = '{db}' AND name = 'tracehouse_schema_lock'"
                ))
                .await
                == "1"
                && latest_lock_row(&ch)
                    .await
                    .is_some_and(|(k, h)| k == "acquire" && h.starts_with("first-applier"));
            if held {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::select! {
        r = apply(&ch.server, &opts, &options) => {
            panic!("apply finished before the deadline could interrupt it: {r:?}")
        }
        () = watcher => {}
    }
    let released_after = wait_released(&ch, Duration::from_secs(20)).await;
    eprintln!("released {released_after:?} after the drop");

    let started = Instant::now();
    let report = apply(
        &ch.server,
        &opts,
        &ApplyOptions {
            lock: short_wait(Duration::from_secs(10)),
            applied_by: "second-applier".into(),
            ..ApplyOptions::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("the next apply did not get the lock: {e}"));
    let took = started.elapsed();
    assert!(report.status.is_up_to_date());
    // A leaked lock fails above (10 s wait, 120 s lease); this bounds the wait itself,
    // with room for a busy shared server.
    assert!(
        took < Duration::from_secs(8),
        "the next apply waited {took:?}: the dropped holder's lease was waited out"
    );
    ch.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_dropped_without_release_is_released_at_once() {
    let ch = connect("lock_drop");
    let opts = ch.opts();
    prepare_lock_table(&ch, &opts).await;
    let cfg = short_wait(Duration::from_secs(2));
    let held = SchemaLock::acquire(&ch.server, &opts, "dropper", &cfg)
        .await
        .unwrap();
    drop(held);
    wait_released(&ch, Duration::from_secs(20)).await;
    let next = SchemaLock::acquire(&ch.server, &opts, "next", &cfg)
        .await
        .unwrap_or_else(|e| panic!("the dropped lock leaked: {e}"));
    next.release().await.unwrap();
    ch.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_is_renewed_while_the_holder_works() {
    let ch = connect("lock_renew");
    let opts = ch.opts();
    prepare_lock_table(&ch, &opts).await;
    // A one-second lease, held for three: without renewal B would take it over.
    let a = SchemaLock::acquire(
        &ch.server,
        &opts,
        "slow-worker",
        &LockConfig {
            lease: Duration::from_secs(1),
            ..short_wait(Duration::from_secs(2))
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    match SchemaLock::acquire(
        &ch.server,
        &opts,
        "B",
        &short_wait(Duration::from_millis(500)),
    )
    .await
    {
        Err(Error::LockTimeout { holder, .. }) => assert_eq!(holder, "slow-worker"),
        other => panic!("B should have waited for the renewed lease, got {other:?}"),
    }
    a.verify().await.unwrap();
    a.release().await.unwrap();
    ch.cleanup().await;
}

/// Helper for the restart test: takes the lock as `CHILD_IDENTITY_ENV` and dies without
/// releasing it (no destructor runs: what kill -9 or an OOM kill leaves behind).
#[tokio::test]
#[ignore = "helper process of a_restarted_process_takes_its_own_claim_back_at_once"]
async fn child_process_dies_holding_the_lock() {
    let db = std::env::var(CHILD_DB_ENV).unwrap_or_else(|_| panic!("run by the restart test"));
    let identity = std::env::var(CHILD_IDENTITY_ENV).unwrap();
    let mut ch = connect("child");
    ch.db = db;
    let lock = SchemaLock::acquire(&ch.server, &ch.opts(), &identity, &LockConfig::default())
        .await
        .unwrap();
    println!("CHILD_HOLDS={}", lock.token());
    std::process::exit(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_takes_its_own_claim_back_at_once() {
    let ch = connect("lock_restart");
    let opts = ch.opts();
    prepare_lock_table(&ch, &opts).await;
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process_dies_holding_the_lock",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DB_ENV, &ch.db)
        .env(CHILD_IDENTITY_ENV, "operator-pod-0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CHILD_HOLDS="),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another pod must still wait for the dead holder's lease: it may be alive.
    match SchemaLock::acquire(
        &ch.server,
        &opts,
        "operator-pod-1",
        &short_wait(Duration::from_millis(500)),
    )
    .await
    {
        Err(Error::LockTimeout { holder, .. }) => assert_eq!(holder, "operator-pod-0"),
        other => panic!("another identity took a live claim: {other:?}"),
    }
    // The same pod, restarted: its predecessor is dead, so the claim is taken back now.
    let started = Instant::now();
    let lock = SchemaLock::acquire(
        &ch.server,
        &opts,
        "operator-pod-0",
        &short_wait(Duration::from_secs(3)),
    )
    .await
    .unwrap_or_else(|e| panic!("the restarted process waited out its own dead claim: {e}"));
    // Taken back on the first look, not after polling out a lease.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    lock.release().await.unwrap();

    // And a whole apply of the same identity proceeds too (the operator's path).
    let report = apply(
        &ch.server,
        &opts,
        &ApplyOptions {
            lock: short_wait(Duration::from_secs(3)),
            applied_by: "operator-pod-0".into(),
            ..ApplyOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.applied.len(), LATEST_VERSION as usize);
    ch.cleanup().await;
}
