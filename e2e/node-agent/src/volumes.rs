//! Pod volumes as directories on the host, and each container's mount table.
//!
//! Each volume is a directory `<pod dir>/volumes/<volume>` (a hostPath volume is the host path
//! itself). A container gets a [`Mounts`] table (mountPath → host directory, `readOnly`), which the
//! container's init (`sandbox`) binds into its root filesystem at the mount paths. See
//! `e2e/node-agent/README.md`.

use std::collections::BTreeSet;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, Volume};

use crate::sources::{Placement, Sources, UnsupportedField, field_value, token_key};

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {volume:?}: configmap {name:?} not found")]
    ConfigMapNotFound { volume: String, name: String },
    #[error("volume {volume:?}: secret {name:?} not found")]
    SecretNotFound { volume: String, name: String },
    #[error("volume {volume:?}: couldn't find key {key:?} in {kind} {name:?}")]
    KeyNotFound {
        volume: String,
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error("volume {0:?}: no service-account token was issued for it")]
    TokenMissing(String),
    #[error("volume {volume:?}: {source}")]
    Field {
        volume: String,
        source: UnsupportedField,
    },
    #[error(
        "volume {0:?}: type not supported by this node agent (supported: configMap, secret, projected, downwardAPI, emptyDir, hostPath)"
    )]
    Unsupported(String),
    #[error("volume mount {mount:?} refers to volume {volume:?}, which the pod does not define")]
    UnknownVolume { mount: String, volume: String },
    #[error("path {0:?} must be relative and stay inside its volume")]
    BadPath(String),
    #[error("writing {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// One file of a volume: path relative to the volume root, content, permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeFile {
    pub path: PathBuf,
    pub content: Vec<u8>,
    pub mode: u32,
}

/// What a volume is on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeContent {
    /// A directory the node agent writes and keeps in sync (configMap, secret, projected, downwardAPI).
    Files(Vec<VolumeFile>),
    /// A directory that belongs to the pod and is only created (emptyDir).
    Scratch,
    /// An existing host directory, used as is (hostPath).
    Host(PathBuf),
}

const DEFAULT_MODE: i32 = 0o644;

/// The content of `volume`, computed from the pod and its sources. Pure.
pub fn content(
    pod: &Pod,
    volume: &Volume,
    placement: Placement,
    sources: &Sources,
) -> Result<VolumeContent, VolumeError> {
    let vname = volume.name.as_str();
    let mut files = Vec::new();
    if let Some(cm) = &volume.config_map {
        let mode = cm.default_mode.unwrap_or(DEFAULT_MODE);
        match sources.config_map(&cm.name) {
            Some(_) => keyed_files(
                &mut files,
                vname,
                "configmap",
                &cm.name,
                cm.items.as_deref(),
                mode,
                |k| sources.config_map_value(&cm.name, k),
                all_config_map_keys(sources, &cm.name),
            )?,
            None if cm.optional == Some(true) => {}
            None => {
                return Err(VolumeError::ConfigMapNotFound {
                    volume: vname.into(),
                    name: cm.name.clone(),
                });
            }
        }
    } else if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let mode = s.default_mode.unwrap_or(DEFAULT_MODE);
        match sources.secret(&name) {
            Some(_) => keyed_files(
                &mut files,
                vname,
                "secret",
                &name,
                s.items.as_deref(),
                mode,
                |k| sources.secret_value(&name, k),
                all_secret_keys(sources, &name),
            )?,
            None if s.optional == Some(true) => {}
            None => {
                return Err(VolumeError::SecretNotFound {
                    volume: vname.into(),
                    name,
                });
            }
        }
    } else if let Some(d) = &volume.downward_api {
        let mode = d.default_mode.unwrap_or(DEFAULT_MODE);
        downward_files(
            &mut files,
            pod,
            vname,
            placement,
            d.items.as_deref().unwrap_or_default(),
            mode,
        )?;
    } else if let Some(p) = &volume.projected {
        let mode = p.default_mode.unwrap_or(DEFAULT_MODE);
        for src in p.sources.iter().flatten() {
            if let Some(cm) = &src.config_map {
                match sources.config_map(&cm.name) {
                    Some(_) => keyed_files(
                        &mut files,
                        vname,
                        "configmap",
                        &cm.name,
                        cm.items.as_deref(),
                        mode,
                        |k| sources.config_map_value(&cm.name, k),
                        all_config_map_keys(sources, &cm.name),
                    )?,
                    None if cm.optional == Some(true) => {}
                    None => {
                        return Err(VolumeError::ConfigMapNotFound {
                            volume: vname.into(),
                            name: cm.name.clone(),
                        });
                    }
                }
            } else if let Some(s) = &src.secret {
                match sources.secret(&s.name) {
                    Some(_) => keyed_files(
                        &mut files,
                        vname,
                        "secret",
                        &s.name,
                        s.items.as_deref(),
                        mode,
                        |k| sources.secret_value(&s.name, k),
                        all_secret_keys(sources, &s.name),
                    )?,
                    None if s.optional == Some(true) => {}
                    None => {
                        return Err(VolumeError::SecretNotFound {
                            volume: vname.into(),
                            name: s.name.clone(),
                        });
                    }
                }
            } else if let Some(d) = &src.downward_api {
                downward_files(
                    &mut files,
                    pod,
                    vname,
                    placement,
                    d.items.as_deref().unwrap_or_default(),
                    mode,
                )?;
            } else if let Some(t) = &src.service_account_token {
                let token = sources
                    .tokens
                    .get(&token_key(vname, &t.path))
                    .ok_or_else(|| VolumeError::TokenMissing(vname.into()))?;
                files.push(VolumeFile {
                    path: relative(&t.path)?,
                    content: token.as_bytes().to_vec(),
                    mode: mode_bits(mode),
                });
            } else {
                return Err(VolumeError::Unsupported(vname.into()));
            }
        }
    } else if volume.empty_dir.is_some() {
        return Ok(VolumeContent::Scratch);
    } else if let Some(h) = &volume.host_path {
        return Ok(VolumeContent::Host(PathBuf::from(&h.path)));
    } else {
        return Err(VolumeError::Unsupported(vname.into()));
    }
    Ok(VolumeContent::Files(files))
}

fn all_config_map_keys(sources: &Sources, name: &str) -> Vec<String> {
    let Some(cm) = sources.config_map(name) else {
        return Vec::new();
    };
    let data = cm.data.iter().flatten().map(|(k, _)| k.clone());
    let binary = cm.binary_data.iter().flatten().map(|(k, _)| k.clone());
    data.chain(binary).collect()
}

fn all_secret_keys(sources: &Sources, name: &str) -> Vec<String> {
    sources
        .secret(name)
        .map(|s| s.data.iter().flatten().map(|(k, _)| k.clone()).collect())
        .unwrap_or_default()
}

/// ConfigMap/Secret projection: the listed `items`, or every key as a file of the same name.
#[allow(clippy::too_many_arguments)]
fn keyed_files(
    files: &mut Vec<VolumeFile>,
    volume: &str,
    kind: &'static str,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    value: impl Fn(&str) -> Option<Vec<u8>>,
    all_keys: Vec<String>,
) -> Result<(), VolumeError> {
    match items {
        Some(items) => {
            for item in items {
                let content = value(&item.key).ok_or_else(|| VolumeError::KeyNotFound {
                    volume: volume.into(),
                    kind,
                    name: name.into(),
                    key: item.key.clone(),
                })?;
                files.push(VolumeFile {
                    path: relative(&item.path)?,
                    content,
                    mode: mode_bits(item.mode.unwrap_or(default_mode)),
                });
            }
        }
        None => {
            for key in all_keys {
                let content = value(&key).unwrap_or_default();
                files.push(VolumeFile {
                    path: relative(&key)?,
                    content,
                    mode: mode_bits(default_mode),
                });
            }
        }
    }
    Ok(())
}

fn downward_files(
    files: &mut Vec<VolumeFile>,
    pod: &Pod,
    volume: &str,
    placement: Placement,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    default_mode: i32,
) -> Result<(), VolumeError> {
    for item in items {
        let Some(f) = &item.field_ref else {
            return Err(VolumeError::Unsupported(format!(
                "{volume} (resourceFieldRef)"
            )));
        };
        let value =
            field_value(pod, placement, &f.field_path).map_err(|source| VolumeError::Field {
                volume: volume.into(),
                source,
            })?;
        files.push(VolumeFile {
            path: relative(&item.path)?,
            content: value.into_bytes(),
            mode: mode_bits(item.mode.unwrap_or(default_mode)),
        });
    }
    Ok(())
}

fn mode_bits(mode: i32) -> u32 {
    u32::try_from(mode).unwrap_or(0o644) & 0o777
}

/// A volume-relative path, refusing anything that would leave the volume directory.
fn relative(path: &str) -> Result<PathBuf, VolumeError> {
    let p = Path::new(path);
    if path.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(VolumeError::BadPath(path.to_owned()));
    }
    Ok(p.to_path_buf())
}

/// Brings `dir` to exactly `files`: writes changed files atomically (temp file + rename, so a
/// reader never sees half a file), leaves unchanged ones untouched (no spurious mtime change
/// for watchers) and removes files that are no longer part of the volume.
pub fn sync_dir(dir: &Path, files: &[VolumeFile]) -> Result<(), VolumeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| VolumeError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut wanted = BTreeSet::new();
    for f in files {
        let target = dir.join(&f.path);
        wanted.insert(target.clone());
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let same_content = std::fs::read(&target).is_ok_and(|c| c == f.content);
        let same_mode =
            std::fs::metadata(&target).is_ok_and(|m| m.permissions().mode() & 0o777 == f.mode);
        if same_content && same_mode {
            continue;
        }
        let tmp = target.with_file_name(format!(
            ".{}.tmp",
            target
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("file")
        ));
        std::fs::write(&tmp, &f.content).map_err(io(&tmp))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(f.mode))
            .map_err(io(&tmp))?;
        std::fs::rename(&tmp, &target).map_err(io(&target))?;
    }
    remove_unwanted(dir, &wanted).map_err(io(dir))
}

fn remove_unwanted(dir: &Path, wanted: &BTreeSet<PathBuf>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            remove_unwanted(&path, wanted)?;
            if std::fs::read_dir(&path)?.next().is_none()
                && !wanted.iter().any(|w| w.starts_with(&path))
            {
                std::fs::remove_dir(&path)?;
            }
        } else if !wanted.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// One volume mount of a container: the host directory (or file) bound at `path` inside the
/// container's root filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub path: String,
    pub host: PathBuf,
    pub read_only: bool,
}

/// A container's mounts, shortest container path first: a mount inside another one's path
/// (`/etc/tracehouse/cache` under `/etc/tracehouse`) is bound after it, so it stays visible.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts(Vec<Mount>);

impl Mounts {
    /// The mounts of `container`, with volume directories under `volumes_dir`.
    pub fn of(pod: &Pod, container: &Container, volumes_dir: &Path) -> Result<Self, VolumeError> {
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or_default();
        let mut table = Vec::new();
        for m in container.volume_mounts.iter().flatten() {
            let volume = volumes.iter().find(|v| v.name == m.name).ok_or_else(|| {
                VolumeError::UnknownVolume {
                    mount: m.mount_path.clone(),
                    volume: m.name.clone(),
                }
            })?;
            let mut host = match &volume.host_path {
                Some(h) => PathBuf::from(&h.path),
                None => volumes_dir.join(&volume.name),
            };
            if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                host = host.join(relative(sub)?);
            }
            let path = m.mount_path.trim_end_matches('/');
            if !path.is_empty() {
                table.push(Mount {
                    path: path.to_owned(),
                    host,
                    read_only: m.read_only.unwrap_or(false),
                });
            }
        }
        table.sort_by(|a, b| {
            a.path
                .len()
                .cmp(&b.path.len())
                .then_with(|| a.path.cmp(&b.path))
        });
        Ok(Self(table))
    }

    /// The mounts in binding order.
    pub fn iter(&self) -> impl Iterator<Item = &Mount> {
        self.0.iter()
    }

    /// Whether a volume is mounted exactly at `path`.
    pub fn has(&self, path: &str) -> bool {
        self.0.iter().any(|m| m.path == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, DownwardAPIProjection,
        DownwardAPIVolumeFile, EmptyDirVolumeSource, ObjectFieldSelector, PodSpec,
        ProjectedVolumeSource, Secret, SecretVolumeSource, ServiceAccountTokenProjection,
        VolumeMount, VolumeProjection,
    };
    use kube::api::ObjectMeta;

    fn at() -> Placement {
        Placement {
            pod_ip: Ipv4Addr::new(127, 0, 0, 3),
            host_ip: Ipv4Addr::LOCALHOST,
        }
    }

    fn pod(volumes: Vec<Volume>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(volumes),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sources() -> Sources {
        let mut s = Sources::default();
        s.config_maps.insert(
            "cfg".into(),
            Some(ConfigMap {
                data: Some(BTreeMap::from([(
                    "config.yaml".to_owned(),
                    "a: 1\n".to_owned(),
                )])),
                binary_data: Some(BTreeMap::from([(
                    "blob".to_owned(),
                    ByteString(vec![0, 1]),
                )])),
                ..Default::default()
            }),
        );
        s.config_maps.insert(
            "kube-root-ca.crt".into(),
            Some(ConfigMap {
                data: Some(BTreeMap::from([("ca.crt".to_owned(), "PEM".to_owned())])),
                ..Default::default()
            }),
        );
        s.secrets.insert(
            "tls".into(),
            Some(Secret {
                data: Some(BTreeMap::from([(
                    "tls.key".to_owned(),
                    ByteString(b"KEY".to_vec()),
                )])),
                ..Default::default()
            }),
        );
        s.tokens
            .insert(token_key("kube-api-access", "token"), "jwt".into());
        s
    }

    fn cm_volume(name: &str, cm: &str, items: Option<Vec<KeyToPath>>) -> Volume {
        Volume {
            name: name.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: cm.into(),
                items,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn files(c: VolumeContent) -> Vec<(String, Vec<u8>, u32)> {
        match c {
            VolumeContent::Files(f) => f
                .into_iter()
                .map(|f| (f.path.display().to_string(), f.content, f.mode))
                .collect(),
            other => panic!("not files: {other:?}"),
        }
    }

    #[test]
    fn config_map_volume_has_every_key_or_the_listed_items() {
        let s = sources();
        let all = content(&pod(vec![]), &cm_volume("v", "cfg", None), at(), &s).unwrap();
        assert_eq!(
            files(all),
            vec![
                ("config.yaml".into(), b"a: 1\n".to_vec(), 0o644),
                ("blob".into(), vec![0, 1], 0o644)
            ]
        );
        let items = Some(vec![KeyToPath {
            key: "config.yaml".into(),
            path: "conf/c.yaml".into(),
            mode: Some(0o600),
        }]);
        let listed = content(&pod(vec![]), &cm_volume("v", "cfg", items), at(), &s).unwrap();
        assert_eq!(
            files(listed),
            vec![("conf/c.yaml".into(), b"a: 1\n".to_vec(), 0o600)]
        );
    }

    #[test]
    fn missing_sources_fail_unless_optional_and_bad_paths_are_refused() {
        let s = sources();
        let err = content(&pod(vec![]), &cm_volume("v", "nope", None), at(), &s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume \"v\": configmap \"nope\" not found"
        );
        let mut optional = cm_volume("v", "nope", None);
        optional.config_map.as_mut().unwrap().optional = Some(true);
        assert_eq!(
            content(&pod(vec![]), &optional, at(), &s).unwrap(),
            VolumeContent::Files(vec![])
        );
        let escape = Some(vec![KeyToPath {
            key: "config.yaml".into(),
            path: "../x".into(),
            mode: None,
        }]);
        assert!(matches!(
            content(&pod(vec![]), &cm_volume("v", "cfg", escape), at(), &s),
            Err(VolumeError::BadPath(_))
        ));
        let secret = Volume {
            name: "s".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("tls".into()),
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            files(content(&pod(vec![]), &secret, at(), &s).unwrap()),
            vec![("tls.key".into(), b"KEY".to_vec(), 0o400)]
        );
    }

    #[test]
    fn service_account_projection_has_token_ca_and_namespace() {
        let projected = Volume {
            name: "kube-api-access".into(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(0o644),
                sources: Some(vec![
                    VolumeProjection {
                        service_account_token: Some(ServiceAccountTokenProjection {
                            path: "token".into(),
                            expiration_seconds: Some(3607),
                            audience: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        config_map: Some(ConfigMapProjection {
                            name: "kube-root-ca.crt".into(),
                            items: Some(vec![KeyToPath {
                                key: "ca.crt".into(),
                                path: "ca.crt".into(),
                                mode: None,
                            }]),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        downward_api: Some(DownwardAPIProjection {
                            items: Some(vec![DownwardAPIVolumeFile {
                                path: "namespace".into(),
                                field_ref: Some(ObjectFieldSelector {
                                    field_path: "metadata.namespace".into(),
                                    api_version: None,
                                }),
                                ..Default::default()
                            }]),
                        }),
                        ..Default::default()
                    },
                ]),
            }),
            ..Default::default()
        };
        let got = files(content(&pod(vec![]), &projected, at(), &sources()).unwrap());
        let names: Vec<(&str, &[u8])> = got
            .iter()
            .map(|(p, c, _)| (p.as_str(), c.as_slice()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("token", &b"jwt"[..]),
                ("ca.crt", b"PEM"),
                ("namespace", b"ns")
            ]
        );
    }

    #[test]
    fn sync_dir_writes_changes_and_removes_stale_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = |p: &str, c: &str| VolumeFile {
            path: p.into(),
            content: c.as_bytes().to_vec(),
            mode: 0o640,
        };
        sync_dir(dir.path(), &[f("a", "1"), f("sub/b", "2")]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sub/b")).unwrap(),
            "2"
        );
        let mode = std::fs::metadata(dir.path().join("a"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o640);
        sync_dir(dir.path(), &[f("a", "changed")]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a")).unwrap(),
            "changed"
        );
        assert!(
            !dir.path().join("sub").exists(),
            "stale file and its directory are gone"
        );
    }

    #[test]
    fn mounts_bind_parents_first_with_subpath_and_read_only() {
        let p = pod(vec![
            cm_volume("config", "cfg", None),
            Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
        ]);
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "scratch".into(),
                    mount_path: "/etc/tracehouse/cache".into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "config".into(),
                    mount_path: "/etc/tracehouse/".into(),
                    read_only: Some(true),
                    ..Default::default()
                },
                VolumeMount {
                    name: "config".into(),
                    mount_path: "/config.yaml".into(),
                    sub_path: Some("config.yaml".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let m = Mounts::of(&p, &c, Path::new("/pod/volumes")).unwrap();
        let got: Vec<(&str, &Path, bool)> = m
            .iter()
            .map(|m| (m.path.as_str(), m.host.as_path(), m.read_only))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "/config.yaml",
                    Path::new("/pod/volumes/config/config.yaml"),
                    false
                ),
                ("/etc/tracehouse", Path::new("/pod/volumes/config"), true),
                (
                    "/etc/tracehouse/cache",
                    Path::new("/pod/volumes/scratch"),
                    false
                ),
            ]
        );
        assert!(m.has("/etc/tracehouse") && !m.has("/etc"));
        let bad = Container {
            volume_mounts: Some(vec![VolumeMount {
                name: "missing".into(),
                mount_path: "/x".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(matches!(
            Mounts::of(&p, &bad, Path::new("/v")),
            Err(VolumeError::UnknownVolume { .. })
        ));
    }
}
