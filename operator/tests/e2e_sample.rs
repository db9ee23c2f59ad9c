//! The production sample (`config/samples/tracepipeline.yaml`) as written, through the
//! operator, against the stack's secured endpoints: SCRAM-SHA-512 over TLS to Kafka, HTTPS to
//! ClickHouse, every credential and CA from the Secrets its header lists (same names, same
//! keys). It must come Ready and deliver every span exactly once.
//!
//! Changed, and only these, because the stack is one machine: where things are (brokers,
//! endpoint, namespace), this test's own names (topics, group, database), the collector image
//! (no registry to pull `ghcr.io` from) and the engine (`ReplicatedMergeTree` on a cluster
//! needs a cluster and Keeper; the stack's single ClickHouse node has neither, so `MergeTree`).
//! TLS, SASL, batching, in-flight limits, resources, replicas, TTL and attributes are the
//! sample's. Real local stack, no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::{Value, json};
use tracehouse_e2e::{stack_var, unique_name};
use tracehouse_operator::crd::TracePipeline;

const PRODUCTION_SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../config/samples/tracepipeline.yaml"
);

fn production_sample() -> Value {
    let text = read(PRODUCTION_SAMPLE);
    tracehouse_contract::yaml::from_str(&text).expect("the production sample is YAML")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_production_sample_delivers_over_tls_as_written() {
    in_namespace("tp-sample", |client, ns| async move {
        let topic = unique_name("tp_sample");
        let dead_letter = format!("{topic}_dead_letter");
        let database = unique_name("tp_sample");
        create_topic(&topic, 8).await;
        // The sample's dead-letter topic must exist too: the operator checks it like the
        // consumed topic (a missing one is Ready=False, DeadLetterTopicNotFound).
        create_topic(&dead_letter, 1).await;
        // The Secrets the sample's header lists, from the stack's CA and users.
        let ca = json!({ "ca.crt": read(&stack_var("TRACEHOUSE_CA_FILE")) });
        put_secret(&client, &ns, "kafka-ca", "Opaque", ca.clone()).await;
        put_secret(&client, &ns, "clickhouse-ca", "Opaque", ca).await;
        let scram = json!({
            "username": stack_var("KAFKA_SCRAM_USER"),
            "password": stack_var("KAFKA_SCRAM_PASSWORD"),
        });
        put_secret(&client, &ns, "kafka-tracehouse", "Opaque", scram).await;
        let writer = json!({
            "username": stack_var("CLICKHOUSE_USER"),
            "password": stack_var("CLICKHOUSE_PASSWORD"),
        });
        put_secret(&client, &ns, "clickhouse-writer", "Opaque", writer).await;

        let mut tp = production_sample();
        let written = tp.clone();
        tp["metadata"]["namespace"] = json!(ns);
        let kafka = &mut tp["spec"]["kafka"];
        kafka["bootstrapServers"] = json!(stack_var("KAFKA_SASL_SSL_BROKERS"));
        kafka["topics"] = json!([topic]);
        kafka["consumerGroup"] = json!(format!("{topic}-gateway"));
        kafka["deadLetterTopic"] = json!(dead_letter);
        let clickhouse = &mut tp["spec"]["clickhouse"];
        assert!(
            clickhouse["endpoint"]
                .as_str()
                .is_some_and(|e| e.starts_with("https://")),
            "the production sample talks HTTPS to ClickHouse"
        );
        clickhouse["endpoint"] = json!(stack_var("CLICKHOUSE_TLS_URL"));
        clickhouse["database"] = json!(database);
        clickhouse["schema"]["engine"] = json!("MergeTree");
        clickhouse["schema"]
            .as_object_mut()
            .unwrap()
            .remove("cluster");
        tp["spec"]["collector"]["image"] = json!(stack_var("TRACEHOUSE_COLLECTOR_IMAGE"));
        // What stays as written.
        for path in [
            "/spec/kafka/tls",
            "/spec/kafka/sasl",
            "/spec/clickhouse/tls",
            "/spec/clickhouse/credentials",
            "/spec/collector/batch",
            "/spec/replicas",
        ] {
            assert_eq!(tp.pointer(path), written.pointer(path), "{path}");
        }

        let name = tp["metadata"]["name"].as_str().unwrap().to_owned();
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        cleaning_up(&topic, &database, async {
            apply(&api, &tp).await;
            // 8 partitions, 4 per replica, at least 2.
            wait_ready(&api, &name, 8, 2, Duration::from_secs(240)).await;
            let deployments = Api::<Deployment>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .unwrap()
                .items;
            assert_eq!(deployments.len(), 1, "one gateway Deployment");
            let deployment = serde_json::to_value(&deployments[0]).unwrap();
            let resources = &deployment["spec"]["template"]["spec"]["containers"][0]["resources"];
            assert_eq!(
                resources, &written["spec"]["collector"]["resources"],
                "the sample's resources"
            );
            deliver(&topic, &database, "sample", 5_000).await;
        })
        .await;
        tracehouse_e2e::delete_topics(&[dead_letter.as_str()]).await;
    })
    .await;
}
