//! What a pod's environment and volumes are made from: the ConfigMaps, Secrets and
//! service-account tokens it references, and the downward-API fields of the pod itself.
//!
//! Fetching is IO (see `pods::fetch_sources`); everything here is pure, so env resolution and
//! volume contents can be tested without a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

/// ConfigMaps and Secrets by name (`None`: looked up, not found) and tokens by
/// [`token_key`].
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub config_maps: BTreeMap<String, Option<ConfigMap>>,
    pub secrets: BTreeMap<String, Option<Secret>>,
    pub tokens: BTreeMap<String, String>,
}

impl Sources {
    pub fn config_map(&self, name: &str) -> Option<&ConfigMap> {
        self.config_maps.get(name).and_then(Option::as_ref)
    }

    pub fn secret(&self, name: &str) -> Option<&Secret> {
        self.secrets.get(name).and_then(Option::as_ref)
    }

    /// `key` of ConfigMap `name`, from `data` or `binaryData`.
    pub fn config_map_value(&self, name: &str, key: &str) -> Option<Vec<u8>> {
        let cm = self.config_map(name)?;
        cm.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| v.as_bytes().to_vec())
            .or_else(|| {
                cm.binary_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|v| v.0.clone())
            })
    }

    pub fn secret_value(&self, name: &str, key: &str) -> Option<Vec<u8>> {
        self.secret(name)?
            .data
            .as_ref()?
            .get(key)
            .map(|v| v.0.clone())
    }
}

/// A projected service-account token is identified by its volume and path in that volume.
pub fn token_key(volume: &str, path: &str) -> String {
    format!("{volume}/{path}")
}

/// A token the pod needs: its key, service account, audience and lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRef {
    pub key: String,
    pub audience: Option<String>,
    pub expiration_seconds: i64,
}

/// Everything a pod references by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Refs {
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
    pub tokens: Vec<TokenRef>,
}

/// The names a pod's containers (env, envFrom) and volumes refer to.
pub fn referenced(pod: &Pod) -> Refs {
    let mut refs = Refs::default();
    let Some(spec) = &pod.spec else { return refs };
    for c in &spec.containers {
        for e in c.env.iter().flatten() {
            if let Some(from) = &e.value_from {
                if let Some(s) = &from.config_map_key_ref {
                    refs.config_maps.insert(s.name.clone());
                }
                if let Some(s) = &from.secret_key_ref {
                    refs.secrets.insert(s.name.clone());
                }
            }
        }
        for e in c.env_from.iter().flatten() {
            if let Some(s) = &e.config_map_ref {
                refs.config_maps.insert(s.name.clone());
            }
            if let Some(s) = &e.secret_ref {
                refs.secrets.insert(s.name.clone());
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = &v.config_map {
            refs.config_maps.insert(s.name.clone());
        }
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            refs.secrets.insert(name);
        }
        for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &p.config_map {
                refs.config_maps.insert(s.name.clone());
            }
            if let Some(s) = &p.secret {
                refs.secrets.insert(s.name.clone());
            }
            if let Some(t) = &p.service_account_token {
                refs.tokens.push(TokenRef {
                    key: token_key(&v.name, &t.path),
                    audience: t.audience.clone(),
                    // The API server's default and minimum is one hour (600 s is the floor).
                    expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                });
            }
        }
    }
    refs
}

/// The pod facts the downward API exposes that are not in the pod object yet (the node agent
/// decides them before it reports status).
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub pod_ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "fieldRef {0:?} is not supported (supported: metadata.name, metadata.namespace, metadata.uid, metadata.labels['K'], metadata.annotations['K'], spec.nodeName, spec.serviceAccountName, status.podIP, status.podIPs, status.hostIP, status.hostIPs)"
)]
pub struct UnsupportedField(pub String);

/// The value of a downward-API `fieldRef` path.
pub fn field_value(
    pod: &Pod,
    placement: Placement,
    path: &str,
) -> Result<String, UnsupportedField> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let from_map = |map: Option<&BTreeMap<String, String>>, prefix: &str| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".to_owned()),
        "status.podIP" | "status.podIPs" => placement.pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => placement.host_ip.to_string(),
        _ => from_map(meta.labels.as_ref(), "metadata.labels['")
            .or_else(|| from_map(meta.annotations.as_ref(), "metadata.annotations['"))
            .ok_or_else(|| UnsupportedField(path.to_owned()))?,
    };
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use kube::api::ObjectMeta;

    #[test]
    fn field_values_come_from_the_pod_and_its_placement() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                labels: Some([("app".to_owned(), "c".to_owned())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let at = Placement {
            pod_ip: Ipv4Addr::new(127, 0, 0, 5),
            host_ip: Ipv4Addr::LOCALHOST,
        };
        let f = |p: &str| field_value(&pod, at, p);
        assert_eq!(f("metadata.name").unwrap(), "p");
        assert_eq!(f("metadata.namespace").unwrap(), "ns");
        assert_eq!(f("status.podIP").unwrap(), "127.0.0.5");
        assert_eq!(f("status.hostIP").unwrap(), "127.0.0.1");
        assert_eq!(f("spec.nodeName").unwrap(), "n1");
        assert_eq!(f("spec.serviceAccountName").unwrap(), "default");
        assert_eq!(f("metadata.labels['app']").unwrap(), "c");
        assert_eq!(f("metadata.labels['none']").unwrap(), "");
        assert_eq!(
            f("metadata.generateName").unwrap_err().0,
            "metadata.generateName"
        );
    }
}
