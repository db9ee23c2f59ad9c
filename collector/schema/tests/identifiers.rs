//! Hostile and unusual identifiers on the real engine: legal-but-weird names work end
//! to end and come back byte for byte; names built to inject SQL only ever become
//! the literal name of an object.
#![cfg(feature = "stack-tests")]

mod common;

use common::{Ch, connect, fresh_name};
use tracehouse_schema::{
    ApplyOptions, Ident, LATEST_VERSION, MapSerialization, TableOptions, apply, status,
};

fn named(ch: &Ch, table: &str) -> TableOptions {
    TableOptions::new(
        Ident::new("database", &ch.db).unwrap(),
        Ident::new("table", table).unwrap(),
    )
}

/// Names of the objects in `db`, sorted, compared as values (via a string literal
/// built by the crate's own quoting, which the unit tests pin down).
async fn objects(ch: &Ch, db: &str) -> Vec<String> {
    ch.text(&format!(
        "SELECT name FROM system.tables WHERE database = {} ORDER BY name FORMAT TSVRaw",
        tracehouse_schema::ident::quote_str(db)
    ))
    .await
    .lines()
    .map(str::to_string)
    .collect()
}

#[tokio::test]
async fn weird_but_legal_names_round_trip() {
    let mut ch = connect("unused");
    // Backtick, quotes, semicolon, `?` (a bind marker for the clickhouse crate),
    // braces (a macro in Keeper paths), spaces, dots and non-ASCII.
    ch.db = fresh_name("th weird`'\"; ?{x}.☃ ");
    let table = "spans `v1`; -- ok? {y}";
    let opts = named(&ch, table);
    let report = apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap();
    assert_eq!(report.applied.len(), LATEST_VERSION as usize);
    assert!(report.status.is_up_to_date());

    let mut want = vec![
        table.to_string(),
        format!("{table}_trace_id_ts"),
        format!("{table}_trace_id_ts_mv"),
        "tracehouse_schema_lock".to_string(),
        "tracehouse_schema_migrations".to_string(),
    ];
    want.sort();
    assert_eq!(objects(&ch, &ch.db).await, want);

    ch.insert_spans(&opts, 1, 3).await;
    let t = format!("{}.{}", opts.database, opts.table);
    assert_eq!(ch.count(&format!("SELECT count() FROM {t}")).await, 3);
    let lookup = format!("{}.{}", opts.database, opts.lookup_table().unwrap());
    assert_eq!(ch.count(&format!("SELECT count() FROM {lookup}")).await, 1);
    // The ledger stored the name as a value, exactly.
    let targets = ch
        .text(&format!(
            "SELECT DISTINCT target FROM {}.tracehouse_schema_migrations FORMAT TSVRaw",
            opts.database
        ))
        .await;
    assert_eq!(targets, table);
    assert!(status(&ch.server, &opts).await.unwrap().is_up_to_date());
    ch.cleanup().await;
}

#[tokio::test]
async fn names_built_to_inject_sql_stay_names() {
    let ch = connect("inject");
    // A canary the payloads try to drop.
    let canary = fresh_name("th_c_")[..13].to_string();
    ch.exec(&format!("CREATE DATABASE `{canary}`")).await;
    ch.exec(&format!(
        "CREATE TABLE `{canary}`.keep (x UInt8) ENGINE = MergeTree ORDER BY x"
    ))
    .await;

    // Closes a backtick identifier and a string literal, then tries a second statement.
    let table = format!("t'`; DROP DATABASE {canary}; --");
    let mut opts = named(&ch, &table);
    // The opt-in layouts' statements name the table too.
    opts.layouts.attribute_items = true;
    opts.layouts.map_serialization = MapSerialization::Buckets;
    let report = apply(&ch.server, &opts, &ApplyOptions::default())
        .await
        .unwrap();
    assert_eq!(report.applied.len(), LATEST_VERSION as usize);
    ch.insert_spans(&opts, 1, 1).await;

    assert_eq!(
        objects(&ch, &canary).await,
        vec!["keep".to_string()],
        "canary touched"
    );
    assert!(objects(&ch, &ch.db).await.contains(&table));
    // And the same payload as a database name.
    let mut evil_db = connect("unused");
    evil_db.db = format!("d'`; DROP DATABASE {canary}; --");
    let opts = named(&evil_db, "otel_traces");
    apply(&evil_db.server, &opts, &ApplyOptions::default())
        .await
        .unwrap();
    assert_eq!(
        objects(&ch, &canary).await,
        vec!["keep".to_string()],
        "canary touched"
    );
    assert!(
        objects(&ch, &evil_db.db)
            .await
            .contains(&"otel_traces".to_string())
    );

    evil_db.cleanup().await;
    ch.exec(&format!("DROP DATABASE `{canary}` SYNC")).await;
    ch.cleanup().await;
}
