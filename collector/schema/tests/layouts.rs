//! The opt-in layouts on the real engine: a table that did not ask records them `skipped`
//! and reads as up to date; asking later applies them on the table with its data (ALIAS
//! columns, text indexes, bucketed Map serialization), readers' `has(SpanAttributeItems, …)`
//! answer, the collector's insert and start-up check still pass; asking no more keeps them.
#![cfg(feature = "stack-tests")]

mod common;

use common::{Ch, connect};
use tracehouse_schema::{Action, State};
use tracehouse_schema::{
    ApplyOptions, Attributes, LATEST_VERSION, Layout, Layouts, MapSerialization, Mode,
    TableOptions, apply, check_table, indexes, status,
};

fn both(mut o: TableOptions) -> TableOptions {
    o.layouts = Layouts {
        attribute_items: true,
        map_serialization: MapSerialization::Buckets,
    };
    o
}

async fn apply_all(ch: &Ch, opts: &TableOptions) -> tracehouse_schema::ApplyReport {
    apply(&ch.server, opts, &ApplyOptions::default())
        .await
        .unwrap_or_else(|e| panic!("apply failed: {e}"))
}

fn modes(r: &tracehouse_schema::ApplyReport) -> Vec<(u32, Mode)> {
    r.applied.iter().map(|a| (a.version, a.mode)).collect()
}

/// `(version, mode, records)` as the ledger reads them (`status`).
async fn ledger(ch: &Ch, opts: &TableOptions) -> Vec<(u32, String, u64)> {
    status(&ch.server, opts)
        .await
        .unwrap()
        .migrations
        .iter()
        .filter_map(|m| match &m.state {
            State::Applied(r) => Some((r.version, r.mode.clone(), r.records)),
            _ => None,
        })
        .collect()
}

async fn alias_columns(ch: &Ch) -> String {
    ch.text(&format!(
        "SELECT name, type, default_kind FROM system.columns WHERE database = '{}' \
         AND table = 'otel_traces' AND default_kind != '' ORDER BY name",
        ch.db
    ))
    .await
}

#[tokio::test]
async fn opting_in_on_an_existing_table_applies_the_layouts_and_readers_use_them() {
    let ch = connect("layouts");
    let plain = ch.opts();
    let t = format!("`{}`.otel_traces", ch.db);

    // Today's table: the opt-in versions are recorded `skipped` and it is up to date.
    let first = apply_all(&ch, &plain).await;
    let mut want: Vec<(u32, Mode)> = (1..=5).map(|v| (v, Mode::Applied)).collect();
    want.extend([(6, Mode::Skipped), (7, Mode::Skipped)]);
    assert_eq!(modes(&first), want);
    assert!(first.status.is_up_to_date());
    assert_eq!(alias_columns(&ch).await, "");
    ch.insert_spans(&plain, 1, 5).await;

    // Asking for both: pending again although recorded, and run on the table with its data.
    let opted = both(ch.opts());
    let before = status(&ch.server, &opted).await.unwrap();
    let pending: Vec<_> = before
        .pending()
        .map(|(m, a)| (m.version, a.clone()))
        .collect();
    assert_eq!(pending, vec![(6, Action::Run), (7, Action::Run)]);
    let second = apply_all(&ch, &opted).await;
    assert_eq!(modes(&second), vec![(6, Mode::Applied), (7, Mode::Applied)]);
    assert!(second.status.is_up_to_date(), "{:?}", second.status);
    // The ledger has both rows of 6 and 7 and reads the `applied` one, once.
    let rows = ledger(&ch, &opted).await;
    assert_eq!(rows.len(), LATEST_VERSION as usize);
    assert_eq!(rows[5], (6, "applied".into(), 1));
    assert_eq!(rows[6], (7, "applied".into(), 1));
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM `{}`.tracehouse_schema_migrations WHERE version IN (6, 7)",
            ch.db
        ))
        .await,
        4
    );

    assert_eq!(
        alias_columns(&ch).await,
        "ResourceAttributeItems\tArray(String)\tALIAS\nSpanAttributeItems\tArray(String)\tALIAS"
    );
    let text_indexes = ch
        .text(&format!(
            "SELECT name, type FROM system.data_skipping_indices \
             WHERE database = '{}' AND table = 'otel_traces' AND type = 'text' ORDER BY name",
            ch.db
        ))
        .await;
    assert_eq!(
        text_indexes, "idx_res_attr_items\ttext\nidx_span_attr_items\ttext",
        "the server stores the ALIAS expanded in `expr`"
    );
    let model: Vec<_> = indexes(&opted)
        .iter()
        .filter(|i| i.since == Layout::AttributeItems.version())
        .map(|i| i.name)
        .collect();
    assert_eq!(model, ["idx_res_attr_items", "idx_span_attr_items"]);
    let create = ch
        .text(&format!(
            "SELECT create_table_query FROM system.tables WHERE database = '{}' AND name = 'otel_traces'",
            ch.db
        ))
        .await;
    assert!(
        create.contains(r"map_serialization_version = \'with_buckets\'"),
        "{create}"
    );
    // The window is still read from the settings clause the layout extended.
    let w = second.status.window.as_ref().unwrap();
    assert_eq!(w.current, Some(w.desired));

    // The collector's start-up check passes, with and without the layouts in its options
    // (the collector's own configuration has none), and its insert goes in.
    for opts in [&plain, &opted] {
        let check = check_table(&ch.server, opts, Some(1_000)).await.unwrap();
        assert!(check.problems.is_empty(), "{:?}", check.problems);
    }
    ch.insert_spans(&plain, 2, 5).await;

    // Readers: the PR #50878 / ClickStack shape answers, on a table mixing parts written
    // before and after the opt-in (without migration 6's MATERIALIZE INDEX the 26.9 engine
    // fails this query), and after a merge; whole maps and one key still read.
    let has = |kv: &str| format!("SELECT count() FROM {t} WHERE has(SpanAttributeItems, '{kv}')");
    let parts = format!(
        "SELECT count() FROM system.parts WHERE database = '{}' AND table = 'otel_traces' AND active",
        ch.db
    );
    assert!(ch.count(&parts).await >= 2, "parts from before and after");
    assert_eq!(ch.count(&has("http.method=GET")).await, 10);
    ch.exec(&format!("OPTIMIZE TABLE {t} FINAL")).await;
    assert_eq!(ch.count(&has("http.method=GET")).await, 10);
    assert_eq!(ch.count(&has("http.method=POST")).await, 0);
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM {t} WHERE has(ResourceAttributeItems, 'host.name=h1')"
        ))
        .await,
        10
    );
    assert_eq!(
        ch.text(&format!(
            "SELECT SpanAttributes['http.method'], mapKeys(ResourceAttributes) FROM {t} LIMIT 1"
        ))
        .await,
        "GET\t['host.name']"
    );

    // Asking no more: up to date, nothing dropped, the kept layouts listed.
    let back = status(&ch.server, &plain).await.unwrap();
    assert!(back.is_up_to_date(), "{back:?}");
    assert_eq!(
        back.kept_layouts,
        vec![Layout::AttributeItems, Layout::MapBuckets]
    );
    let third = apply_all(&ch, &plain).await;
    assert!(third.applied.is_empty(), "{:?}", third.applied);
    assert_eq!(alias_columns(&ch).await.lines().count(), 2);
    ch.cleanup().await;
}

#[tokio::test]
async fn a_new_table_asked_with_the_layouts_gets_them_before_any_row() {
    let ch = connect("layouts_new");
    let opts = both(ch.opts());
    let report = apply_all(&ch, &opts).await;
    assert_eq!(
        modes(&report),
        (1..=LATEST_VERSION)
            .map(|v| (v, Mode::Applied))
            .collect::<Vec<_>>()
    );
    let idx = ch
        .text(&format!(
            "SELECT name FROM system.data_skipping_indices WHERE database = '{}' \
             AND table = 'otel_traces' ORDER BY name",
            ch.db
        ))
        .await;
    let mut want: Vec<_> = indexes(&opts).iter().map(|i| i.name).collect();
    want.sort_unstable();
    assert_eq!(idx.lines().collect::<Vec<_>>(), want);
    ch.insert_spans(&opts, 3, 4).await;
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM `{}`.otel_traces WHERE has(SpanAttributeItems, 'http.method=GET')",
            ch.db
        ))
        .await,
        4
    );
    ch.cleanup().await;
}

#[tokio::test]
async fn a_layout_the_json_table_cannot_take_is_refused_before_anything_runs() {
    let ch = connect("layouts_json");
    let mut opts = ch.opts_with(Attributes::Json, true);
    opts.layouts.map_serialization = MapSerialization::Buckets;
    let err = apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("map_serialization=Buckets is for Map attributes"),
        "{err}"
    );
    assert_eq!(
        ch.count(&format!(
            "SELECT count() FROM system.databases WHERE name = '{}'",
            ch.db
        ))
        .await,
        0,
        "nothing was created"
    );
}
