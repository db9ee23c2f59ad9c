//! The collector pod's volumes and their mounts: its configuration (the ConfigMap) and the
//! Secrets it reads as files — the Kafka and ClickHouse CA bundles and client certificates, the
//! processing hash key. Pure; `gateway.rs` puts them in the Deployment.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, KeyToPath, SecretVolumeSource, Volume, VolumeMount,
};

use super::clickhouse_tls::{CLICKHOUSE_CA_DIR, CLICKHOUSE_CLIENT_CERT_DIR};
use super::config::HASH_KEY_DIR;
use super::{CONFIG_DIR, Names};
use crate::crd::{CLIENT_CERT_KEY, CLIENT_KEY_KEY, TlsSpec, TracePipeline};
use crate::kafka::security::{KAFKA_CA_DIR, KAFKA_CLIENT_CERT_DIR};

pub(super) fn volumes(tp: &TracePipeline, names: &Names) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = vec![Volume {
        name: "config".to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: names.config_map.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "config".to_owned(),
        mount_path: CONFIG_DIR.to_owned(),
        read_only: Some(true),
        ..Default::default()
    }];
    let kafka = tp.spec.kafka.tls.as_ref();
    let clickhouse = tp.spec.clickhouse.tls.as_ref();
    let mut mount = |name: &str, dir: &str, secret: SecretVolumeSource| {
        volumes.push(Volume {
            name: name.to_owned(),
            secret: Some(secret),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: name.to_owned(),
            mount_path: dir.to_owned(),
            read_only: Some(true),
            ..Default::default()
        });
    };
    // One key of the CA Secret, renamed `ca.crt`.
    let ca = |r: &crate::crd::SecretKeyRef| SecretVolumeSource {
        secret_name: Some(r.name.clone()),
        items: Some(vec![KeyToPath {
            key: r.key.clone(),
            path: "ca.crt".to_owned(),
            mode: None,
        }]),
        ..Default::default()
    };
    // The client certificate and key, as `tls.crt` and `tls.key` whatever their keys in the
    // Secret (a Strimzi KafkaUser's are `user.crt`, `user.key`; a `kubernetes.io/tls`
    // Secret's already are: mounted whole, as before). Readable by all: Secret files are owned
    // by root and the collector runs as 65532 (0400 made the key unreadable to it); the pod
    // has no other user.
    let client_cert = |t: &TlsSpec| {
        let (cert, key) = t.client_keys();
        let renamed = (cert != CLIENT_CERT_KEY || key != CLIENT_KEY_KEY).then(|| {
            vec![
                KeyToPath {
                    key: cert.to_owned(),
                    path: CLIENT_CERT_KEY.to_owned(),
                    mode: None,
                },
                KeyToPath {
                    key: key.to_owned(),
                    path: CLIENT_KEY_KEY.to_owned(),
                    mode: None,
                },
            ]
        });
        SecretVolumeSource {
            secret_name: t.client_cert_secret_name.clone(),
            default_mode: Some(0o444),
            items: renamed,
            ..Default::default()
        }
    };
    if let Some(r) = kafka.and_then(|t| t.ca.as_ref()) {
        mount("kafka-ca", KAFKA_CA_DIR, ca(r));
    }
    if let Some(t) = kafka.filter(|t| t.client_cert_secret_name.is_some()) {
        mount("kafka-client-cert", KAFKA_CLIENT_CERT_DIR, client_cert(t));
    }
    if let Some(r) = clickhouse.and_then(|t| t.ca.as_ref()) {
        mount("clickhouse-ca", CLICKHOUSE_CA_DIR, ca(r));
    }
    // The processing hash key, as `hash.key`; readable by the collector's user (65532).
    if let Some(r) = tp
        .spec
        .processing
        .as_ref()
        .and_then(|p| p.hash_key.as_ref())
    {
        let key = SecretVolumeSource {
            secret_name: Some(r.name.clone()),
            default_mode: Some(0o444),
            items: Some(vec![KeyToPath {
                key: r.key.clone(),
                path: "hash.key".to_owned(),
                mode: None,
            }]),
            ..Default::default()
        };
        mount("processing-hash-key", HASH_KEY_DIR, key);
    }
    if let Some(t) = clickhouse.filter(|t| t.client_cert_secret_name.is_some()) {
        mount(
            "clickhouse-client-cert",
            CLICKHOUSE_CLIENT_CERT_DIR,
            client_cert(t),
        );
    }
    (volumes, mounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processing_hash_key_is_mounted_as_a_file_the_collector_can_read() {
        let mut tp = crate::crd::fixtures::sample();
        tp.spec.processing = Some(crate::crd::ProcessingSpec {
            rules: Vec::new(),
            hash_key: Some(crate::crd::SecretKeyRef {
                name: "pii-key".into(),
                key: "hmac".into(),
            }),
        });
        let (volumes, mounts) = volumes(&tp, &Names::of("p"));
        let v = volumes
            .iter()
            .find(|v| v.name == "processing-hash-key")
            .unwrap();
        let secret = v.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("pii-key"));
        assert_eq!(secret.default_mode, Some(0o444));
        let items = secret.items.as_ref().unwrap();
        assert_eq!(
            (items[0].key.as_str(), items[0].path.as_str()),
            ("hmac", "hash.key")
        );
        assert!(mounts.iter().any(|m| m.mount_path == HASH_KEY_DIR));
    }
}
