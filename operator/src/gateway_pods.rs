//! What the operator reads off the gateway's pods and Deployment, pure: whether a pod is
//! ready, and the collector container's memory limit. One definition for the autoscaler's
//! samples, the offsets-retention watch (`status`) and the per-pipeline gauges, read from the
//! objects the reconcile already holds (the one pod list, the live Deployment).

use k8s_openapi::api::core::v1::{Pod, PodSpec};

use crate::builders;
use crate::quantity::quantity_bytes;

/// The pod is Ready and not being deleted.
pub fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The collector container's memory limit in `spec` (a pod's, or the Deployment's template).
pub fn memory_limit(spec: &PodSpec) -> Option<u64> {
    let c = spec
        .containers
        .iter()
        .find(|c| c.name == builders::CONTAINER)
        .or(spec.containers.first())?;
    let q = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
    quantity_bytes(&q.0).and_then(|b| u64::try_from(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn ready_means_the_ready_condition_and_not_terminating() {
        let ready = serde_json::json!({
            "metadata": { "name": "p" },
            "status": { "conditions": [{ "type": "Ready", "status": "True" }] }
        });
        assert!(is_ready(&pod(ready.clone())));
        let mut going = ready.clone();
        going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        assert!(!is_ready(&pod(going)));
        let mut unready = ready;
        unready["status"]["conditions"][0]["status"] = "False".into();
        assert!(!is_ready(&pod(unready)));
    }

    #[test]
    fn the_memory_limit_is_the_collector_containers() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({ "containers": [
            { "name": "sidecar", "resources": { "limits": { "memory": "64Mi" } } },
            { "name": builders::CONTAINER, "resources": { "limits": { "memory": "512Mi" } } }
        ] }))
        .unwrap();
        assert_eq!(memory_limit(&spec), Some(512 << 20));
        let none: PodSpec =
            serde_json::from_value(serde_json::json!({ "containers": [{ "name": "c" }] })).unwrap();
        assert_eq!(memory_limit(&none), None);
    }
}
