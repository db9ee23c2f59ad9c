//! Pipelines the unit tests share (the builders', the chart defaults', the autoscaler's):
//! `TracePipeline`s from a spec written as JSON, stored in namespace `shop` with a uid, as
//! the API server would hand them over.

use crate::crd::{TracePipeline, TracePipelineSpec};

pub fn pipeline(spec: serde_json::Value) -> TracePipeline {
    let spec: TracePipelineSpec = serde_json::from_value(spec).unwrap();
    let mut tp = TracePipeline::new("orders", spec);
    tp.metadata.namespace = Some("shop".into());
    tp.metadata.uid = Some("0b7c0c3e-3c1d-4a8e-9a57-1f5f2f4c6d10".into());
    tp
}

pub fn sample() -> TracePipeline {
    pipeline(serde_json::json!({
        "kafka": { "bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092", "topics": ["otlp_spans"] },
        "clickhouse": {
            "endpoint": "http://clickhouse.db:8123",
            "credentials": { "name": "clickhouse-writer" }
        },
        "collector": {
            "image": "ghcr.io/tracehouse/collector:0.1.0",
            "env": [{ "name": "EXTRA", "value": "1" }]
        },
        "replicas": { "partitionsPerReplica": 2, "min": 1, "max": 6 }
    }))
}

/// Kafka over SASL_SSL with OAUTHBEARER (Confluent Cloud's extensions), the Kafka CA given.
pub fn oauth() -> TracePipeline {
    pipeline(serde_json::json!({
        "kafka": {
            "bootstrapServers": "kafka:9093",
            "tls": { "ca": { "name": "kafka-ca", "key": "ca.crt" } },
            "sasl": {
                "mechanism": "OAUTHBEARER",
                "oauth": {
                    "tokenEndpoint": "https://login.example.com/oauth2/token",
                    "credentials": { "name": "kafka-oauth" },
                    "scope": "kafka",
                    "extensions": { "logicalCluster": "lkc-12345", "identityPoolId": "pool-AbCd" }
                }
            }
        },
        "clickhouse": { "endpoint": "http://clickhouse.db:8123" },
        "collector": { "image": "ghcr.io/tracehouse/collector:0.1.0" }
    }))
}

/// Kafka over SASL_SSL, ClickHouse over mutual TLS with credentials: five Secrets referenced.
pub fn secured() -> TracePipeline {
    pipeline(serde_json::json!({
        "kafka": {
            "bootstrapServers": "kafka:9093",
            "tls": { "ca": { "name": "kafka-ca", "key": "ca.crt" } },
            "sasl": { "mechanism": "SCRAM-SHA-512", "credentials": { "name": "kafka-scram" } }
        },
        "clickhouse": {
            "endpoint": "https://clickhouse.db:8443",
            "credentials": { "name": "clickhouse-writer" },
            "tls": { "ca": { "name": "clickhouse-ca", "key": "ca.pem" }, "clientCertSecretName": "clickhouse-client" }
        },
        "collector": { "image": "ghcr.io/tracehouse/collector:0.1.0" }
    }))
}
