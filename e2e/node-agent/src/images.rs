//! Container images from local image storage: the node agent's image service.
//!
//! Images live in a podman storage (`--image-store`, the one `e2e/lib/images.sh` builds into);
//! nothing is pulled from a registry. A pod's image is looked up there (`podman image inspect`:
//! id, entrypoint, cmd, env, user, working dir), and its root filesystem is unpacked once per
//! image id (`podman create` + `podman export`) into `<state>/images/<id>/rootfs`, which every
//! container of that image then uses read-only as the lower layer of its own root. An image
//! that is not in the storage is a pull error (`ErrImagePull`, then `ImagePullBackOff`), as
//! with a kubelet that cannot pull. Unpacked images that left the storage and are no longer
//! used by a container are deleted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use tokio::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(
        "image {image:?} is not in this node's image storage ({store}); nothing can be pulled here: build it into that storage (e2e/lib/images.sh)"
    )]
    NotFound { image: String, store: String },
    #[error("inspecting image {image:?}: {message}")]
    Inspect { image: String, message: String },
    #[error("unpacking image {image:?} ({id}): {message}")]
    Unpack {
        image: String,
        id: String,
        message: String,
    },
}

/// What the image says about running it (the OCI image config).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `uid`, `uid:gid`, `name` or `name:group`; empty: root.
    pub user: String,
    pub working_dir: String,
}

/// An image ready to run: its id, unpacked root filesystem and config.
#[derive(Debug)]
pub struct Image {
    pub reference: String,
    pub id: String,
    pub rootfs: PathBuf,
    pub config: ImageConfig,
    /// Keeps the unpacked root filesystem from being collected while a container uses it.
    _use: ImageUse,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspected {
    id: String,
    #[serde(default)]
    config: InspectedConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectedConfig {
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    working_dir: Option<String>,
}

/// Parses `podman image inspect` output (a JSON array with one image) into its id and config.
pub fn parse_inspect(json: &[u8]) -> Result<(String, ImageConfig), String> {
    let mut list: Vec<Inspected> = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    let one = list.pop().ok_or("podman returned no image")?;
    let c = one.config;
    let env = c
        .env
        .unwrap_or_default()
        .into_iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect();
    let id = one.id.trim_start_matches("sha256:").to_owned();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("unexpected image id {:?}", one.id));
    }
    Ok((
        id,
        ImageConfig {
            entrypoint: c.entrypoint.unwrap_or_default(),
            cmd: c.cmd.unwrap_or_default(),
            env,
            user: c.user.unwrap_or_default(),
            working_dir: c.working_dir.unwrap_or_default(),
        },
    ))
}

/// How many containers use each unpacked image id.
type Uses = Arc<Mutex<HashMap<String, usize>>>;

/// A container's use of an unpacked image; released on drop.
#[derive(Debug)]
struct ImageUse {
    id: String,
    uses: Uses,
}

impl Drop for ImageUse {
    fn drop(&mut self) {
        let mut uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = uses.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                uses.remove(&self.id);
            }
        }
    }
}

/// The local image storage and the unpacked root filesystems.
#[derive(Debug)]
pub struct ImageStore {
    /// `podman` and the global flags that select the storage.
    podman: Vec<String>,
    store: PathBuf,
    unpacked: PathBuf,
    /// One unpack at a time: two pods of a new image must not both unpack it.
    unpacking: tokio::sync::Mutex<()>,
    uses: Uses,
}

impl ImageStore {
    /// The podman storage under `store` (`storage/`, `run/`, vfs driver), unpacked images under
    /// `unpacked`.
    pub fn new(store: &Path, unpacked: PathBuf) -> Self {
        let podman = vec![
            "podman".to_owned(),
            "--root".to_owned(),
            store.join("storage").display().to_string(),
            "--runroot".to_owned(),
            store.join("run").display().to_string(),
            "--storage-driver".to_owned(),
            "vfs".to_owned(),
        ];
        Self {
            podman,
            store: store.to_path_buf(),
            unpacked,
            unpacking: tokio::sync::Mutex::new(()),
            uses: Uses::default(),
        }
    }

    async fn podman(&self, args: &[&str]) -> Result<Vec<u8>, String> {
        let out = Command::new(&self.podman[0])
            .args(&self.podman[1..])
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| format!("running podman: {e}"))?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    /// The image `reference` from local storage, unpacked.
    pub async fn pull(&self, reference: &str) -> Result<Image, ImageError> {
        let inspected = self.podman(&["image", "inspect", reference]).await;
        let json = match inspected {
            Ok(json) => json,
            Err(message) if message.contains("image not known") => {
                return Err(ImageError::NotFound {
                    image: reference.to_owned(),
                    store: self.store.display().to_string(),
                });
            }
            Err(message) => {
                return Err(ImageError::Inspect {
                    image: reference.to_owned(),
                    message,
                });
            }
        };
        let (id, config) = parse_inspect(&json).map_err(|message| ImageError::Inspect {
            image: reference.to_owned(),
            message,
        })?;
        let use_ = {
            let mut uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
            *uses.entry(id.clone()).or_default() += 1;
            ImageUse {
                id: id.clone(),
                uses: self.uses.clone(),
            }
        };
        let rootfs = self.unpacked.join(&id).join("rootfs");
        if !rootfs.is_dir() {
            let _one = self.unpacking.lock().await;
            if !rootfs.is_dir() {
                self.unpack(&id, &rootfs)
                    .await
                    .map_err(|message| ImageError::Unpack {
                        image: reference.to_owned(),
                        id: id.clone(),
                        message,
                    })?;
                tracing::info!(image = reference, id = %id, "image unpacked");
                self.collect(&id).await;
            }
        }
        Ok(Image {
            reference: reference.to_owned(),
            id,
            rootfs,
            config,
            _use: use_,
        })
    }

    /// `podman create` + `podman export` into a temporary directory renamed to `rootfs`.
    async fn unpack(&self, id: &str, rootfs: &Path) -> Result<(), String> {
        let dir = rootfs.parent().ok_or("no parent")?;
        let tmp = dir.join(format!("rootfs.tmp.{}", std::process::id()));
        let tar = dir.join("export.tar");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let name = format!("tracehouse-unpack-{}", &id[..id.len().min(12)]);
        let _ = self.podman(&["rm", "-f", &name]).await;
        // A command is given so images without one can be created too; it never runs.
        self.podman(&["create", "--name", &name, "--entrypoint", "/", id])
            .await?;
        let exported = self
            .podman(&["export", "-o", &tar.display().to_string(), &name])
            .await;
        let _ = self.podman(&["rm", "-f", &name]).await;
        exported?;
        let out = Command::new("tar")
            .args(["--numeric-owner", "-xf"])
            .arg(&tar)
            .arg("-C")
            .arg(&tmp)
            .output()
            .await
            .map_err(|e| format!("running tar: {e}"))?;
        let _ = std::fs::remove_file(&tar);
        if !out.status.success() {
            return Err(format!(
                "tar: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        std::fs::rename(&tmp, rootfs).map_err(|e| format!("{}: {e}", rootfs.display()))
    }

    /// Deletes unpacked images that are gone from the storage and used by no container.
    async fn collect(&self, keep: &str) {
        let Ok(entries) = std::fs::read_dir(&self.unpacked) else {
            return;
        };
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            if id == keep
                || self
                    .uses
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(&id)
            {
                continue;
            }
            if self.podman(&["image", "exists", &id]).await.is_err() {
                tracing::info!(id = %id, "deleting an unpacked image no longer in storage");
                if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                    tracing::warn!(id = %id, error = %e, "cannot delete unpacked image");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_output_gives_id_and_run_config() {
        let json = br#"[{"Id":"sha256:64e83fde","Config":{"User":"65532:65532",
            "Env":["PATH=/usr/bin:/bin","EMPTY=","A=b=c"],
            "Entrypoint":["/usr/local/bin/tracehouse-operator"],"Cmd":["run"],
            "WorkingDir":"/home/nonroot","Labels":{"x":"y"}}}]"#;
        let (id, c) = parse_inspect(json).unwrap();
        assert_eq!(id, "64e83fde");
        assert_eq!(c.entrypoint, ["/usr/local/bin/tracehouse-operator"]);
        assert_eq!(c.cmd, ["run"]);
        assert_eq!(c.user, "65532:65532");
        assert_eq!(c.working_dir, "/home/nonroot");
        assert_eq!(
            c.env,
            [
                ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
                ("EMPTY".to_owned(), String::new()),
                ("A".to_owned(), "b=c".to_owned()),
            ]
        );
    }

    #[test]
    fn inspect_output_without_config_or_with_a_bad_id_is_handled() {
        let (id, c) = parse_inspect(br#"[{"Id":"abc123"}]"#).unwrap();
        assert_eq!((id.as_str(), c), ("abc123", ImageConfig::default()));
        assert!(parse_inspect(b"[]").is_err());
        assert!(parse_inspect(br#"[{"Id":"../../etc"}]"#).is_err());
        assert!(parse_inspect(b"not json").is_err());
    }
}
