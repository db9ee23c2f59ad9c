//! Operator ↔ collector version skew on the real local stack: a pipeline pinned to the previous
//! release's collector image (`tracehouse/collector:d00aafd`, which `e2e/stack up` builds from
//! e2e/harness/chaos/previous.py's binary: `e2e/lib/images.sh`, `images_previous_collector`)
//! under this operator.
//!
//! The old collector moves spans exactly once; a setting it does not know (`spec.processing`)
//! is left out of its configuration and named on `ConfigApplied`, nothing rolls out and spans
//! still flow exactly once; on the operator's own image the setting is rendered, rolled out
//! and applied, and the condition clears (docs/upgrade.md, *Operator ↔ collector version skew*).
//!
//! Needs `e2e/stack up && eval "$(e2e/stack env)"`.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracehouse_e2e::unique_name;
use tracehouse_operator::builders::{Names, PIPELINE_LABEL};
use tracehouse_operator::crd::{TracePipeline, condition};

/// The previous release's collector image, as `e2e/lib/images.sh` tags it.
const OLD_IMAGE: &str = "tracehouse/collector:d00aafd";
const NAME: &str = "e2e";
/// A rule that matches no span of the load generator: applied, it drops nothing, so every
/// delivery stays exactly once whichever collector runs.
const RULE: &str = "skew-e2e-never";

fn config_applied(tp: &TracePipeline) -> Option<(String, String, String)> {
    tp.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition::CONFIG_APPLIED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the pipeline's `ConfigApplied` has `reason` (for its current generation).
async fn wait_config_applied(api: &Api<TracePipeline>, reason: &str) -> TracePipeline {
    wait_for(
        &format!("ConfigApplied {reason}"),
        Duration::from_secs(90),
        || async {
            let tp = api.get(NAME).await.map_err(|e| e.to_string())?;
            let seen = config_applied(&tp);
            let current =
                tp.status.as_ref().and_then(|s| s.observed_generation) == tp.metadata.generation;
            if current && seen.as_ref().is_some_and(|c| c.1 == reason) {
                Ok(tp)
            } else {
                Err(format!("{seen:?}, status {:?}", tp.status))
            }
        },
    )
    .await
}

/// The gateway's live pods: `(uid, image)`.
async fn gateway_pods(pods: &Api<Pod>) -> Vec<(String, String)> {
    let mut list: Vec<(String, String)> = pods
        .list(&ListParams::default().labels(&format!("{PIPELINE_LABEL}={NAME}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let image = p
                .spec
                .as_ref()
                .and_then(|s| s.containers.first()?.image.clone())
                .unwrap_or_default();
            (p.uid().unwrap_or_default(), image)
        })
        .collect();
    list.sort();
    list
}

async fn pod_metrics(pods: &Api<Pod>) -> String {
    let pod = pods
        .list(&ListParams::default().labels(&format!("{PIPELINE_LABEL}={NAME}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
        .expect("a ready gateway pod");
    let ip = pod.status.and_then(|s| s.pod_ip).expect("a pod IP");
    let (code, body) = http_get(&ip, 8888, "/metrics").await.expect("/metrics");
    assert_eq!(code, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_older_collector_image_gets_only_what_it_knows() {
    in_namespace("skew", |client, ns| async move {
        let topic = unique_name("skew");
        let database = unique_name("skew");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let mut spec: Value = sample(&ns, &topic, &database);
        spec["spec"]["collector"]["image"] = json!(OLD_IMAGE);

        cleaning_up(&topic, &database, async {
            // 1. The previous release's collector runs the pipeline and says what it knows by
            //    serving no build_info: config revision 1.
            apply(&api, &spec).await;
            let tp = wait_ready(&api, NAME, 2, 1, Duration::from_secs(180)).await;
            let hash = tp.status.clone().unwrap().config_hash.unwrap();
            wait_pods(&client, &ns, NAME, 1, &hash).await;
            let tp = wait_config_applied(&api, "Applied").await;
            let status = tp.status.clone().unwrap();
            assert_eq!(status.collector_image.as_deref(), Some(OLD_IMAGE));
            assert_eq!(status.collector_config_revision, Some(1), "{status:?}");
            let old_pods = gateway_pods(&pods).await;
            assert!(
                old_pods.iter().all(|(_, image)| image == OLD_IMAGE),
                "{old_pods:?}"
            );
            assert!(!pod_metrics(&pods).await.contains("tracehouse_build_info"));
            deliver(&topic, &database, "skew-old", 2_000).await;

            // 2. A setting revision 1 does not know: left out and named, no rollout.
            let text = config_map_text(&client, &ns, NAME).await;
            let generation = deployments
                .get(&Names::of(NAME).deployment)
                .await
                .unwrap()
                .metadata
                .generation;
            spec["spec"]["processing"] = json!({ "rules": [{
                "name": RULE, "action": "drop",
                "when": [{ "attribute": "skew.e2e.never", "equals": "x" }]
            }] });
            apply(&api, &spec).await;
            let tp = wait_config_applied(&api, "CollectorTooOld").await;
            let (status, _, message) = config_applied(&tp).unwrap();
            assert_eq!(status, "False");
            assert!(
                message.contains("spec.processing (config revision 2)")
                    && message.contains(OLD_IMAGE),
                "{message}"
            );
            let ready = ready_condition(&tp).unwrap();
            assert_eq!(
                (ready.0.as_str(), ready.1.as_str()),
                ("False", "CollectorTooOld")
            );
            let events = pipeline_events(&client, &ns, NAME).await;
            assert!(
                events
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("CollectorTooOld")
                        && e.type_.as_deref() == Some("Warning")),
                "{:?}",
                events.iter().map(|e| &e.reason).collect::<Vec<_>>()
            );
            // A resync later: the same configuration, template and pods.
            tokio::time::sleep(RESYNC).await;
            let tp = api.get(NAME).await.unwrap();
            let status = tp.status.clone().unwrap();
            assert_eq!(status.config_hash.as_deref(), Some(hash.as_str()));
            assert_eq!(status.processing, None);
            assert_eq!(config_map_text(&client, &ns, NAME).await, text);
            let now = deployments.get(&Names::of(NAME).deployment).await.unwrap();
            assert_eq!(
                now.metadata.generation, generation,
                "the Deployment was changed"
            );
            assert_eq!(gateway_pods(&pods).await, old_pods, "the gateway rolled");
            deliver(&topic, &database, "skew-held", 2_000).await;

            // 3. The gateway moves to the operator's own image: the setting is rendered and
            //    rolled out, the collector applies it, the condition clears.
            spec["spec"]["collector"]
                .as_object_mut()
                .unwrap()
                .remove("image");
            apply(&api, &spec).await;
            let tp = wait_config_applied(&api, "Applied").await;
            let status = tp.status.clone().unwrap();
            let new_hash = status.config_hash.clone().unwrap();
            assert_ne!(new_hash, hash);
            assert_eq!(status.processing.as_deref(), Some("1 drop"));
            assert_eq!(status.collector_config_revision, None);
            assert!(
                config_map_text(&client, &ns, NAME).await.contains(RULE),
                "the rule is rendered"
            );
            let tp = wait_ready(&api, NAME, 2, 1, Duration::from_secs(180)).await;
            let image = tp.status.unwrap().collector_image.unwrap();
            assert_ne!(image, OLD_IMAGE);
            wait_pods(&client, &ns, NAME, 1, &new_hash).await;
            let metrics = pod_metrics(&pods).await;
            let revision = format!(
                "config_revision=\"{}\"",
                tracehouse_contract::revision::CONFIG_REVISION
            );
            assert!(
                metrics
                    .lines()
                    .any(|l| l.starts_with("tracehouse_build_info{") && l.contains(&revision)),
                "no build_info with {revision}"
            );
            assert!(
                metrics.contains(&format!("rule=\"{RULE}\"")),
                "the collector does not run the rule"
            );
            deliver(&topic, &database, "skew-new", 2_000).await;
        })
        .await;
    })
    .await;
}
