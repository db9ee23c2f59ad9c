//! `verify` against the real ClickHouse engine: tables of both attribute variants with
//! known holes, extra copies and stray rows; the report must name each exactly.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::{stack_var, unique_name};
use tracehouse_loadgen::{Expectation, GeneratorReport, VerifyOptions, VerifyReport, verify};
use tracehouse_schema::Attributes;

fn client() -> clickhouse::Client {
    clickhouse::Client::default()
        .with_url(stack_var("CLICKHOUSE_URL"))
        .with_user(stack_var("CLICKHOUSE_USER"))
        .with_password(stack_var("CLICKHOUSE_PASSWORD"))
}

async fn exec(client: &clickhouse::Client, sql: &str) {
    client
        .query(sql)
        .execute()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn run_verify(db: &str, attributes: Attributes) -> VerifyReport {
    verify(&VerifyOptions {
        url: stack_var("CLICKHOUSE_URL"),
        user: Some(stack_var("CLICKHOUSE_USER")),
        password: Some(stack_var("CLICKHOUSE_PASSWORD")),
        tls: Default::default(),
        database: db.to_string(),
        table: "otel_traces".to_string(),
        attributes,
        generators: vec![
            Expectation {
                generator_id: "gen-a".into(),
                expected: 100,
            },
            Expectation {
                generator_id: "gen-b".into(),
                expected: 50,
            },
            Expectation {
                generator_id: "gen-absent".into(),
                expected: 10,
            },
        ],
        timeout: Duration::from_secs(60),
    })
    .await
    .expect("verify")
}

/// gen-a: seqs 0..100 without 17 and 58, seq 5 twice more and 42 once more, one row with
/// seq 100 (beyond the expected range), one with seq "x". gen-b: 0..50 exactly once.
/// gen-absent: nothing. Plus another generator's rows, which must not count.
fn assert_expected_report(r: &VerifyReport) {
    let g = |id: &str, expected, rows, found, missing, duplicated, out_of_range| GeneratorReport {
        generator_id: id.to_string(),
        expected,
        rows,
        found,
        missing,
        duplicated,
        out_of_range,
    };
    assert_eq!(
        r.generators,
        vec![
            g("gen-a", 100, 103, 98, 2, 3, 2),
            g("gen-b", 50, 50, 50, 0, 0, 0),
            g("gen-absent", 10, 0, 0, 10, 0, 0),
        ]
    );
    assert_eq!((r.missing(), r.duplicated(), r.out_of_range()), (12, 3, 2));
    assert!(!r.is_exact());
    assert!(r.generators[1].is_exact());
}

#[tokio::test]
async fn map_variant_reports_missing_duplicated_and_out_of_range_exactly() {
    let ch = client();
    let db = unique_name("loadgen_verify_map");
    exec(&ch, &format!("CREATE DATABASE {db}")).await;
    // The Map variant's shape for the columns that matter here.
    exec(
        &ch,
        &format!(
            "CREATE TABLE {db}.otel_traces (
                Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
                ServiceName LowCardinality(String) CODEC(ZSTD(1)),
                SpanName LowCardinality(String) CODEC(ZSTD(1)),
                SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1))
            ) ENGINE = MergeTree
            PARTITION BY toDate(Timestamp)
            ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))"
        ),
    )
    .await;
    let insert = |id: &str, seq_sql: &str, from: &str| {
        format!(
            "INSERT INTO {db}.otel_traces (Timestamp, ServiceName, SpanName, SpanAttributes) \
             SELECT now64(9), 'svc', 'op', map('loadgen.id', '{id}', 'loadgen.seq', {seq_sql}) \
             FROM {from}"
        )
    };
    for sql in [
        insert(
            "gen-a",
            "toString(number)",
            "numbers(100) WHERE number NOT IN (17, 58)",
        ),
        insert("gen-a", "toString(number)", "numbers(6) WHERE number = 5"),
        insert("gen-a", "'5'", "numbers(1)"),
        insert("gen-a", "'42'", "numbers(1)"),
        insert("gen-a", "'100'", "numbers(1)"),
        insert("gen-a", "'x'", "numbers(1)"),
        insert("gen-b", "toString(number)", "numbers(50)"),
        insert("someone-else", "toString(number)", "numbers(30)"),
    ] {
        exec(&ch, &sql).await;
    }
    let report = run_verify(&db, Attributes::Map).await;
    assert_expected_report(&report);
    exec(&ch, &format!("DROP DATABASE {db}")).await;
}

#[tokio::test]
async fn json_variant_reads_the_dotted_path_and_reports_exactly() {
    let ch = client();
    let db = unique_name("loadgen_verify_json");
    exec(&ch, &format!("CREATE DATABASE {db}")).await;
    exec(
        &ch,
        &format!(
            "CREATE TABLE {db}.otel_traces (
                Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
                ServiceName LowCardinality(String) CODEC(ZSTD(1)),
                SpanName LowCardinality(String) CODEC(ZSTD(1)),
                SpanAttributes JSON CODEC(ZSTD(1))
            ) ENGINE = MergeTree
            PARTITION BY toDate(Timestamp)
            ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)"
        ),
    )
    .await;
    // Rows as the exporter's JSON schema stores them: dotted keys, the seq an Int64
    // (the stray "x" a String), sent as JSONEachRow text.
    let mut rows = Vec::new();
    let mut row = |id: &str, seq: serde_json::Value| {
        rows.push(
            serde_json::json!({
                "Timestamp": "2026-01-01 00:00:00.000000001",
                "ServiceName": "svc",
                "SpanName": "op",
                "SpanAttributes": {"loadgen.id": id, "loadgen.seq": seq, "other.key": true}
            })
            .to_string(),
        );
    };
    for seq in (0..100).filter(|s| ![17, 58].contains(s)) {
        row("gen-a", seq.into());
    }
    for seq in [5, 5, 42, 100] {
        row("gen-a", seq.into());
    }
    row("gen-a", "x".into());
    for seq in 0..50 {
        row("gen-b", seq.into());
    }
    for seq in 0..30 {
        row("someone-else", seq.into());
    }
    let sql = format!(
        "INSERT INTO {db}.otel_traces FORMAT JSONEachRow\n{}",
        rows.join("\n")
    );
    exec(&ch, &sql).await;
    let types: Vec<String> = ch
        .query(&format!(
            "SELECT DISTINCT dynamicType(SpanAttributes.loadgen.seq) FROM {db}.otel_traces ORDER BY 1"
        ))
        .fetch_all()
        .await
        .expect("types");
    assert_eq!(types, ["Int64", "String"], "the engine typed the seq path");
    let report = run_verify(&db, Attributes::Json).await;
    assert_expected_report(&report);
    exec(&ch, &format!("DROP DATABASE {db}")).await;
}
