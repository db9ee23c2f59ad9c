//! Reporting a reconcile: the next status, written only when it differs from the stored
//! one (`crate::status` derives it, purely), and one Event per state change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};

use super::Context;
use crate::FIELD_MANAGER;
use crate::crd::{TracePipeline, TracePipelineStatus};
use crate::error::Error;
use crate::status::{self, Observation};

/// Writes the next status if it differs from the stored one, then one Event per change.
///
/// `prev` comes from the controller's cache, which can lag behind our own last write: a
/// Deployment event right after a status write reconciles with the object as it was before
/// that write. Compared with that stale copy the status looks changed, and writing it would
/// repeat the write (and its Events), or move a condition's transition time. So a status
/// that looks changed is compared once more with the stored one, read from the API server
/// (a quorum read), and written only if it still differs: nothing changed, nothing written.
pub(super) async fn publish(
    tp: &TracePipeline,
    ctx: &Context,
    prev: &TracePipelineStatus,
    obs: &Observation,
) -> Result<(), Error> {
    let now = Time(Timestamp::now());
    let mut next = status::next(prev, obs, &now);
    // Every reconcile, changed or not: a restarted operator fills its gauges again. The
    // memory limit is the live gateway's, as this reconcile read it.
    let memory_limit = obs.gateway.and_then(|g| g.memory_limit_bytes);
    ctx.metrics.pipelines.observe(tp, &next, memory_limit);
    if next == *prev {
        return Ok(());
    }
    let api: Api<TracePipeline> =
        Api::namespaced(ctx.client.clone(), &tp.namespace().unwrap_or_default());
    let stored = match api.get_opt(&tp.name_any()).await? {
        // Deleted meanwhile: nothing to report on.
        None => return Ok(()),
        Some(fresh) => fresh.status.unwrap_or_default(),
    };
    if stored != *prev {
        next = status::next(&stored, obs, &now);
        ctx.metrics.pipelines.observe(tp, &next, memory_limit);
        if next == stored {
            return Ok(());
        }
    }
    let body = serde_json::json!({
        "apiVersion": TracePipeline::api_version(&()),
        "kind": TracePipeline::kind(&()),
        "status": next,
    });
    api.patch_status(
        &tp.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    ctx.metrics.wrote("TracePipelineStatus");
    for e in status::events(&stored, &next) {
        let type_ = if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        event(tp, ctx, type_, e.reason, "Reconcile", e.note).await;
    }
    Ok(())
}

/// Publishes an Event for `action`; a failure is logged, never fatal (Events are best
/// effort). The recorder folds Events of the same reason and action into one series that
/// keeps the first note, so each distinct step gets its own action.
pub(super) async fn event(
    tp: &TracePipeline,
    ctx: &Context,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        // Notes are limited to 1 kB by the API.
        note: Some(note.chars().take(1000).collect()),
        action: action.to_owned(),
        secondary: None,
    };
    match ctx.recorder.publish(&event, &tp.object_ref(&())).await {
        Ok(()) => ctx.metrics.wrote("Event"),
        Err(e) => tracing::warn!(reason, error = %e, "cannot publish Event"),
    }
}
