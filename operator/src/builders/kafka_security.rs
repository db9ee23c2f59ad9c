//! librdkafka security settings implied by `spec.kafka.tls` and `spec.kafka.sasl`, and where
//! the collector pods find the mounted Kafka certificates. Secrets never appear here. (The
//! ClickHouse side is `clickhouse_tls.rs`.)

use std::collections::BTreeMap;

use crate::crd::{KafkaSasl, TlsSpec};

/// Where the CA Secret is mounted in the collector container.
pub(super) const KAFKA_CA_DIR: &str = "/etc/tracehouse/kafka-tls/ca";
/// Where the client certificate Secret is mounted in the collector container.
pub(super) const KAFKA_CLIENT_CERT_DIR: &str = "/etc/tracehouse/kafka-tls/client";
/// librdkafka security settings implied by `tls`/`sasl`, with certificate paths as the
/// collector pods see them. Secrets never appear here: SASL credentials reach the collector
/// through environment variables filled from the Secret.
pub fn kafka_security_properties(
    tls: Option<&TlsSpec>,
    sasl: Option<&KafkaSasl>,
) -> BTreeMap<String, String> {
    let mut p = BTreeMap::new();
    let protocol = match (tls.is_some(), sasl.is_some()) {
        (false, false) => return p,
        (true, false) => "SSL",
        (false, true) => "SASL_PLAINTEXT",
        (true, true) => "SASL_SSL",
    };
    p.insert("security.protocol".to_owned(), protocol.to_owned());
    if let Some(sasl) = sasl {
        p.insert(
            "sasl.mechanism".to_owned(),
            sasl.mechanism.as_str().to_owned(),
        );
    }
    if let Some(tls) = tls {
        if tls.ca.is_some() {
            p.insert(
                "ssl.ca.location".to_owned(),
                format!("{KAFKA_CA_DIR}/ca.crt"),
            );
        }
        if tls.client_cert_secret_name.is_some() {
            p.insert(
                "ssl.certificate.location".to_owned(),
                format!("{KAFKA_CLIENT_CERT_DIR}/tls.crt"),
            );
            p.insert(
                "ssl.key.location".to_owned(),
                format!("{KAFKA_CLIENT_CERT_DIR}/tls.key"),
            );
        }
        if tls.insecure_skip_verify {
            p.insert(
                "enable.ssl.certificate.verification".to_owned(),
                "false".to_owned(),
            );
        }
    }
    p
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::fixtures::pipeline;
    use super::super::{SECRETS_HASH_ANNOTATION, desired, referenced_secrets};
    use super::*;

    pub(in crate::builders) fn secured() -> crate::crd::TracePipeline {
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

    /// Strimzi's KafkaUser Secrets as they are: a SCRAM user's holds only `password` (the
    /// user is the Secret's name), a TLS user's `user.crt`/`user.key`/`ca.crt`.
    #[test]
    fn strimzi_kafka_user_secrets_are_used_as_they_are() {
        let tp = pipeline(serde_json::json!({
            "kafka": {
                "bootstrapServers": "my-cluster-kafka-bootstrap:9093",
                "tls": {
                    "ca": { "name": "my-cluster-cluster-ca-cert", "key": "ca.crt" },
                    "clientCertSecretName": "tls-user",
                    "clientCertKey": "user.crt",
                    "clientKeyKey": "user.key"
                },
                "sasl": {
                    "mechanism": "SCRAM-SHA-512",
                    "credentials": { "name": "scram-user", "username": "scram-user" }
                }
            },
            "clickhouse": { "endpoint": "http://clickhouse.db:8123" }
        }));
        let d = desired(&tp, 2).unwrap();
        let pod = d.deployment.spec.unwrap().template.spec.unwrap();
        let env = pod.containers[0].env.clone().unwrap();
        let user = env
            .iter()
            .find(|e| e.name == "KAFKA_SASL_USERNAME")
            .unwrap();
        assert_eq!(user.value.as_deref(), Some("scram-user"));
        let password = env
            .iter()
            .find(|e| e.name == "KAFKA_SASL_PASSWORD")
            .unwrap();
        let from = password
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (from.name.as_str(), from.key.as_str()),
            ("scram-user", "password")
        );
        let cert = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "kafka-client-cert")
            .and_then(|v| v.secret)
            .unwrap();
        let items: Vec<(String, String)> = cert
            .items
            .unwrap()
            .into_iter()
            .map(|i| (i.key, i.path))
            .collect();
        assert_eq!(
            items,
            [
                ("user.crt".to_owned(), "tls.crt".to_owned()),
                ("user.key".to_owned(), "tls.key".to_owned())
            ]
        );
        // The collector reads the same paths as with a kubernetes.io/tls Secret.
        let p = kafka_security_properties(tp.spec.kafka.tls.as_ref(), tp.spec.kafka.sasl.as_ref());
        assert_eq!(
            p["ssl.certificate.location"],
            format!("{KAFKA_CLIENT_CERT_DIR}/tls.crt")
        );
        // A kubernetes.io/tls Secret is mounted whole, as before (no rollout on upgrade).
        let plain = secured();
        let d = desired(&plain, 2).unwrap();
        let v = d
            .deployment
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .volumes
            .unwrap();
        let c = v
            .iter()
            .find(|v| v.name == "clickhouse-client-cert")
            .unwrap();
        assert_eq!(c.secret.as_ref().unwrap().items, None);
    }

    #[test]
    fn every_referenced_secret_feeds_the_roll_annotation() {
        let tp = secured();
        let names: Vec<String> = referenced_secrets(&tp).into_iter().collect();
        assert_eq!(
            names,
            [
                "clickhouse-ca",
                "clickhouse-client",
                "clickhouse-writer",
                "kafka-ca",
                "kafka-scram"
            ]
        );
        let d = desired(&tp, 2)
            .unwrap()
            .with_secrets_hash("sha256:ab".into());
        let annotations = d
            .deployment
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap();
        assert_eq!(annotations[SECRETS_HASH_ANNOTATION], "sha256:ab");
    }
}
