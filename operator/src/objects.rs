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

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::FIELD_MANAGER;
use crate::builders::Owned;
use crate::error::Error;
use crate::quantity::quantity;

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

fn hash_of(value: &Value) -> String {
    let digest = Sha256::digest(value.to_string().as_bytes());
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// Applies `desired` unless the live object already matches it; returns the live object.
pub async fn ensure(client: &Client, desired: &Owned) -> Result<(DynamicObject, Change), Error> {
    ensure_over(client, desired, None).await
}

/// [`ensure`], comparing with `known`, the live object as this reconcile already read it
/// (`Some(None)`: read, and not there), instead of reading it again.
pub async fn ensure_over(
    client: &Client,
    desired: &Owned,
    known: Option<Option<DynamicObject>>,
) -> Result<(DynamicObject, Change), Error> {
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
    let live = match known {
        Some(live) => live,
        None => api.get_opt(&name).await?,
    };
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
}
