//! The deduplication window on the real engine (issue 30, finding 6): `apply` raises it
//! on an existing table (idempotent, recorded, never lowered, migration 5 still applied), the larger
//! window keeps out a replay the smaller one let in, and the start-up check reports the
//! table's shape and window.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::{Ch, connect};
use tracehouse_schema::dedup_window::PipelineShape;
use tracehouse_schema::migrate::SET_WINDOW;
use tracehouse_schema::{
    ApplyOptions, State, TableOptions, TableProblem, apply, check_table, insert_into, status,
};

async fn apply_with_window(ch: &Ch, window: u64) -> tracehouse_schema::ApplyReport {
    let mut opts = ch.opts();
    opts.dedup_window = window;
    apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap_or_else(|e| panic!("apply with window {window}: {e}"))
}

/// The window setting of each table, as `system.tables` shows it.
async fn windows(ch: &Ch) -> String {
    ch.text(&format!(
        "SELECT name, extract(create_table_query, 'non_replicated_deduplication_window = (\\\\d+)') \
         FROM system.tables WHERE database = '{}' AND name LIKE 'otel_traces%' \
         AND engine = 'MergeTree' ORDER BY name",
        ch.db
    ))
    .await
}

/// Inserts one span under `token`, as the collector does for a batch.
async fn insert_with_token(ch: &Ch, opts: &TableOptions, trace: u32, token: &str) {
    let mut i = ch
        .client
        .insert_formatted_with(format!("{} FORMAT JSONEachRow", insert_into(opts)))
        .with_setting("insert_deduplication_token", token);
    i.send(bytes::Bytes::from(common::span_json(opts, trace, 0)))
        .await
        .unwrap();
    i.end().await.unwrap();
}

/// Inserts `victim`, then `others` other tokens, then `victim` again (a replay after
/// that many blocks of other partitions); returns the rows the two batches added.
async fn replay_after(ch: &Ch, victim: &str, others: u32) -> u64 {
    let opts = ch.opts();
    let count = || async {
        ch.count(&format!("SELECT count() FROM `{}`.otel_traces", ch.db))
            .await
    };
    let before = count().await;
    insert_with_token(ch, &opts, 1, victim).await;
    for n in 0..others {
        insert_with_token(ch, &opts, 2 + n, &format!("{victim}-other-{n}")).await;
    }
    insert_with_token(ch, &opts, 1, victim).await;
    count().await - before - u64::from(others)
}

#[tokio::test]
async fn the_window_changes_on_an_existing_table_idempotently_and_recorded() {
    let ch = connect("window_change");
    let first = apply_with_window(&ch, 1_000).await;
    assert!(first.applied.iter().all(|a| a.name != SET_WINDOW));
    assert_eq!(
        windows(&ch).await,
        "otel_traces\t1000\notel_traces_trace_id_ts\t1000"
    );

    let need = PipelineShape::new(128, Duration::from_secs(1)).required_window();
    let changed = apply_with_window(&ch, need).await;
    let names: Vec<_> = changed.applied.iter().map(|a| a.name).collect();
    assert_eq!(names, vec![SET_WINDOW], "only the window changes");
    assert_eq!(
        changed.applied[0].notes,
        vec![format!(
            "non_replicated_deduplication_window 1000 -> {need}"
        )]
    );
    assert_eq!(
        windows(&ch).await,
        format!("otel_traces\t{need}\notel_traces_trace_id_ts\t{need}")
    );
    // Migration 5 (recorded at 1000) is still applied, not an edited migration.
    let mut opts = ch.opts();
    opts.dedup_window = need;
    let st = status(&ch.server, &opts).await.unwrap();
    assert!(st.is_up_to_date(), "{st:?}");
    assert!(matches!(st.migrations[4].state, State::Applied(_)));
    assert_eq!(st.window.as_ref().unwrap().current, Some(need));
    assert!(changed.status.is_up_to_date());

    // Idempotent: nothing left to do, nothing recorded again.
    let again = apply_with_window(&ch, need).await;
    assert!(again.applied.is_empty(), "{:?}", again.applied);
    // Never lowered: a smaller request (the CLI's default, a smaller pipeline) is a no-op.
    let smaller = apply_with_window(&ch, 1_000).await;
    assert!(smaller.applied.is_empty(), "{:?}", smaller.applied);
    assert!(smaller.status.is_up_to_date());
    assert_eq!(
        windows(&ch).await,
        format!("otel_traces\t{need}\notel_traces_trace_id_ts\t{need}")
    );
    assert_eq!(
        ch.text(&format!(
            "SELECT count(), any(name), any(statements) LIKE '%MODIFY SETTING non_replicated_deduplication_window = {need}%' \
             FROM `{}`.tracehouse_schema_migrations WHERE version = 0",
            ch.db
        ))
        .await,
        format!("1\t{SET_WINDOW}\t1")
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn a_larger_window_keeps_out_a_replay_that_the_smaller_one_let_in() {
    let ch = connect("window_replay");
    apply_with_window(&ch, 5).await;
    // Seven other blocks between a batch and its replay push it out of a 5-block window.
    assert_eq!(replay_after(&ch, "t-0-100-199", 7).await, 2, "window 5");
    apply_with_window(&ch, 50).await;
    assert_eq!(replay_after(&ch, "t-0-200-299", 7).await, 1, "window 50");
    ch.cleanup().await;
}

#[tokio::test]
async fn the_start_up_check_reports_a_missing_table_and_a_small_window() {
    let ch = connect("window_check");
    let need = PipelineShape::new(96, Duration::from_secs(1)).required_window();
    let missing = check_table(&ch.server, &ch.opts(), Some(need))
        .await
        .unwrap();
    assert_eq!(missing.problems, vec![TableProblem::Missing]);

    apply_with_window(&ch, 1_000).await;
    let small = check_table(&ch.server, &ch.opts(), Some(need))
        .await
        .unwrap();
    assert_eq!(small.dedup_window, Some(1_000));
    assert_eq!(
        small.problems,
        vec![TableProblem::WindowTooSmall {
            setting: "non_replicated_deduplication_window",
            have: 1_000,
            need
        }]
    );

    apply_with_window(&ch, need).await;
    let good = check_table(&ch.server, &ch.opts(), Some(need))
        .await
        .unwrap();
    assert_eq!(good.dedup_window, Some(need));
    assert!(good.problems.is_empty(), "{:?}", good.problems);

    // A table whose column the collector writes has another type is a fatal shape problem.
    ch.exec(&format!(
        "ALTER TABLE `{}`.otel_traces MODIFY COLUMN `StatusMessage` UInt8",
        ch.db
    ))
    .await;
    let bad = check_table(&ch.server, &ch.opts(), Some(need))
        .await
        .unwrap();
    assert!(
        bad.problems.iter().any(TableProblem::is_fatal),
        "{:?}",
        bad.problems
    );
    ch.cleanup().await;
}
