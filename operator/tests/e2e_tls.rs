//! Production connectivity through the operator, on the stack's secured listeners: a pipeline
//! with SCRAM-SHA-512 over TLS to Kafka and HTTPS to ClickHouse, then one with mutual TLS to
//! both, every credential and certificate from Secrets, delivers every span exactly once; and
//! afterwards no password or key appears in pod specs, ConfigMaps, Events, status, the
//! collectors' `/metrics` or any log file of the stack. Failures are named: a wrong SCRAM
//! password is `KafkaAuthFailed`, a plaintext client on the SASL_SSL listener
//! `KafkaProtocolMismatch`, an `http://` URL on ClickHouse's HTTPS port and an unknown CA
//! `ClickHouseTlsFailed`; fixing the Secret (which rolls the pods) heals the pipeline, and the
//! spans produced while it was failing are all delivered, once. Real local stack, no mocks
//! (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tracehouse_e2e::stack_var;
use tracehouse_e2e::unique_name;
use tracehouse_operator::builders::{PIPELINE_LABEL, SECRETS_HASH_ANNOTATION};
use tracehouse_operator::crd::{TracePipeline, condition};

/// The Secret `kafka-scram`: the stack's SCRAM user with `password`; `rotated` adds a key,
/// so the data (and the pods' secrets hash) changes while the credentials stay.
async fn put_scram_secret(client: &Client, ns: &str, password: &str, rotated: bool) {
    let mut data = json!({
        "username": stack_var("KAFKA_SCRAM_USER"),
        "password": password,
    });
    if rotated {
        data["rotated"] = json!("1");
    }
    put_secret(client, ns, "kafka-scram", "Opaque", data).await;
}

/// The stack's CA, SCRAM user and client certificate as the Secrets users would create.
async fn create_tls_secrets(client: &Client, ns: &str) {
    create_clickhouse_secret(client, ns).await;
    put_secret(
        client,
        ns,
        "stack-ca",
        "Opaque",
        json!({ "ca.crt": read(&stack_var("TRACEHOUSE_CA_FILE")) }),
    )
    .await;
    put_scram_secret(client, ns, &stack_var("KAFKA_SCRAM_PASSWORD"), false).await;
    put_secret(
        client,
        ns,
        "client-cert",
        "kubernetes.io/tls",
        json!({
            "tls.crt": read(&stack_var("TRACEHOUSE_CLIENT_CERT")),
            "tls.key": read(&stack_var("TRACEHOUSE_CLIENT_KEY")),
        }),
    )
    .await;
}

fn ca_ref() -> Value {
    json!({ "name": "stack-ca", "key": "ca.crt" })
}

/// SCRAM-SHA-512 over TLS to Kafka, HTTPS to ClickHouse.
fn scram_spec(ns: &str, topic: &str, database: &str) -> Value {
    let mut tp = sample(ns, topic, database);
    tp["spec"]["kafka"]["bootstrapServers"] = json!(stack_var("KAFKA_SASL_SSL_BROKERS"));
    tp["spec"]["kafka"]["tls"] = json!({ "ca": ca_ref() });
    tp["spec"]["kafka"]["sasl"] =
        json!({ "mechanism": "SCRAM-SHA-512", "credentials": { "name": "kafka-scram" } });
    tp["spec"]["clickhouse"]["endpoint"] = json!(stack_var("CLICKHOUSE_TLS_URL"));
    tp["spec"]["clickhouse"]["tls"] = json!({ "ca": ca_ref() });
    tp
}

/// Mutual TLS to Kafka and to ClickHouse, one client certificate.
fn mtls_spec(ns: &str, topic: &str, database: &str) -> Value {
    let mut tp = sample(ns, topic, database);
    let tls = json!({ "ca": ca_ref(), "clientCertSecretName": "client-cert" });
    tp["spec"]["kafka"]["bootstrapServers"] = json!(stack_var("KAFKA_MTLS_BROKERS"));
    tp["spec"]["kafka"]["tls"] = tls.clone();
    tp["spec"]["clickhouse"]["endpoint"] = json!(stack_var("CLICKHOUSE_MTLS_URL"));
    tp["spec"]["clickhouse"]["tls"] = tls;
    tp
}

/// Waits until condition `type_` is False with `reason` and a message containing `needle`
/// (case-insensitive); returns the message.
async fn wait_reason(
    api: &Api<TracePipeline>,
    name: &str,
    type_: &str,
    reason: &str,
    needle: &str,
) -> String {
    wait_for(
        &format!("{type_}=False/{reason} saying {needle:?}"),
        Duration::from_secs(120),
        || async {
            let tp = api.get(name).await.map_err(|e| e.to_string())?;
            let conditions = tp.status.clone().unwrap_or_default().conditions;
            conditions
                .iter()
                .find(|c| {
                    c.type_ == type_
                        && c.status == "False"
                        && c.reason == reason
                        && c.message.to_lowercase().contains(&needle.to_lowercase())
                })
                .map(|c| c.message.clone())
                .ok_or_else(|| serde_json::to_string(&conditions).unwrap())
        },
    )
    .await
}

/// Every object of kind `K` in `ns`, as JSON named `<label> <name>`.
async fn dump<K>(client: &Client, ns: &str, label: &str, out: &mut Vec<(String, String)>)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
    K::DynamicType: Default,
{
    for o in Api::<K>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        out.push((
            format!("{label} {}", o.name_any()),
            serde_json::to_string(&o).unwrap(),
        ));
    }
}

/// Every place a secret could leak to, as text with where it came from.
async fn leak_surfaces(client: &Client, ns: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let lp = ListParams::default();
    for p in Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
        .items
    {
        out.push((
            format!("pod {}", p.name_any()),
            serde_json::to_string(&p).unwrap(),
        ));
        if let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone())
            && let Ok((_, text)) = tracehouse_e2e::k8s::http_get(&ip, 8888, "/metrics").await
        {
            out.push((format!("/metrics of {}", p.name_any()), text));
        }
    }
    dump::<ConfigMap>(client, ns, "configmap", &mut out).await;
    dump::<Event>(client, ns, "event", &mut out).await;
    dump::<TracePipeline>(client, ns, "tracepipeline", &mut out).await;
    // Every log of the stack: components, the node agent, every pod (operator, collectors).
    let state = std::env::var("TRACEHOUSE_STATE").map_or_else(
        |_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/tracehouse/state"),
        PathBuf::from,
    );
    let mut dirs = vec![state.join("logs")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((
                    path.display().to_string(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                ));
            }
        }
    }
    out
}

/// The secret values this file hands to pipelines: passwords and the client key's body.
fn secret_needles() -> Vec<(&'static str, String)> {
    let key = read(&stack_var("TRACEHOUSE_CLIENT_KEY"));
    // A line from the middle of the PEM body: 64 base64 characters no log would hold by chance.
    let key_line = key
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .nth(3)
        .expect("a PEM key body")
        .to_owned();
    vec![
        ("KAFKA_SCRAM_PASSWORD", stack_var("KAFKA_SCRAM_PASSWORD")),
        ("CLICKHOUSE_PASSWORD", stack_var("CLICKHOUSE_PASSWORD")),
        ("client key material", key_line),
    ]
}

async fn assert_no_leak(client: &Client, ns: &str) {
    let surfaces = leak_surfaces(client, ns).await;
    assert!(
        surfaces.iter().any(|(w, _)| w.starts_with("/metrics")),
        "no collector /metrics was read"
    );
    let mut leaks = Vec::new();
    for (what, needle) in secret_needles() {
        assert!(needle.len() >= 16, "{what} is too short to search for");
        for (place, text) in &surfaces {
            if text.contains(&needle) {
                leaks.push(format!("{what} in {place}"));
            }
        }
    }
    assert!(leaks.is_empty(), "secrets leaked: {leaks:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scram_over_tls_and_mutual_tls_deliver_every_span_once_and_leak_nothing() {
    in_namespace("tp-tls", |client, ns| async move {
        let topic = unique_name("tp_tls");
        let database = unique_name("tp_tls");
        create_topic(&topic, 2).await;
        create_tls_secrets(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            // 1. SCRAM-SHA-512 over TLS to Kafka, HTTPS to ClickHouse.
            apply(&api, &scram_spec(&ns, &topic, &database)).await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            let config = config_map_text(&client, &ns, name).await;
            assert!(
                config.contains("SASL_SSL") && config.contains("ca_file"),
                "{config}"
            );
            deliver(&topic, &database, "tls-scram", 3_000).await;

            // 2. Mutual TLS to both (the same table: the spans so far stay exactly once).
            apply(&api, &mtls_spec(&ns, &topic, &database)).await;
            wait_for(
                "the mutual-TLS config rolled out",
                Duration::from_secs(60),
                || async {
                    let text = config_map_text(&client, &ns, name).await;
                    if text.contains("client_cert_file")
                        && text.contains("ssl.certificate.location")
                    {
                        Ok(())
                    } else {
                        Err(text)
                    }
                },
            )
            .await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            deliver(&topic, &database, "tls-mutual", 3_000).await;
            deliver(&topic, &database, "tls-scram", 3_000).await;

            // 3. Nothing secret anywhere it could be read.
            assert_no_leak(&client, &ns).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn security_failures_are_named_and_a_fixed_secret_rolls_the_pods_and_heals() {
    in_namespace("tp-tls-fail", |client, ns| async move {
        let topic = unique_name("tp_tlsf");
        let database = unique_name("tp_tlsf");
        create_topic(&topic, 2).await;
        create_tls_secrets(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            // 2. A wrong SCRAM password.
            put_scram_secret(&client, &ns, "not-the-password", false).await;
            let spec = scram_spec(&ns, &topic, &database);
            apply(&api, &spec).await;
            wait_reason(
                &api,
                name,
                condition::KAFKA_REACHABLE,
                "KafkaAuthFailed",
                "authentication",
            )
            .await;
            // Spans keep arriving while the pipeline cannot read them: none may be lost.
            produce_spans(&topic, "tls-while-failing", 2_000).await;

            // A plaintext client on the SASL_SSL listener, named as such.
            let mut plain = spec.clone();
            let kafka = plain["spec"]["kafka"].as_object_mut().unwrap();
            kafka.remove("tls");
            kafka.remove("sasl");
            apply(&api, &plain).await;
            wait_reason(
                &api,
                name,
                condition::KAFKA_REACHABLE,
                "KafkaProtocolMismatch",
                "security settings do not match",
            )
            .await;

            // An http:// ClickHouse URL on the HTTPS port, named as such.
            let mut plain_ch = spec.clone();
            plain_ch["spec"]["clickhouse"]["endpoint"] =
                json!(stack_var("CLICKHOUSE_TLS_URL").replacen("https://", "http://", 1));
            plain_ch["spec"]["clickhouse"]
                .as_object_mut()
                .unwrap()
                .remove("tls");
            put_scram_secret(&client, &ns, &stack_var("KAFKA_SCRAM_PASSWORD"), false).await;
            apply(&api, &plain_ch).await;
            wait_reason(
                &api,
                name,
                condition::SCHEMA_READY,
                "ClickHouseTlsFailed",
                "should be https://",
            )
            .await;

            // 3. The right password; ClickHouse's certificate checked against an unknown CA.
            create_secret_other_ca(&client, &ns).await;
            let mut bad_ca = spec.clone();
            bad_ca["spec"]["clickhouse"]["tls"] =
                json!({ "ca": { "name": "other-ca", "key": "ca.crt" } });
            apply(&api, &bad_ca).await;
            wait_reason(
                &api,
                name,
                condition::SCHEMA_READY,
                "ClickHouseTlsFailed",
                "unknown CA",
            )
            .await;

            // 4. Fixed: Ready, the spans that waited and new ones delivered, each once.
            apply(&api, &spec).await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            deliver(&topic, &database, "tls-healed", 2_000).await;
            await_delivered(&database, "tls-while-failing", 2_000, Attributes::Map).await;

            // 5. A rotated Secret rolls the pods (same config, new secrets hash).
            let before = secrets_hash_of_pods(&client, &ns, name).await;
            put_scram_secret(&client, &ns, &stack_var("KAFKA_SCRAM_PASSWORD"), true).await;
            wait_for(
                "pods with a new secrets hash",
                Duration::from_secs(180),
                || async {
                    let now = secrets_hash_of_pods(&client, &ns, name).await;
                    if !now.is_empty() && now.iter().all(|h| Some(h) != before.first()) {
                        Ok(())
                    } else {
                        Err(format!("{before:?} → {now:?}"))
                    }
                },
            )
            .await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            deliver(&topic, &database, "tls-rotated", 2_000).await;
        })
        .await;
    })
    .await;
}

async fn create_secret_other_ca(client: &Client, ns: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "other-ca" },
        "stringData": { "ca.crt": read(&stack_var("TRACEHOUSE_OTHER_CA_FILE")) },
    }))
    .unwrap();
    let _ = secrets.create(&PostParams::default(), &secret).await;
}

async fn secrets_hash_of_pods(client: &Client, ns: &str, name: &str) -> Vec<String> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{PIPELINE_LABEL}={name}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.annotations().get(SECRETS_HASH_ANNOTATION).cloned())
        .collect()
}
