//! Container image → local binary: the node agent's whole "image registry".
//!
//! There is no container runtime on the machines this runs on, so an image is only a name
//! for a binary the workspace builds. The tag and digest are ignored (the binary is whatever
//! `cargo build` produced last); a registry host in front of the repository is ignored too,
//! so `ghcr.io/tracehouse/collector:0.1.0` runs the same binary as `tracehouse/collector`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImageError {
    #[error("image mapping {0:?} is not REPOSITORY=PATH")]
    BadMapping(String),
    #[error("image {image:?} has no local binary on this node (known images: {known})")]
    Unknown { image: String, known: String },
}

impl ImageError {
    /// The container's `Waiting` reason for this error.
    pub fn reason(&self) -> &'static str {
        "UnknownImage"
    }
}

/// Repository (no registry, tag or digest) → binary path.
#[derive(Debug, Clone, Default)]
pub struct ImageMap {
    by_repo: BTreeMap<String, PathBuf>,
}

impl ImageMap {
    /// Parses `REPOSITORY=PATH` entries, as given on the command line.
    pub fn parse(specs: &[String]) -> Result<Self, ImageError> {
        let mut by_repo = BTreeMap::new();
        for spec in specs {
            let (repo, path) = spec
                .split_once('=')
                .filter(|(r, p)| !r.is_empty() && !p.is_empty())
                .ok_or_else(|| ImageError::BadMapping(spec.clone()))?;
            by_repo.insert(repository(repo).to_owned(), PathBuf::from(path));
        }
        Ok(Self { by_repo })
    }

    /// The binary that runs containers of `image`.
    pub fn resolve(&self, image: &str) -> Result<&Path, ImageError> {
        let repo = repository(image);
        self.by_repo
            .get(repo)
            .or_else(|| without_registry(repo).and_then(|r| self.by_repo.get(r)))
            .map(PathBuf::as_path)
            .ok_or_else(|| ImageError::Unknown {
                image: image.to_owned(),
                known: self.known(),
            })
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Path)> {
        self.by_repo.iter().map(|(r, p)| (r.as_str(), p.as_path()))
    }

    fn known(&self) -> String {
        if self.by_repo.is_empty() {
            return "none".to_owned();
        }
        self.by_repo.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// The repository part of an image reference: without `@digest` and `:tag`.
pub fn repository(image: &str) -> &str {
    let no_digest = image.split_once('@').map_or(image, |(r, _)| r);
    match no_digest.rfind(':') {
        // A ':' before the last '/' belongs to a registry port, not a tag.
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

/// `registry.example:5000/a/b` → `a/b`; `None` when the first component is not a host.
fn without_registry(repo: &str) -> Option<&str> {
    let (first, rest) = repo.split_once('/')?;
    (first.contains('.') || first.contains(':') || first == "localhost").then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> ImageMap {
        ImageMap::parse(&[
            "tracehouse/collector=/bin/collector".to_owned(),
            "tracehouse/operator:ignored=/bin/operator".to_owned(),
        ])
        .unwrap()
    }

    #[test]
    fn repository_strips_tag_and_digest_but_not_registry_port() {
        assert_eq!(repository("tracehouse/collector"), "tracehouse/collector");
        assert_eq!(
            repository("tracehouse/collector:0.1"),
            "tracehouse/collector"
        );
        assert_eq!(
            repository("tracehouse/collector@sha256:ab"),
            "tracehouse/collector"
        );
        assert_eq!(
            repository("reg:5000/tracehouse/collector"),
            "reg:5000/tracehouse/collector"
        );
        assert_eq!(
            repository("reg:5000/tracehouse/collector:1"),
            "reg:5000/tracehouse/collector"
        );
    }

    #[test]
    fn any_tag_and_registry_maps_to_the_same_binary() {
        let m = map();
        for image in [
            "tracehouse/collector",
            "tracehouse/collector:latest",
            "tracehouse/collector:0.1.0@sha256:00",
            "ghcr.io/tracehouse/collector:0.1.0",
            "localhost:5000/tracehouse/collector",
        ] {
            assert_eq!(
                m.resolve(image).unwrap(),
                Path::new("/bin/collector"),
                "{image}"
            );
        }
        assert_eq!(
            m.resolve("tracehouse/operator:dev").unwrap(),
            Path::new("/bin/operator")
        );
    }

    #[test]
    fn unknown_image_error_names_the_image_and_the_known_ones() {
        let err = map().resolve("nginx:1.27").unwrap_err();
        assert_eq!(err.reason(), "UnknownImage");
        let msg = err.to_string();
        assert!(msg.contains("\"nginx:1.27\""), "{msg}");
        assert!(
            msg.contains("tracehouse/collector, tracehouse/operator"),
            "{msg}"
        );
        // A path component that is not a host is part of the repository.
        assert!(map().resolve("other/tracehouse/collector").is_err());
    }

    #[test]
    fn malformed_mappings_are_rejected() {
        for bad in ["tracehouse/collector", "=/bin/x", "tracehouse/collector="] {
            assert_eq!(
                ImageMap::parse(&[bad.to_owned()]).unwrap_err(),
                ImageError::BadMapping(bad.to_owned())
            );
        }
    }
}
