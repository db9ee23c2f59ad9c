//! The collector pod's volumes and their mounts: its configuration (the ConfigMap) and the
//! Secrets it reads as files — the Kafka and ClickHouse CA bundles and client certificates, the
//! Kafka OAuth client id and secret, the processing hash key. Pure; `gateway.rs` puts them in
//! the Deployment.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, KeyToPath, SecretVolumeSource, Volume, VolumeMount,
};

use super::clickhouse_tls::{CLICKHOUSE_CA_DIR, CLICKHOUSE_CLIENT_CERT_DIR};
use super::config::HASH_KEY_DIR;
use super::{CONFIG_DIR, Names};
use crate::crd::{CLIENT_CERT_KEY, CLIENT_KEY_KEY, TlsSpec, TracePipeline};
use crate::kafka::security::{
    KAFKA_CA_DIR, KAFKA_CLIENT_CERT_DIR, KAFKA_OAUTH_CLIENT_ID, KAFKA_OAUTH_CLIENT_SECRET,
    KAFKA_OAUTH_DIR,
};

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
    // The OAUTHBEARER client id and secret, as `client-id` and `client-secret` whatever their
    // keys; readable by the collector's user (65532), as the client key is.
    if let Some(o) = tp.spec.kafka.sasl.as_ref().and_then(|s| s.oauth.as_ref()) {
        let item = |key: &str, path: &str| KeyToPath {
            key: key.to_owned(),
            path: path.to_owned(),
            mode: None,
        };
        let client = SecretVolumeSource {
            secret_name: Some(o.credentials.name.clone()),
            default_mode: Some(0o444),
            items: Some(vec![
                item(&o.credentials.client_id_key, KAFKA_OAUTH_CLIENT_ID),
                item(&o.credentials.client_secret_key, KAFKA_OAUTH_CLIENT_SECRET),
            ]),
            ..Default::default()
        };
        mount("kafka-oauth", KAFKA_OAUTH_DIR, client);
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

    /// OAUTHBEARER: the client id and secret are files the collector reads (mounted from the
    /// Secret, readable by its user), the config names them and the CA, and nothing of the
    /// Secret reaches the ConfigMap or the environment.
    #[test]
    fn the_oauth_client_is_mounted_and_named_by_path_only() {
        let mut tp = crate::crd::fixtures::oauth();
        if let Some(o) = tp.spec.kafka.sasl.as_mut().and_then(|s| s.oauth.as_mut()) {
            o.credentials.client_id_key = "id".into();
            o.credentials.client_secret_key = "secret".into();
        }
        let (volumes, mounts) = volumes(&tp, &Names::of("p"));
        let v = volumes.iter().find(|v| v.name == "kafka-oauth").unwrap();
        let secret = v.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("kafka-oauth"));
        assert_eq!(secret.default_mode, Some(0o444));
        let items: Vec<(&str, &str)> = secret
            .items
            .iter()
            .flatten()
            .map(|i| (i.key.as_str(), i.path.as_str()))
            .collect();
        assert_eq!(items, [("id", "client-id"), ("secret", "client-secret")]);
        assert!(mounts.iter().any(|m| m.mount_path == KAFKA_OAUTH_DIR));

        let d = crate::builders::desired(&tp, 2).unwrap();
        let yaml = &d.config_map.data.as_ref().unwrap()[crate::builders::CONFIG_KEY];
        let cfg: tracehouse_contract::config::Config =
            tracehouse_contract::yaml::from_str(yaml).unwrap();
        let o = cfg.kafka.oauth.unwrap();
        assert_eq!(o.token_endpoint, "https://login.example.com/oauth2/token");
        assert_eq!(
            o.client_secret_file,
            std::path::Path::new("/etc/tracehouse/kafka-oauth/client-secret")
        );
        assert_eq!(
            o.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/tracehouse/kafka-tls/ca/ca.crt"))
        );
        assert_eq!(o.extensions["identityPoolId"], "pool-AbCd");
        assert_eq!(cfg.kafka.properties["sasl.mechanism"], "OAUTHBEARER");
        assert!(!yaml.contains("sasl.username") && !yaml.contains("sasl.password"));
        let env = d.deployment.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap_or_default();
        assert!(
            !env.iter().any(|e| e.name.starts_with("KAFKA_SASL")),
            "{env:?}"
        );
        assert!(crate::builders::referenced_secrets(&tp).contains("kafka-oauth"));
    }

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
