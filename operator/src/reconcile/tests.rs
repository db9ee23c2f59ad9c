//! The reconcile against a fake API server and fake brokers and ClickHouse
//! (`fake_api.rs`): the order of its steps and writes, nothing written when nothing
//! changed, and failures named in the status — in milliseconds, without a stack.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::fake_api::World;
use super::{Context, Settings, backoff, error_policy, reconcile};
use crate::crd::TracePipeline;
use crate::kafka::KafkaError;
use crate::metrics::Metrics;

pub(super) const PIPELINE: &str =
    "/apis/tracehouse.dev/v1alpha1/namespaces/shop/tracepipelines/orders";

fn spec(clickhouse: Value) -> Value {
    json!({
        "kafka": { "bootstrapServers": "kafka:9092", "topics": ["otlp_spans"] },
        "clickhouse": clickhouse,
        "collector": { "image": "ghcr.io/tracehouse/collector:0.1.0" }
    })
}

/// A world holding pipeline `shop/orders` with `spec`, and a context over it.
pub(super) fn world_with(spec: Value) -> (Arc<World>, Arc<Context>) {
    let world = World::new();
    world.put(
        PIPELINE,
        json!({
            "apiVersion": "tracehouse.dev/v1alpha1", "kind": "TracePipeline",
            "metadata": {
                "name": "orders", "namespace": "shop", "generation": 1,
                "uid": "0b7c0c3e-3c1d-4a8e-9a57-1f5f2f4c6d10", "resourceVersion": "1"
            },
            "spec": spec
        }),
    );
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let ctx = Context::with_backends(world.client(), metrics, Settings::default(), world.clone())
        .unwrap();
    (world, Arc::new(ctx))
}

/// The pipeline as the controller's cache would hand it over now.
pub(super) fn cached(world: &World) -> Arc<TracePipeline> {
    Arc::new(serde_json::from_value(world.get(PIPELINE).unwrap()).unwrap())
}

/// The journal's writes (and backend calls), reads left out.
pub(super) fn writes(journal: &[String]) -> Vec<&str> {
    journal
        .iter()
        .map(String::as_str)
        .filter(|e| !e.starts_with("GET "))
        .collect()
}

pub(super) fn condition(world: &World, type_: &str) -> Value {
    let status = &world.get(PIPELINE).unwrap()["status"];
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

#[tokio::test]
async fn a_new_pipeline_gets_its_schema_then_its_objects_deployment_last_then_its_status() {
    let (world, ctx) = world_with(spec(json!({ "endpoint": "http://clickhouse:8123" })));
    reconcile(cached(&world), ctx).await.unwrap();
    let journal = world.take_journal();
    let ns = "namespaces/shop";
    let expected = [
        "kafka partitions otlp_spans".to_owned(),
        "kafka offsets tracehouse.shop.orders".to_owned(),
        // No gateway pod is ready yet: how long the broker keeps the group's offsets.
        "kafka offsets retention".to_owned(),
        "clickhouse schema `otel`.`otel_traces` verify_only=false".to_owned(),
        format!("PATCH /api/v1/{ns}/configmaps/orders-collector"),
        format!("PATCH /api/v1/{ns}/services/orders-collector-metrics"),
        format!("PATCH /apis/policy/v1/{ns}/poddisruptionbudgets/orders-collector"),
        format!("PATCH /apis/apps/v1/{ns}/deployments/orders-collector"),
        format!("PATCH {PIPELINE}/status"),
    ];
    let writes = writes(&journal);
    let (steps, events) = writes.split_at(expected.len().min(writes.len()));
    assert_eq!(steps, expected, "{journal:#?}");
    // Then one Event per change, after the status that tells it.
    assert!(!events.is_empty(), "no Event: {journal:#?}");
    assert!(
        events
            .iter()
            .all(|e| e.starts_with("POST /apis/events.k8s.io/v1/namespaces/shop/events")),
        "{journal:#?}"
    );
    let status = &world.get(PIPELINE).unwrap()["status"];
    assert_eq!(status["partitions"], 4, "{status}");
    assert_eq!(status["schemaVersion"], 7, "{status}");
    assert_eq!(condition(&world, "KafkaReachable")["status"], "True");
    let consuming = condition(&world, "Consuming");
    assert_eq!(
        (&consuming["status"], &consuming["reason"]),
        (&json!("False"), &json!("NoReadyCollector"))
    );
}

#[tokio::test]
async fn a_reconcile_that_finds_everything_in_place_writes_nothing() {
    let (world, ctx) = world_with(spec(json!({ "endpoint": "http://clickhouse:8123" })));
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    let first = world.take_journal();
    assert!(first.iter().any(|e| e.starts_with("PATCH")), "{first:#?}");
    // The next reconcile sees the objects and the status it wrote (a requeue).
    reconcile(cached(&world), ctx).await.unwrap();
    let second = world.take_journal();
    let api_writes: Vec<&str> = writes(&second)
        .into_iter()
        .filter(|e| !e.starts_with("kafka ") && !e.starts_with("clickhouse "))
        .collect();
    assert!(api_writes.is_empty(), "{second:#?}");
    // It still looked: brokers, schema, every object.
    assert!(second.iter().any(|e| e.starts_with("clickhouse schema")));
    assert_eq!(
        second.iter().filter(|e| e.starts_with("GET /api")).count(),
        5,
        "{second:#?}"
    );
}

#[tokio::test]
async fn a_missing_secret_is_named_in_the_status_before_clickhouse_or_the_objects() {
    let (world, ctx) = world_with(spec(json!({
        "endpoint": "http://clickhouse:8123",
        "credentials": { "name": "clickhouse-writer" }
    })));
    let tp = cached(&world);
    let error = reconcile(tp.clone(), ctx.clone()).await.unwrap_err();
    assert_eq!(error.reason(), "SecretNotFound");
    let journal = world.take_journal();
    assert!(
        journal.contains(&"GET /api/v1/namespaces/shop/secrets/clickhouse-writer".to_owned()),
        "{journal:#?}"
    );
    // The brokers, the pods and the Deployment were looked at; nothing was migrated, applied
    // or rolled out.
    assert!(
        !writes(&journal)
            .into_iter()
            .any(|e| e.starts_with("clickhouse ")
                || e.contains("/configmaps/")
                || e.contains("/deployments/")),
        "went on past the missing Secret: {journal:#?}"
    );
    let ready = condition(&world, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "SecretNotFound");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("shop/clickhouse-writer"),
        "{ready}"
    );
    // A Warning Event says it; the retry backs off.
    let events = world.events();
    assert!(
        events.contains(&("Warning".to_owned(), "ReconcileFailed".to_owned())),
        "{events:?}"
    );
    assert_eq!(
        error_policy(tp.clone(), &error, ctx.clone()),
        kube::runtime::controller::Action::requeue(Duration::from_secs(1))
    );
    assert_eq!(
        error_policy(tp, &error, ctx),
        kube::runtime::controller::Action::requeue(Duration::from_secs(2))
    );
}

#[tokio::test]
async fn a_missing_topic_fails_the_kafka_step_and_nothing_after_it_runs() {
    let (world, ctx) = world_with(spec(json!({ "endpoint": "http://clickhouse:8123" })));
    *world.kafka_failure.lock().unwrap() = Some(|| KafkaError::TopicNotFound {
        topic: "otlp_spans".into(),
        brokers: "kafka:9092".into(),
    });
    let error = reconcile(cached(&world), ctx).await.unwrap_err();
    assert_eq!(error.reason(), "TopicNotFound");
    let journal = world.take_journal();
    assert_eq!(
        writes(&journal)
            .into_iter()
            .filter(|e| !e.starts_with("POST /apis/events.k8s.io/"))
            .collect::<Vec<_>>(),
        [
            "kafka partitions otlp_spans".to_owned(),
            format!("PATCH {PIPELINE}/status")
        ],
        "{journal:#?}"
    );
    let kafka = condition(&world, "KafkaReachable");
    assert_eq!(kafka["status"], "False");
    assert_eq!(kafka["reason"], "TopicNotFound");
    assert!(kafka["message"].as_str().unwrap().contains("otlp_spans"));
}

#[tokio::test]
async fn a_pipeline_naming_a_host_outside_the_allow_list_is_refused_before_anything_is_dialled() {
    let (world, _) = world_with(spec(json!({ "endpoint": "http://exfil.example:8123" })));
    let settings = Settings {
        allowed_endpoints: crate::endpoints::AllowList::new(["kafka", "clickhouse"]),
        ..Settings::default()
    };
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let ctx =
        Arc::new(Context::with_backends(world.client(), metrics, settings, world.clone()).unwrap());
    reconcile(cached(&world), ctx).await.unwrap();
    let journal = world.take_journal();
    // No Kafka, no ClickHouse, no object: the status, and its Warning Event.
    assert_eq!(
        writes(&journal)
            .into_iter()
            .filter(|e| !e.starts_with("POST /apis/events.k8s.io/"))
            .collect::<Vec<_>>(),
        [format!("PATCH {PIPELINE}/status")],
        "{journal:#?}"
    );
    assert!(
        journal
            .iter()
            .any(|e| e.starts_with("POST /apis/events.k8s.io/")),
        "a Warning Event: {journal:#?}"
    );
    let ready = condition(&world, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "EndpointNotAllowed");
    let message = ready["message"].as_str().unwrap();
    assert!(message.contains("exfil.example"), "{message}");
}

#[test]
fn backoff_doubles_from_one_second_up_to_the_cap() {
    let max = Duration::from_secs(300);
    let delays: Vec<u64> = (1..=11).map(|a| backoff(a, max).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
    assert_eq!(backoff(u32::MAX, max), max);
}

#[tokio::test]
async fn opting_in_to_layouts_reaches_the_schema_step_and_shows_in_the_status() {
    let (world, ctx) = world_with(spec(json!({ "endpoint": "http://clickhouse:8123" })));
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    let status = &world.get(PIPELINE).unwrap()["status"];
    assert_eq!(status["layouts"], "none", "{status}");

    // The user opts in: the next reconcile asks the schema step for both layouts.
    let mut tp = world.get(PIPELINE).unwrap();
    tp["spec"]["clickhouse"]["schema"] =
        json!({ "layouts": { "attributeItems": true, "mapSerialization": "Buckets" } });
    tp["metadata"]["generation"] = json!(2);
    world.put(PIPELINE, tp);
    world.take_journal();
    reconcile(cached(&world), ctx).await.unwrap();
    let status = &world.get(PIPELINE).unwrap()["status"];
    assert_eq!(
        status["layouts"], "attributeItems,mapSerialization=Buckets",
        "{status}"
    );
    assert_eq!(status["schemaVersion"], 7, "{status}");
    assert_eq!(condition(&world, "SchemaReady")["status"], "True");
    let events = world.events();
    assert!(
        events.contains(&("Normal".to_owned(), "LayoutsChanged".to_owned())),
        "{events:?}"
    );
}

/// `pipeline_metrics`'s autoscaled pipeline: Secrets on both sides, a group 10 records behind
/// on each of 4 partitions, one ready gateway pod whose /metrics the fake serves.
fn autoscaled() -> (Arc<World>, Arc<Context>) {
    let (world, ctx) = world_with(json!({
        "kafka": {
            "bootstrapServers": "kafka:9094",
            "topics": ["otlp_spans"],
            "sasl": { "mechanism": "SCRAM-SHA-512", "credentials": { "name": "kafka-scram" } }
        },
        "clickhouse": {
            "endpoint": "http://clickhouse:8123",
            "credentials": { "name": "clickhouse-writer" }
        },
        "collector": {
            "image": "ghcr.io/tracehouse/collector:0.1.0",
            "resources": { "limits": { "memory": "512Mi" } }
        },
        "autoscaling": { "min": 1, "max": 4 }
    }));
    let secret = |name: &str| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": name, "namespace": "shop" },
            // "writer" / "hunter2"
            "data": { "username": "d3JpdGVy", "password": "aHVudGVyMg==" }
        })
    };
    world.put(SECRETS_KAFKA, secret("kafka-scram"));
    world.put(SECRETS_CLICKHOUSE, secret("clickhouse-writer"));
    world.put(
        PODS,
        json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {},
            "items": [{
                "metadata": { "name": "orders-collector-0", "namespace": "shop" },
                "spec": {
                    "nodeName": "node-1",
                    "containers": [{
                        "name": crate::builders::CONTAINER,
                        "resources": { "limits": { "memory": "512Mi" } }
                    }]
                },
                "status": {
                    "podIP": "10.0.0.7",
                    "conditions": [{ "type": "Ready", "status": "True" }]
                }
            }]
        }),
    );
    *world.offsets.lock().unwrap() = (90, 100);
    *world.oldest.lock().unwrap() = Some(1_800_000_000_000);
    use crate::autoscale::scrape::{
        INFLIGHT_BYTES, LAG_SECONDS, RECORDS_CONSUMED, RESIDENT_MEMORY, SPANS_DECODED,
    };
    world.pod_metrics.lock().unwrap().insert(
        "10.0.0.7".into(),
        format!(
            "{LAG_SECONDS}{{topic=\"otlp_spans\",partition=\"0\"}} 2.5\n\
             {RECORDS_CONSUMED}{{topic=\"otlp_spans\"}} 1000\n\
             {SPANS_DECODED} 5000\n{INFLIGHT_BYTES} 1024\n{RESIDENT_MEMORY} 104857600\n"
        ),
    );
    (world, ctx)
}

const SECRETS_KAFKA: &str = "/api/v1/namespaces/shop/secrets/kafka-scram";
const SECRETS_CLICKHOUSE: &str = "/api/v1/namespaces/shop/secrets/clickhouse-writer";
pub(super) const PODS: &str = "/api/v1/namespaces/shop/pods";

#[tokio::test]
async fn an_autoscaled_pipeline_reads_each_secret_the_offsets_and_the_pods_once() {
    let (world, ctx) = autoscaled();
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    let journal = world.take_journal();
    let ns = "namespaces/shop";
    let deployment = format!("/apis/apps/v1/{ns}/deployments/orders-collector");
    let mut expected = vec![
        // Each Secret once: the Kafka access, the ClickHouse connection and the pods'
        // fingerprint are all derived from these two reads.
        format!("GET {SECRETS_CLICKHOUSE}"),
        format!("GET {SECRETS_KAFKA}"),
        "kafka partitions otlp_spans".to_owned(),
        // The offsets once: the lag and the autoscaler's sample are made of them.
        "kafka offsets tracehouse.shop.orders".to_owned(),
        "kafka oldest unconsumed tracehouse.shop.orders".to_owned(),
        // The pods once: the sample, the offsets-retention watch (a pod is ready: no
        // retention read) and the diagnosis.
        format!("GET {PODS}"),
        // The Deployment once: the autoscaler's current count, and the apply's comparison.
        format!("GET {deployment}"),
        "scrape 10.0.0.7".to_owned(),
        "clickhouse schema `otel`.`otel_traces` verify_only=false".to_owned(),
    ];
    for path in [
        format!("/api/v1/{ns}/configmaps/orders-collector"),
        format!("/api/v1/{ns}/services/orders-collector-metrics"),
        format!("/apis/policy/v1/{ns}/poddisruptionbudgets/orders-collector"),
    ] {
        expected.push(format!("GET {path}"));
        expected.push(format!("PATCH {path}"));
    }
    expected.push(format!("PATCH {deployment}"));
    expected.push(format!("GET {PIPELINE}"));
    expected.push(format!("PATCH {PIPELINE}/status"));
    expected.extend(std::iter::repeat_n(
        format!("POST /apis/events.k8s.io/v1/{ns}/events"),
        5,
    ));
    assert_eq!(journal, expected, "{journal:#?}");
    let events: Vec<String> = world.events().into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        events,
        [
            "PartitionsChanged",
            "SchemaMigrated",
            "DedupWindowChanged",
            "GatewayCreated",
            "Scaled"
        ]
    );

    let status = &world.get(PIPELINE).unwrap()["status"];
    // The lag, from the one read of the offsets: 10 behind on each of 4 partitions.
    assert_eq!(status["lag"]["records"], 40, "{status}");
    assert_eq!(status["lag"]["partitionsBehind"], 4, "{status}");
    // The autoscaler took its first sample from the same read, and holds for a second.
    assert_eq!(status["autoscaling"]["reason"], "TooFewSamples", "{status}");
    assert_eq!(status["autoscaling"]["desiredReplicas"], 1, "{status}");
    assert_eq!(condition(&world, "Consuming")["status"], "True");
    // The pods' fingerprint is over the two Secrets as read.
    let template = &world.get(&deployment).unwrap()["spec"]["template"]["metadata"];
    assert!(
        template["annotations"][crate::builders::SECRETS_HASH_ANNOTATION]
            .as_str()
            .is_some_and(|h| h.starts_with("sha256:")),
        "{template}"
    );

    // A requeue before the next sample is due: the same single reads, no scrape, no write.
    reconcile(cached(&world), ctx.clone()).await.unwrap();
    let journal = world.take_journal();
    let mut expected: Vec<String> = vec![
        format!("GET {SECRETS_CLICKHOUSE}"),
        format!("GET {SECRETS_KAFKA}"),
        "kafka partitions otlp_spans".to_owned(),
        "kafka offsets tracehouse.shop.orders".to_owned(),
        "kafka oldest unconsumed tracehouse.shop.orders".to_owned(),
        format!("GET {PODS}"),
        format!("GET {deployment}"),
        "clickhouse schema `otel`.`otel_traces` verify_only=false".to_owned(),
    ];
    for path in [
        format!("/api/v1/{ns}/configmaps/orders-collector"),
        format!("/api/v1/{ns}/services/orders-collector-metrics"),
        format!("/apis/policy/v1/{ns}/poddisruptionbudgets/orders-collector"),
    ] {
        expected.push(format!("GET {path}"));
    }
    assert_eq!(journal, expected, "{journal:#?}");

    // Deleted: what the operator holds for it, its Kafka client included, is let go.
    super::forget(&ctx, "shop", "orders");
    assert_eq!(world.take_journal(), ["forget shop/orders"]);
}

#[tokio::test]
async fn a_paused_pipeline_is_watched_for_its_offsets_retention_and_changed_nowhere() {
    let (world, ctx) = autoscaled();
    let mut tp = world.get(PIPELINE).unwrap();
    tp["spec"]["paused"] = json!(true);
    world.put(PIPELINE, tp);
    reconcile(cached(&world), ctx).await.unwrap();
    let journal = world.take_journal();
    let ns = "namespaces/shop";
    assert_eq!(
        journal,
        [
            format!("GET {SECRETS_CLICKHOUSE}"),
            format!("GET {SECRETS_KAFKA}"),
            "kafka offsets retention".to_owned(),
            format!("GET /apis/apps/v1/{ns}/deployments/orders-collector"),
            format!("GET {PIPELINE}"),
            format!("PATCH {PIPELINE}/status"),
            format!("POST /apis/events.k8s.io/v1/{ns}/events"),
        ],
        "{journal:#?}"
    );
    let consuming = condition(&world, "Consuming");
    assert_eq!(consuming["status"], "False");
    assert_eq!(consuming["reason"], "Paused");
    assert!(
        consuming["message"]
            .as_str()
            .unwrap()
            .contains("offsets.retention.minutes=10080"),
        "{consuming}"
    );
}
