//! Helpers of the operator's e2e tests: the local stack's clients, throw-away namespaces,
//! topics and databases, the local sample, and waits that always have a deadline.
//!
//! Needs `e2e/stack up && eval "$(e2e/stack env)"` (KUBECONFIG, KAFKA_BROKERS,
//! CLICKHOUSE_URL/USER/PASSWORD); a missing variable fails the test, never skips it.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;

use futures::FutureExt;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use rdkafka::admin::{AdminOptions, NewPartitions, NewTopic, TopicReplication};
use serde_json::{Value, json};
use tracehouse_e2e::k8s::with_namespace;
pub use tracehouse_e2e::k8s::{client, http_get, pod_pid, pod_ready, wait_for};
use tracehouse_e2e::{kafka_admin, stack_var};
use tracehouse_loadgen::{
    Expectation, GeneratorConfig, ProduceOptions, VerifyOptions, produce, verify,
};
use tracehouse_operator::FIELD_MANAGER;
use tracehouse_operator::builders::{CONFIG_HASH_ANNOTATION, CONFIG_KEY, Names, PIPELINE_LABEL};
use tracehouse_operator::crd::{TracePipeline, condition};
pub use tracehouse_schema::Attributes;

/// Where `e2e/stack up` runs the operator (config/manager, config/local).
pub const OPERATOR_NAMESPACE: &str = "tracehouse-system";
pub const OPERATOR_NAME: &str = "tracehouse-operator";
pub const OPERATOR_METRICS_PORT: u16 = 8080;
/// The requeue period config/local gives the operator.
pub const RESYNC: Duration = Duration::from_secs(10);
/// Field manager of this test's own applies (the user's edits).
pub const TEST_MANAGER: &str = "tracehouse-e2e";
pub const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../config/samples/local/tracepipeline.yaml"
);

/// The operator must be running on the stack: these tests exercise it, not a copy.
pub async fn require_operator(client: &Client) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let ready = match deployments.get_opt(OPERATOR_NAME).await {
        Ok(Some(d)) => d.status.and_then(|s| s.ready_replicas).unwrap_or(0),
        Ok(None) => 0,
        Err(e) => panic!("cannot read the operator Deployment: {e}"),
    };
    assert!(
        ready > 0,
        "the operator is not running on the local stack ({OPERATOR_NAMESPACE}/{OPERATOR_NAME} \
         has no ready replica): run `e2e/stack up` (it installs crds/, config/local and starts \
         the operator from the current build)"
    );
}

/// A fresh namespace (after checking the operator runs); deleted (with
/// everything in it) afterwards, pass or fail.
pub async fn in_namespace<F, Fut>(prefix: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let client = client().await;
    require_operator(&client).await;
    with_namespace(client, prefix, body).await;
}

pub async fn create_clickhouse_secret(client: &Client, ns: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "tracehouse-clickhouse" },
        "stringData": {
            "username": stack_var("CLICKHOUSE_USER"),
            "password": stack_var("CLICKHOUSE_PASSWORD"),
        }
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the ClickHouse Secret");
}

/// A file's text (the stack's PEM files), or a panic naming it.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Creates or replaces the Secret `name` in `ns` with `data` as `stringData`.
pub async fn put_secret(client: &Client, ns: &str, name: &str, type_: &str, data: Value) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": name },
        "type": type_,
        "stringData": data,
    }))
    .unwrap();
    secrets
        .patch(
            name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
}

pub async fn create_topic(topic: &str, partitions: i32) {
    let result = kafka_admin()
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create_topics");
    for r in result {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

pub async fn grow_topic(topic: &str, partitions: usize) {
    let result = kafka_admin()
        .create_partitions(
            &[NewPartitions::new(topic, partitions)],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create_partitions");
    for r in result {
        r.unwrap_or_else(|(t, e)| panic!("adding partitions to {t}: {e}"));
    }
}

/// Runs a query as the stack's ClickHouse user; the TSV body, trimmed.
pub async fn clickhouse_query(sql: &str) -> String {
    let resp = reqwest::Client::new()
        .post(stack_var("CLICKHOUSE_URL"))
        .header("X-ClickHouse-User", stack_var("CLICKHOUSE_USER"))
        .header("X-ClickHouse-Key", stack_var("CLICKHOUSE_PASSWORD"))
        .timeout(Duration::from_secs(60))
        .body(sql.to_owned())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert!(status.is_success(), "{sql}: {status} {text}");
    text.trim().to_owned()
}

/// Runs `body`, then deletes `topic` and `database` whatever happened, and re-raises a
/// panic of `body`.
pub async fn cleaning_up(topic: &str, database: &str, body: impl Future<Output = ()>) {
    let result = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    tracehouse_e2e::delete_topics(&[topic]).await;
    tracehouse_e2e::drop_database(database).await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The local sample, pointed at this test's namespace, topic, group and database.
pub fn sample(ns: &str, topic: &str, database: &str) -> Value {
    let text = std::fs::read_to_string(SAMPLE).unwrap_or_else(|e| panic!("{SAMPLE}: {e}"));
    let mut tp: Value =
        tracehouse_contract::yaml::from_str(&text).expect("the local sample is YAML");
    assert_eq!(tp["kind"], "TracePipeline");
    // The sample targets the stack's default ports; follow the stack if it moved them.
    let brokers = stack_var("KAFKA_BROKERS");
    let url = stack_var("CLICKHOUSE_URL");
    if tp["spec"]["kafka"]["bootstrapServers"] != brokers.as_str()
        || tp["spec"]["clickhouse"]["endpoint"] != url.as_str()
    {
        eprintln!("note: the stack runs on non-default ports; pointing the sample at them");
    }
    tp["metadata"]["name"] = json!("e2e");
    tp["metadata"]["namespace"] = json!(ns);
    tp["spec"]["kafka"]["bootstrapServers"] = json!(brokers);
    tp["spec"]["kafka"]["topics"] = json!([topic]);
    tp["spec"]["kafka"]["consumerGroup"] = json!(format!("{topic}-gateway"));
    tp["spec"]["clickhouse"]["endpoint"] = json!(url);
    tp["spec"]["clickhouse"]["database"] = json!(database);
    // Two partitions per collector: 4 partitions → 2 replicas, 8 → 4 (the sample's max).
    tp["spec"]["replicas"]["partitionsPerReplica"] = json!(2);
    // Sized by partitions: these tests count replicas and writes; e2e_autoscale.rs puts the
    // sample's autoscaling back.
    let autoscaling = tp["spec"]
        .as_object_mut()
        .and_then(|s| s.remove("autoscaling"));
    assert!(
        autoscaling.is_some(),
        "the local sample enables autoscaling"
    );
    tp
}

/// Server-side apply of the pipeline as the user (not the operator's field manager).
pub async fn apply(api: &Api<TracePipeline>, tp: &Value) -> TracePipeline {
    let name = tp["metadata"]["name"].as_str().unwrap();
    api.patch(
        name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(tp),
    )
    .await
    .unwrap_or_else(|e| panic!("applying TracePipeline {name}: {e}"))
}

pub fn ready_condition(tp: &TracePipeline) -> Option<(String, String, String)> {
    tp.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition::READY)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits for a converged, Ready pipeline with these numbers (its rollout complete); returns it.
pub async fn wait_ready(
    api: &Api<TracePipeline>,
    name: &str,
    partitions: i32,
    replicas: i32,
    deadline: Duration,
) -> TracePipeline {
    wait_for(
        &format!("TracePipeline {name} Ready with {partitions} partitions and {replicas} replicas"),
        deadline,
        || async {
            let tp = api.get(name).await.map_err(|e| e.to_string())?;
            let s = tp.status.clone().unwrap_or_default();
            let ready = ready_condition(&tp);
            // Ready means serving; a rollout or scale step may still be moving.
            let moving = s
                .conditions
                .iter()
                .any(|c| c.type_ == condition::PROGRESSING && c.status == "True");
            let ok = s.observed_generation == tp.metadata.generation
                && ready.as_ref().is_some_and(|r| r.0 == "True")
                && !moving
                && s.replicas == Some(replicas)
                && s.partitions == Some(partitions)
                && s.desired_replicas == Some(replicas)
                && s.ready_replicas == Some(replicas)
                && s.schema_version == Some(i64::from(tracehouse_schema::LATEST_VERSION));
            if ok {
                Ok(tp)
            } else {
                Err(format!(
                    "generation {:?}, status {}",
                    tp.metadata.generation,
                    serde_json::to_string(&s).unwrap()
                ))
            }
        },
    )
    .await
}

pub fn pod_hash(pod: &Pod) -> Option<String> {
    pod.annotations().get(CONFIG_HASH_ANNOTATION).cloned()
}

/// Waits until exactly `replicas` gateway pods run the config `hash`, each Ready and each a
/// live process of the collector binary started by the node agent.
pub async fn wait_pods(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: usize,
    hash: &str,
) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("{replicas} ready gateway pods with config {hash}"),
        Duration::from_secs(240),
        || async {
            let list = pods
                .list(&ListParams::default().labels(&format!("{PIPELINE_LABEL}={name}")))
                .await
                .map_err(|e| e.to_string())?
                .items;
            let live: Vec<Pod> = list
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let described: Vec<String> = live
                .iter()
                .map(|p| {
                    format!(
                        "{} ready={} hash={:?}",
                        p.name_any(),
                        pod_ready(p),
                        pod_hash(p)
                    )
                })
                .collect();
            let good = live.len() == replicas
                && live.iter().all(|p| {
                    pod_ready(p)
                        && pod_hash(p).as_deref() == Some(hash)
                        && pod_pid(p).is_some_and(is_collector_process)
                });
            if good {
                Ok(live)
            } else {
                Err(format!("{described:?}"))
            }
        },
    )
    .await
}

/// Whether `pid` is a live `tracehouse-collector run` process on this machine.
pub fn is_collector_process(pid: i32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    args.first()
        .is_some_and(|a| a.ends_with("tracehouse-collector"))
        && args.get(1).is_some_and(|a| a == "run")
}

pub async fn deployment_replicas(client: &Client, ns: &str, name: &str) -> Option<i32> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments
        .get(&Names::of(name).deployment)
        .await
        .ok()?
        .spec?
        .replicas
}

/// Produces `spans` spans as `generator_id` and waits until each is in ClickHouse exactly once
/// (a table with Map attributes, the operator's default).
pub async fn deliver(topic: &str, database: &str, generator_id: &str, spans: u64) {
    deliver_to(topic, database, generator_id, spans, Attributes::Map).await;
}

/// [`deliver`] into a table whose attribute columns are of kind `attributes`.
pub async fn deliver_to(
    topic: &str,
    database: &str,
    generator_id: &str,
    spans: u64,
    attributes: Attributes,
) {
    produce_spans(topic, generator_id, spans).await;
    await_delivered(database, generator_id, spans, attributes).await;
}

/// Produces `spans` of `generator_id` to `topic` on the stack's plaintext listener.
pub async fn produce_spans(topic: &str, generator_id: &str, spans: u64) {
    let report = produce(&ProduceOptions {
        brokers: stack_var("KAFKA_BROKERS"),
        topic: topic.to_owned(),
        spans,
        generator: GeneratorConfig {
            generator_id: generator_id.to_owned(),
            seed: 7,
            spans_per_record: 50,
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .expect("producing spans");
    assert_eq!(report.spans, spans);
}

/// Waits until `spans` of `generator_id` are in `database.otel_traces`, each exactly once.
pub async fn await_delivered(
    database: &str,
    generator_id: &str,
    spans: u64,
    attributes: Attributes,
) {
    let options = verify_options(database, generator_id, spans, attributes);
    wait_for(
        &format!("{spans} spans of {generator_id} in {database}.otel_traces exactly once"),
        Duration::from_secs(180),
        || async {
            let r = verify(&options).await.map_err(|e| e.to_string())?;
            if r.is_exact() {
                Ok(())
            } else {
                Err(serde_json::to_string(&r).unwrap())
            }
        },
    )
    .await;
}

/// How `tracehouse-loadgen verify` checks `spans` of `generator_id` in `database.otel_traces`
/// on the stack's ClickHouse.
pub fn verify_options(
    database: &str,
    generator_id: &str,
    spans: u64,
    attributes: Attributes,
) -> VerifyOptions {
    VerifyOptions {
        url: stack_var("CLICKHOUSE_URL"),
        user: Some(stack_var("CLICKHOUSE_USER")),
        password: Some(stack_var("CLICKHOUSE_PASSWORD")),
        tls: Default::default(),
        database: database.to_owned(),
        table: "otel_traces".to_owned(),
        attributes,
        generators: vec![Expectation {
            generator_id: generator_id.to_owned(),
            expected: spans,
        }],
        timeout: Duration::from_secs(30),
    }
}

/// What the operator's field manager last wrote to an object: (generation, time, fields).
pub fn our_fields<K: Resource>(obj: &K) -> (Option<i64>, Vec<String>) {
    let meta = obj.meta();
    let mine = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
        .map(|m| {
            format!(
                "{:?} {:?} {:?}",
                m.operation,
                m.time.as_ref().map(|t| t.0.to_string()),
                m.fields_v1.as_ref().map(|f| f.0.to_string())
            )
        })
        .collect();
    (meta.generation, mine)
}

/// Everything a write by the operator would change, for one pipeline.
#[derive(Debug, PartialEq)]
pub struct Footprint {
    pub pipeline_version: Option<String>,
    pub objects: BTreeMap<&'static str, (Option<i64>, Vec<String>)>,
    pub events: usize,
}

pub async fn footprint(client: &Client, ns: &str, name: &str) -> Footprint {
    let names = Names::of(name);
    let tp = Api::<TracePipeline>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let mut objects = BTreeMap::new();
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(&names.deployment)
        .await
        .unwrap();
    objects.insert("Deployment", our_fields(&d));
    let c = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(&names.config_map)
        .await
        .unwrap();
    objects.insert("ConfigMap", our_fields(&c));
    let s = Api::<Service>::namespaced(client.clone(), ns)
        .get(&names.service)
        .await
        .unwrap();
    objects.insert("Service", our_fields(&s));
    let p = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .get(&names.pdb)
        .await
        .unwrap();
    objects.insert("PodDisruptionBudget", our_fields(&p));
    Footprint {
        pipeline_version: tp.metadata.resource_version,
        objects,
        events: pipeline_events(client, ns, name).await.len(),
    }
}

pub async fn pipeline_events(client: &Client, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("TracePipeline") && r.name.as_deref() == Some(name)
            })
        })
        .collect()
}

pub async fn operator_pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=tracehouse-operator"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits until every operator replica is ready; their `(name, restart count)`.
pub async fn operator_replicas_settled(client: &Client) -> Vec<(String, i32)> {
    wait_for(
        "every operator replica ready",
        Duration::from_secs(120),
        || async {
            let pods = operator_pods(client).await;
            let restarts: Vec<(String, i32)> = pods
                .iter()
                .map(|p| {
                    let n = p
                        .status
                        .as_ref()
                        .and_then(|s| s.container_statuses.as_ref())
                        .and_then(|c| c.first())
                        .map_or(0, |c| c.restart_count);
                    (p.name_any(), n)
                })
                .collect();
            if !pods.is_empty() && pods.iter().all(pod_ready) {
                Ok(restarts)
            } else {
                Err(format!("{restarts:?}"))
            }
        },
    )
    .await
}

pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `(reconciliations, writes)` summed over the operator replicas' /metrics.
pub async fn operator_counters(client: &Client) -> (f64, f64) {
    let mut totals = (0.0, 0.0);
    for pod in operator_pods(client).await {
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let (code, body) = http_get(&ip, OPERATOR_METRICS_PORT, "/metrics")
            .await
            .unwrap_or_else(|e| panic!("operator metrics of {}: {e}", pod.name_any()));
        assert_eq!(code, 200, "{body}");
        totals.0 += metric_sum(&body, "tracehouse_operator_reconciliations_total");
        totals.1 += metric_sum(&body, "tracehouse_operator_writes_total");
    }
    totals
}

/// The pod holding the operator's Lease.
pub async fn leader_pod(client: &Client) -> Pod {
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let holder = leases
        .get(OPERATOR_NAME)
        .await
        .expect("the operator's Lease")
        .spec
        .and_then(|s| s.holder_identity)
        .expect("the Lease has a holder");
    Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .get(&holder)
        .await
        .unwrap_or_else(|e| panic!("leader pod {holder}: {e}"))
}

pub async fn config_map_text(client: &Client, ns: &str, name: &str) -> String {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(&Names::of(name).config_map)
        .await
        .unwrap()
        .data
        .unwrap_or_default()
        .remove(CONFIG_KEY)
        .unwrap_or_default()
}
