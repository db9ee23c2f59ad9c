#![cfg(feature = "stack-tests")]
//! The shipped dashboards and alerts, proven on the real stack: two pipelines (Map and JSON
//! attributes, the Map one with a dead-letter topic and a processing rule) move a load of
//! spans and a few poison records, and a third one names a topic that does not exist
//! (reconcile errors, not Ready); then
//! - every PromQL expression of every Gateway and Operator panel, and every signal of every
//!   alert (charts/tracehouse/dashboards/gen/alert-signals.json), returns at least one series
//!   from the stack's Prometheus, which scrapes the pods it discovers through the API server;
//! - every Prometheus template variable (`label_values`) lists the namespace, pipelines, pods;
//! - every alert rule is loaded by that Prometheus and evaluates without error;
//! - every metric name those expressions read is in the pods' own `/metrics`;
//! - every SQL query of the Traces dashboards (panels and the `service` variable), with the
//!   ClickHouse data source's macros expanded for the last hour, runs on the ClickHouse engine
//!   against its table variant and returns rows.
//!
//! Failures name the dashboard and the panel (`title / refId`) or the alert.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Value, json};
use tracehouse_e2e::grafana::{self, QueryKind, Range};
use tracehouse_e2e::{stack_var, unique_name};
use tracehouse_operator::builders::{METRICS_PORT, PIPELINE_LABEL};
use tracehouse_operator::crd::TracePipeline;

const DASHBOARDS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../charts/tracehouse/dashboards"
);
const SPANS: u64 = 5_000;
const POISON: usize = 3;

fn dashboard(file: &str) -> Value {
    let path = format!("{DASHBOARDS}/{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_dashboard_and_alert_query_returns_data_after_a_load() {
    let prometheus = stack_var("PROMETHEUS_URL");
    in_namespace("dash", |client, ns| async move {
        create_clickhouse_secret(&client, &ns).await;
        let map_topic = unique_name("dash_map");
        let json_topic = unique_name("dash_json");
        let dead_letters = unique_name("dash_dlq");
        let (map_db, json_db) = (map_topic.clone(), json_topic.clone());
        create_topic(&map_topic, 2).await;
        create_topic(&json_topic, 2).await;
        create_topic(&dead_letters, 1).await;
        let body = async {
            let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
            let mut map = sample(&ns, &map_topic, &map_db);
            map["metadata"]["name"] = json!("map");
            map["spec"]["kafka"]["deadLetterTopic"] = json!(dead_letters);
            // Autoscaled (every default): the Operator dashboard's Autoscaling row reads it.
            map["spec"]["autoscaling"] = json!({});
            // A rule no span of the load matches: its tracehouse_spans_processed_total series
            // (each at 0 from the start) feed the Gateway dashboard's Processing row, and every
            // span is still written.
            map["spec"]["processing"] = json!({"rules": [{
                "name": "dash-none",
                "action": "drop",
                "when": [{"span": "name", "equals": "dash-no-such-span"}],
            }]});
            let mut js = sample(&ns, &json_topic, &json_db);
            js["metadata"]["name"] = json!("json");
            js["spec"]["clickhouse"]["schema"]["attributes"] = json!(Attributes::Json);
            let mut broken = sample(&ns, &unique_name("dash_missing"), &map_db);
            broken["metadata"]["name"] = json!("broken");
            apply(&api, &map).await;
            apply(&api, &js).await;
            apply(&api, &broken).await;
            let ready = wait_ready(&api, "map", 2, 1, Duration::from_secs(240)).await;
            // `kubectl get tp -o wide` shows the rules by action; none, no column value.
            let processing =
                |tp: &TracePipeline| tp.status.as_ref().and_then(|s| s.processing.clone());
            assert_eq!(processing(&ready).as_deref(), Some("1 drop"));
            let ready = wait_ready(&api, "json", 2, 1, Duration::from_secs(240)).await;
            assert_eq!(processing(&ready), None);

            produce_poison(&map_topic).await;
            tokio::join!(
                deliver(&map_topic, &map_db, "dash-map", SPANS),
                deliver_to(&json_topic, &json_db, "dash-json", SPANS, Attributes::Json),
            );

            let exprs = prometheus_queries(&ns);
            // The operator's per-pipeline lag series appear with the autoscaler's first
            // sample, which may come after the delivery (a gateway is Ready as soon as one
            // collector serves): wait for them rather than race them.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
            let missing = loop {
                let names = metric_names_of_pods(&client, &ns).await;
                let missing: Vec<String> = exprs
                    .iter()
                    .flat_map(|(origin, e)| {
                        grafana::metric_names(e)
                            .into_iter()
                            .filter(|n| !names.contains(n))
                            .map(move |n| format!("{origin}: {n}"))
                    })
                    .collect();
                if missing.is_empty() || tokio::time::Instant::now() >= deadline {
                    break missing;
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
            };
            assert!(
                missing.is_empty(),
                "metric names the dashboards and alerts read that no pod exposes:\n{}",
                missing.join("\n")
            );

            every_expression_returns_series(&prometheus, &exprs).await;
            every_variable_has_values(&prometheus, &ns).await;
            every_rule_is_healthy(&prometheus).await;
            every_sql_query_returns_rows("tracehouse-traces-map.json", &map_db).await;
            every_sql_query_returns_rows("tracehouse-traces-json.json", &json_db).await;

            for name in ["map", "json", "broken"] {
                api.delete(name, &Default::default()).await.ok();
            }
        };
        cleaning_up(&map_topic, &map_db, async {
            cleaning_up(&json_topic, &json_db, body).await;
        })
        .await;
        tracehouse_e2e::delete_topics(&[&dead_letters]).await;
    })
    .await;
}

/// A few records that are not OTLP: skipped as poison and copied to the dead-letter topic.
async fn produce_poison(topic: &str) {
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", stack_var("KAFKA_BROKERS"))
        .create()
        .expect("kafka producer");
    for i in 0..POISON {
        let payload = format!("not an OTLP request #{i}");
        producer
            .send(
                FutureRecord::<(), _>::to(topic).payload(payload.as_bytes()),
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("producing a poison record: {e}"));
    }
}

/// (origin, PromQL) of every Prometheus panel target and every alert signal, with the
/// dashboards' variables set to this test's namespace and every pipeline and pod.
fn prometheus_queries(ns: &str) -> Vec<(String, String)> {
    let vars = BTreeMap::from([
        ("namespace", ns.to_owned()),
        ("pipeline", ".*".to_owned()),
        ("pod", ".*".to_owned()),
        ("__rate_interval", "1m".to_owned()),
    ]);
    let mut out = Vec::new();
    for file in ["tracehouse-gateway.json", "tracehouse-operator.json"] {
        for q in grafana::queries(&dashboard(file)) {
            if let QueryKind::PromQL(expr) = q.kind {
                out.push((
                    format!("{file}: {}", q.origin),
                    grafana::interpolate(&expr, &vars),
                ));
            }
        }
    }
    let signals: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{DASHBOARDS}/gen/alert-signals.json")).unwrap(),
    )
    .unwrap();
    for a in signals["alerts"].as_array().unwrap() {
        for s in a["signals"].as_array().unwrap() {
            out.push((
                format!("alert {}", a["alert"].as_str().unwrap()),
                s.as_str().unwrap().to_owned(),
            ));
        }
    }
    assert!(out.len() > 20, "too few queries found: {out:?}");
    out
}

/// Every sample name exposed by the collector pods of `ns` and the operator pods.
async fn metric_names_of_pods(client: &Client, ns: &str) -> BTreeSet<String> {
    let mut targets = Vec::new();
    let collectors: Api<Pod> = Api::namespaced(client.clone(), ns);
    for p in collectors
        .list(&ListParams::default().labels(PIPELINE_LABEL))
        .await
        .unwrap()
    {
        targets.push((p.name_any(), pod_ip(&p), METRICS_PORT as u16));
    }
    let operators: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    for p in operators
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={OPERATOR_NAME}")))
        .await
        .unwrap()
    {
        targets.push((p.name_any(), pod_ip(&p), OPERATOR_METRICS_PORT));
    }
    assert!(
        targets.len() >= 3,
        "expected 2 collector pods and the operator: {targets:?}"
    );
    let mut names = BTreeSet::new();
    for (pod, ip, port) in targets {
        let (status, body) = http_get(&ip, port, "/metrics")
            .await
            .unwrap_or_else(|e| panic!("GET http://{ip}:{port}/metrics of {pod}: {e}"));
        assert_eq!(status, 200, "{pod} /metrics: {body}");
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

fn pod_ip(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_else(|| panic!("pod {} has no IP", p.name_any()))
}

async fn prometheus_get(base: &str, path: &str, params: &[(&str, &str)]) -> Value {
    let resp = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .query(params)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap_or_else(|e| panic!("Prometheus {path}: {e}"));
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert!(
        status.is_success() && body["status"] == "success",
        "Prometheus {path} {params:?}: {status} {text}"
    );
    body
}

/// Polls until every expression returns at least one series (scrapes come every 5 s and
/// rates need two samples), then fails naming those that still return none.
async fn every_expression_returns_series(prometheus: &str, exprs: &[(String, String)]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut empty = Vec::new();
        for (origin, expr) in exprs {
            let body = prometheus_get(prometheus, "/api/v1/query", &[("query", expr)]).await;
            if body["data"]["result"].as_array().is_none_or(Vec::is_empty) {
                empty.push(format!("{origin}\n    {expr}"));
            }
        }
        if empty.is_empty() {
            eprintln!("{} PromQL expressions each returned series", exprs.len());
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let targets = prometheus_get(prometheus, "/api/v1/targets", &[]).await;
            panic!(
                "{} of {} expressions returned no series within 120 s:\n{}\n\nPrometheus targets: {}",
                empty.len(),
                exprs.len(),
                empty.join("\n"),
                targets["data"]["activeTargets"]
            );
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Every Prometheus template variable (`label_values(selector, label)`) lists this test's
/// namespace, its pipelines and their pods, as Grafana's variable dropdowns would.
async fn every_variable_has_values(prometheus: &str, ns: &str) {
    let vars = BTreeMap::from([("namespace", ns.to_owned()), ("pipeline", ".*".to_owned())]);
    let mut checked = 0;
    for file in ["tracehouse-gateway.json", "tracehouse-operator.json"] {
        for q in grafana::queries(&dashboard(file)) {
            let QueryKind::LabelValues { selector, label } = q.kind else {
                continue;
            };
            let selector = grafana::interpolate(&selector, &vars);
            let body = prometheus_get(
                prometheus,
                &format!("/api/v1/label/{label}/values"),
                &[("match[]", selector.as_str())],
            )
            .await;
            let values: Vec<&str> = body["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let expected = match label.as_str() {
                "namespace" => Some(ns),
                "pipeline" => Some("map"),
                _ => None,
            };
            assert!(
                !values.is_empty() && expected.is_none_or(|e| values.contains(&e)),
                "{file}: {}: label_values({selector}, {label}) gave {values:?}",
                q.origin
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 5, "expected 3 Gateway and 2 Operator variables");
}

/// Every shipped alert rule is loaded by the stack's Prometheus and evaluates without error.
async fn every_rule_is_healthy(prometheus: &str) {
    let body = prometheus_get(prometheus, "/api/v1/rules", &[("type", "alert")]).await;
    let rules: Vec<&Value> = body["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    let signals: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{DASHBOARDS}/gen/alert-signals.json")).unwrap(),
    )
    .unwrap();
    for a in signals["alerts"].as_array().unwrap() {
        let name = a["alert"].as_str().unwrap();
        let rule = rules
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("alert {name} is not loaded by Prometheus (rules: {body})"));
        assert_ne!(rule["health"], "err", "alert {name}: {rule}");
    }
}

/// Runs every SQL query of a Traces dashboard against `database`.otel_traces.
async fn every_sql_query_returns_rows(file: &str, database: &str) {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let range = Range {
        from_ms: now_ms - 3_600_000,
        to_ms: now_ms + 60_000,
        interval_ms: 10_000,
    };
    let queries = grafana::queries(&dashboard(file));
    let mut vars = BTreeMap::from([
        ("database", database.to_owned()),
        ("table", "otel_traces".to_owned()),
    ]);
    // The `service` variable first (as Grafana does): its values feed every panel.
    let service = queries
        .iter()
        .find(|q| q.origin == "variable service")
        .unwrap_or_else(|| panic!("{file}: no `service` variable"));
    let QueryKind::Sql(sql) = &service.kind else {
        panic!("{file}: the service variable is not SQL")
    };
    let services: Vec<String> = run_sql(file, &service.origin, sql, &vars, range)
        .await
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(
        !services.is_empty(),
        "{file}: variable service returned no rows"
    );
    vars.insert("service", grafana::singlequote(&services));
    // A trace to look up: one with an error span, as a user would pick from "Latest error spans".
    let trace_id = clickhouse_query(&format!(
        "SELECT TraceId FROM `{database}`.otel_traces WHERE StatusCode = 'Error' LIMIT 1"
    ))
    .await;
    assert!(!trace_id.is_empty(), "{database}: no error span to look up");
    vars.insert("trace_id", trace_id);

    let mut ran = 0;
    for q in &queries {
        let QueryKind::Sql(sql) = &q.kind else {
            continue;
        };
        let rows = run_sql(file, &q.origin, sql, &vars, range).await;
        assert!(
            !rows.is_empty(),
            "{file}: panel {} returned no rows on {database}.otel_traces",
            q.origin
        );
        // The panels that read an attribute (the part that differs between the variants) must
        // read real values, not empty strings: every loadgen span has these attributes.
        let attribute_column = match q.origin.as_str() {
            "Error spans by HTTP status code / A" => Some(1),
            "Latest error spans / A" => Some(3),
            _ => None,
        };
        if let Some(col) = attribute_column {
            let read = rows
                .lines()
                .filter_map(|l| l.split('\t').nth(col))
                .any(|v| !v.is_empty() && v != "\\N");
            assert!(
                read,
                "{file}: panel {} read no attribute value (column {col}) on {database}: {rows}",
                q.origin
            );
        }
        ran += 1;
    }
    eprintln!("{file}: {ran} SQL queries each returned rows on {database}.otel_traces");
}

async fn run_sql(
    file: &str,
    origin: &str,
    sql: &str,
    vars: &BTreeMap<&str, String>,
    range: Range,
) -> String {
    let text = grafana::interpolate(sql, vars);
    let expanded = grafana::expand_clickhouse_macros(&text, range)
        .unwrap_or_else(|e| panic!("{file}: {origin}: {e}"));
    let resp = reqwest::Client::new()
        .post(stack_var("CLICKHOUSE_URL"))
        .header("X-ClickHouse-User", stack_var("CLICKHOUSE_USER"))
        .header("X-ClickHouse-Key", stack_var("CLICKHOUSE_PASSWORD"))
        .timeout(Duration::from_secs(60))
        .body(format!("{expanded}\nFORMAT TSV"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{file}: {origin}: {e}"));
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert!(
        status.is_success(),
        "{file}: panel {origin} failed on the engine: {status} {body}\nSQL:\n{expanded}"
    );
    body.trim().to_owned()
}
