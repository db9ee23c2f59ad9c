//! Failures surface in the status and heal by themselves: a pipeline whose topic and Secret do
//! not exist yet reports each problem (condition, reason, `lastError`, a Warning Event), rolls
//! nothing out meanwhile, and converges once they appear — through the operator's retries with
//! backoff, with no edit of the pipeline. Real local stack, no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::DeleteParams;
use tracehouse_e2e::unique_name;
use tracehouse_operator::builders::Names;
use tracehouse_operator::crd::{TracePipeline, condition};

/// Waits until condition `type_` is False with `reason`; returns the pipeline.
async fn wait_failure(
    api: &Api<TracePipeline>,
    name: &str,
    type_: &str,
    reason: &str,
) -> TracePipeline {
    wait_for(
        &format!("{type_}=False/{reason} and Ready=False/{reason}"),
        Duration::from_secs(120),
        || async {
            let tp = api.get(name).await.map_err(|e| e.to_string())?;
            let conditions = tp.status.clone().unwrap_or_default().conditions;
            let is = |t: &str| {
                conditions
                    .iter()
                    .any(|c| c.type_ == t && c.status == "False" && c.reason == reason)
            };
            if is(type_) && is(condition::READY) {
                Ok(tp)
            } else {
                Err(serde_json::to_string(&conditions).unwrap())
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_topic_and_secret_are_reported_in_status_and_retried_until_fixed() {
    in_namespace("tp-errors", |client, ns| async move {
        let topic = unique_name("tp_err");
        let database = unique_name("tp_err");
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            apply(&api, &sample(&ns, &topic, &database)).await;

            // 1. No topic: KafkaReachable=False/TopicNotFound, nothing rolled out or migrated.
            let tp = wait_failure(&api, name, condition::KAFKA_REACHABLE, "TopicNotFound").await;
            let last_error = tp.status.unwrap().last_error.unwrap_or_default();
            assert!(last_error.contains(&topic), "{last_error}");
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
            assert!(
                deployments
                    .get_opt(&Names::of(name).deployment)
                    .await
                    .unwrap()
                    .is_none(),
                "a gateway was rolled out without its topic"
            );
            let databases = clickhouse_query(&format!(
                "SELECT count() FROM system.databases WHERE name = '{database}'"
            ))
            .await;
            assert_eq!(
                databases, "0",
                "the schema was applied before Kafka was checked"
            );
            let warnings: Vec<String> = pipeline_events(&client, &ns, name)
                .await
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .filter_map(|e| e.reason)
                .collect();
            assert!(
                warnings.iter().any(|r| r == "ReconcileFailed"),
                "{warnings:?}"
            );

            // 2. The topic appears: the next problem is the missing ClickHouse Secret.
            create_topic(&topic, 2).await;
            let tp = wait_failure(&api, name, condition::READY, "SecretNotFound").await;
            let s = tp.status.unwrap();
            assert_eq!(s.partitions, Some(2));
            assert!(
                s.last_error
                    .unwrap_or_default()
                    .contains("tracehouse-clickhouse"),
                "lastError names the Secret"
            );

            // 3. The Secret appears: the retries converge without any edit of the pipeline.
            create_clickhouse_secret(&client, &ns).await;
            let tp = wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            assert_eq!(
                tp.status.unwrap().last_error,
                None,
                "a success clears lastError"
            );

            api.delete(name, &DeleteParams::default()).await.unwrap();
            wait_for(
                "the pipeline to be gone",
                Duration::from_secs(60),
                || async {
                    match api.get_opt(name).await.map_err(|e| e.to_string())? {
                        None => Ok(()),
                        Some(_) => Err("still there".to_owned()),
                    }
                },
            )
            .await;
        })
        .await;
    })
    .await;
}
