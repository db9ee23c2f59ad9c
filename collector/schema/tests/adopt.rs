//! Adoption on the real engine: tables the OTel Collector ClickHouse exporter (or
//! ClickStack) created are recognised and recorded without DDL, and their data is
//! kept; tables of another shape are refused and left exactly as they were.
#![cfg(feature = "stack-tests")]

mod common;

use common::connect;
use tracehouse_schema::migrations::render_all;
use tracehouse_schema::{Action, State};
use tracehouse_schema::{ApplyOptions, Attributes, Error, Mode, apply, status};

/// The exporter's Map-variant traces table, lookup table and view, written the way
/// the exporter renders its templates (double-quoted names, its clause layout).
fn exporter_map_ddl(db: &str) -> Vec<String> {
    vec![
        format!(
            r#"CREATE TABLE IF NOT EXISTS "{db}"."otel_traces"  (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
TTL toDateTime(Timestamp) + toIntervalDay(3650)
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1"#
        ),
        format!(
            r#"CREATE TABLE IF NOT EXISTS "{db}"."otel_traces_trace_id_ts"  (
     TraceId String CODEC(ZSTD(1)),
     Start DateTime CODEC(Delta, ZSTD(1)),
     End DateTime CODEC(Delta, ZSTD(1)),
     INDEX idx_trace_id TraceId TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(Start)
ORDER BY (TraceId, Start)
TTL toDateTime(Start) + toIntervalDay(3650)
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1"#
        ),
        format!(
            r#"CREATE MATERIALIZED VIEW IF NOT EXISTS "{db}"."otel_traces_trace_id_ts_mv"
TO "{db}"."otel_traces_trace_id_ts"
AS SELECT
    TraceId,
    min(Timestamp) as Start,
    max(Timestamp) as End
FROM "{db}"."otel_traces"
WHERE TraceId != ''
GROUP BY TraceId"#
        ),
    ]
}

/// A newer exporter/ClickStack shape: extra ALIAS columns, another codec, the
/// span-name index already present, and `SimpleAggregateFunction` lookup columns.
fn newer_exporter_ddl(db: &str) -> Vec<String> {
    vec![
        format!(
            r#"CREATE TABLE "{db}"."otel_traces" (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (Timestamp DateTime64(9), Name LowCardinality(String), Attributes Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    Links Nested (TraceId String, SpanId String, TraceState String, Attributes Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    ResourceAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(ResourceAttributes, 'Array(Tuple(String, String))')),
    SpanAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(SpanAttributes, 'Array(Tuple(String, String))')),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,
    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1"#
        ),
        format!(
            r#"CREATE TABLE "{db}"."otel_traces_trace_id_ts" (
    TraceId String CODEC(ZSTD(1)),
    Start SimpleAggregateFunction(min, DateTime) CODEC(ZSTD(1)),
    End SimpleAggregateFunction(max, DateTime) CODEC(ZSTD(1))
) ENGINE = AggregatingMergeTree
PARTITION BY toStartOfWeek(Start)
ORDER BY (TraceId)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1"#
        ),
    ]
}

#[tokio::test]
async fn a_table_the_otel_exporter_created_is_adopted_and_keeps_its_data() {
    let ch = connect("adopt_map");
    let opts = ch.opts();
    ch.exec(&format!("CREATE DATABASE \"{}\"", ch.db)).await;
    for sql in exporter_map_ddl(&ch.db) {
        ch.exec(&sql).await;
    }
    ch.insert_spans(&opts, 1, 4).await;

    let st = status(&ch.server, &opts).await.unwrap();
    let actions: Vec<_> = st.pending().map(|(m, a)| (m.version, a.clone())).collect();
    assert!(
        matches!(actions[0], (1, Action::Adopt { .. })),
        "{actions:?}"
    );
    assert!(
        matches!(actions[1], (2, Action::Adopt { .. })),
        "{actions:?}"
    );
    assert!(
        matches!(actions[2], (3, Action::Adopt { .. })),
        "{actions:?}"
    );
    assert_eq!(actions[3], (4, Action::Run));

    let report = apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap();
    let modes: Vec<_> = report.applied.iter().map(|a| a.mode).collect();
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
        ch.ledger_modes(0).await,
        "1:adopted 2:adopted 3:adopted 4:applied 5:applied 6:skipped 7:skipped"
    );
    // The data, the view and the exporter's own TTL are all still there.
    assert_eq!(
        ch.count(&format!("SELECT count() FROM `{}`.otel_traces", ch.db))
            .await,
        4
    );
    ch.insert_spans(&opts, 2, 1).await;
    assert_eq!(
        ch.count(&format!(
            "SELECT uniqExact(TraceId) FROM `{}`.otel_traces_trace_id_ts",
            ch.db
        ))
        .await,
        2
    );
    let create = ch
        .text(&format!(
            "SELECT create_table_query FROM system.tables WHERE database = '{}' AND name = 'otel_traces'",
            ch.db
        ))
        .await;
    assert!(
        create.contains("TTL toDateTime(Timestamp) + toIntervalDay(3650)"),
        "{create}"
    );
    assert!(
        create.contains("idx_lower_span_name"),
        "v4 was not applied on top: {create}"
    );
    // Nothing pending afterwards, and a second apply is a no-op.
    assert!(
        apply(&ch.server, &opts, &ApplyOptions::default())
            .await
            .unwrap()
            .applied
            .is_empty()
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn a_newer_exporter_shape_is_adopted_with_notes() {
    let ch = connect("adopt_newer");
    let opts = ch.opts();
    ch.exec(&format!("CREATE DATABASE \"{}\"", ch.db)).await;
    for sql in newer_exporter_ddl(&ch.db) {
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
        notes.contains("SpanAttributeItems") && notes.contains("ALIAS"),
        "{notes}"
    );
    assert!(matches!(
        st.migrations[1].state,
        State::Pending(Action::Adopt { .. })
    ));
    // No view yet: that one is created.
    assert_eq!(st.migrations[2].state, State::Pending(Action::Run));

    let report = apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap();
    let modes: Vec<_> = report.applied.iter().map(|a| a.mode).collect();
    assert_eq!(
        modes,
        [
            Mode::Adopted,
            Mode::Adopted,
            Mode::Applied,
            Mode::Applied,
            Mode::Applied,
            Mode::Skipped,
            Mode::Skipped
        ]
    );
    // The collector's insert still works on the adopted table, and feeds the view.
    ch.insert_spans(&opts, 5, 2).await;
    assert_eq!(
        ch.count(&format!("SELECT count() FROM `{}`.otel_traces", ch.db))
            .await,
        2
    );
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM `{}`.otel_traces_trace_id_ts",
            ch.db
        ))
        .await,
        1
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn a_json_exporter_table_with_keys_columns_is_adopted() {
    let ch = connect("adopt_json");
    let opts = ch.opts_with(Attributes::Json, true);
    ch.exec(&format!("CREATE DATABASE \"{}\"", ch.db)).await;
    ch.exec(&format!(
        r#"CREATE TABLE IF NOT EXISTS "{}"."otel_traces"  (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes JSON CODEC(ZSTD(1)),
    ResourceAttributesKeys Array(LowCardinality(String)) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes JSON CODEC(ZSTD(1)),
    SpanAttributesKeys Array(LowCardinality(String)) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes JSON
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes JSON
    ) CODEC(ZSTD(1)),
    INDEX idx_res_attr_keys ResourceAttributesKeys TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_keys SpanAttributesKeys TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1"#,
        ch.db
    ))
    .await;
    ch.insert_spans(&opts, 3, 2).await;
    let report = apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap();
    assert_eq!(report.applied[0].mode, Mode::Adopted);
    assert_eq!(
        ch.count(&format!("SELECT count() FROM `{}`.otel_traces", ch.db))
            .await,
        2
    );

    // Once adopted under the JSON options, the Map options are a changed migration.
    let err = apply(&ch.server, &ch.opts(), &ApplyOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ChecksumMismatch { version: 1, .. }),
        "{err}"
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn a_table_of_another_shape_is_refused_and_left_untouched() {
    let ch = connect("adopt_conflict");
    let opts = ch.opts();
    ch.exec(&format!("CREATE DATABASE \"{}\"", ch.db)).await;
    ch.exec(&format!(
        "CREATE TABLE `{}`.otel_traces (Timestamp DateTime, TraceId String, Note String) \
         ENGINE = MergeTree ORDER BY Timestamp",
        ch.db
    ))
    .await;
    ch.exec(&format!(
        "INSERT INTO `{}`.otel_traces VALUES ('2024-01-01 00:00:00', 'a', 'keep me')",
        ch.db
    ))
    .await;
    let describe_before = ch.describe(&opts.table).await;

    let err = apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap_err();
    match &err {
        Error::ShapeMismatch {
            object,
            differences,
        } => {
            assert!(object.contains("otel_traces"));
            let all = differences.join("\n");
            assert!(
                all.contains("column Timestamp is DateTime, expected DateTime64(9)"),
                "{all}"
            );
            assert!(all.contains("column SpanName is missing"), "{all}");
        }
        other => panic!("expected a shape mismatch, got {other:?}"),
    }
    assert_eq!(ch.describe(&opts.table).await, describe_before);
    assert_eq!(
        ch.text(&format!("SELECT Note FROM `{}`.otel_traces", ch.db))
            .await,
        "keep me"
    );
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM `{}`.tracehouse_schema_migrations",
            ch.db
        ))
        .await,
        0
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn a_map_table_is_refused_under_json_options_with_a_hint() {
    let ch = connect("adopt_variant");
    ch.exec(&format!("CREATE DATABASE \"{}\"", ch.db)).await;
    for sql in exporter_map_ddl(&ch.db) {
        ch.exec(&sql).await;
    }
    let json = ch.opts_with(Attributes::Json, false);
    let err = apply(&ch.server, &json, &ApplyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    assert!(err.to_string().contains("--attributes map"), "{err}");
    ch.cleanup().await;
}

#[tokio::test]
async fn an_applier_that_died_after_create_is_repaired_by_adoption() {
    let ch = connect("adopt_crash");
    let opts = ch.opts();
    // Simulate the crash: migration 1's DDL ran, its ledger row was never written.
    ch.exec(&tracehouse_schema::ddl::create_database(&opts))
        .await;
    let v1 = &render_all(&opts).unwrap()[0];
    ch.exec(&v1.statements[0]).await;
    let report = apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap();
    assert_eq!(report.applied[0].mode, Mode::Adopted);
    assert!(
        report.applied[0].notes.is_empty(),
        "{:?}",
        report.applied[0].notes
    );
    // The opt-in layouts were not asked for: recorded `skipped`.
    assert!(report.applied[1..].iter().all(|a| a.mode
        == if a.version > 5 {
            Mode::Skipped
        } else {
            Mode::Applied
        }));
    ch.cleanup().await;
}
