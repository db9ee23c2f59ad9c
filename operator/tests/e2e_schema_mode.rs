//! Schema ownership on the real stack: with `schemaMode: Verify` the operator runs no DDL — on
//! a fresh database it reports `SchemaReady=False/SchemaNotApplied` naming every missing
//! migration, creates nothing in ClickHouse and rolls out no gateway; switched to `Apply` it
//! migrates; back on `Verify` an up-to-date table is Ready. `ddlCredentials` are what the
//! schema step uses (a wrong password there is `ClickHouseAuthFailed` while the writer's
//! credentials are right), and never reach the collector pods. Retention (`ttl`) changes in
//! place as a recorded migration, shown in status. Real local stack, no mocks (see `common`).
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
