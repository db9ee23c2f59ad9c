//! The offsets-retention watch on the real stack: a paused pipeline reads
//! `Consuming=False/Paused`, its message naming the broker's `offsets.retention.minutes` as the
//! operator read it from the broker (DescribeConfigs through the pipeline's Kafka access), not
//! Kafka's default assumed; its transition time is when it was paused, and it holds while
//! nothing changes (no status write per reconcile). The stages after that (80 % and past the
//! retention, days away on a real broker) are the pure decision's unit tests
//! (`src/offsets_retention.rs`, `src/status/tests.rs`) and the fake-API scenario
//! (`src/reconcile/tests.rs`). Real local stack, no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use kube::Api;
use serde_json::json;
use tracehouse_e2e::unique_name;
use tracehouse_operator::crd::{TracePipeline, condition};

fn consuming(tp: &TracePipeline) -> Option<(String, String, String)> {
    tp.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition::CONSUMING)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_pipeline_is_told_how_long_the_broker_keeps_its_offsets() {
    in_namespace("tp-retention", |client, ns| async move {
        let topic = unique_name("tp_retention");
        let database = unique_name("tp_retention");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        let body = async {
            let mut tp = sample(&ns, &topic, &database);
            tp["spec"]["paused"] = json!(true);
            apply(&api, &tp).await;
            let (status, reason, message) = wait_for(
                "Consuming=False/Paused",
                Duration::from_secs(60),
                || async {
                    let tp = api.get(name).await.map_err(|e| e.to_string())?;
                    match consuming(&tp) {
                        Some(c) if c.0 == "False" && c.1 == "Paused" => Ok(c),
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await;
            assert_eq!((status.as_str(), reason.as_str()), ("False", "Paused"));
            // Read from the broker (the stack's runs Kafka's default), not assumed.
            assert!(
                message.contains("offsets.retention.minutes=10080")
                    && !message.contains("could not be read"),
                "{message}"
            );
            assert!(message.contains("spec.paused"), "{message}");
            // Nothing moves: the status is not rewritten.
            let version = api.get(name).await.unwrap().metadata.resource_version;
            tokio::time::sleep(RESYNC * 2 + Duration::from_secs(5)).await;
            let again = api.get(name).await.unwrap();
            assert_eq!(
                again.metadata.resource_version, version,
                "a paused pipeline rewrote its status"
            );
        };
        cleaning_up(&topic, &database, body).await;
    })
    .await;
}
