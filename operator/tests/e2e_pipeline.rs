//! The operator end to end on the real local stack: Kafka, the ClickHouse engine, a real
//! kube-apiserver and controller-manager, the node agent running pods as processes, and the
//! operator itself as `e2e/stack up` runs it (two replicas of image tracehouse/operator from
//! the current build, with the RBAC of config/rbac). No mocks.
//!
//! Needs `e2e/stack up && eval "$(e2e/stack env)"` (KUBECONFIG, KAFKA_BROKERS,
//! CLICKHOUSE_URL/USER/PASSWORD); a missing variable fails the test. Each test works in a
//! namespace, topic and database of its own, and every wait has a deadline.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracehouse_e2e::unique_name;
use tracehouse_operator::builders::{Names, PIPELINE_LABEL};
use tracehouse_operator::crd::TracePipeline;

/// The whole life of a pipeline, in order, against one operator: create → schema, gateway,
/// delivery, Ready; partitions grow → replicas follow; a collector setting changes → rollout;
/// the schema is immutable; the operator is killed mid-reconcile → converges; nothing
/// changes → nothing is written; pause freezes; delete → gateway collected, data kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipeline_lifecycle_on_the_real_stack() {
    in_namespace("tp-e2e", |client, ns| async move {
        let topic = unique_name("tp_e2e");
        let database = unique_name("tp_e2e");
        create_topic(&topic, 4).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let mut spec = sample(&ns, &topic, &database);
        // Written as users do; the API server stores "100m". The no-write check (step 7)
        // proves the operator does not re-apply because of the different spelling.
        spec["spec"]["collector"]["resources"]["requests"]["cpu"] = json!("0.1");
        let name = "e2e";

        cleaning_up(&topic, &database, async {
            // 1. Create: schema, gateway of ceil(4 / 2) = 2 replicas, Ready.
            apply(&api, &spec).await;
            let tp = wait_ready(&api, name, 4, 2, Duration::from_secs(180)).await;
            let tables = clickhouse_query(&format!(
                "SELECT name FROM system.tables WHERE database = '{database}' ORDER BY name"
            ))
            .await;
            for table in ["otel_traces", "otel_traces_trace_id_ts", "otel_traces_trace_id_ts_mv"] {
                assert!(tables.lines().any(|l| l == table), "{table} missing: {tables}");
            }
            assert_eq!(deployment_replicas(&client, &ns, name).await, Some(2));
            let hash1 = tp.status.clone().unwrap().config_hash.expect("config hash in status");
            wait_pods(&client, &ns, name, 2, &hash1).await;
            // No finalizer: uninstalling the operator must never strand a pipeline.
            assert!(tp.finalizers().is_empty(), "{:?}", tp.finalizers());

            // 2. Spans from the load generator land in ClickHouse, exactly once.
            deliver(&topic, &database, "e2e-first", 2_000).await;

            // 3. More partitions → more replicas (noticed by the periodic requeue).
            grow_topic(&topic, 8).await;
            let tp = wait_ready(&api, name, 8, 4, Duration::from_secs(240)).await;
            assert_eq!(deployment_replicas(&client, &ns, name).await, Some(4));
            assert_eq!(tp.status.clone().unwrap().config_hash.as_deref(), Some(hash1.as_str()));
            wait_pods(&client, &ns, name, 4, &hash1).await;
            deliver(&topic, &database, "e2e-after-growth", 2_000).await;

            // 4. A collector setting changes → new config hash → the pods roll.
            spec["spec"]["collector"]["batch"]["lingerMs"] = json!(250);
            apply(&api, &spec).await;
            let tp = wait_for("a new config hash", Duration::from_secs(60), || async {
                let tp = api.get(name).await.map_err(|e| e.to_string())?;
                match tp.status.clone().and_then(|s| s.config_hash) {
                    Some(h) if h != hash1 => Ok(tp),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
            let hash2 = tp.status.unwrap().config_hash.unwrap();
            assert!(config_map_text(&client, &ns, name).await.contains("linger_ms: 250"));
            wait_pods(&client, &ns, name, 4, &hash2).await;
            wait_ready(&api, name, 8, 4, Duration::from_secs(240)).await;

            // 5. The schema is fixed once applied: the API server refuses a change.
            let mut changed = spec.clone();
            changed["spec"]["clickhouse"]["schema"] = json!({ "attributes": "json" });
            let err = api
                .patch(name, &PatchParams::apply(TEST_MANAGER).force(), &Patch::Apply(&changed))
                .await
                .expect_err("a schema change without a new table must be refused");
            assert!(
                err.to_string().contains("spec.clickhouse.schema can only change together"),
                "{err}"
            );

            // 6. The operator is killed mid-reconcile (right after a spec change): the
            //    restarted or standby replica converges.
            spec["spec"]["collector"]["batch"]["lingerMs"] = json!(750);
            spec["spec"]["replicas"]["partitionsPerReplica"] = json!(4);
            let leader = leader_pod(&client).await;
            let pid = pod_pid(&leader).expect("the leader runs as a local process");
            apply(&api, &spec).await;
            let killed = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .expect("kill");
            assert!(killed.success(), "could not kill the operator process {pid}");
            let tp = wait_ready(&api, name, 8, 2, Duration::from_secs(240)).await;
            let hash3 = tp.status.clone().unwrap().config_hash.unwrap();
            assert_ne!(hash3, hash2);
            assert!(config_map_text(&client, &ns, name).await.contains("linger_ms: 750"));
            wait_pods(&client, &ns, name, 2, &hash3).await;
            wait_ready(&api, name, 8, 2, Duration::from_secs(120)).await;
            require_operator(&client).await;

            // 7. Nothing changes → over several resyncs the operator reconciles and writes
            //    nothing: no object, status or Event changes, and its write counter is flat.
            //    (Counters live in the processes: no replica may restart in between.)
            let replicas_before = operator_replicas_settled(&client).await;
            let before = footprint(&client, &ns, name).await;
            let counters_before = operator_counters(&client).await;
            tokio::time::sleep(RESYNC * 2 + Duration::from_secs(5)).await;
            let after = footprint(&client, &ns, name).await;
            let counters_after = operator_counters(&client).await;
            assert_eq!(
                operator_replicas_settled(&client).await,
                replicas_before,
                "an operator replica restarted during the quiet period"
            );
            assert_eq!(after, before, "a reconcile with nothing changed wrote something");
            assert!(
                counters_after.0 >= counters_before.0 + 2.0,
                "the operator did not reconcile during the quiet period: {counters_before:?} → {counters_after:?}"
            );
            assert_eq!(
                counters_after.1, counters_before.1,
                "the operator's write counter moved while nothing changed"
            );

            // 8. Paused: spec changes are not rolled out; resumed: they are.
            spec["spec"]["paused"] = json!(true);
            spec["spec"]["collector"]["batch"]["lingerMs"] = json!(1_000);
            apply(&api, &spec).await;
            wait_for("Ready=False/Paused", Duration::from_secs(60), || async {
                let tp = api.get(name).await.map_err(|e| e.to_string())?;
                let r = ready_condition(&tp);
                let current = tp.status.as_ref().and_then(|s| s.observed_generation) == tp.metadata.generation;
                match r {
                    Some((s, reason, _)) if current && s == "False" && reason == "Paused" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
            tokio::time::sleep(RESYNC + Duration::from_secs(3)).await;
            assert!(
                config_map_text(&client, &ns, name).await.contains("linger_ms: 750"),
                "a paused pipeline's config changed"
            );
            spec["spec"]["paused"] = json!(false);
            apply(&api, &spec).await;
            let tp = wait_ready(&api, name, 8, 2, Duration::from_secs(240)).await;
            assert_ne!(tp.status.unwrap().config_hash.as_deref(), Some(hash3.as_str()));
            assert!(config_map_text(&client, &ns, name).await.contains("linger_ms: 1000"));

            let reasons: Vec<String> = pipeline_events(&client, &ns, name)
                .await
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            for r in ["SchemaMigrated", "GatewayCreated", "Scaled", "ConfigChanged", "PipelineReady", "Paused", "Resumed"] {
                assert!(reasons.iter().any(|x| x == r), "no {r} Event in {reasons:?}");
            }

            // 9. Delete: the gateway is garbage-collected, the data stays.
            let rows_before = clickhouse_query(&format!("SELECT count() FROM `{database}`.otel_traces")).await;
            assert_eq!(rows_before, "4000");
            api.delete(name, &DeleteParams::default()).await.expect("deleting the pipeline");
            wait_for("the pipeline to be gone", Duration::from_secs(60), || async {
                match api.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(tp) => Err(format!("finalizers {:?}", tp.finalizers())),
                }
            })
            .await;
            let names = Names::of(name);
            wait_for("owned objects garbage-collected", Duration::from_secs(120), || async {
                let d = Api::<Deployment>::namespaced(client.clone(), &ns).get_opt(&names.deployment).await.map_err(|e| e.to_string())?;
                let c = Api::<ConfigMap>::namespaced(client.clone(), &ns).get_opt(&names.config_map).await.map_err(|e| e.to_string())?;
                let s = Api::<Service>::namespaced(client.clone(), &ns).get_opt(&names.service).await.map_err(|e| e.to_string())?;
                let p = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns).get_opt(&names.pdb).await.map_err(|e| e.to_string())?;
                let pods = Api::<Pod>::namespaced(client.clone(), &ns)
                    .list(&ListParams::default().labels(&format!("{PIPELINE_LABEL}={name}")))
                    .await
                    .map_err(|e| e.to_string())?
                    .items;
                if d.is_none() && c.is_none() && s.is_none() && p.is_none() && pods.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "deployment {} configmap {} service {} pdb {} pods {}",
                        d.is_some(), c.is_some(), s.is_some(), p.is_some(), pods.len()
                    ))
                }
            })
            .await;
            let rows_after = clickhouse_query(&format!("SELECT count() FROM `{database}`.otel_traces")).await;
            assert_eq!(rows_after, rows_before, "deleting the pipeline touched the data");
        })
        .await;
    })
    .await;
}

/// An invalid spec never reaches the operator: the API server refuses it, and each message
/// names the field.
#[tokio::test]
async fn invalid_spec_is_rejected_by_the_api_server_with_field_messages() {
    in_namespace("tp-invalid", |client, ns| async move {
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let bad: TracePipeline = serde_json::from_value(json!({
            "apiVersion": "tracehouse.dev/v1alpha1",
            "kind": "TracePipeline",
            "metadata": { "name": "bad" },
            "spec": {
                "kafka": {
                    "bootstrapServers": "127.0.0.1:19092",
                    "topics": ["spans"],
                    "deadLetterTopic": "spans",
                    "properties": { "sasl.password": "inline-secret" }
                },
                "clickhouse": { "endpoint": "clickhouse:8123" },
                "replicas": { "partitionsPerReplica": 0, "min": 5, "max": 2 }
            }
        }))
        .unwrap();
        let err = api
            .create(&PostParams::default(), &bad)
            .await
            .expect_err("the API server must refuse this spec");
        let kube::Error::Api(status) = &err else {
            panic!("expected an API error, got {err}");
        };
        assert_eq!(status.code, 422, "{status:?}");
        for expected in [
            "spec.replicas.max must be greater than or equal to spec.replicas.min",
            "spec.replicas.partitionsPerReplica",
            "spec.clickhouse.endpoint must start with http:// or https://",
            "spec.kafka.deadLetterTopic must differ from every topic in spec.kafka.topics",
            "spec.kafka.properties must not set",
        ] {
            assert!(
                status.message.contains(expected),
                "{expected:?} not in: {}",
                status.message
            );
        }
        let long_name: TracePipeline = serde_json::from_value(json!({
            "apiVersion": "tracehouse.dev/v1alpha1",
            "kind": "TracePipeline",
            "metadata": { "name": "a-name-that-is-far-too-long-for-the-gateway-objects" },
            "spec": {
                "kafka": { "bootstrapServers": "127.0.0.1:19092" },
                "clickhouse": { "endpoint": "http://127.0.0.1:18123" }
            }
        }))
        .unwrap();
        let err = api
            .create(&PostParams::default(), &long_name)
            .await
            .expect_err("the API server must refuse a name the gateway cannot carry");
        assert!(err.to_string().contains("metadata.name"), "{err}");
        assert!(
            api.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty(),
            "nothing was stored"
        );
    })
    .await;
}
