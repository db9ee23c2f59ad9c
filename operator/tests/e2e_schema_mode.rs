//! Schema ownership on the real stack: with `schemaMode: Verify` the operator runs no DDL — on
//! a fresh database it reports `SchemaReady=False/SchemaNotApplied` naming every missing
//! migration, creates nothing in ClickHouse and rolls out no gateway; switched to `Apply` it
//! migrates; back on `Verify` an up-to-date table is Ready. `ddlCredentials` are what the
//! schema step uses (a wrong password there is `ClickHouseAuthFailed` while the writer's
//! credentials are right), and never reach the collector pods. Retention (`ttl`) changes in
//! place as a recorded migration, shown in status. Opt-in layouts (`layouts`) are added to a
//! live table in place, shown in status, kept when turned off, and refused on a JSON table.
//! Real local stack, no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::json;
use tracehouse_e2e::{stack_var, unique_name};
use tracehouse_operator::builders::Names;
use tracehouse_operator::crd::{TracePipeline, condition};

async fn wait_schema(api: &Api<TracePipeline>, name: &str, status: &str, reason: &str) -> String {
    wait_for(
        &format!("SchemaReady={status}/{reason}"),
        Duration::from_secs(90),
        || async {
            let tp = api.get(name).await.map_err(|e| e.to_string())?;
            let c = tp
                .status
                .as_ref()
                .and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == condition::SCHEMA_READY)
                })
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
            match c {
                Some((s, r, m)) if s == status && r == reason => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_only_runs_no_ddl_and_ddl_credentials_are_the_schema_steps() {
    in_namespace("tp-schema", |client, ns| async move {
        let topic = unique_name("tp_schema");
        let database = unique_name("tp_schema");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        put_secret(
            &client,
            &ns,
            "clickhouse-ddl",
            "Opaque",
            json!({ "username": stack_var("CLICKHOUSE_USER"), "password": "wrong" }),
        )
        .await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            // 1. Verify on a fresh database: named, nothing created, no gateway.
            let mut tp = sample(&ns, &topic, &database);
            tp["spec"]["clickhouse"]["schemaMode"] = json!("Verify");
            apply(&api, &tp).await;
            let m = wait_schema(&api, name, "False", "SchemaNotApplied").await;
            assert!(m.contains("0001 create_traces_table"), "{m}");
            assert!(m.contains("schemaMode"), "{m}");
            tokio::time::sleep(RESYNC + Duration::from_secs(2)).await;
            let databases = clickhouse_query(&format!(
                "SELECT count() FROM system.databases WHERE name = '{database}'"
            ))
            .await;
            assert_eq!(databases, "0", "Verify created the database");
            let gateway = Api::<Deployment>::namespaced(client.clone(), &ns)
                .get_opt(&Names::of(name).deployment)
                .await
                .unwrap();
            assert!(
                gateway.is_none(),
                "no gateway before the schema is in place"
            );

            // 2. Apply, with DDL credentials that are wrong: the schema step uses them.
            tp["spec"]["clickhouse"]["schemaMode"] = json!("Apply");
            tp["spec"]["clickhouse"]["ddlCredentials"] = json!({ "name": "clickhouse-ddl" });
            apply(&api, &tp).await;
            wait_schema(&api, name, "False", "ClickHouseAuthFailed").await;

            // 3. Right DDL credentials: migrated, Ready, delivering; the pods never see them.
            put_secret(
                &client,
                &ns,
                "clickhouse-ddl",
                "Opaque",
                json!({
                    "username": stack_var("CLICKHOUSE_USER"),
                    "password": stack_var("CLICKHOUSE_PASSWORD")
                }),
            )
            .await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            deliver(&topic, &database, "schema-mode", 1_000).await;
            let d = Api::<Deployment>::namespaced(client.clone(), &ns)
                .get(&Names::of(name).deployment)
                .await
                .unwrap();
            let spec = serde_json::to_string(&d.spec).unwrap();
            assert!(
                !spec.contains("clickhouse-ddl"),
                "the DDL Secret reached the pods"
            );

            // 4. Back to Verify: an up-to-date table is Ready, nothing changes.
            tp["spec"]["clickhouse"]["schemaMode"] = json!("Verify");
            apply(&api, &tp).await;
            let tp_now = wait_ready(&api, name, 2, 1, Duration::from_secs(60)).await;
            let s = wait_schema(&api, name, "True", "MigrationsApplied").await;
            assert!(s.contains("version"), "{s}");
            assert_eq!(
                tp_now.status.unwrap().schema_version,
                Some(i64::from(tracehouse_schema::LATEST_VERSION))
            );
        })
        .await;
    })
    .await;
}

async fn wait_retention(api: &Api<TracePipeline>, name: &str, want: Option<&str>) {
    wait_for(
        &format!("status.retention {want:?}"),
        Duration::from_secs(90),
        || async {
            let tp = api.get(name).await.map_err(|e| e.to_string())?;
            let r = tp.status.as_ref().and_then(|s| s.retention.clone());
            let ok = match want {
                Some(w) => r.as_deref().is_some_and(|r| r.contains(w)),
                None => r.is_none(),
            };
            if ok { Ok(()) } else { Err(format!("{r:?}")) }
        },
    )
    .await;
}

/// Retention changes in place: `ttl` 30d → 7d → none on a live table is `MODIFY TTL` then
/// `REMOVE TTL` on the traces and lookup tables (the same tables: same UUIDs), each recorded
/// in the migration ledger (`set_ttl`), shown in `status.retention` with a `RetentionChanged`
/// Event, the pipeline Ready throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_changes_in_place_as_a_recorded_migration() {
    in_namespace("tp-ttl", |client, ns| async move {
        let topic = unique_name("tp_ttl");
        let database = unique_name("tp_ttl");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        let tables = |database: String| async move {
            clickhouse_query(&format!(
                "SELECT name, uuid, create_table_query FROM system.tables \
                 WHERE database = '{database}' AND name IN ('otel_traces', 'otel_traces_trace_id_ts') ORDER BY name"
            ))
            .await
        };
        cleaning_up(&topic, &database, async {
            let mut tp = sample(&ns, &topic, &database);
            tp["spec"]["clickhouse"]["schema"]["ttl"] = json!("30d");
            apply(&api, &tp).await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            wait_retention(&api, name, Some("toIntervalDay(30)")).await;
            let before = tables(database.clone()).await;
            let uuids = |t: &str| -> Vec<String> {
                t.lines().map(|l| l.split('\t').take(2).collect::<Vec<_>>().join(" ")).collect()
            };

            // 30d → 7d: accepted by the API server, applied in place.
            tp["spec"]["clickhouse"]["schema"]["ttl"] = json!("7d");
            apply(&api, &tp).await;
            wait_retention(&api, name, Some("toIntervalDay(7)")).await;
            let after = tables(database.clone()).await;
            assert_eq!(uuids(&after), uuids(&before), "the same tables, not new ones");
            assert_eq!(after.matches("toIntervalDay(7)").count(), 2, "{after}");
            let recorded = clickhouse_query(&format!(
                "SELECT count() FROM `{database}`.tracehouse_schema_migrations WHERE name = 'set_ttl'"
            ))
            .await;
            assert_eq!(recorded, "1");
            wait_ready(&api, name, 2, 1, Duration::from_secs(120)).await;
            deliver(&topic, &database, "ttl", 1_000).await;

            // Removed: REMOVE TTL, recorded too.
            tp["spec"]["clickhouse"]["schema"]
                .as_object_mut()
                .unwrap()
                .remove("ttl");
            apply(&api, &tp).await;
            wait_retention(&api, name, None).await;
            let after = tables(database.clone()).await;
            assert!(!after.contains(" TTL "), "{after}");
            let recorded = clickhouse_query(&format!(
                "SELECT count() FROM `{database}`.tracehouse_schema_migrations WHERE name = 'set_ttl'"
            ))
            .await;
            assert_eq!(recorded, "2");
            let reasons: Vec<String> = pipeline_events(&client, &ns, name)
                .await
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            assert!(reasons.iter().any(|r| r == "RetentionChanged"), "{reasons:?}");
            wait_ready(&api, name, 2, 1, Duration::from_secs(120)).await;
        })
        .await;
    })
    .await;
}

async fn wait_layouts(api: &Api<TracePipeline>, name: &str, want: &str) {
    wait_for(
        &format!("status.layouts {want}"),
        Duration::from_secs(90),
        || async {
            let tp = api.get(name).await.map_err(|e| e.to_string())?;
            let l = tp.status.as_ref().and_then(|s| s.layouts.clone());
            if l.as_deref() == Some(want) {
                Ok(())
            } else {
                Err(format!("{l:?}"))
            }
        },
    )
    .await;
}

/// Opt-in layouts on a live pipeline: today's table (`status.layouts: none`, versions 6 and 7
/// recorded `skipped`), then `layouts: {attributeItems: true, mapSerialization: Buckets}`
/// patched in → the same table gains the item ALIAS columns, their text indexes and the
/// bucketed Map setting (versions 6 and 7 recorded `applied`), `status.layouts` and a
/// `LayoutsChanged` Event say so, readers' `has(SpanAttributeItems, …)` answer, and the gateway
/// (not rolled: the collectors' configuration does not change) keeps delivering exactly once.
/// Turned off again → nothing dropped, `SchemaReady` names the kept layouts. A JSON table
/// asking for a layout is refused by the API server naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layouts_are_opted_in_on_a_live_pipeline_and_kept_when_turned_off() {
    in_namespace("tp-layouts", |client, ns| async move {
        let topic = unique_name("tp_layouts");
        let database = unique_name("tp_layouts");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        let ledger = |database: String| async move {
            clickhouse_query(&format!(
                "SELECT version, mode FROM `{database}`.tracehouse_schema_migrations \
                 WHERE version IN (6, 7) ORDER BY version, applied_at"
            ))
            .await
            .replace('\t', ":")
            .replace('\n', " ")
        };
        cleaning_up(&topic, &database, async {
            let mut tp = sample(&ns, &topic, &database);
            apply(&api, &tp).await;
            let before = wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            wait_layouts(&api, name, "none").await;
            assert_eq!(ledger(database.clone()).await, "6:skipped 7:skipped");
            deliver(&topic, &database, "layouts-before", 1_000).await;
            let uuid = |database: String| async move {
                clickhouse_query(&format!(
                    "SELECT uuid FROM system.tables WHERE database = '{database}' AND name = 'otel_traces'"
                ))
                .await
            };
            let table_before = uuid(database.clone()).await;
            let hash = before.status.unwrap().config_hash;

            // A JSON table cannot take them: refused by the API server, naming the field.
            let mut json_tp = tp.clone();
            json_tp["metadata"]["name"] = json!("e2e-json");
            json_tp["spec"]["clickhouse"]["schema"] =
                json!({ "attributes": "json", "layouts": { "attributeItems": true } });
            let refused = api
                .patch(
                    "e2e-json",
                    &kube::api::PatchParams::apply(TEST_MANAGER).force(),
                    &kube::api::Patch::Apply(&json_tp),
                )
                .await
                .expect_err("a JSON table with attributeItems must be refused");
            assert!(
                refused
                    .to_string()
                    .contains("spec.clickhouse.schema.layouts.attributeItems needs spec.clickhouse.schema.attributes map"),
                "{refused}"
            );

            // Opt in on the live table.
            tp["spec"]["clickhouse"]["schema"]["layouts"] =
                json!({ "attributeItems": true, "mapSerialization": "Buckets" });
            apply(&api, &tp).await;
            wait_layouts(&api, name, "attributeItems,mapSerialization=Buckets").await;
            let after = wait_ready(&api, name, 2, 1, Duration::from_secs(120)).await;
            assert_eq!(after.status.unwrap().config_hash, hash, "the gateway did not roll");
            assert_eq!(uuid(database.clone()).await, table_before, "the same table");
            assert_eq!(
                ledger(database.clone()).await,
                "6:skipped 6:applied 7:skipped 7:applied"
            );
            let columns = clickhouse_query(&format!(
                "SELECT name, default_kind FROM system.columns WHERE database = '{database}' \
                 AND table = 'otel_traces' AND default_kind = 'ALIAS' ORDER BY name"
            ))
            .await;
            assert_eq!(
                columns,
                "ResourceAttributeItems\tALIAS\nSpanAttributeItems\tALIAS"
            );
            let text_indexes = clickhouse_query(&format!(
                "SELECT name FROM system.data_skipping_indices WHERE database = '{database}' \
                 AND table = 'otel_traces' AND type = 'text' ORDER BY name"
            ))
            .await;
            assert_eq!(text_indexes, "idx_res_attr_items\nidx_span_attr_items");
            let create = clickhouse_query(&format!(
                "SELECT create_table_query FROM system.tables WHERE database = '{database}' \
                 AND name = 'otel_traces'"
            ))
            .await;
            assert!(create.contains("with_buckets"), "{create}");
            let reasons: Vec<String> = pipeline_events(&client, &ns, name)
                .await
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            assert!(reasons.iter().any(|r| r == "LayoutsChanged"), "{reasons:?}");

            // The gateway keeps delivering into the opted-in table (its inserts leave the
            // ALIAS columns out), and readers' item searches answer.
            deliver(&topic, &database, "layouts-after", 1_000).await;
            let t = format!("`{database}`.otel_traces");
            let found = clickhouse_query(&format!(
                "SELECT count() FROM {t} WHERE has(SpanAttributeItems, \
                 (SELECT SpanAttributeItems[1] FROM {t} WHERE notEmpty(SpanAttributeItems) LIMIT 1))"
            ))
            .await;
            assert!(found.parse::<u64>().unwrap() > 0, "{found}");

            // Turned off: nothing dropped, the table keeps them and says so.
            tp["spec"]["clickhouse"]["schema"]
                .as_object_mut()
                .unwrap()
                .remove("layouts");
            apply(&api, &tp).await;
            let m = wait_schema(&api, name, "True", "MigrationsApplied").await;
            let m = if m.contains("keeps the layouts") {
                m
            } else {
                wait_for("SchemaReady naming the kept layouts", Duration::from_secs(60), || async {
                    let m = wait_schema(&api, name, "True", "MigrationsApplied").await;
                    if m.contains("keeps the layouts") { Ok(m) } else { Err(m) }
                })
                .await
            };
            assert!(m.contains("attributeItems, mapSerialization=Buckets"), "{m}");
            wait_layouts(&api, name, "attributeItems,mapSerialization=Buckets").await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(120)).await;
            let columns_after = clickhouse_query(&format!(
                "SELECT count() FROM system.columns WHERE database = '{database}' \
                 AND table = 'otel_traces' AND default_kind = 'ALIAS'"
            ))
            .await;
            assert_eq!(columns_after, "2");
        })
        .await;
    })
    .await;
}
