//! Strimzi's Secrets used as Strimzi writes them, on the stack's secured listeners: a SCRAM
//! KafkaUser's Secret (`password` and `sasl.jaas.config`, no user name: the user is the
//! KafkaUser, whose name the Secret carries), a TLS KafkaUser's Secret (`ca.crt`, `user.crt`,
//! `user.key`, `user.p12`, `user.password`) and the cluster CA Secret
//! (`<cluster>-cluster-ca-cert`: `ca.crt`, `ca.p12`, `ca.password`). A pipeline on each kind of
//! user is Ready and delivers every span once; nothing is copied into a Secret of another
//! shape, so Strimzi's rotations reach the pipeline. Real local stack, no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use serde_json::{Value, json};
use tracehouse_e2e::{stack_var, unique_name};
use tracehouse_operator::crd::TracePipeline;

const CLUSTER: &str = "my-cluster";
const TLS_USER: &str = "tracehouse-tls";

fn strimzi_labels() -> Value {
    json!({ "strimzi.io/cluster": CLUSTER, "strimzi.io/kind": "KafkaUser" })
}

/// A Secret exactly as Strimzi's operators write it (`data`, their labels, type Opaque).
async fn put_strimzi_secret(client: &Client, ns: &str, name: &str, labels: Value, data: Value) {
    let data = data
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                ByteString(v.as_str().unwrap().as_bytes().to_vec()),
            )
        })
        .collect();
    let mut secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "type": "Opaque",
    }))
    .unwrap();
    secret.data = Some(data);
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&Default::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
}

async fn strimzi_secrets(client: &Client, ns: &str) {
    let user = stack_var("KAFKA_SCRAM_USER");
    let password = stack_var("KAFKA_SCRAM_PASSWORD");
    put_strimzi_secret(
        client,
        ns,
        &format!("{CLUSTER}-cluster-ca-cert"),
        json!({ "strimzi.io/cluster": CLUSTER, "strimzi.io/kind": "Kafka" }),
        json!({
            "ca.crt": read(&stack_var("TRACEHOUSE_CA_FILE")),
            "ca.p12": "not-used-pkcs12",
            "ca.password": "not-used",
        }),
    )
    .await;
    put_strimzi_secret(
        client,
        ns,
        &user,
        strimzi_labels(),
        json!({
            "password": password,
            "sasl.jaas.config": format!(
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{password}\";"
            ),
        }),
    )
    .await;
    put_strimzi_secret(
        client,
        ns,
        TLS_USER,
        strimzi_labels(),
        json!({
            // Strimzi's clients CA; the brokers' CA is the cluster CA Secret's.
            "ca.crt": read(&stack_var("TRACEHOUSE_CA_FILE")),
            "user.crt": read(&stack_var("TRACEHOUSE_CLIENT_CERT")),
            "user.key": read(&stack_var("TRACEHOUSE_CLIENT_KEY")),
            "user.p12": "not-used-pkcs12",
            "user.password": "not-used",
        }),
    )
    .await;
}

fn cluster_ca() -> Value {
    json!({ "name": format!("{CLUSTER}-cluster-ca-cert"), "key": "ca.crt" })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strimzi_kafka_user_secrets_are_used_as_they_are() {
    in_namespace("tp-strimzi", |client, ns| async move {
        let topic = unique_name("tp_strimzi");
        let database = unique_name("tp_strimzi");
        create_topic(&topic, 2).await;
        create_clickhouse_secret(&client, &ns).await;
        strimzi_secrets(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            // 1. A SCRAM-SHA-512 KafkaUser: its Secret's name is the user name.
            let user = stack_var("KAFKA_SCRAM_USER");
            let mut tp = sample(&ns, &topic, &database);
            tp["spec"]["kafka"]["bootstrapServers"] = json!(stack_var("KAFKA_SASL_SSL_BROKERS"));
            tp["spec"]["kafka"]["tls"] = json!({ "ca": cluster_ca() });
            tp["spec"]["kafka"]["sasl"] = json!({
                "mechanism": "SCRAM-SHA-512",
                "credentials": { "name": user, "username": user }
            });
            apply(&api, &tp).await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            deliver(&topic, &database, "strimzi-scram", 2_000).await;

            // 2. A TLS KafkaUser: user.crt and user.key, on the mutual-TLS listener.
            let mut tp = sample(&ns, &topic, &database);
            tp["spec"]["kafka"]["bootstrapServers"] = json!(stack_var("KAFKA_MTLS_BROKERS"));
            tp["spec"]["kafka"]["tls"] = json!({
                "ca": cluster_ca(),
                "clientCertSecretName": TLS_USER,
                "clientCertKey": "user.crt",
                "clientKeyKey": "user.key"
            });
            apply(&api, &tp).await;
            wait_for(
                "the TLS user's config rolled out",
                Duration::from_secs(60),
                || async {
                    let text = config_map_text(&client, &ns, name).await;
                    if text.contains("ssl.certificate.location") && !text.contains("SASL") {
                        Ok(())
                    } else {
                        Err(text)
                    }
                },
            )
            .await;
            wait_ready(&api, name, 2, 1, Duration::from_secs(180)).await;
            deliver(&topic, &database, "strimzi-tls", 2_000).await;
            deliver(&topic, &database, "strimzi-scram", 2_000).await;
        })
        .await;
    })
    .await;
}
