//! Reading the Secrets a pipeline references: the operator itself needs the credentials to
//! run migrations and read Kafka metadata. Values are held only for the call and never
//! logged, written to status, or copied into another object.

use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use crate::crd::{CredentialsSecretRef, SecretKeyRef, TracePipeline};

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

    /// The text value of `key` in Secret `name`.
    pub async fn value(&self, name: &str, key: &str) -> Result<String, SecretError> {
        let secret = self
            .api
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
            })?;
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
            username: self.value(&r.name, &r.username_key).await?,
            password: self.value(&r.name, &r.password_key).await?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
