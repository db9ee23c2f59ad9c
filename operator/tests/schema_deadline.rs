//! The reconciler's deadline on the schema step never leaks the schema lock (issue 30,
//! finding 7): when it fires while migrations run under the lock, those migrations still
//! finish and release it (they run in their own task), so the next reconcile of the same
//! operator proceeds at once and every migration is recorded exactly once. Real engine of
//! the local stack (`CLICKHOUSE_URL`), no Kubernetes needed.
#![cfg(feature = "stack-tests")]

use std::time::{Duration, Instant};

use tracehouse_e2e::unique_name;
use tracehouse_operator::schema_step;
use tracehouse_schema::lock::latest_claim;
use tracehouse_schema::lock_decide::Kind;
use tracehouse_schema::{ConnectionConfig, Ident, LATEST_VERSION, Server, TableOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_deadline_while_the_lock_is_held_leaves_no_lock_and_the_next_attempt_proceeds_at_once()
 {
    let connection = ConnectionConfig::from_env()
        .unwrap_or_else(|e| panic!("{e}: run `eval \"$(e2e/stack env)\"` first"));
    let server = Server::new(&connection).unwrap();
    let db = unique_name("th_schema_deadline");
    let opts = TableOptions::new(
        Ident::new("database", &db).unwrap(),
        Ident::new("table", "otel_traces").unwrap(),
    );
    let identity = "tracehouse-operator-7d9f-abcde";

    // The reconciler's `timeout(schema_timeout, ensure(..))`, with the deadline firing the
    // moment the lock is held, in the middle of the migrations.
    let held = async {
        loop {
            if let Ok(Some(l)) = latest_claim(&server, &opts).await
                && l.kind == Some(Kind::Acquire)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::select! {
        r = schema_step::ensure(&connection, &opts, identity, Duration::from_secs(10), false) => {
            panic!("the schema step finished before its deadline could fire: {r:?}")
        }
        () = held => {}
    }

    // The next reconcile: proceeds at once, finds (or brings) the table up to date.
    let started = Instant::now();
    let outcome = schema_step::ensure(&connection, &opts, identity, Duration::from_secs(10), false)
        .await
        .unwrap_or_else(|e| panic!("the next schema step did not proceed: {e}"));
    let took = started.elapsed();
    // Bounded by the interrupted run's remaining migrations, not by a lease (120 s): a
    // leaked lock fails above on its 10 s lock timeout. Room for a busy shared server.
    assert!(
        took < Duration::from_secs(8),
        "the next attempt waited {took:?}"
    );
    assert_eq!(outcome.version, LATEST_VERSION);
    assert!(outcome.dedup_window.is_some());

    // Nothing leaked, and the interrupted run was not cut short: each migration once.
    let latest = latest_claim(&server, &opts).await.unwrap().unwrap();
    assert_eq!(latest.kind, Some(Kind::Release), "{latest:?}");
    let ledger = tracehouse_schema::ledger_io::read(&server, &opts)
        .await
        .unwrap();
    assert_eq!(ledger.len(), LATEST_VERSION as usize);
    assert!(ledger.iter().all(|r| r.records == 1), "{ledger:?}");
    eprintln!("next attempt took {took:?}");

    server
        .execute(
            "drop the test database",
            &format!("DROP DATABASE IF EXISTS {} SYNC", opts.database),
        )
        .await
        .unwrap();
}
