//! YAML, in one place: the collector's configuration file (read by `Config::load`, shown
//! by `run --print-config`) and everything the operator writes as YAML (the collector
//! `ConfigMap`, the CRD) go through these functions. No other file names the library, so
//! replacing it is a change to this file alone.
//!
//! Why this is still `serde_yaml`, deprecated upstream (0.9.34+deprecated, no further
//! releases), rather than a successor:
//!
//! - The operator hashes the rendered collector configuration and rolls the gateway pods
//!   when the hash changes, and the CRD in `crds/` is committed text. A different emitter
//!   changes that text. `serde-saphyr` (actively developed, pure Rust, and already built
//!   here as a dependency of `kube-client`) reads the CRD, the samples in `config/` and
//!   the test configs to the same values, but writes `"false"` where serde_yaml writes
//!   `'false'` and folds long descriptions: every pipeline with a quoted property
//!   (`fetch.max.bytes: '52428800'`, the TLS settings) would get a new hash and roll its
//!   gateway on the operator upgrade, and the CRD would be rewritten. That switch should
//!   be made on purpose, with the roll announced, not inside a refactoring.
//! - The drop-in forks that keep the output (`serde_yaml_ng`, `serde_norway`) keep the
//!   C-translated libyaml core (`unsafe-libyaml`, or `serde_norway`'s own fork of it) and
//!   are individual efforts; `serde_norway`'s README does not commit to maintaining it
//!   long-term. Moving there changes the name, not the risk.
//!
//! The library is used only for a small, trusted input (our own config file) and for
//! output we generate, so staying on the last release costs little meanwhile.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A YAML syntax or shape error, with its line and column.
pub use serde_yaml::Error;
/// A YAML document as a tree of mappings, sequences and scalars.
pub use serde_yaml::Value;

/// Reads `T` from YAML text.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_yaml::from_str(text)
}

/// Writes `value` as YAML text.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    serde_yaml::to_string(value)
}

/// `value` as a YAML tree (what [`to_string`] would write, before it is text).
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, Error> {
    serde_yaml::to_value(value)
}

/// Reads `T` from a YAML tree.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_yaml::from_value(value)
}
