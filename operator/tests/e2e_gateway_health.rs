//! A gateway that does not come up says why, and one that moves stays Ready: on the real API
//! server with the node agent running the pods, a missing image tag, a pod no node takes and a
//! crash-looping collector are each named in the status within a minute (reason and message on
//! `GatewayAvailable` and `Ready`) with one Warning Event, and heal by an edit; a scale step is
//! `Progressing`, never `Ready=False`. The pipeline's pod settings (service account, pull
//! secrets, labels, annotations, tolerations, the default topology spread) reach the pods.
//! Byte sizes are written as quantities (`64Mi`) and refused when not whole bytes.
//! OOM kills need cgroups, which the node agent does not have: `gateway_diagnosis.rs` unit-tests them
//! on the kubelet's status shape. Real local stack, no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use tracehouse_e2e::k8s::collector_image;
use tracehouse_e2e::unique_name;
use tracehouse_operator::builders::PIPELINE_LABEL;
use tracehouse_operator::crd::{TracePipeline, condition};

/// The promise: a failure is named within a minute.
const NAMED_WITHIN: Duration = Duration::from_secs(60);

fn condition_of(tp: &TracePipeline, type_: &str) -> Option<(String, String, String)> {
    tp.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until `GatewayAvailable` and `Ready` are False with `reason`; the message.
async fn wait_named(
    api: &Api<TracePipeline>,
    name: &str,
    reason: &str,
    deadline: Duration,
) -> String {
    wait_for(
        &format!("GatewayAvailable=False/{reason} and Ready=False/{reason}"),
        deadline,
        || async {
            let tp = api.get(name).await.map_err(|e| e.to_string())?;
            let gw = condition_of(&tp, condition::GATEWAY_AVAILABLE);
            let ready = condition_of(&tp, condition::READY);
            match (&gw, &ready) {
                (Some(g), Some(r))
                    if g.0 == "False" && g.1 == reason && r.0 == "False" && r.1 == reason =>
                {
                    Ok(g.2.clone())
                }
                _ => Err(format!("GatewayAvailable {gw:?}, Ready {ready:?}")),
            }
        },
    )
    .await
}

async fn warnings(client: &kube::Client, ns: &str, name: &str, reason: &str) -> usize {
    pipeline_events(client, ns, name)
        .await
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason))
        .map(|e| e.series.map_or(1, |s| s.count.max(1)))
        .sum::<i32>()
        .try_into()
        .unwrap_or(0)
}

/// The failure is named within a minute of `since`, with exactly one Warning Event, still one
/// after a few more reconciles.
async fn named_once(
    client: &kube::Client,
    api: &Api<TracePipeline>,
    ns: &str,
    name: &str,
    reason: &str,
    since: Instant,
) -> String {
    let message = wait_named(api, name, reason, NAMED_WITHIN).await;
    let took = since.elapsed();
    eprintln!(
        "{reason} named after {:.1} s: {message}",
        took.as_secs_f64()
    );
    assert!(took <= NAMED_WITHIN, "{reason} took {took:?}");
    wait_for(
        &format!("the {reason} Warning Event"),
        Duration::from_secs(10),
        || async {
            match warnings(client, ns, name, reason).await {
                0 => Err("none yet".to_owned()),
                n => Ok(n),
            }
        },
    )
    .await;
    // Two more reconciles at least (the operator looks again every 15 s while it fails).
    tokio::time::sleep(Duration::from_secs(32)).await;
    assert_eq!(
        warnings(client, ns, name, reason).await,
        1,
        "one Warning Event per failure"
    );
    let (_, _, still) = condition_of(&api.get(name).await.unwrap(), condition::GATEWAY_AVAILABLE)
        .expect("GatewayAvailable");
    assert!(
        still.starts_with(message.split(';').next().unwrap_or_default()),
        "the verdict is stable: {message} then {still}"
    );
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_gateway_pods_are_named_within_a_minute_once_and_heal() {
    in_namespace("tp-health", |client, ns| async move {
        let topic = unique_name("tp_health");
        let database = unique_name("tp_health");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            let base = sample(&ns, &topic, &database);

            // 1. A tag that does not exist.
            let mut tp = base.clone();
            tp["spec"]["collector"]["image"] = json!("tracehouse/collector:no-such-tag");
            let start = Instant::now();
            apply(&api, &tp).await;
            let m = named_once(&client, &api, &ns, name, "ImagePullBackOff", start).await;
            assert!(m.contains("tracehouse/collector:no-such-tag"), "{m}");

            // 2. The right image, but a node selector no node matches.
            let mut tp = base.clone();
            tp["spec"]["collector"]["nodeSelector"] = json!({ "tracehouse.dev/zone": "nowhere" });
            let start = Instant::now();
            apply(&api, &tp).await;
            let m = named_once(&client, &api, &ns, name, "Unschedulable", start).await;
            assert!(m.contains("tracehouse.dev/zone"), "{m}");

            // 3. Schedulable, but the collector exits at start (a CA file that is not there).
            let mut tp = base.clone();
            tp["spec"]["collector"]["env"] =
                json!([{ "name": "CLICKHOUSE_CA_FILE", "value": "/nonexistent/ca.crt" }]);
            let start = Instant::now();
            apply(&api, &tp).await;
            let m = named_once(&client, &api, &ns, name, "CrashLoopBackOff", start).await;
            assert!(m.contains("exiting with code"), "{m}");

            // 4. Fixed: Ready, and the failures' reasons are gone from the conditions.
            apply(&api, &base).await;
            let tp = wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            let gw = condition_of(&tp, condition::GATEWAY_AVAILABLE).unwrap();
            assert_eq!(gw.0, "True", "{gw:?}");
            deliver(&topic, &database, "health", 1_000).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_settings_reach_the_pods_and_a_scale_step_stays_ready() {
    in_namespace("tp-podset", |client, ns| async move {
        let topic = unique_name("tp_podset");
        let database = unique_name("tp_podset");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
        let sa: ServiceAccount =
            serde_json::from_value(json!({ "metadata": { "name": "collectors" } })).unwrap();
        accounts.create(&PostParams::default(), &sa).await.unwrap();
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            let mut tp = sample(&ns, &topic, &database);
            tp["spec"]["collector"]["image"] = json!(collector_image());
            let c = &mut tp["spec"]["collector"];
            c["serviceAccountName"] = json!("collectors");
            c["imagePullSecrets"] = json!([{ "name": "registry" }]);
            c["podLabels"] = json!({ "team": "observability" });
            c["podAnnotations"] = json!({ "example.com/owner": "platform" });
            c["tolerations"] =
                json!([{ "key": "dedicated", "operator": "Exists", "effect": "NoSchedule" }]);
            // Byte sizes as Kubernetes quantities; a fraction of a byte is refused by the
            // API server (CEL), naming the field.
            c["maxInflightBytes"] = json!("1.5Mi");
            let mut bad = tp.clone();
            let err = api
                .patch(
                    name,
                    &kube::api::PatchParams::apply(TEST_MANAGER).force(),
                    &kube::api::Patch::Apply(&bad),
                )
                .await
                .expect_err("1.5Mi is not at least one batch plus one record");
            assert!(
                err.to_string().contains("spec.collector.maxInflightBytes"),
                "{err}"
            );
            bad["spec"]["collector"]["maxInflightBytes"] = json!("1500m");
            let err = api
                .patch(
                    name,
                    &kube::api::PatchParams::apply(TEST_MANAGER).force(),
                    &kube::api::Patch::Apply(&bad),
                )
                .await
                .expect_err("1500m is not a whole number of bytes");
            assert!(
                err.to_string().contains("spec.collector.maxInflightBytes"),
                "{err}"
            );
            let c = &mut tp["spec"]["collector"];
            c["maxInflightBytes"] = json!("64Mi");
            c["maxRecordBytes"] = json!("1Mi");
            c["batch"]["maxBytes"] = json!("8M");
            apply(&api, &tp).await;
            let tp_now = wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            let config = config_map_text(&client, &ns, name).await;
            for line in [
                "max_inflight_bytes: 67108864",
                "max_record_bytes: 1048576",
                "max_bytes: 8000000",
            ] {
                assert!(config.contains(line), "{line} in\n{config}");
            }
            assert_eq!(
                serde_json::to_value(&tp_now.spec.collector.max_inflight_bytes).unwrap(),
                "64Mi",
                "the spec reads back as written"
            );
            let status = tp_now.status.clone().unwrap();
            assert_eq!(
                status.collector_image.as_deref(),
                Some(collector_image().as_str())
            );

            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let list = pods
                .list(&ListParams::default().labels(&format!("{PIPELINE_LABEL}={name}")))
                .await
                .unwrap()
                .items;
            assert_eq!(list.len(), 1);
            let pod = serde_json::to_value(&list[0]).unwrap();
            assert_eq!(pod["spec"]["serviceAccountName"], "collectors");
            assert_eq!(
                pod["spec"]["imagePullSecrets"],
                json!([{ "name": "registry" }])
            );
            assert_eq!(pod["metadata"]["labels"]["team"], "observability");
            assert_eq!(
                pod["metadata"]["annotations"]["example.com/owner"],
                "platform"
            );
            let tolerations = pod["spec"]["tolerations"].as_array().unwrap();
            assert!(
                tolerations.iter().any(|t| t["key"] == "dedicated"),
                "{tolerations:?}"
            );
            let spread: Vec<&Value> = pod["spec"]["topologySpreadConstraints"]
                .as_array()
                .expect("the default spread")
                .iter()
                .collect();
            let keys: Vec<&str> = spread
                .iter()
                .filter_map(|t| t["topologyKey"].as_str())
                .collect();
            assert_eq!(
                keys,
                ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
            );

            // A scale step (2 → 4 partitions, 2 per replica: 1 → 2 replicas) keeps serving:
            // Progressing while it moves, Ready throughout.
            grow_topic(&topic, 4).await;
            let mut seen_progressing = false;
            let deadline = Instant::now() + Duration::from_secs(180);
            loop {
                let now = api.get(name).await.unwrap();
                let ready = condition_of(&now, condition::READY).unwrap();
                assert_eq!(ready.0, "True", "Ready during the scale step: {ready:?}");
                let progressing = condition_of(&now, condition::PROGRESSING).unwrap();
                seen_progressing |= progressing.0 == "True";
                let s = now.status.clone().unwrap();
                if s.desired_replicas == Some(2)
                    && s.ready_replicas == Some(2)
                    && progressing.0 == "False"
                {
                    assert_eq!(progressing.1, "RolloutComplete");
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the scale step did not finish: {s:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            assert!(
                seen_progressing,
                "Progressing=True while the second pod started"
            );
            assert_eq!(warnings(&client, &ns, name, "PipelineNotReady").await, 0);
            deliver(&topic, &database, "podset", 1_000).await;
        })
        .await;
    })
    .await;
}
