//! librdkafka security settings implied by `spec.kafka.tls` and `spec.kafka.sasl`, the
//! collector's `kafka.oauth` for OAUTHBEARER ([`kafka_oauth_files`]), and where the collector
//! pods find the mounted Kafka certificates and OAuth client. Secrets never appear here. Pure:
//! the builders render these settings into the collector's config and mount the Secrets at
//! these paths, and the operator's own client takes them with the Secrets' contents inline
//! (`secrets.rs`). (The ClickHouse side is `builders/clickhouse_tls.rs`.)

use std::collections::BTreeMap;

use tracehouse_contract::config::OAuthConfig;

use crate::crd::{KafkaSasl, TlsSpec};

/// Where the CA Secret is mounted in the collector container.
pub(crate) const KAFKA_CA_DIR: &str = "/etc/tracehouse/kafka-tls/ca";
/// Where the client certificate Secret is mounted in the collector container.
pub(crate) const KAFKA_CLIENT_CERT_DIR: &str = "/etc/tracehouse/kafka-tls/client";
/// Where the OAUTHBEARER client id and secret (`spec.kafka.sasl.oauth.credentials`) are
/// mounted in the collector container, as `client-id` and `client-secret`.
pub(crate) const KAFKA_OAUTH_DIR: &str = "/etc/tracehouse/kafka-oauth";
pub(crate) const KAFKA_OAUTH_CLIENT_ID: &str = "client-id";
pub(crate) const KAFKA_OAUTH_CLIENT_SECRET: &str = "client-secret";

/// The collector's `kafka.oauth` for `spec.kafka.sasl.oauth`, with the client id and secret
/// as the files the pods mount, and the Kafka CA trusted for the token endpoint too.
pub fn kafka_oauth_files(tls: Option<&TlsSpec>, sasl: Option<&KafkaSasl>) -> Option<OAuthConfig> {
    let o = sasl?.oauth.as_ref()?;
    Some(OAuthConfig {
        token_endpoint: o.token_endpoint.clone(),
        client_id_file: format!("{KAFKA_OAUTH_DIR}/{KAFKA_OAUTH_CLIENT_ID}").into(),
        client_secret_file: format!("{KAFKA_OAUTH_DIR}/{KAFKA_OAUTH_CLIENT_SECRET}").into(),
        scope: o.scope.clone(),
        extensions: o.extensions.clone(),
        ca_file: tls
            .and_then(|t| t.ca.as_ref())
            .map(|_| format!("{KAFKA_CA_DIR}/ca.crt").into()),
    })
}

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
