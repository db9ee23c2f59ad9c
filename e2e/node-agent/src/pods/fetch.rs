//! Reads what a pod references from the API: ConfigMaps, Secrets, and service-account
//! tokens bound to the pod (TokenRequest), cached until 80% of their lifetime has passed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::sources::{Refs, Sources};

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("reading {kind} {name:?}: {source}")]
    Api {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    #[error("token request for service account {0:?} returned no token")]
    EmptyToken(String),
}

/// Tokens already issued for one pod: key → (token, when to renew).
#[derive(Debug, Default)]
pub struct TokenCache(HashMap<String, (String, Instant)>);

pub async fn sources(
    client: &Client,
    pod: &Pod,
    refs: &Refs,
    tokens: Option<&mut TokenCache>,
) -> Result<Sources, FetchError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = Sources::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for name in &refs.config_maps {
        let cm = cms.get_opt(name).await.map_err(|source| FetchError::Api {
            kind: "configmap",
            name: name.clone(),
            source,
        })?;
        out.config_maps.insert(name.clone(), cm);
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for name in &refs.secrets {
        let s = secrets
            .get_opt(name)
            .await
            .map_err(|source| FetchError::Api {
                kind: "secret",
                name: name.clone(),
                source,
            })?;
        out.secrets.insert(name.clone(), s);
    }
    let Some(cache) = tokens else { return Ok(out) };
    let sa_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".to_owned());
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    for t in &refs.tokens {
        if let Some((token, renew_at)) = cache.0.get(&t.key)
            && Instant::now() < *renew_at
        {
            out.tokens.insert(t.key.clone(), token.clone());
            continue;
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: t.audience.clone().map(|a| vec![a]),
                expiration_seconds: Some(t.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            }),
            ..Default::default()
        };
        let issued = sas
            .create_token_request(&sa_name, &PostParams::default(), &request)
            .await
            .map_err(|source| FetchError::Api {
                kind: "serviceaccount token",
                name: sa_name.clone(),
                source,
            })?;
        let token = issued
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| FetchError::EmptyToken(sa_name.clone()))?;
        // Renew at 80% of the lifetime, as the kubelet does.
        let lifetime = Duration::from_secs(u64::try_from(t.expiration_seconds).unwrap_or(3600));
        cache.0.insert(
            t.key.clone(),
            (token.clone(), Instant::now() + lifetime.mul_f64(0.8)),
        );
        out.tokens.insert(t.key.clone(), token);
    }
    Ok(out)
}
