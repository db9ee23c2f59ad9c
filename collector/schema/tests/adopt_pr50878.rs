//! Adopting the tables of opentelemetry-collector-contrib PR #50878 (the ClickHouse
//! exporter's traces upgrade: text indexes, `*AttributeItems` ALIAS columns, T64 on
//! `Duration`, and a lookup table of `SimpleAggregateFunction(min|max, DateTime)` ordered by
//! `TraceId`), on the real engine. "Adopted" means all of: the ledger records migrations 1–3
//! as `adopted` and nothing of theirs runs; the later migrations and the window apply on top
//! and the tables keep their own indexes; the collector's start-up check finds nothing wrong
//! and its insert (the model's columns, by name) lands, feeding the lookup table; `status`
//! settles (a second `apply` does nothing) — also when the tables carry column and table
//! comments that mention `TTL` and `SETTINGS`. That the readers' queries return rows on an
//! adopted table is checked by e2e/harness/querybench/readercompat.py on the same DDL
//! (`fixtures/pr50878_map.sql`).
#![cfg(feature = "stack-tests")]

mod common;

use common::{Ch, connect, trace_id};
use tracehouse_schema::{Action, State};
use tracehouse_schema::{
    ApplyOptions, Attributes, Mode, TableOptions, Ttl, apply, check_table, status,
};

/// The fixture's statements for database `db`.
fn pr50878_ddl(db: &str) -> Vec<String> {
    include_str!("fixtures/pr50878_map.sql")
        .split(";\n")
        .map(|s| {
            s.lines()
                .filter(|l| !l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.replace("{db}", db))
        .collect()
}

async fn create_query(ch: &Ch, table: &str) -> String {
    ch.text(&format!(
        "SELECT create_table_query FROM system.tables WHERE database = '{}' AND name = '{table}'",
        ch.db
    ))
    .await
}

/// Applies `opts` and checks what adoption promises: migrations 1–3 adopted, nothing
/// pending afterwards, a second apply a no-op, the collector's check clean.
async fn apply_and_settle(ch: &Ch, opts: &TableOptions) {
    let report = apply(&ch.server, opts, &ApplyOptions::default())
        .await
        .unwrap();
    let modes: Vec<_> = report
        .applied
        .iter()
        .filter(|a| a.version > 0)
        .map(|a| a.mode)
        .collect();
    assert_eq!(
        modes,
        [
            Mode::Adopted,
            Mode::Adopted,
            Mode::Adopted,
            Mode::Applied,
            Mode::Applied,
            Mode::Skipped,
            Mode::Skipped
        ]
    );
    assert_eq!(
        ch.ledger_modes(1).await,
        "1:adopted 2:adopted 3:adopted 4:applied 5:applied 6:skipped 7:skipped"
    );
    assert!(
        report.status.is_up_to_date(),
        "not settled after apply: window {:?}, ttl changes {:?}",
        report.status.window,
        report.status.ttl_changes
    );
    let again = apply(&ch.server, opts, &ApplyOptions::default())
        .await
        .unwrap();
    assert!(again.applied.is_empty(), "{:?}", again.applied);
    let check = check_table(&ch.server, opts, Some(opts.dedup_window))
        .await
        .unwrap();
    assert!(check.problems.is_empty(), "{:?}", check.problems);
}

#[tokio::test]
async fn pr50878_tables_are_adopted_keep_their_indexes_and_take_the_collectors_rows() {
    let ch = connect("adopt_pr50878");
    let opts = ch.opts();
    ch.exec(&format!("CREATE DATABASE `{}`", ch.db)).await;
    for sql in pr50878_ddl(&ch.db) {
        ch.exec(&sql).await;
    }

    let st = status(&ch.server, &opts).await.unwrap();
    let State::Pending(Action::Adopt { notes }) = &st.migrations[0].state else {
        panic!("traces table not adoptable: {:?}", st.migrations[0].state);
    };
    let notes = notes.join("\n");
    assert!(
        notes.contains("Duration has codec \"T64, ZSTD(1)\""),
        "{notes}"
    );
    assert!(
        notes.contains("extra column ResourceAttributeItems Array(String)")
            && notes.contains("extra column SpanAttributeItems Array(String)")
            && notes.contains("ALIAS"),
        "{notes}"
    );
    for m in &st.migrations[1..3] {
        assert_eq!(
            m.state,
            State::Pending(Action::Adopt { notes: vec![] }),
            "{}",
            m.migration.name
        );
    }

    apply_and_settle(&ch, &opts).await;

    // Its own indexes stay: no bloom filter was added next to the text indexes, and v4's
    // `ADD INDEX IF NOT EXISTS idx_lower_span_name` found the one it has.
    let traces = create_query(&ch, "otel_traces").await;
    assert!(
        traces.contains("INDEX idx_trace_id TraceId TYPE text(tokenizer = \\'array\\')"),
        "{traces}"
    );
    assert!(!traces.contains("bloom_filter"), "{traces}");
    assert_eq!(traces.matches("idx_lower_span_name").count(), 1, "{traces}");
    assert!(
        traces.contains("non_replicated_deduplication_window"),
        "{traces}"
    );
    let lookup = create_query(&ch, "otel_traces_trace_id_ts").await;
    assert!(
        lookup.contains("SimpleAggregateFunction(min, DateTime)")
            && lookup.contains("non_replicated_deduplication_window"),
        "{lookup}"
    );

    // The collector's insert lands, the view fills the lookup table, the ALIAS items read.
    ch.insert_spans(&opts, 7, 30).await;
    ch.insert_spans(&opts, 8, 5).await;
    assert_eq!(
        ch.count(&format!("SELECT count() FROM `{}`.otel_traces", ch.db))
            .await,
        35
    );
    assert_eq!(
        ch.text(&format!(
            "SELECT toString(min(Start)), toString(max(End)) FROM `{}`.otel_traces_trace_id_ts \
             WHERE TraceId = '{}'",
            ch.db,
            trace_id(7)
        ))
        .await,
        "2024-05-01 12:00:00\t2024-05-01 12:00:29"
    );
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM `{}`.otel_traces WHERE has(SpanAttributeItems, 'http.method=GET')",
            ch.db
        ))
        .await,
        35
    );

    // Opting in to `attribute_items` on their table: the columns and index names are
    // theirs, so `IF NOT EXISTS` finds them; recorded `applied`, nothing added twice.
    let mut items = opts.clone();
    items.layouts.attribute_items = true;
    let report = apply(&ch.server, &items, &ApplyOptions::default())
        .await
        .unwrap();
    let done: Vec<_> = report.applied.iter().map(|a| (a.version, a.mode)).collect();
    assert_eq!(done, vec![(6, Mode::Applied)]);
    let traces = create_query(&ch, "otel_traces").await;
    assert_eq!(traces.matches("idx_span_attr_items").count(), 1, "{traces}");
    assert_eq!(
        traces.matches("`SpanAttributeItems` Array").count(),
        1,
        "{traces}"
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn comments_on_adopted_tables_change_nothing() {
    let ch = connect("adopt_comments");
    let mut opts = ch.opts();
    // A TTL asked of an adopted table is changed once, then read back as set.
    opts.ttl = Some(Ttl::days(30).unwrap());
    ch.exec(&format!("CREATE DATABASE `{}`", ch.db)).await;
    for sql in pr50878_ddl(&ch.db) {
        ch.exec(&sql).await;
    }
    for table in ["otel_traces", "otel_traces_trace_id_ts"] {
        let t = format!("`{}`.`{table}`", ch.db);
        let column = if table == "otel_traces" {
            "Timestamp"
        } else {
            "Start"
        };
        ch.exec(&format!(
            "ALTER TABLE {t} COMMENT COLUMN {column} 'rows expire by TTL after 30 days, SETTINGS say so'"
        ))
        .await;
        ch.exec(&format!(
            "ALTER TABLE {t} MODIFY COMMENT 'owned by the SRE team: TTL and SETTINGS by tracehouse'"
        ))
        .await;
    }
    ch.exec(&format!(
        "ALTER TABLE `{}`.otel_traces COMMENT COLUMN TraceId 'it''s hex, 32 digits'",
        ch.db
    ))
    .await;
    let columns = ch.describe(&opts.table).await;
    assert_eq!(columns[1].0, "TraceId");

    apply_and_settle(&ch, &opts).await;
    let st = status(&ch.server, &opts).await.unwrap();
    assert_eq!(
        st.ttl.as_deref(),
        Some("toDateTime(Timestamp) + toIntervalDay(30)")
    );
    assert_eq!(
        st.window.as_ref().and_then(|w| w.current),
        Some(opts.dedup_window)
    );
    // The comments are still there: adoption and the setting changes left them alone.
    let traces = create_query(&ch, "otel_traces").await;
    assert!(traces.contains("owned by the SRE team"), "{traces}");
    assert!(traces.contains("rows expire by TTL"), "{traces}");
    ch.cleanup().await;
}

#[tokio::test]
async fn a_json_table_with_the_pr50878_lookup_table_on_aggregating_merge_tree_is_adopted() {
    let ch = connect("adopt_pr50878_json");
    let opts = ch.opts_with(Attributes::Json, true);
    ch.exec(&format!("CREATE DATABASE `{}`", ch.db)).await;
    // The exporter's JSON traces table is what migration 1 renders for these options (the
    // JSON template is unchanged by #50878); the lookup table and view are the PR's, its
    // lookup table on the aggregating engine its column types suggest.
    let v1 = &tracehouse_schema::migrations::render_all(&opts).unwrap()[0];
    ch.exec(&v1.statements[0]).await;
    for sql in &pr50878_ddl(&ch.db)[1..] {
        ch.exec(&sql.replace(
            ") ENGINE = MergeTree()\nPARTITION BY toStartOfWeek",
            ") ENGINE = AggregatingMergeTree\nPARTITION BY toStartOfWeek",
        ))
        .await;
    }
    let engine = ch
        .text(&format!(
            "SELECT engine FROM system.tables WHERE database = '{}' AND name = 'otel_traces_trace_id_ts'",
            ch.db
        ))
        .await;
    assert_eq!(engine, "AggregatingMergeTree");

    apply_and_settle(&ch, &opts).await;
    ch.insert_spans(&opts, 9, 4).await;
    ch.insert_spans(&opts, 9, 6).await;
    ch.exec(&format!(
        "OPTIMIZE TABLE `{}`.otel_traces_trace_id_ts FINAL",
        ch.db
    ))
    .await;
    // Two inserts of one trace merge into one lookup row with the widest window.
    assert_eq!(
        ch.text(&format!(
            "SELECT count(), toString(min(Start)), toString(max(End)) FROM `{}`.otel_traces_trace_id_ts",
            ch.db
        ))
        .await,
        "1\t2024-05-01 12:00:00\t2024-05-01 12:00:05"
    );
    ch.cleanup().await;
}
