//! Reading the Secrets a pipeline references, once per reconcile: [`Secrets::read`] fetches
//! each named Secret a single time into a [`SecretSnapshot`], and everything the reconcile
//! needs from them is derived from that one read, purely — how the operator itself reaches
//! the brokers ([`SecretSnapshot::kafka_access`]) and ClickHouse
//! ([`SecretSnapshot::clickhouse_connection`]), and the pods' one-way fingerprint
//! ([`SecretSnapshot::fingerprint`], see [`fingerprint_of`]), so a changed Secret rolls the
//! pods. A Secret that does not exist is recorded as missing, not failed on: only a
//! derivation that needs it fails (`SecretNotFound`), so the brokers are still read for a
//! pipeline whose ClickHouse Secret is missing.
//!
//! Values are held only for the reconcile and never logged, written to status, or copied into
//! another object — except as that fingerprint.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use sha2::{Digest, Sha256};
use tracehouse_contract::oauth::OAuthClient;
use tracehouse_schema::{ClientIdentity, ConnectionConfig, TlsConfig};

use crate::crd::{ClickHouseSpec, CredentialsSecretRef, KafkaSpec, TlsSpec, TracePipeline};
use crate::kafka::KafkaAccess;
use crate::kafka::security::kafka_security_properties;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret {namespace}/{name} referenced by the spec does not exist")]
    NotFound { namespace: String, name: String },
    #[error("secret {namespace}/{name} has no key {key:?}")]
    MissingKey {
        namespace: String,
        name: String,
        key: String,
    },
    #[error("key {key:?} of secret {namespace}/{name} is not UTF-8 text")]
    NotText {
        namespace: String,
        name: String,
        key: String,
    },
    #[error("reading secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// A user name and password read from a Secret. `Debug` never shows the password.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Every Secret name `tp` references: the collectors' ([`crate::builders::referenced_secrets`])
/// and the schema owner's (`spec.clickhouse.ddlCredentials`), which only the operator uses.
pub fn secret_names(tp: &TracePipeline) -> BTreeSet<String> {
    let mut names = crate::builders::referenced_secrets(tp);
    if let Some(r) = &tp.spec.clickhouse.ddl_credentials {
        names.insert(r.name.clone());
    }
    names
}

/// Reads Secrets in one namespace.
#[derive(Clone)]
pub struct Secrets {
    api: Api<Secret>,
    namespace: String,
}

impl Secrets {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    pub fn for_pipeline(client: Client, tp: &TracePipeline) -> Self {
        let ns = tp.metadata.namespace.as_deref().unwrap_or("default");
        Self::new(client, ns)
    }

    /// Each of `names` read once. A Secret that does not exist is recorded as missing; an
    /// API failure fails the read.
    pub async fn read(&self, names: &BTreeSet<String>) -> Result<SecretSnapshot, SecretError> {
        let mut snapshot = SecretSnapshot {
            namespace: self.namespace.clone(),
            ..Default::default()
        };
        for name in names {
            let secret = self
                .api
                .get_opt(name)
                .await
                .map_err(|source| SecretError::Api {
                    namespace: self.namespace.clone(),
                    name: name.clone(),
                    source,
                })?;
            snapshot.insert(name, secret);
        }
        Ok(snapshot)
    }
}

/// The Secrets of one reconcile, as read once (`None`: it does not exist). Pure from here on.
#[derive(Clone, Default)]
pub struct SecretSnapshot {
    namespace: String,
    secrets: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
}

impl fmt::Debug for SecretSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<(&str, bool)> = self
            .secrets
            .iter()
            .map(|(n, s)| (n.as_str(), s.is_some()))
            .collect();
        f.debug_struct("SecretSnapshot")
            .field("namespace", &self.namespace)
            .field("found", &names)
            .finish()
    }
}

impl SecretSnapshot {
    /// Records Secret `name` as read (`None`: not found). `stringData` is write-only on the
    /// server, but a Secret built by hand may carry it: its keys count where `data` lacks them.
    pub fn insert(&mut self, name: &str, secret: Option<Secret>) {
        let data = secret.map(|s| {
            let mut data: BTreeMap<String, Vec<u8>> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            for (k, v) in s.string_data.unwrap_or_default() {
                data.entry(k).or_insert_with(|| v.into_bytes());
            }
            data
        });
        self.secrets.insert(name.to_owned(), data);
    }

    /// The data of Secret `name`; not read or not found is `SecretNotFound`.
    fn data(&self, name: &str) -> Result<&BTreeMap<String, Vec<u8>>, SecretError> {
        self.secrets
            .get(name)
            .and_then(Option::as_ref)
            .ok_or_else(|| SecretError::NotFound {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
            })
    }

    /// The text value of `key` in Secret `name`.
    pub fn value(&self, name: &str, key: &str) -> Result<String, SecretError> {
        let v = self
            .data(name)?
            .get(key)
            .ok_or_else(|| SecretError::MissingKey {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
                key: key.to_owned(),
            })?;
        String::from_utf8(v.clone()).map_err(|_| SecretError::NotText {
            namespace: self.namespace.clone(),
            name: name.to_owned(),
            key: key.to_owned(),
        })
    }

    pub fn credentials(&self, r: &CredentialsSecretRef) -> Result<Credentials, SecretError> {
        Ok(Credentials {
            username: match &r.username {
                Some(u) => u.clone(),
                None => self.value(&r.name, &r.username_key)?,
            },
            password: self.value(&r.name, &r.password_key)?,
        })
    }

    /// `spec.clickhouse.tls` with the Secrets' PEMs inline, for the operator's own client.
    pub fn clickhouse_tls(&self, tls: Option<&TlsSpec>) -> Result<TlsConfig, SecretError> {
        let Some(tls) = tls else {
            return Ok(TlsConfig::default());
        };
        let ca_pem = match &tls.ca {
            Some(r) => Some(self.value(&r.name, &r.key)?),
            None => None,
        };
        let (cert_key, key_key) = tls.client_keys();
        let client = match &tls.client_cert_secret_name {
            Some(name) => Some(ClientIdentity {
                cert_pem: self.value(name, cert_key)?,
                key_pem: self.value(name, key_key)?,
            }),
            None => None,
        };
        Ok(TlsConfig {
            ca_pem,
            client,
            insecure_skip_verify: tls.insecure_skip_verify,
        })
    }

    /// How the operator itself reaches the brokers: the spec's properties plus its security
    /// settings with the Secrets' contents inline (the pods get files; the operator values).
    pub fn kafka_access(&self, spec: &KafkaSpec) -> Result<KafkaAccess, SecretError> {
        let mut properties = spec.properties.clone();
        for (k, v) in kafka_security_properties(spec.tls.as_ref(), spec.sasl.as_ref()) {
            if !k.ends_with(".location") {
                properties.insert(k, v);
            }
        }
        if let Some(tls) = &spec.tls {
            if let Some(ca) = &tls.ca {
                properties.insert("ssl.ca.pem".into(), self.value(&ca.name, &ca.key)?);
            }
            if let Some(name) = &tls.client_cert_secret_name {
                let (cert_key, key_key) = tls.client_keys();
                properties.insert("ssl.certificate.pem".into(), self.value(name, cert_key)?);
                properties.insert("ssl.key.pem".into(), self.value(name, key_key)?);
            }
        }
        if let Some(c) = spec.sasl.as_ref().and_then(|s| s.credentials.as_ref()) {
            let c = self.credentials(c)?;
            properties.insert("sasl.username".into(), c.username);
            properties.insert("sasl.password".into(), c.password);
        }
        let oauth = match spec.sasl.as_ref().and_then(|s| s.oauth.as_ref()) {
            Some(o) => Some(OAuthClient {
                token_endpoint: o.token_endpoint.clone(),
                client_id: self.value(&o.credentials.name, &o.credentials.client_id_key)?,
                client_secret: self.value(&o.credentials.name, &o.credentials.client_secret_key)?,
                scope: o.scope.clone(),
                extensions: o.extensions.clone(),
                // The token endpoint is trusted through the system roots and the Kafka CA.
                ca_pem: match spec.tls.as_ref().and_then(|t| t.ca.as_ref()) {
                    Some(ca) => Some(self.value(&ca.name, &ca.key)?),
                    None => None,
                },
            }),
            None => None,
        };
        Ok(KafkaAccess {
            brokers: spec.bootstrap_servers.clone(),
            properties,
            oauth,
        })
    }

    /// How the operator itself reaches ClickHouse as `credentials` (none: the server's
    /// default user), with `spec.tls`'s PEMs inline.
    pub fn clickhouse_connection(
        &self,
        spec: &ClickHouseSpec,
        credentials: Option<&CredentialsSecretRef>,
    ) -> Result<ConnectionConfig, SecretError> {
        let (user, password) = match credentials {
            Some(r) => {
                let c = self.credentials(r)?;
                (Some(c.username), Some(c.password))
            }
            None => (None, None),
        };
        Ok(ConnectionConfig {
            url: spec.endpoint.clone(),
            user,
            password,
            tls: self.clickhouse_tls(spec.tls.as_ref())?,
        })
    }

    /// The fingerprint of the named Secrets' data (see [`fingerprint_of`]); a missing
    /// Secret is an error, as it would be for the pods.
    pub fn fingerprint(&self, names: &BTreeSet<String>) -> Result<String, SecretError> {
        let mut secrets = Vec::with_capacity(names.len());
        for name in names {
            secrets.push((name.clone(), self.data(name)?.clone()));
        }
        Ok(fingerprint_of(&secrets))
    }
}

/// `sha256:<hex>` (128 bits) over each Secret's name, keys and values, in order: it tells
/// changes apart without carrying any value. Like every unsalted digest it only protects a
/// weak password as well as the password's own strength does (whoever reads pod specs could
/// test guesses against it), which is why it covers all the Secrets' data at once.
pub fn fingerprint_of(secrets: &[(String, std::collections::BTreeMap<String, Vec<u8>>)]) -> String {
    let mut h = Sha256::new();
    for (name, data) in secrets {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        for (k, v) in data {
            h.update((k.len() as u64).to_le_bytes());
            h.update(k.as_bytes());
            h.update((v.len() as u64).to_le_bytes());
            h.update(v);
        }
    }
    let hex: String = h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_changes_with_any_value_and_never_shows_it() {
        let one = |v: &str| {
            vec![(
                "kafka-scram".to_owned(),
                std::collections::BTreeMap::from([
                    ("username".to_owned(), b"writer".to_vec()),
                    ("password".to_owned(), v.as_bytes().to_vec()),
                ]),
            )]
        };
        let a = fingerprint_of(&one("hunter2"));
        assert_eq!(a, fingerprint_of(&one("hunter2")));
        assert_ne!(a, fingerprint_of(&one("hunter3")));
        assert!(a.starts_with("sha256:") && !a.contains("hunter2"));
    }

    fn secret(data: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| {
                        (
                            (*k).to_owned(),
                            k8s_openapi::ByteString(v.as_bytes().to_vec()),
                        )
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn kafka_spec() -> KafkaSpec {
        serde_json::from_value(serde_json::json!({
            "bootstrapServers": "kafka:9094",
            "topics": ["spans"],
            "tls": { "ca": { "name": "kafka-ca", "key": "ca.crt" } },
            "sasl": { "mechanism": "SCRAM-SHA-512", "credentials": { "name": "kafka-scram" } }
        }))
        .unwrap()
    }

    /// A snapshot of `shop` holding the Secrets [`kafka_spec`] names.
    fn kafka_secrets() -> SecretSnapshot {
        let mut s = SecretSnapshot {
            namespace: "shop".into(),
            ..Default::default()
        };
        s.insert("kafka-ca", Some(secret(&[("ca.crt", "PEM")])));
        s.insert(
            "kafka-scram",
            Some(secret(&[("username", "writer"), ("password", "hunter2")])),
        );
        s
    }

    #[test]
    fn one_read_gives_the_kafka_access_the_connection_and_the_fingerprint() {
        let s = kafka_secrets();
        let access = s.kafka_access(&kafka_spec()).unwrap();
        assert_eq!(access.brokers, "kafka:9094");
        assert_eq!(access.properties["ssl.ca.pem"], "PEM");
        assert_eq!(access.properties["sasl.password"], "hunter2");
        assert_eq!(access.properties["security.protocol"], "SASL_SSL");
        assert!(!access.properties.contains_key("ssl.ca.location"));
        // The fingerprint is the one the pods always had: over the Secrets' data.
        let names = BTreeSet::from(["kafka-ca".to_owned(), "kafka-scram".to_owned()]);
        let expected = fingerprint_of(&[
            (
                "kafka-ca".to_owned(),
                BTreeMap::from([("ca.crt".to_owned(), b"PEM".to_vec())]),
            ),
            (
                "kafka-scram".to_owned(),
                BTreeMap::from([
                    ("password".to_owned(), b"hunter2".to_vec()),
                    ("username".to_owned(), b"writer".to_vec()),
                ]),
            ),
        ]);
        assert_eq!(s.fingerprint(&names).unwrap(), expected);
    }

    #[test]
    fn a_missing_secret_fails_only_what_needs_it() {
        let mut s = kafka_secrets();
        s.insert("clickhouse-writer", None);
        assert!(s.kafka_access(&kafka_spec()).is_ok());
        let ch: ClickHouseSpec =
            serde_json::from_value(serde_json::json!({ "endpoint": "http://c:8123" })).unwrap();
        let creds = CredentialsSecretRef {
            name: "clickhouse-writer".into(),
            ..serde_json::from_value(serde_json::json!({ "name": "x" })).unwrap()
        };
        let err = s.clickhouse_connection(&ch, Some(&creds)).unwrap_err();
        assert!(
            matches!(&err, SecretError::NotFound { namespace, name } if namespace == "shop" && name == "clickhouse-writer"),
            "{err}"
        );
        let err = s
            .fingerprint(&BTreeSet::from(["clickhouse-writer".to_owned()]))
            .unwrap_err();
        assert!(matches!(err, SecretError::NotFound { .. }), "{err}");
        // A key the Secret lacks is named with its Secret.
        let err = s.value("kafka-ca", "tls.crt").unwrap_err();
        assert!(matches!(err, SecretError::MissingKey { .. }), "{err}");
    }

    #[test]
    fn oauthbearer_gives_the_operator_the_oauth_client_and_no_sasl_password() {
        let tp = crate::crd::fixtures::oauth();
        let mut s = SecretSnapshot {
            namespace: "shop".into(),
            ..Default::default()
        };
        s.insert("kafka-ca", Some(secret(&[("ca.crt", "PEM")])));
        s.insert(
            "kafka-oauth",
            Some(secret(&[
                ("clientId", "tracehouse"),
                ("clientSecret", "s3cr3t"),
            ])),
        );
        let access = s.kafka_access(&tp.spec.kafka).unwrap();
        assert_eq!(access.properties["sasl.mechanism"], "OAUTHBEARER");
        assert_eq!(access.properties["security.protocol"], "SASL_SSL");
        assert!(!access.properties.contains_key("sasl.password"));
        let o = access.oauth.clone().unwrap();
        assert_eq!(o.token_endpoint, "https://login.example.com/oauth2/token");
        assert_eq!(
            (o.client_id.as_str(), o.client_secret.as_str()),
            ("tracehouse", "s3cr3t")
        );
        assert_eq!(o.scope.as_deref(), Some("kafka"));
        assert_eq!(o.extensions["logicalCluster"], "lkc-12345");
        // The token endpoint is trusted through the Kafka CA too.
        assert_eq!(o.ca_pem.as_deref(), Some("PEM"));
        assert!(!format!("{access:?}").contains("s3cr3t"));
        // The Secret's keys are named when missing.
        s.insert("kafka-oauth", Some(secret(&[("clientId", "tracehouse")])));
        let err = s.kafka_access(&tp.spec.kafka).unwrap_err();
        assert!(
            matches!(&err, SecretError::MissingKey { name, key, .. } if name == "kafka-oauth" && key == "clientSecret"),
            "{err}"
        );
    }

    #[test]
    fn credentials_debug_hides_the_password() {
        let c = Credentials {
            username: "writer".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{c:?}");
        assert!(
            shown.contains("writer") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
