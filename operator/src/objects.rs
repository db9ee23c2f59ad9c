//! Server-side apply of owned objects, skipped when the object already is as desired.
//!
//! Every apply uses the one field manager ([`crate::FIELD_MANAGER`]). Before applying, the
//! live object is compared with the desired one, and the apply is skipped when
//! - its `tracehouse.dev/applied` annotation carries the hash of the desired object (so a
//!   field we stopped setting is still removed by the next apply), and
//! - every field we set has the desired value in the live object (so a hand edit of one of
//!   our fields is reverted). Fields others add (defaults, other managers) are ignored.
//!
//! So a reconcile that finds nothing to change sends no write at all.

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, TypeMeta};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::FIELD_MANAGER;
use crate::error::Error;

/// Annotation with the hash of the desired object last applied.
pub const APPLIED_ANNOTATION: &str = "tracehouse.dev/applied";

/// What [`ensure`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Created,
    Updated,
}

/// `true` when `live` has every field of `desired` with the same value. Lists must have the
/// same length and match item by item; maps may have more keys in `live`. Resource
/// quantities (`requests`/`limits` values) compare by value, since the API server rewrites
/// them in canonical form (`0.5` → `500m`).
pub fn contains(live: &Value, desired: &Value) -> bool {
    contains_at(live, desired, false)
}

fn contains_at(live: &Value, desired: &Value, quantities: bool) -> bool {
    match (live, desired) {
        (_, Value::Null) => true,
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| match l.get(k) {
            // `quantities` here means "this is a requests/limits map": its values are.
            Some(lv) => contains_at(lv, dv, quantities || k == "requests" || k == "limits"),
            None => dv.is_null() || dv.as_object().is_some_and(serde_json::Map::is_empty),
        }),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| contains_at(lv, dv, false))
        }
        (Value::Number(l), Value::Number(d)) => l.as_f64() == d.as_f64(),
        (Value::String(l), Value::String(d)) if quantities && l != d => {
            matches!((quantity(l), quantity(d)), (Some(a), Some(b)) if a == b)
        }
        (l, d) => l == d,
    }
}

/// A Kubernetes memory quantity in whole bytes, rounded up (`1500m` is 2 bytes); `None`
/// when it does not parse, is negative or does not fit an `i64`. The one parser is
/// [`quantity`].
pub fn quantity_bytes(q: &str) -> Option<i64> {
    let nanos = quantity(q.trim())?;
    if nanos < 0 {
        return None;
    }
    i64::try_from((nanos + 999_999_999) / 1_000_000_000).ok()
}

/// A Kubernetes quantity (`500m`, `0.5`, `1536Mi`, `1.5Gi`, `2e3`) in nano-units; `None`
/// when it does not parse or does not fit.
pub fn quantity(s: &str) -> Option<i128> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if frac.len() > 9 || (int.is_empty() && frac.is_empty()) {
        return None;
    }
    let negative = int.starts_with('-');
    let int = int.trim_start_matches(['+', '-']);
    let mut nanos: i128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    nanos = nanos.checked_mul(1_000_000_000)?;
    if !frac.is_empty() {
        let f: i128 = frac.parse().ok()?;
        nanos += f * 10i128.pow(9 - frac.len() as u32);
    }
    let (num, den): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            if exp >= 0 {
                (10i128.checked_pow(exp.unsigned_abs())?, 1)
            } else {
                (1, 10i128.checked_pow(exp.unsigned_abs())?)
            }
        }
        _ => return None,
    };
    let value = nanos.checked_mul(num)? / den;
    Some(if negative { -value } else { value })
}

fn hash_of(value: &Value) -> String {
    let digest = Sha256::digest(value.to_string().as_bytes());
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// One desired object of any kind, as [`ensure`] applies it: its API resource and its body.
/// The reconciler applies a list of them in order (`builders::Desired::objects`).
#[derive(Debug, Clone)]
pub struct Owned {
    /// The kind, for logs and the write counter.
    pub kind: &'static str,
    pub resource: ApiResource,
    pub object: DynamicObject,
}

impl Owned {
    /// `typed` as an [`Owned`]; its JSON (and so its [`APPLIED_ANNOTATION`] hash) is the
    /// typed object's own.
    pub fn of<K>(typed: &K) -> Result<Self, serde_json::Error>
    where
        K: k8s_openapi::Resource + Resource<DynamicType = ()> + Serialize,
    {
        let mut object: DynamicObject = serde_json::from_value(serde_json::to_value(typed)?)?;
        // Required in an apply body; typed objects may leave them out.
        object.types = Some(TypeMeta {
            api_version: K::API_VERSION.to_owned(),
            kind: K::KIND.to_owned(),
        });
        Ok(Self {
            kind: K::KIND,
            resource: ApiResource::erase::<K>(&()),
            object,
        })
    }
}

/// Applies `desired` unless the live object already matches it; returns the live object.
pub async fn ensure(client: &Client, desired: &Owned) -> Result<(DynamicObject, Change), Error> {
    let name = desired.object.name_any();
    let namespace = desired.object.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &desired.resource);
    let mut desired_value =
        serde_json::to_value(&desired.object).map_err(|source| Error::Serialize {
            what: "an owned object",
            source,
        })?;
    let hash = hash_of(&desired_value);
    desired_value["metadata"]["annotations"][APPLIED_ANNOTATION] = Value::String(hash.clone());
    let live = api.get_opt(&name).await?;
    if let Some(live) = &live {
        let annotation = live.annotations().get(APPLIED_ANNOTATION);
        let live_value = serde_json::to_value(live).map_err(|source| Error::Serialize {
            what: "a live object",
            source,
        })?;
        if annotation == Some(&hash) && contains(&live_value, &desired_value) {
            return Ok((live.clone(), Change::Unchanged));
        }
    }
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired_value),
        )
        .await?;
    tracing::info!(
        kind = desired.kind,
        namespace = %namespace,
        name = %name,
        created = live.is_none(),
        "applied"
    );
    let change = if live.is_none() {
        Change::Created
    } else {
        Change::Updated
    };
    Ok((applied, change))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn live_objects_with_server_defaults_contain_the_desired_fields() {
        let desired = json!({
            "spec": { "replicas": 2, "template": { "spec": { "containers": [
                { "name": "c", "ports": [{ "containerPort": 8888 }] }
            ] } } }
        });
        let live = json!({
            "metadata": { "resourceVersion": "7" },
            "spec": { "replicas": 2, "progressDeadlineSeconds": 600, "template": { "spec": {
                "dnsPolicy": "ClusterFirst",
                "containers": [
                    { "name": "c", "terminationMessagePath": "/dev/termination-log",
                      "ports": [{ "containerPort": 8888, "protocol": "TCP" }] }
                ]
            } } }
        });
        assert!(contains(&live, &desired));
    }

    #[test]
    fn a_changed_value_or_list_length_is_a_difference() {
        let desired = json!({ "spec": { "replicas": 3, "args": ["a", "b"] } });
        assert!(!contains(
            &json!({ "spec": { "replicas": 2, "args": ["a", "b"] } }),
            &desired
        ));
        assert!(!contains(
            &json!({ "spec": { "replicas": 3, "args": ["a", "b", "c"] } }),
            &desired
        ));
        assert!(!contains(&json!({ "spec": {} }), &desired));
        assert!(contains(
            &json!({ "spec": { "replicas": 3.0, "args": ["a", "b"] } }),
            &desired
        ));
    }

    #[test]
    fn resource_quantities_compare_by_value_and_nothing_else_does() {
        let desired = json!({ "resources": { "requests": { "cpu": "0.5", "memory": "1.5Gi" } } });
        let live = json!({ "resources": { "requests": { "cpu": "500m", "memory": "1536Mi" } } });
        assert!(contains(&live, &desired));
        let more = json!({ "resources": { "requests": { "cpu": "600m", "memory": "1536Mi" } } });
        assert!(!contains(&more, &desired));
        // Outside requests/limits, "1" and "1000m" are different strings.
        assert!(!contains(
            &json!({ "value": "1000m" }),
            &json!({ "value": "1" })
        ));
        assert_eq!(quantity("1"), quantity("1000m"));
        assert_eq!(quantity("2e3"), quantity("2k"));
        assert_eq!(quantity("1Ki"), Some(1024 * 1_000_000_000));
        assert_eq!(quantity("12x"), None);
        assert_eq!(quantity(""), None);
    }

    #[test]
    fn the_hash_changes_when_a_field_is_dropped() {
        let with = json!({ "metadata": { "labels": { "a": "1", "b": "2" } } });
        let without = json!({ "metadata": { "labels": { "a": "1" } } });
        assert_ne!(hash_of(&with), hash_of(&without));
        // A field dropped from the desired object still "contains": only the hash tells.
        assert!(contains(&with, &without));
    }

    #[test]
    fn an_owned_object_hashes_as_its_typed_self() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let typed = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("gw".into()),
                namespace: Some("ns".into()),
                labels: Some([("a".to_owned(), "1".to_owned())].into()),
                ..Default::default()
            },
            data: Some([("k".to_owned(), "v".to_owned())].into()),
            ..Default::default()
        };
        let owned = Owned::of(&typed).unwrap();
        assert_eq!(owned.kind, "ConfigMap");
        assert_eq!(owned.resource.plural, "configmaps");
        // The hash on every live object stays valid across the move to one apply loop.
        let typed_value = serde_json::to_value(&typed).unwrap();
        assert_eq!(typed_value["kind"], "ConfigMap");
        assert_eq!(serde_json::to_value(&owned.object).unwrap(), typed_value);
    }

    #[test]
    fn quantities_in_bytes() {
        for (q, bytes) in [
            ("512Mi", 512 << 20),
            ("1Gi", 1 << 30),
            ("1G", 1_000_000_000),
            ("500M", 500_000_000),
            ("128974848", 128_974_848),
            ("1e9", 1_000_000_000),
            ("1.5Gi", 3 << 29),
            ("100k", 100_000),
        ] {
            assert_eq!(quantity_bytes(q), Some(bytes), "{q}");
        }
        for bad in ["", "Mi", "12x", "-1", "1.5.2Gi"] {
            assert_eq!(quantity_bytes(bad), None, "{bad}");
        }
    }
}
