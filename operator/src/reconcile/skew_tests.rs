//! The reconcile of a pipeline whose gateway runs an older collector than the operator's own
//! (version skew, `crate::skew`), against the fake API server and backends (`fake_api.rs`):
//! the one question to its collector, the newer setting left out and named, nothing rolled
//! out, and everything rendered once the gateway moves to the operator's image.

use std::sync::Arc;

use serde_json::{Value, json};

use super::fake_api::World;
use super::tests::{PIPELINE, PODS, cached, condition, world_with, writes};
use super::{Context, reconcile};

const OLD_IMAGE: &str = "tracehouse/collector:d00aafd";

/// A pipeline pinned to an older collector image than the operator's own, one ready gateway
/// pod running it whose /metrics are those of a collector from before `tracehouse_build_info`
/// (d00aafd's kind: config revision 1).
fn pinned_to_an_older_collector() -> (Arc<World>, Arc<Context>) {
    let (world, ctx) = world_with(json!({
        "kafka": { "bootstrapServers": "kafka:9092", "topics": ["otlp_spans"] },
        "clickhouse": { "endpoint": "http://clickhouse:8123" },
        "collector": { "image": OLD_IMAGE }
    }));
    world.put(
        PODS,
        json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {},
            "items": [{
                "metadata": { "name": "orders-collector-0", "namespace": "shop" },
                "spec": {
                    "nodeName": "node-1",
                    "containers": [{ "name": crate::builders::CONTAINER, "image": OLD_IMAGE }]
                },
                "status": {
                    "podIP": "10.0.0.7",
                    "conditions": [{ "type": "Ready", "status": "True" }]
                }
            }]
        }),
    );
    world.pod_metrics.lock().unwrap().insert(
        "10.0.0.7".into(),
        "# TYPE tracehouse_inflight_bytes gauge\ntracehouse_inflight_bytes 0\n".into(),
    );
    (world, ctx)
}

/// The stored gateway Deployment, rolled out and ready (the fake API server has no
/// controller to say so).
fn roll_out(world: &World) {
    let path = "/apis/apps/v1/namespaces/shop/deployments/orders-collector";
    let mut d = world.get(path).unwrap();
    let replicas = d["spec"]["replicas"].clone();
    d["metadata"]["generation"] = json!(1);
    d["status"] = json!({
        "observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas
    });
    world.put(path, d);
}

fn edit(world: &World, generation: i64, change: impl FnOnce(&mut Value)) {
    let mut tp = world.get(PIPELINE).unwrap();
    change(&mut tp["spec"]);
    tp["metadata"]["generation"] = json!(generation);
    world.put(PIPELINE, tp);
}

#[tokio::test]
async fn a_setting_an_older_collector_does_not_know_is_left_out_named_and_rolls_nothing() {
    let (world, ctx) = pinned_to_an_older_collector();
    let ns = "namespaces/shop";
    let deployment = format!("/apis/apps/v1/{ns}/deployments/orders-collector");
    let config_map = format!("/api/v1/{ns}/configmaps/orders-collector");
    // The gateway runs the old image with what it knows; settled.
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    roll_out(&world);
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    let status = world.get(PIPELINE).unwrap()["status"].clone();
    assert_eq!(status["collectorConfigRevision"], 1, "{status}");
    assert_eq!(condition(&world, "Ready")["status"], "True");
    assert_eq!(condition(&world, "ConfigApplied")["reason"], "Applied");
    let hash = status["configHash"].clone();
    let text = world.get(&config_map).unwrap()["data"]["collector.yaml"].clone();
    world.take_journal();

    // The user adds processing rules, which revision 1 does not know.
    edit(&world, 2, |spec| {
        spec["processing"] = json!({ "rules": [{
            "name": "health", "action": "drop",
            "when": [{ "attribute": "http.route", "equals": "/healthz" }]
        }] });
    });
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    let journal = world.take_journal();
    let expected = [
        "kafka partitions otlp_spans".to_owned(),
        "kafka offsets tracehouse.shop.orders".to_owned(),
        format!("GET {PODS}"),
        format!("GET {deployment}"),
        // The one question to the gateway's collector: what it knows.
        "scrape 10.0.0.7".to_owned(),
        "clickhouse schema `otel`.`otel_traces` verify_only=false".to_owned(),
        // Every object as it was: nothing applied, no rollout.
        format!("GET {config_map}"),
        format!("GET /api/v1/{ns}/services/orders-collector-metrics"),
        format!("GET /apis/policy/v1/{ns}/poddisruptionbudgets/orders-collector"),
        format!("GET {PIPELINE}"),
        format!("PATCH {PIPELINE}/status"),
        format!("POST /apis/events.k8s.io/v1/{ns}/events"),
    ];
    assert_eq!(journal, expected, "{journal:#?}");
    let status = world.get(PIPELINE).unwrap()["status"].clone();
    assert_eq!(status["configHash"], hash, "{status}");
    assert_eq!(
        world.get(&config_map).unwrap()["data"]["collector.yaml"],
        text
    );
    assert!(status.get("processing").is_none(), "{status}");
    let applied = condition(&world, "ConfigApplied");
    assert_eq!(
        (&applied["status"], &applied["reason"]),
        (&json!("False"), &json!("CollectorTooOld"))
    );
    let message = applied["message"].as_str().unwrap();
    assert!(
        message.contains(OLD_IMAGE)
            && message.contains("knows config revision 1")
            && message.contains("spec.processing (config revision 2)"),
        "{message}"
    );
    assert_eq!(condition(&world, "Ready")["reason"], "CollectorTooOld");
    assert_eq!(condition(&world, "GatewayAvailable")["status"], "True");
    assert!(
        world
            .events()
            .contains(&("Warning".to_owned(), "CollectorTooOld".to_owned())),
        "{:?}",
        world.events()
    );

    // A requeue asks again and writes nothing; nor does one whose question goes unanswered
    // (the revision recorded for this image stands).
    let reads = expected[..9].to_vec();
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    assert_eq!(world.take_journal(), reads);
    world.pod_metrics.lock().unwrap().clear();
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    assert_eq!(world.take_journal(), reads);

    // The gateway moves to the operator's own image: no question, the rules rendered and
    // rolled out, the condition cleared.
    edit(&world, 3, |spec| {
        spec["collector"].as_object_mut().unwrap().remove("image");
    });
    reconcile(cached(&world), ctx).await.unwrap();
    let journal = world.take_journal();
    assert!(
        !journal.iter().any(|e| e.starts_with("scrape")),
        "{journal:#?}"
    );
    let patched: Vec<&str> = writes(&journal)
        .into_iter()
        .filter(|e| e.starts_with("PATCH"))
        .collect();
    assert_eq!(
        patched,
        [
            format!("PATCH {config_map}"),
            format!("PATCH {deployment}"),
            format!("PATCH {PIPELINE}/status"),
        ],
        "{journal:#?}"
    );
    let text = world.get(&config_map).unwrap()["data"]["collector.yaml"].clone();
    assert!(text.as_str().unwrap().contains("processing:"), "{text}");
    let status = world.get(PIPELINE).unwrap()["status"].clone();
    assert_ne!(status["configHash"], hash);
    assert_eq!(status["processing"], "1 drop", "{status}");
    assert!(status.get("collectorConfigRevision").is_none(), "{status}");
    assert_eq!(condition(&world, "ConfigApplied")["reason"], "Applied");
    let events: Vec<String> = world.events().into_iter().map(|(_, r)| r).collect();
    assert!(
        events.contains(&"ConfigApplied".to_owned())
            && events.contains(&"ConfigChanged".to_owned()),
        "{events:?}"
    );
}
