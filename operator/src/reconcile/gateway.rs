//! Looking at the gateway without changing it: its Deployment (paused pipelines), its pods —
//! listed once per reconcile ([`pods`]), the list the autoscaler's sample, the
//! offsets-retention watch, the skew check and the diagnosis all read —, the config revision
//! its collector reports when it runs another image than the operator's ([`collector_revision`],
//! `crate::skew`), and why the pods fail, if they do (`crate::gateway_diagnosis` decides; this
//! adds the scheduler's Events). Best effort: what the API or a pod refuses reads as "nothing
//! known".

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::Context;
use crate::builders::{self, Names};
use crate::crd::TracePipeline;
use crate::error::Error;
use crate::gateway_diagnosis::{self, PodFacts};
use crate::skew;
use crate::status::{Gateway, Observation};

/// The live gateway Deployment, if there is one.
pub(super) async fn deployment(
    tp: &TracePipeline,
    ctx: &Context,
) -> Result<Option<Deployment>, Error> {
    let api: Api<Deployment> =
        Api::namespaced(ctx.client.clone(), &tp.namespace().unwrap_or_default());
    Ok(api.get_opt(&Names::of(&tp.name_any()).deployment).await?)
}

/// Reads the gateway Deployment, and its pods if it has any, without changing anything
/// (paused pipelines).
pub(super) async fn observe(
    tp: &TracePipeline,
    ctx: &Context,
    obs: &mut Observation,
) -> Result<(), Error> {
    let deployment = deployment(tp, ctx).await?;
    obs.gateway = deployment.as_ref().map(Gateway::of);
    if deployment.is_some()
        && let Some(list) = pods(tp, ctx).await
    {
        obs.gateway_failure = diagnose(tp, ctx, &list, deployment.as_ref()).await;
    }
    Ok(())
}

/// The gateway's pods, listed once per reconcile. A list the API refuses is logged and reads
/// as "nothing known" (`None`), never fails the reconcile.
pub(super) async fn pods(tp: &TracePipeline, ctx: &Context) -> Option<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &tp.namespace().unwrap_or_default());
    let selector = builders::selector_string(tp);
    match api.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => Some(l.items),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the gateway pods");
            None
        }
    }
}

/// The config revision the collector on `image` reports (`tracehouse_build_info`), read from
/// one ready pod of that image among `list` (from [`pods`]) through the backends' /metrics
/// read; `None` when no such pod is ready or its answer says nothing.
pub(super) async fn collector_revision(ctx: &Context, list: &[Pod], image: &str) -> Option<u32> {
    let ip = skew::pod_to_ask(list, image)?;
    match ctx.backends.pod_metrics(ip).await {
        Ok(text) => skew::revision_in(&text),
        Err(e) => {
            tracing::warn!(ip, image, error = %e, "cannot read the collector's config revision");
            None
        }
    }
}

/// Why the gateway's pods (`list`, from [`pods`]) fail, if they do.
pub(super) async fn diagnose(
    tp: &TracePipeline,
    ctx: &Context,
    list: &[Pod],
    deployment: Option<&Deployment>,
) -> Option<gateway_diagnosis::Diagnosis> {
    let ns = tp.namespace().unwrap_or_default();
    let now = Time(Timestamp::now());
    let mut notes = Vec::with_capacity(list.len());
    for pod in list {
        let unscheduled = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_none_or(str::is_empty);
        // Only unscheduled pods: a scheduler's reason is in an Event when it left no condition.
        notes.push(if unscheduled {
            scheduling_note(ctx, &ns, &pod.name_any()).await
        } else {
            None
        });
    }
    let facts: Vec<PodFacts<'_>> = list
        .iter()
        .zip(notes)
        .map(|(pod, scheduling_note)| PodFacts {
            pod,
            scheduling_note,
        })
        .collect();
    gateway_diagnosis::diagnose(&facts, deployment, &now)
}

/// The newest `FailedScheduling` Event's note for pod `name`.
async fn scheduling_note(ctx: &Context, ns: &str, name: &str) -> Option<String> {
    let events: Api<CoreEvent> = Api::namespaced(ctx.client.clone(), ns);
    let fields =
        format!("involvedObject.kind=Pod,involvedObject.name={name},reason=FailedScheduling");
    let list = events
        .list(&ListParams::default().fields(&fields))
        .await
        .inspect_err(|e| tracing::debug!(pod = name, error = %e, "cannot list scheduling Events"))
        .ok()?;
    list.items
        .into_iter()
        .max_by_key(|e| {
            e.last_timestamp
                .as_ref()
                .or(e.first_timestamp.as_ref())
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
        })
        .and_then(|e| e.message)
}
