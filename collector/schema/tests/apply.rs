//! `apply` on the real engine: fresh install, idempotence, the table matches the
//! model, inserts of the collector's columns work, additive migrations keep data,
//! and changed migrations are refused.
#![cfg(feature = "stack-tests")]

mod common;

use common::{Ch, connect, trace_id};
use tracehouse_schema::model::lookup_columns;
use tracehouse_schema::{Action, State};
use tracehouse_schema::{
    ApplyOptions, Attributes, Engine, Error, LATEST_VERSION, Mode, TableOptions, Ttl, apply,
    columns, indexes, plan, status,
};

async fn apply_all(ch: &Ch, opts: &TableOptions) -> tracehouse_schema::ApplyReport {
    apply(&ch.server, opts, &ApplyOptions::default())
        .await
        .unwrap_or_else(|e| panic!("apply failed: {e}"))
}

async fn ledger_rows(ch: &Ch) -> String {
    ch.text(&format!(
        "SELECT target, version, name, mode FROM `{}`.tracehouse_schema_migrations ORDER BY target, version",
        ch.db
    ))
    .await
}

/// Compares `DESCRIBE TABLE` and `system.data_skipping_indices` with the model.
async fn assert_table_matches_model(ch: &Ch, opts: &TableOptions) {
    let described = ch.describe(&opts.table).await;
    let model: Vec<(String, String, String)> = columns(opts)
        .iter()
        .map(|c| {
            (
                c.name().to_string(),
                c.ch_type.to_string(),
                c.codec.to_string(),
            )
        })
        .collect();
    assert_eq!(
        described, model,
        "DESCRIBE differs from the model for {opts:?}"
    );

    let idx = ch
        .text(&format!(
            "SELECT name, type_full, expr, granularity FROM system.data_skipping_indices \
             WHERE database = '{}' AND table = 'otel_traces'",
            ch.db
        ))
        .await;
    let want: Vec<String> = indexes(opts)
        .iter()
        .map(|i| format!("{}\t{}\t{}\t{}", i.name, i.kind, i.expr, i.granularity))
        .collect();
    assert_eq!(idx.lines().collect::<Vec<_>>(), want);

    if opts.is_stored() {
        let lookup = ch.describe(&opts.lookup_table().unwrap()).await;
        let want: Vec<_> = lookup_columns()
            .iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    c.ch_type.to_string(),
                    c.codec.to_string(),
                )
            })
            .collect();
        assert_eq!(lookup, want);
        let engine = ch
            .text(&format!(
                "SELECT engine FROM system.tables WHERE database = '{}' AND name = 'otel_traces_trace_id_ts_mv'",
                ch.db
            ))
            .await;
        assert_eq!(engine, "MaterializedView");
    }
}

#[tokio::test]
async fn apply_on_an_empty_server_creates_everything_and_a_second_apply_changes_nothing() {
    let ch = connect("fresh");
    let opts = ch.opts();

    let before = status(&ch.server, &opts).await.unwrap();
    assert_eq!(before.pending().count(), LATEST_VERSION as usize);
    // The opt-in layouts (6, 7) are not asked for: recorded without running anything.
    assert!(before.pending().all(|(m, a)| *a
        == if m.opt_in.is_some() {
            Action::NoOp
        } else {
            Action::Run
        }));
    // status/plan are read-only: the database was not even created.
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM system.databases WHERE name = '{}'",
            ch.db
        ))
        .await,
        0
    );

    let first = apply_all(&ch, &opts).await;
    let modes: Vec<_> = first.applied.iter().map(|a| (a.version, a.mode)).collect();
    assert_eq!(
        modes,
        (1..=LATEST_VERSION)
            .map(|v| (v, if v > 5 { Mode::Skipped } else { Mode::Applied }))
            .collect::<Vec<_>>()
    );
    assert!(first.status.is_up_to_date());
    let ledger_after_first = ledger_rows(&ch).await;

    let second = apply_all(&ch, &opts).await;
    assert!(second.applied.is_empty(), "{:?}", second.applied);
    assert_eq!(
        ledger_rows(&ch).await,
        ledger_after_first,
        "second apply wrote to the ledger"
    );
    assert!(
        plan(&ch.server, &opts)
            .await
            .unwrap()
            .pending()
            .next()
            .is_none()
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn every_variant_matches_the_model_and_accepts_the_collectors_insert() {
    for (attributes, keys) in [
        (Attributes::Map, true),
        (Attributes::Json, true),
        (Attributes::Json, false),
    ] {
        let ch = connect("variant");
        let mut opts = ch.opts_with(attributes, keys);
        // Ten years: the fixed 2024 test timestamps are not expired on insert (and the
        // DateTime sum stays below its 2106 wrap).
        opts.ttl = Some(Ttl::days(3_650).unwrap());
        apply_all(&ch, &opts).await;
        assert_table_matches_model(&ch, &opts).await;

        ch.insert_spans(&opts, 7, 3).await;
        let t = format!("`{}`.otel_traces", ch.db);
        assert_eq!(ch.count(&format!("SELECT count() FROM {t}")).await, 3);
        let attr = match attributes {
            Attributes::Map => "SpanAttributes['http.method'], ResourceAttributes['host.name']",
            Attributes::Json => {
                "toString(SpanAttributes.http.method), toString(ResourceAttributes.host.name)"
            }
        };
        let row = ch
            .text(&format!(
                "SELECT TraceId, SpanName, SpanKind, ServiceName, Duration, toString(Timestamp), \
                 {attr}, Events.Name, Links.TraceState, StatusCode \
                 FROM {t} ORDER BY Duration LIMIT 1"
            ))
            .await;
        assert_eq!(
            row,
            format!(
                "{}\tGET /checkout\tServer\tcheckout\t1500000\t2024-05-01 12:00:00.123456789\tGET\th1\t['exception']\t['k=v']\tOk",
                trace_id(7)
            ),
            "{opts:?}"
        );
        if opts.has_keys_columns() {
            let keys = ch
                .text(&format!("SELECT SpanAttributesKeys FROM {t} LIMIT 1"))
                .await;
            assert_eq!(keys, "['http.method']");
        }
        // The materialized view filled the trace-id lookup table.
        let lookup = ch
            .text(&format!(
                "SELECT TraceId, min(Start), max(End) FROM `{}`.otel_traces_trace_id_ts GROUP BY TraceId",
                ch.db
            ))
            .await;
        assert_eq!(
            lookup,
            format!("{}\t2024-05-01 12:00:00\t2024-05-01 12:00:02", trace_id(7))
        );
        ch.cleanup().await;
    }
}

#[tokio::test]
async fn null_engine_table_takes_inserts_and_has_no_companions() {
    let ch = connect("null");
    let mut opts = ch.opts_with(Attributes::Json, true);
    opts.engine = Engine::Null;
    let report = apply_all(&ch, &opts).await;
    let modes: Vec<_> = report.applied.iter().map(|a| a.mode).collect();
    assert_eq!(modes[0], Mode::Applied);
    assert!(
        modes[1..5].iter().all(|m| *m == Mode::NoOp)
            && modes[5..].iter().all(|m| *m == Mode::Skipped),
        "{modes:?}"
    );
    assert_table_matches_model(&ch, &opts).await;
    let engine = ch
        .text(&format!(
            "SELECT engine FROM system.tables WHERE database = '{}' AND name = 'otel_traces'",
            ch.db
        ))
        .await;
    assert_eq!(engine, "Null");
    let others = ch
        .count(&format!(
            "SELECT count() FROM system.tables WHERE database = '{}' AND name LIKE 'otel_traces_%'",
            ch.db
        ))
        .await;
    assert_eq!(
        others, 0,
        "Null variant must not create the lookup table or view"
    );

    ch.insert_spans(&opts, 1, 5).await;
    assert_eq!(
        ch.count(&format!("SELECT count() FROM `{}`.otel_traces", ch.db))
            .await,
        0
    );
    assert!(apply_all(&ch, &opts).await.applied.is_empty());
    ch.cleanup().await;
}

#[tokio::test]
async fn additive_migrations_on_top_of_v1_data_keep_the_data() {
    let ch = connect("v2");
    let opts = ch.opts();
    let v1 = apply(
        &ch.server,
        &opts,
        &ApplyOptions {
            up_to: Some(3),
            ..ApplyOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(v1.applied.len(), 3);
    let has_span_name_index = || async {
        ch.count(&format!(
            "SELECT count() FROM system.data_skipping_indices WHERE database = '{}' \
             AND table = 'otel_traces' AND name = 'idx_lower_span_name'",
            ch.db
        ))
        .await
    };
    assert_eq!(has_span_name_index().await, 0);
    let dedup_setting = || async {
        ch.text(&format!(
            "SELECT extract(create_table_query, 'non_replicated_deduplication_window = \\\\d+') \
             FROM system.tables WHERE database = '{}' AND name = 'otel_traces'",
            ch.db
        ))
        .await
    };
    assert_eq!(dedup_setting().await, "");

    ch.insert_spans(&opts, 1, 10).await;
    ch.insert_spans(&opts, 2, 5).await;
    let snapshot_sql = format!(
        "SELECT count(), sum(Duration), arraySort(groupUniqArray(TraceId)) FROM `{}`.otel_traces",
        ch.db
    );
    let before = ch.text(&snapshot_sql).await;
    let lookup_before = ch
        .count(&format!(
            "SELECT count() FROM `{}`.otel_traces_trace_id_ts",
            ch.db
        ))
        .await;

    let rest = apply_all(&ch, &opts).await;
    let versions: Vec<_> = rest.applied.iter().map(|a| a.version).collect();
    assert_eq!(versions, vec![4, 5, 6, 7], "6 and 7 recorded skipped");
    assert_eq!(
        ch.text(&snapshot_sql).await,
        before,
        "an additive migration changed the data"
    );
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM `{}`.otel_traces_trace_id_ts",
            ch.db
        ))
        .await,
        lookup_before
    );
    assert_eq!(has_span_name_index().await, 1);
    assert_eq!(
        dedup_setting().await,
        "non_replicated_deduplication_window = 1000"
    );
    assert_table_matches_model(&ch, &opts).await;

    // And the new index is usable on new data.
    ch.insert_spans(&opts, 3, 1).await;
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM `{}`.otel_traces WHERE lower(SpanName) LIKE '%checkout%'",
            ch.db
        ))
        .await,
        16
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn retried_insert_with_the_same_token_is_deduplicated_after_apply() {
    let ch = connect("dedup");
    let opts = ch.opts();
    apply_all(&ch, &opts).await;
    let insert = format!(
        "{} FORMAT JSONEachRow",
        tracehouse_schema::insert_into(&opts)
    );
    let body = common::span_json(&opts, 9, 0);
    for _ in 0..2 {
        let mut i = ch
            .client
            .insert_formatted_with(insert.clone())
            .with_setting("insert_deduplication_token", "topic-0-100-199");
        i.send(bytes::Bytes::from(body.clone())).await.unwrap();
        i.end().await.unwrap();
    }
    assert_eq!(
        ch.count(&format!("SELECT count() FROM `{}`.otel_traces", ch.db))
            .await,
        1
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn a_tampered_ledger_checksum_is_refused_naming_the_migration() {
    let ch = connect("tamper");
    let opts = ch.opts();
    apply(
        &ch.server,
        &opts,
        &ApplyOptions {
            up_to: Some(2),
            ..ApplyOptions::default()
        },
    )
    .await
    .unwrap();
    ch.exec(&format!(
        "ALTER TABLE `{}`.tracehouse_schema_migrations UPDATE checksum = 'deadbeef' \
         WHERE version = 2 SETTINGS mutations_sync = 2",
        ch.db
    ))
    .await;

    let st = status(&ch.server, &opts).await.unwrap();
    assert!(matches!(st.migrations[1].state, State::ChecksumMismatch(_)));
    for result in [
        plan(&ch.server, &opts).await.map(|_| ()),
        apply(&ch.server, &opts, &ApplyOptions::default())
            .await
            .map(|_| ()),
    ] {
        match result {
            Err(Error::ChecksumMismatch {
                version,
                name,
                applied,
                ..
            }) => {
                assert_eq!(
                    (version, name.as_str(), applied.as_str()),
                    (2, "create_trace_id_ts_table", "deadbeef")
                );
            }
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
    }
    // Refused before running anything: migration 3 was not run.
    assert_eq!(
        ch.count(&format!("SELECT count() FROM system.tables WHERE database = '{}' AND name = 'otel_traces_trace_id_ts_mv'", ch.db)).await,
        0
    );
    assert_eq!(ledger_rows(&ch).await.lines().count(), 2);
    ch.cleanup().await;
}

#[tokio::test]
async fn changed_options_are_refused_as_a_changed_migration() {
    let ch = connect("changed");
    let opts = ch.opts();
    apply_all(&ch, &opts).await;
    // The attributes layout is part of the table (the TTL and the window are desired state,
    // changed in place: see retention.rs and dedup_window.rs).
    let other = ch.opts_with(Attributes::Json, false);
    let err = apply(&ch.server, &other, &ApplyOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ChecksumMismatch { version: 1, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("0001 create_traces_table"),
        "{err}"
    );
    // Refused before anything ran: the table keeps its Map columns.
    let q = ch
        .text(&format!(
            "SELECT position(create_table_query, 'SpanAttributes` Map') FROM system.tables WHERE database = '{}' AND name = 'otel_traces'",
            ch.db
        ))
        .await;
    assert_ne!(q, "0");
    ch.cleanup().await;
}
