//! Events from the difference between two statuses: one per state change, none when
//! nothing changed (pure; `reconcile/report.rs` publishes them after the status write).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::find;
use crate::crd::{TracePipelineStatus, condition};
use crate::gateway_diagnosis::Failure;
use crate::offsets_retention::{EXPIRING_SOON, MAY_HAVE_EXPIRED};
use crate::skew::COLLECTOR_TOO_OLD;

/// An Event to publish about the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub warning: bool,
    /// CamelCase, as `kubectl describe` shows it.
    pub reason: &'static str,
    pub note: String,
}

fn shown<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

/// One Event per state change between `prev` and `next`; none when nothing changed.
pub fn events(prev: &TracePipelineStatus, next: &TracePipelineStatus) -> Vec<EventSpec> {
    let mut out = Vec::new();
    let normal = |reason, note| EventSpec {
        warning: false,
        reason,
        note,
    };
    if next.partitions != prev.partitions && next.partitions.is_some() {
        out.push(normal(
            "PartitionsChanged",
            format!(
                "topics have {} partitions (was {})",
                shown(next.partitions),
                shown(prev.partitions)
            ),
        ));
    }
    if next.schema_version != prev.schema_version && next.schema_version.is_some() {
        out.push(normal(
            "SchemaMigrated",
            format!(
                "traces table at schema version {} (was {})",
                shown(next.schema_version),
                shown(prev.schema_version)
            ),
        ));
    }
    if next.dedup_window != prev.dedup_window && next.dedup_window.is_some() {
        out.push(normal(
            "DedupWindowChanged",
            format!(
                "traces table deduplication window is {} blocks (was {})",
                shown(next.dedup_window),
                shown(prev.dedup_window)
            ),
        ));
    }
    // Not at creation (the first reading is no change). A status written by an operator
    // older than this field reads as a change once, for a table with a TTL.
    if next.retention != prev.retention && prev.schema_version.is_some() {
        out.push(normal(
            "RetentionChanged",
            format!(
                "traces table retention (TTL) is {} (was {})",
                shown(next.retention.as_deref()),
                shown(prev.retention.as_deref())
            ),
        ));
    }
    // Not at creation, as for the retention.
    if next.layouts != prev.layouts && next.layouts.is_some() && prev.schema_version.is_some() {
        out.push(normal(
            "LayoutsChanged",
            format!(
                "traces table layouts are {} (was {})",
                shown(next.layouts.as_deref()),
                shown(prev.layouts.as_deref())
            ),
        ));
    }
    if next.config_hash != prev.config_hash && next.config_hash.is_some() {
        out.push(match prev.config_hash {
            None => normal(
                "GatewayCreated",
                format!(
                    "collector gateway created with config {}",
                    shown(next.config_hash.as_deref())
                ),
            ),
            Some(_) => normal(
                "ConfigChanged",
                format!(
                    "collector config changed to {}: rolling the gateway",
                    shown(next.config_hash.as_deref())
                ),
            ),
        });
    }
    if next.desired_replicas != prev.desired_replicas && next.desired_replicas.is_some() {
        out.push(normal(
            "Scaled",
            format!(
                "gateway scaled to {} replicas (was {}) for {} partitions",
                shown(next.desired_replicas),
                shown(prev.desired_replicas),
                shown(next.partitions)
            ),
        ));
    }
    if next.collector_upgrade != prev.collector_upgrade
        && let Some(newer) = &next.collector_upgrade
    {
        out.push(normal(
            "CollectorUpgradeAvailable",
            format!(
                "the operator's default collector image is {newer}; upgradePolicy Manual keeps {} \
                 (set it to Auto, or set spec.collector.image, to upgrade)",
                shown(next.collector_image.as_deref())
            ),
        ));
    }
    let ready = |s: &TracePipelineStatus| find(&s.conditions, condition::READY).cloned();
    let (was, now) = (ready(prev), ready(next));
    let reason_of = |c: &Option<Condition>| c.as_ref().map(|c| c.reason.clone());
    if reason_of(&now).as_deref() == Some("Paused") && reason_of(&was).as_deref() != Some("Paused")
    {
        out.push(normal(
            "Paused",
            "spec.paused is true: changes are frozen".to_owned(),
        ));
    } else if reason_of(&was).as_deref() == Some("Paused")
        && reason_of(&now).as_deref() != Some("Paused")
    {
        out.push(normal(
            "Resumed",
            "spec.paused is false: reconciling again".to_owned(),
        ));
    }
    // A gateway failure newly named (or a new kind of it): one Warning with its reason.
    let mut failure_announced = false;
    for type_ in [condition::GATEWAY_AVAILABLE, condition::PROGRESSING] {
        let (before, after) = (find(&prev.conditions, type_), find(&next.conditions, type_));
        if let Some(c) = after.filter(|c| c.status == "False")
            && Failure::is_failure_reason(&c.reason)
            && before.is_none_or(|b| b.reason != c.reason)
            && let Some(f) = Failure::ALL.iter().find(|f| f.reason() == c.reason)
        {
            out.push(EventSpec {
                warning: true,
                reason: f.reason(),
                note: c.message.clone(),
            });
            failure_announced = true;
        }
    }
    // Settings the gateway's collector does not know, left out: one Warning naming them (again
    // when the list changes), and one Normal once every setting is in its configuration.
    let config = |s: &TracePipelineStatus| find(&s.conditions, condition::CONFIG_APPLIED).cloned();
    match (config(prev), config(next)) {
        (before, Some(c))
            if c.reason == COLLECTOR_TOO_OLD
                && before
                    .as_ref()
                    .is_none_or(|b| b.reason != c.reason || b.message != c.message) =>
        {
            out.push(EventSpec {
                warning: true,
                reason: COLLECTOR_TOO_OLD,
                note: c.message,
            });
            failure_announced = true;
        }
        (Some(before), Some(c)) if before.status == "False" && c.status == "True" => {
            out.push(normal("ConfigApplied", c.message));
        }
        _ => {}
    }
    let status_of = |c: &Option<Condition>| c.as_ref().map(|c| c.status.clone());
    if status_of(&now) != status_of(&was)
        && let Some(c) = &now
    {
        if c.status == "True" {
            out.push(normal("PipelineReady", c.message.clone()));
        } else if c.reason != "Paused"
            && !failure_announced
            && status_of(&was).as_deref() == Some("True")
        {
            out.push(EventSpec {
                warning: true,
                reason: "PipelineNotReady",
                note: format!("{}: {}", c.reason, c.message),
            });
        }
    }
    // A stopped group nearing or past the broker's offsets retention: one Warning per stage.
    let consuming = |s: &TracePipelineStatus| find(&s.conditions, condition::CONSUMING).cloned();
    if let Some(c) = consuming(next)
        && reason_of(&consuming(prev)).as_deref() != Some(c.reason.as_str())
        && let Some(reason) = [EXPIRING_SOON, MAY_HAVE_EXPIRED]
            .into_iter()
            .find(|r| *r == c.reason)
    {
        out.push(EventSpec {
            warning: true,
            reason,
            note: c.message,
        });
    }
    if next.last_error != prev.last_error
        && let Some(e) = &next.last_error
    {
        out.push(EventSpec {
            warning: true,
            reason: "ReconcileFailed",
            note: e.clone(),
        });
    }
    out
}
