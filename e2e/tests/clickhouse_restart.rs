//! The ClickHouse server keeps its data on disk: rows written before a restart are there after.
//! (Its own test binary: it restarts the server, which must not race other tests.)
#![cfg(feature = "stack-tests")]

use tracehouse_e2e::{clickhouse, run_repo_command, unique_name};

#[tokio::test]
async fn clickhouse_restart_keeps_data() {
    let client = clickhouse();
    let db = unique_name("e2e_restart");
    client
        .query(&format!("CREATE DATABASE {db}"))
        .execute()
        .await
        .unwrap();
    let client = client.with_database(&db);
    client
        .query("CREATE TABLE kept (n UInt64) ENGINE = MergeTree ORDER BY n")
        .execute()
        .await
        .unwrap();
    client
        .query("INSERT INTO kept SELECT number FROM numbers(12345)")
        .execute()
        .await
        .unwrap();

    run_repo_command(&["e2e/stack", "restart", "clickhouse"]);

    let (n, sum): (u64, u64) = client
        .query("SELECT count(), sum(n) FROM kept")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!((n, sum), (12345, (0..12345).sum()));
    tracehouse_e2e::drop_database(&db).await;
}
