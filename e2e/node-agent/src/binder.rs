//! The scheduler of a one-node cluster: binds every pending pod of the default scheduler to
//! this node through the `pods/binding` subresource, as kube-scheduler would.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::EventType;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;

use crate::ctx::Ctx;

const DEFAULT_SCHEDULER: &str = "default-scheduler";
const BIND_ATTEMPTS: u32 = 5;

/// Why a pending pod is not bound here.
#[derive(Debug, PartialEq, Eq)]
pub enum Skip {
    /// Another scheduler's pod, already terminal or being deleted: not ours to bind.
    NotOurs,
    /// The pod's `nodeSelector` does not match this node (a real scheduler would keep it Pending).
    Unschedulable(String),
}

/// Whether `pod` should be bound to the node with `node_labels`. Pure.
pub fn decide(pod: &Pod, node_labels: &BTreeMap<String, String>) -> Result<(), Skip> {
    let spec = pod.spec.as_ref().ok_or(Skip::NotOurs)?;
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
        || spec
            .scheduler_name
            .as_deref()
            .is_some_and(|s| s != DEFAULT_SCHEDULER)
        || pod.metadata.deletion_timestamp.is_some()
        || pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
    {
        return Err(Skip::NotOurs);
    }
    for (k, v) in spec.node_selector.iter().flatten() {
        if node_labels.get(k) != Some(v) {
            return Err(Skip::Unschedulable(format!(
                "0/1 nodes are available: node selector {k}={v} does not match the node"
            )));
        }
    }
    Ok(())
}

/// Watches unbound pods and binds them, until `shutdown`.
pub async fn run(
    ctx: Arc<Ctx>,
    node_labels: BTreeMap<String, String>,
    shutdown: CancellationToken,
) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let config = watcher::Config::default().fields("spec.nodeName=");
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            e = events.next() => e,
        };
        let pod = match event {
            None => return,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "unbound-pod watch failed; retrying with backoff");
                continue;
            }
            Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => pod,
            Some(Ok(_)) => continue,
        };
        match decide(&pod, &node_labels) {
            Ok(()) => {
                // Binding retries in the background, so one failing pod does not hold up others.
                tokio::spawn(bind(ctx.clone(), pod));
            }
            Err(Skip::NotOurs) => {}
            Err(Skip::Unschedulable(reason)) => {
                tracing::info!(pod = ?pod.metadata.name, %reason, "pod not schedulable here");
                ctx.event(&pod, EventType::Warning, "FailedScheduling", reason)
                    .await;
            }
        }
    }
}

async fn bind(ctx: Arc<Ctx>, pod: Pod) {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(ctx.node_name.clone()),
            ..Default::default()
        },
    };
    for attempt in 0..BIND_ATTEMPTS {
        let result: Result<serde_json::Value, _> = api
            .create_subresource("binding", &name, &PostParams::default(), &binding)
            .await;
        match result {
            Ok(_) => {
                tracing::info!(pod = %format!("{ns}/{name}"), node = %ctx.node_name, "pod bound");
                let note = format!("Successfully assigned {ns}/{name} to {}", ctx.node_name);
                ctx.event(&pod, EventType::Normal, "Scheduled", note).await;
                return;
            }
            // Bound already (a second event for the same pod), or deleted meanwhile.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => return,
            Err(e) => {
                let delay = ctx.restart_backoff.delay(attempt);
                tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, ?delay, "binding failed; retrying");
                tokio::time::sleep(delay.min(Duration::from_secs(10))).await;
            }
        }
    }
    tracing::error!(pod = %format!("{ns}/{name}"), "giving up binding the pod");
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(spec: PodSpec) -> Pod {
        Pod {
            spec: Some(spec),
            ..Default::default()
        }
    }

    #[test]
    fn binds_only_unbound_default_scheduler_pods_that_fit() {
        let labels = BTreeMap::from([("kubernetes.io/os".to_owned(), "linux".to_owned())]);
        assert_eq!(decide(&pod(PodSpec::default()), &labels), Ok(()));
        let other = PodSpec {
            scheduler_name: Some("volcano".into()),
            ..Default::default()
        };
        assert_eq!(decide(&pod(other), &labels), Err(Skip::NotOurs));
        let bound = PodSpec {
            node_name: Some("n".into()),
            ..Default::default()
        };
        assert_eq!(decide(&pod(bound), &labels), Err(Skip::NotOurs));
        let fits = PodSpec {
            node_selector: Some(labels.clone()),
            ..Default::default()
        };
        assert_eq!(decide(&pod(fits), &labels), Ok(()));
        let windows = PodSpec {
            node_selector: Some(BTreeMap::from([(
                "kubernetes.io/os".to_owned(),
                "windows".to_owned(),
            )])),
            ..Default::default()
        };
        assert!(matches!(
            decide(&pod(windows), &labels),
            Err(Skip::Unschedulable(_))
        ));
    }
}
