//! Reading the Secrets a pipeline references: the operator itself needs the credentials to
//! run migrations and read Kafka metadata ([`Secrets::kafka_access`],
//! [`Secrets::clickhouse_connection`]). Values are held only for the call and never
//! logged, written to status, or copied into another object — except as a one-way
//! fingerprint ([`fingerprint_of`]) on the pod template, so a changed Secret rolls the pods.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use sha2::{Digest, Sha256};
use tracehouse_schema::{ClientIdentity, ConnectionConfig, TlsConfig};

use crate::crd::{
    ClickHouseSpec, CredentialsSecretRef, KafkaSpec, SecretKeyRef, TlsSpec, TracePipeline,
};
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

    /// Secret `name`, or why it cannot be read.
    async fn get(&self, name: &str) -> Result<Secret, SecretError> {
        self.api
            .get_opt(name)
            .await
            .map_err(|source| SecretError::Api {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
                source,
            })?
            .ok_or_else(|| SecretError::NotFound {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
            })
    }

    /// The text value of `key` in Secret `name`.
    pub async fn value(&self, name: &str, key: &str) -> Result<String, SecretError> {
        let secret = self.get(name).await?;
        let missing = || SecretError::MissingKey {
            namespace: self.namespace.clone(),
            name: name.to_owned(),
            key: key.to_owned(),
        };
        // `stringData` is write-only on the server, but a Secret built by hand may carry it.
        if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
            return String::from_utf8(v.0.clone()).map_err(|_| SecretError::NotText {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
                key: key.to_owned(),
            });
        }
        secret
            .string_data
            .as_ref()
            .and_then(|d| d.get(key))
            .cloned()
            .ok_or_else(missing)
    }

    pub async fn key(&self, r: &SecretKeyRef) -> Result<String, SecretError> {
        self.value(&r.name, &r.key).await
    }

    pub async fn credentials(&self, r: &CredentialsSecretRef) -> Result<Credentials, SecretError> {
        Ok(Credentials {
            username: match &r.username {
                Some(u) => u.clone(),
                None => self.value(&r.name, &r.username_key).await?,
            },
            password: self.value(&r.name, &r.password_key).await?,
        })
    }

    /// `spec.clickhouse.tls` with the Secrets' PEMs inline, for the operator's own client.
    pub async fn clickhouse_tls(&self, tls: Option<&TlsSpec>) -> Result<TlsConfig, SecretError> {
        let Some(tls) = tls else {
            return Ok(TlsConfig::default());
        };
        let ca_pem = match &tls.ca {
            Some(r) => Some(self.key(r).await?),
            None => None,
        };
        let (cert_key, key_key) = tls.client_keys();
        let client = match &tls.client_cert_secret_name {
            Some(name) => Some(ClientIdentity {
                cert_pem: self.value(name, cert_key).await?,
                key_pem: self.value(name, key_key).await?,
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
    pub async fn kafka_access(&self, spec: &KafkaSpec) -> Result<KafkaAccess, SecretError> {
        let mut properties = spec.properties.clone();
        for (k, v) in kafka_security_properties(spec.tls.as_ref(), spec.sasl.as_ref()) {
            if !k.ends_with(".location") {
                properties.insert(k, v);
            }
        }
        if let Some(tls) = &spec.tls {
            if let Some(ca) = &tls.ca {
                properties.insert("ssl.ca.pem".into(), self.key(ca).await?);
            }
            if let Some(name) = &tls.client_cert_secret_name {
                let (cert_key, key_key) = tls.client_keys();
                properties.insert(
                    "ssl.certificate.pem".into(),
                    self.value(name, cert_key).await?,
                );
                properties.insert("ssl.key.pem".into(), self.value(name, key_key).await?);
            }
        }
        if let Some(sasl) = &spec.sasl {
            let c = self.credentials(&sasl.credentials).await?;
            properties.insert("sasl.username".into(), c.username);
            properties.insert("sasl.password".into(), c.password);
        }
        Ok(KafkaAccess {
            brokers: spec.bootstrap_servers.clone(),
            properties,
        })
    }

    /// How the operator itself reaches ClickHouse as `credentials` (none: the server's
    /// default user), with `spec.tls`'s PEMs inline.
    pub async fn clickhouse_connection(
        &self,
        spec: &ClickHouseSpec,
        credentials: Option<&CredentialsSecretRef>,
    ) -> Result<ConnectionConfig, SecretError> {
        let (user, password) = match credentials {
            Some(r) => {
                let c = self.credentials(r).await?;
                (Some(c.username), Some(c.password))
            }
            None => (None, None),
        };
        Ok(ConnectionConfig {
            url: spec.endpoint.clone(),
            user,
            password,
            tls: self.clickhouse_tls(spec.tls.as_ref()).await?,
        })
    }

    /// The fingerprint of the named Secrets' data (see [`fingerprint_of`]); a missing
    /// Secret is an error, as it would be for the pods.
    pub async fn fingerprint(&self, names: &BTreeSet<String>) -> Result<String, SecretError> {
        let mut secrets = Vec::with_capacity(names.len());
        for name in names {
            let secret = self.get(name).await?;
            let data = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            secrets.push((name.clone(), data));
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
