//! Lag in the status of every pipeline, from the brokers: on the real stack, a pipeline with
//! no `spec.autoscaling` whose collectors cannot run (an image tag that does not exist) shows
//! the records it is behind and when the oldest of them was written (`kubectl get` shows the
//! `LAG` and `BEHIND` columns), keeps that status unchanged while nothing moves, and reads 0
//! once the collectors run and catch up. A missing dead-letter topic is named at reconcile
//! (`KafkaReachable=False/DeadLetterTopicNotFound`), like a missing consumed topic, and heals
//! when the topic is created. Real local stack, no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde_json::json;
use tracehouse_e2e::unique_name;
use tracehouse_operator::crd::{LagStatus, TracePipeline, condition};

fn kafka_condition(tp: &TracePipeline) -> Option<(String, String, String)> {
    tp.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition::KAFKA_REACHABLE)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_lag(
    api: &Api<TracePipeline>,
    name: &str,
    what: &str,
    want: impl Fn(&LagStatus) -> bool,
) -> TracePipeline {
    wait_for(what, Duration::from_secs(120), || async {
        let tp = api.get(name).await.map_err(|e| e.to_string())?;
        match tp.status.as_ref().and_then(|s| s.lag.as_ref()) {
            Some(l) if want(l) => Ok(tp),
            other => Err(format!("status.lag {other:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_is_read_from_the_brokers_while_no_collector_runs_and_the_dead_letter_topic_is_checked()
{
    in_namespace("tp-lag", |client, ns| async move {
        let topic = unique_name("tp_lag");
        let dead_letter = format!("{topic}_dlq");
        let database = unique_name("tp_lag");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        let body = async {
            let base = sample(&ns, &topic, &database);
            assert!(base["spec"].get("autoscaling").is_none());

            // 1. A dead-letter topic that does not exist is named at reconcile.
            let mut tp = base.clone();
            tp["spec"]["kafka"]["deadLetterTopic"] = json!(dead_letter);
            tp["spec"]["collector"]["image"] = json!("tracehouse/collector:no-such-tag");
            apply(&api, &tp).await;
            let tp_now = wait_for(
                "KafkaReachable=False/DeadLetterTopicNotFound",
                Duration::from_secs(60),
                || async {
                    let tp = api.get(name).await.map_err(|e| e.to_string())?;
                    match kafka_condition(&tp) {
                        Some(c) if c.0 == "False" && c.1 == "DeadLetterTopicNotFound" => Ok(tp),
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await;
            let (_, _, message) = kafka_condition(&tp_now).unwrap();
            assert!(message.contains(&dead_letter), "{message}");
            assert!(message.contains("spec.kafka.deadLetterTopic"), "{message}");
            let ready = ready_condition(&tp_now).unwrap();
            assert_eq!(
                (ready.0.as_str(), ready.1.as_str()),
                ("False", "DeadLetterTopicNotFound")
            );

            // 2. Created: the pipeline goes on (its collectors still cannot run).
            create_topic(&dead_letter, 1).await;
            wait_for("KafkaReachable=True", Duration::from_secs(60), || async {
                let tp = api.get(name).await.map_err(|e| e.to_string())?;
                match kafka_condition(&tp) {
                    Some(c) if c.0 == "True" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
            wait_lag(&api, name, "status.lag at 0 before any record", |l| {
                l.records == 0 && l.oldest_unconsumed_time.is_none()
            })
            .await;

            // 3. Records arrive while no collector runs: the lag counts them, and the oldest
            //    one's time is when it was written.
            let before = Timestamp::now().as_second();
            produce_spans(&topic, "lag", 1_000).await; // 20 records of 50 spans
            let after = Timestamp::now().as_second();
            let tp_now = wait_lag(&api, name, "status.lag of the 20 records", |l| {
                l.records == 20
            })
            .await;
            let lag = tp_now.status.clone().unwrap().lag.unwrap();
            assert!(
                lag.partitions_behind >= 1 && lag.partitions_behind <= 2,
                "{lag:?}"
            );
            let oldest = lag
                .oldest_unconsumed_time
                .clone()
                .expect("the oldest record's time")
                .0
                .as_second();
            assert!(
                before - 1 <= oldest && oldest <= after,
                "{before} <= {oldest} <= {after}"
            );
            assert!(tp_now.status.as_ref().unwrap().autoscaling.is_none());
            let ready_pods =
                Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns)
                    .list(&kube::api::ListParams::default().labels(&format!(
                        "{}={name}",
                        tracehouse_operator::builders::PIPELINE_LABEL
                    )))
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .filter(|p| pod_ready(p))
                    .count();
            assert_eq!(ready_pods, 0, "no collector may run in this step");

            // `kubectl get` shows it: LAG in records, BEHIND as the oldest record's age.
            let out = std::process::Command::new("kubectl")
                .args(["get", "tracepipeline", name, "-n", &ns])
                .output()
                .expect("kubectl");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut lines = text.lines();
            let header: Vec<&str> = lines
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .collect();
            let row: Vec<&str> = lines
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .collect();
            let col = |n: &str| {
                header
                    .iter()
                    .position(|h| *h == n)
                    .unwrap_or_else(|| panic!("no {n} column: {text}"))
            };
            assert_eq!(row[col("LAG")], "20", "{text}");
            assert!(
                row[col("BEHIND")].ends_with('s') || row[col("BEHIND")].ends_with('m'),
                "{text}"
            );

            // 4. Nothing moves: the status is not rewritten (the age grows in kubectl, not in
            //    the stored status).
            let version = api.get(name).await.unwrap().metadata.resource_version;
            tokio::time::sleep(RESYNC * 2 + Duration::from_secs(5)).await;
            let again = api.get(name).await.unwrap();
            assert_eq!(
                again.metadata.resource_version, version,
                "a stuck lag rewrote the status"
            );

            // 5. The collectors run: they catch up, and the lag reads 0 with no time.
            apply(&api, &base).await;
            wait_lag(&api, name, "status.lag back at 0", |l| {
                l.records == 0 && l.partitions_behind == 0 && l.oldest_unconsumed_time.is_none()
            })
            .await;
            await_delivered(&database, "lag", 1_000, Attributes::Map).await;
        };
        cleaning_up(&topic, &database, async {
            let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
            tracehouse_e2e::delete_topics(&[dead_letter.as_str()]).await;
            if let Err(p) = result {
                std::panic::resume_unwind(p);
            }
        })
        .await;
    })
    .await;
}
