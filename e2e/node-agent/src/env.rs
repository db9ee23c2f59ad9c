//! A container's environment, resolved the way the kubelet does it: `envFrom` first, then
//! `env` (later entries win), `$(VAR)` references expanded against the variables defined
//! before them, and `valueFrom` resolved from ConfigMaps, Secrets and the downward API.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::sources::{Placement, Sources, UnsupportedField, field_value};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("configmap {0:?} not found")]
    ConfigMapNotFound(String),
    #[error("couldn't find key {key:?} in configmap {name:?}")]
    ConfigMapKeyNotFound { name: String, key: String },
    #[error("secret {0:?} not found")]
    SecretNotFound(String),
    #[error("couldn't find key {key:?} in secret {name:?}")]
    SecretKeyNotFound { name: String, key: String },
    #[error("env var {var:?}: {source}")]
    Field {
        var: String,
        source: UnsupportedField,
    },
    #[error("env var {0:?}: resourceFieldRef and fileKeyRef are not supported by this node agent")]
    Unsupported(String),
}

/// Ordered environment: a name keeps the position of its first definition, the value of its last.
#[derive(Debug, Default)]
struct EnvList {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl EnvList {
    fn set(&mut self, name: String, value: String) {
        match self.index.get(&name) {
            Some(&i) => self.vars[i].1 = value,
            None => {
                self.index.insert(name.clone(), self.vars.len());
                self.vars.push((name, value));
            }
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.vars[i].1.as_str())
    }
}

/// The environment of `container` in `pod`.
pub fn resolve(
    pod: &Pod,
    container: &Container,
    placement: Placement,
    sources: &Sources,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut env = EnvList::default();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        let mut entries: Vec<(String, String)> = Vec::new();
        if let Some(r) = &from.config_map_ref {
            match sources.config_map(&r.name) {
                Some(cm) => entries.extend(
                    cm.data
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.clone())),
                ),
                None if r.optional == Some(true) => {}
                None => return Err(EnvError::ConfigMapNotFound(r.name.clone())),
            }
        }
        if let Some(r) = &from.secret_ref {
            match sources.secret(&r.name) {
                Some(s) => entries.extend(
                    s.data
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned())),
                ),
                None if r.optional == Some(true) => {}
                None => return Err(EnvError::SecretNotFound(r.name.clone())),
            }
        }
        for (k, v) in entries {
            let name = format!("{prefix}{k}");
            // The kubelet skips keys that are not valid variable names (with an event).
            if is_env_name(&name) {
                env.set(name, v);
            }
        }
    }
    for e in container.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (_, Some(from)) => {
                if let Some(r) = &from.field_ref {
                    Some(
                        field_value(pod, placement, &r.field_path).map_err(|source| {
                            EnvError::Field {
                                var: e.name.clone(),
                                source,
                            }
                        })?,
                    )
                } else if let Some(r) = &from.config_map_key_ref {
                    match (sources.config_map(&r.name), r.optional == Some(true)) {
                        (None, true) => None,
                        (None, false) => return Err(EnvError::ConfigMapNotFound(r.name.clone())),
                        (Some(_), optional) => match sources.config_map_value(&r.name, &r.key) {
                            Some(v) => Some(String::from_utf8_lossy(&v).into_owned()),
                            None if optional => None,
                            None => {
                                return Err(EnvError::ConfigMapKeyNotFound {
                                    name: r.name.clone(),
                                    key: r.key.clone(),
                                });
                            }
                        },
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    match (sources.secret(&r.name), r.optional == Some(true)) {
                        (None, true) => None,
                        (None, false) => return Err(EnvError::SecretNotFound(r.name.clone())),
                        (Some(_), optional) => match sources.secret_value(&r.name, &r.key) {
                            Some(v) => Some(String::from_utf8_lossy(&v).into_owned()),
                            None if optional => None,
                            None => {
                                return Err(EnvError::SecretKeyNotFound {
                                    name: r.name.clone(),
                                    key: r.key.clone(),
                                });
                            }
                        },
                    }
                } else {
                    return Err(EnvError::Unsupported(e.name.clone()));
                }
            }
            (Some(v), None) => Some(expand(v, |name| env.get(name))),
            (None, None) => Some(String::new()),
        };
        if let Some(v) = value {
            env.set(e.name.clone(), v);
        }
    }
    Ok(env.vars)
}

/// Kubernetes' `$(VAR)` expansion: a defined variable is replaced, an undefined reference is
/// kept as written, and `$$` is an escaped `$`.
pub fn expand<'a>(input: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match lookup(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Expands `$(VAR)` in a command or argument with the container's final environment.
pub fn expand_with(input: &str, env: &[(String, String)]) -> String {
    expand(input, |name| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    })
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource,
        ObjectFieldSelector, Secret, SecretKeySelector,
    };
    use kube::api::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("team".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn at() -> Placement {
        Placement {
            pod_ip: Ipv4Addr::new(127, 0, 0, 9),
            host_ip: Ipv4Addr::LOCALHOST,
        }
    }

    fn sources() -> Sources {
        let mut s = Sources::default();
        s.config_maps.insert(
            "cfg".into(),
            Some(ConfigMap {
                data: Some(
                    [
                        ("LEVEL".to_owned(), "debug".to_owned()),
                        ("bad key".to_owned(), "x".to_owned()),
                    ]
                    .into(),
                ),
                ..Default::default()
            }),
        );
        s.config_maps.insert("gone".into(), None);
        s.secrets.insert(
            "creds".into(),
            Some(Secret {
                data: Some([("password".to_owned(), ByteString(b"s3cret".to_vec()))].into()),
                ..Default::default()
            }),
        );
        s
    }

    fn value(name: &str, v: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(v.into()),
            ..Default::default()
        }
    }

    fn from(name: &str, source: EnvVarSource) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(source),
            ..Default::default()
        }
    }

    fn field(path: &str) -> EnvVarSource {
        EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cm_key(name: &str, key: &str, optional: bool) -> EnvVarSource {
        EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: name.into(),
                key: key.into(),
                optional: Some(optional),
            }),
            ..Default::default()
        }
    }

    fn container(env: Vec<EnvVar>, env_from: Vec<EnvFromSource>) -> Container {
        Container {
            name: "c".into(),
            env: Some(env),
            env_from: Some(env_from),
            ..Default::default()
        }
    }

    #[test]
    fn resolves_values_field_refs_config_maps_and_secrets_in_order() {
        let c = container(
            vec![
                value("A", "1"),
                from("POD_NAME", field("metadata.name")),
                from("POD_NAMESPACE", field("metadata.namespace")),
                from("POD_IP", field("status.podIP")),
                from("LOG", cm_key("cfg", "LEVEL", false)),
                from(
                    "PASSWORD",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "creds".into(),
                            key: "password".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                value("URL", "http://$(POD_IP):8080/$(A)/$(UNDEFINED)/$$(A)"),
                value("A", "2"),
            ],
            vec![],
        );
        let env = resolve(&pod(), &c, at(), &sources()).unwrap();
        let expected = [
            ("A", "2"),
            ("POD_NAME", "web-0"),
            ("POD_NAMESPACE", "team"),
            ("POD_IP", "127.0.0.9"),
            ("LOG", "debug"),
            ("PASSWORD", "s3cret"),
            ("URL", "http://127.0.0.9:8080/1/$(UNDEFINED)/$(A)"),
        ];
        let got: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn env_from_comes_first_with_prefix_and_env_overrides_it() {
        let c = container(
            vec![value("CFG_LEVEL", "info")],
            vec![EnvFromSource {
                prefix: Some("CFG_".into()),
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cfg".into(),
                    optional: None,
                }),
                ..Default::default()
            }],
        );
        let env = resolve(&pod(), &c, at(), &sources()).unwrap();
        assert_eq!(
            env,
            vec![("CFG_LEVEL".to_owned(), "info".to_owned())],
            "invalid key skipped"
        );
    }

    #[test]
    fn missing_references_fail_unless_optional() {
        let s = sources();
        let missing = container(vec![from("X", cm_key("gone", "k", false))], vec![]);
        assert_eq!(
            resolve(&pod(), &missing, at(), &s).unwrap_err(),
            EnvError::ConfigMapNotFound("gone".into())
        );
        let missing_key = container(vec![from("X", cm_key("cfg", "nope", false))], vec![]);
        let err = resolve(&pod(), &missing_key, at(), &s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "couldn't find key \"nope\" in configmap \"cfg\""
        );
        let optional = container(
            vec![
                from("X", cm_key("gone", "k", true)),
                from("Y", cm_key("cfg", "nope", true)),
            ],
            vec![],
        );
        assert!(resolve(&pod(), &optional, at(), &s).unwrap().is_empty());
        let bad_field = container(vec![from("X", field("spec.hostname"))], vec![]);
        assert!(matches!(
            resolve(&pod(), &bad_field, at(), &s).unwrap_err(),
            EnvError::Field { var, .. } if var == "X"
        ));
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let lookup = |n: &str| (n == "V").then_some("v");
        assert_eq!(expand("$(V)", lookup), "v");
        assert_eq!(expand("a$(V)b$(V)", lookup), "avbv");
        assert_eq!(expand("$(W)", lookup), "$(W)");
        assert_eq!(expand("$$(V)", lookup), "$(V)");
        assert_eq!(expand("$$$(V)", lookup), "$v");
        assert_eq!(expand("$V $ $(V", lookup), "$V $ $(V");
        assert_eq!(expand("price: 5$", lookup), "price: 5$");
    }
}
