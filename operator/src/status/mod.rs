//! Pure status logic: what a reconcile observed → the next `TracePipelineStatus`, and the
//! Events that describe the difference between two statuses.
//!
//! Keeping both pure is what makes "a reconcile with nothing changed writes nothing" hold by
//! construction: condition transition times are carried over when a condition's status did
//! not change, so an unchanged world yields a status equal to the stored one (no patch), and
//! Events are derived from the status diff only (no diff, no Event).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::{AutoscalingStatus, LagStatus, TracePipelineStatus, condition};
use crate::gateway_diagnosis::{Diagnosis, Failure};
use crate::gateway_pods;
use crate::offsets_retention::{self, Consumers};
use crate::skew;

mod events;
#[cfg(test)]
mod tests;

pub use self::events::{EventSpec, events};

/// The outcome of one step of a reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Step<T> {
    /// Not reached (an earlier step failed, or paused): the stored value stands.
    #[default]
    NotRun,
    Ok(T),
    Failed {
        reason: &'static str,
        message: String,
    },
}

/// What the gateway Deployment reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gateway {
    pub desired: i32,
    pub replicas: i32,
    pub updated: i32,
    pub ready: i32,
    /// The Deployment controller has seen the latest spec.
    pub observed: bool,
    /// The collector container's memory limit in the pod template (the per-pipeline gauge).
    pub memory_limit_bytes: Option<i64>,
}

impl Gateway {
    pub fn of(d: &Deployment) -> Self {
        let s = d.status.clone().unwrap_or_default();
        Self {
            desired: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            replicas: s.replicas.unwrap_or(0),
            updated: s.updated_replicas.unwrap_or(0),
            ready: s.ready_replicas.unwrap_or(0),
            observed: s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0),
            memory_limit_bytes: d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(gateway_pods::memory_limit)
                .and_then(|b| i64::try_from(b).ok()),
        }
    }

    /// Every desired replica runs the current template and is ready, and no old one is left.
    pub fn is_rolled_out(&self) -> bool {
        self.observed
            && self.updated >= self.desired
            && self.ready >= self.desired
            && self.replicas == self.desired
    }

    /// Spans flow: some collector is ready (or none is wanted, with no partitions). A scale
    /// step or a rollout keeps serving, so it is not unavailability.
    pub fn is_serving(&self) -> bool {
        self.ready >= 1 || self.desired == 0
    }

    fn counts(&self) -> String {
        format!(
            "{} of {} replicas ready, {} updated, {} running",
            self.ready, self.desired, self.updated, self.replicas
        )
    }
}

/// Everything one reconcile learned.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub generation: Option<i64>,
    pub paused: bool,
    /// Partitions of the topics, summed.
    pub kafka: Step<i32>,
    /// How far the consumer group is behind (`crate::lag`); not run, the stored one stands.
    pub lag: Step<LagStatus>,
    /// Schema version recorded in ClickHouse.
    pub schema: Step<u32>,
    /// The traces table's insert-deduplication window, when the schema step read it.
    pub dedup_window: Option<u64>,
    /// The traces table's TTL expression (`Some(None)`: none), when the schema step read it.
    pub retention: Option<Option<String>>,
    /// The opt-in layouts the table has (`tracehouse_schema::layouts::label`), when the
    /// schema step read them.
    pub layouts: Option<String>,
    /// Layouts the table keeps that the spec no longer asks for (their spec fields).
    pub kept_layouts: Vec<&'static str>,
    pub desired_replicas: Option<i32>,
    pub config_hash: Option<String>,
    /// `status.processing` of the configuration just applied (`Some(None)`: no rules); not
    /// run, the stored one stands.
    pub processing: Option<Option<String>>,
    /// The image the gateway was given; not run, the stored one stands.
    pub collector_image: Option<String>,
    /// `Some(newer)` while `upgradePolicy: Manual` holds the gateway back; not run: stored.
    pub collector_upgrade: Option<Option<String>>,
    /// What the collector the gateway runs knows, and what its configuration left out (the
    /// `ConfigApplied` condition, `crate::skew`); not run, the stored ones stand.
    pub collector_config: Option<skew::Seen>,
    pub selector: Option<String>,
    pub gateway: Option<Gateway>,
    /// Why the gateway's pods or rollout are failing, when they are (`crate::gateway_diagnosis`).
    pub gateway_failure: Option<Diagnosis>,
    /// Whether a collector consumes, and the broker's offsets retention when none does (the
    /// `Consuming` condition, `crate::offsets_retention`); `None`: not looked, it stands.
    pub consumers: Option<Consumers>,
    /// `status.autoscaling`: `Ok(None)` when the spec has no autoscaling (the field goes);
    /// not run, the stored one stands.
    pub autoscaling: Step<Option<AutoscalingStatus>>,
    /// A failure outside the steps above (spec, Secret, API), as `(reason, message)`.
    pub error: Option<(&'static str, String)>,
}

impl Observation {
    /// The first failure of this reconcile, if any.
    fn failure(&self) -> Option<(&'static str, String)> {
        if let Step::Failed { reason, message } = &self.kafka {
            return Some((reason, message.clone()));
        }
        if let Step::Failed { reason, message } = &self.schema {
            return Some((reason, message.clone()));
        }
        self.error.clone()
    }
}

/// `SchemaReady`'s message: the version, and the layouts the table keeps though the spec
/// turned them off (nothing is dropped; `DROP INDEX`/`DROP COLUMN` by hand if unwanted).
fn schema_message(version: u32, kept: &[&str]) -> String {
    let mut m = format!("every migration up to version {version} is recorded");
    if !kept.is_empty() {
        m.push_str(&format!(
            "; the table keeps the layouts {} though spec.clickhouse.schema.layouts no longer \
             asks for them (the operator never drops columns or indexes)",
            kept.join(", ")
        ));
    }
    m
}

fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// A condition, keeping the previous transition time when its status did not change.
fn condition(
    previous: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last_transition_time = find(previous, type_)
        .filter(|c| c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// The `Consuming` condition: stopped since its own transition time, warned as that nears the
/// broker's offsets retention (`crate::offsets_retention`); not looked, the stored one.
fn consuming(previous: &[Condition], obs: &Observation, now: &Time) -> Option<Condition> {
    let Some(seen) = obs.consumers else {
        return find(previous, condition::CONSUMING).cloned();
    };
    let since = find(previous, condition::CONSUMING)
        .filter(|c| c.status == "False")
        .map_or(now.0, |c| c.last_transition_time.0);
    let v = offsets_retention::assess(seen, since, now.0);
    Some(condition(
        previous,
        condition::CONSUMING,
        v.consuming,
        v.reason,
        v.message,
        obs.generation,
        now,
    ))
}

/// The `ConfigApplied` condition (`crate::skew::verdict`); not looked, the stored one.
fn config_applied(previous: &[Condition], obs: &Observation, now: &Time) -> Option<Condition> {
    let Some(seen) = &obs.collector_config else {
        return find(previous, condition::CONFIG_APPLIED).cloned();
    };
    let (ok, reason, message) = skew::verdict(seen);
    Some(condition(
        previous,
        condition::CONFIG_APPLIED,
        ok,
        reason,
        message,
        obs.generation,
        now,
    ))
}

/// The next status, from the stored one and this reconcile's observation.
pub fn next(prev: &TracePipelineStatus, obs: &Observation, now: &Time) -> TracePipelineStatus {
    let pc = prev.conditions.as_slice();
    let g = obs.generation;
    let mut conditions = Vec::with_capacity(4);

    let kafka = match &obs.kafka {
        Step::Ok(p) => Some(condition(
            pc,
            condition::KAFKA_REACHABLE,
            true,
            "TopicsFound",
            format!("the topics have {p} partitions"),
            g,
            now,
        )),
        Step::Failed { reason, message } => Some(condition(
            pc,
            condition::KAFKA_REACHABLE,
            false,
            reason,
            message.clone(),
            g,
            now,
        )),
        Step::NotRun => find(pc, condition::KAFKA_REACHABLE).cloned(),
    };
    let schema = match &obs.schema {
        Step::Ok(v) => Some(condition(
            pc,
            condition::SCHEMA_READY,
            true,
            "MigrationsApplied",
            schema_message(*v, &obs.kept_layouts),
            g,
            now,
        )),
        Step::Failed { reason, message } => Some(condition(
            pc,
            condition::SCHEMA_READY,
            false,
            reason,
            message.clone(),
            g,
            now,
        )),
        Step::NotRun => find(pc, condition::SCHEMA_READY).cloned(),
    };
    // A pod failure makes the gateway unavailable; a stuck rollout stops its progress.
    let (pod_failure, stuck) = match &obs.gateway_failure {
        Some(d) if d.failure == Failure::ProgressDeadlineExceeded => (None, Some(d)),
        other => (other.as_ref(), None),
    };
    let gateway = match (&obs.gateway, pod_failure) {
        (Some(gw), Some(d)) => Some(condition(
            pc,
            condition::GATEWAY_AVAILABLE,
            false,
            d.failure.reason(),
            format!("{}; {}", d.message, gw.counts()),
            g,
            now,
        )),
        (Some(gw), None) if gw.is_serving() => Some(condition(
            pc,
            condition::GATEWAY_AVAILABLE,
            true,
            if gw.is_rolled_out() {
                "RolloutComplete"
            } else {
                "Serving"
            },
            gw.counts(),
            g,
            now,
        )),
        (Some(gw), None) => Some(condition(
            pc,
            condition::GATEWAY_AVAILABLE,
            false,
            "RollingOut",
            gw.counts(),
            g,
            now,
        )),
        (None, _) => find(pc, condition::GATEWAY_AVAILABLE).cloned(),
    };
    let progressing = match (&obs.gateway, stuck) {
        (Some(_), Some(d)) => Some(condition(
            pc,
            condition::PROGRESSING,
            false,
            d.failure.reason(),
            d.message.clone(),
            g,
            now,
        )),
        (Some(gw), None) if gw.is_rolled_out() => Some(condition(
            pc,
            condition::PROGRESSING,
            false,
            "RolloutComplete",
            format!("{} replicas run the current spec", gw.desired),
            g,
            now,
        )),
        (Some(gw), None) => Some(condition(
            pc,
            condition::PROGRESSING,
            true,
            if gw.updated < gw.desired || !gw.observed {
                "RollingOut"
            } else {
                "Scaling"
            },
            gw.counts(),
            g,
            now,
        )),
        (None, _) => find(pc, condition::PROGRESSING).cloned(),
    };

    let not_true = [&kafka, &schema, &gateway]
        .into_iter()
        .find_map(|c| match c {
            Some(c) if c.status == "True" => None,
            Some(c) => Some((c.reason.clone(), c.message.clone())),
            None => Some(("Pending".to_owned(), "not reconciled yet".to_owned())),
        });
    // A setting left out of the collector's configuration: spans flow, but not as the spec
    // says (absent, as from an older operator, it says nothing).
    let config = config_applied(pc, obs, now);
    let not_applied = config
        .as_ref()
        .filter(|c| c.status != "True")
        .map(|c| (c.reason.clone(), c.message.clone()));
    let ready = if obs.paused {
        condition(
            pc,
            condition::READY,
            false,
            "Paused",
            "spec.paused is true: the operator changes nothing until it is false".to_owned(),
            g,
            now,
        )
    } else if let Some((reason, message)) = obs.failure() {
        condition(pc, condition::READY, false, reason, message, g, now)
    } else if let Some((reason, message)) = not_true {
        condition(pc, condition::READY, false, &reason, message, g, now)
    } else if let Some(d) = stuck {
        condition(
            pc,
            condition::READY,
            false,
            d.failure.reason(),
            d.message.clone(),
            g,
            now,
        )
    } else if let Some((reason, message)) = not_applied {
        condition(pc, condition::READY, false, &reason, message, g, now)
    } else {
        condition(
            pc,
            condition::READY,
            true,
            "Reconciled",
            "spans flow from Kafka into ClickHouse".to_owned(),
            g,
            now,
        )
    };
    conditions.push(ready);
    conditions.extend(kafka);
    conditions.extend(schema);
    conditions.extend(gateway);
    conditions.extend(progressing);
    conditions.extend(consuming(pc, obs, now));
    conditions.extend(config);

    TracePipelineStatus {
        observed_generation: obs.generation.or(prev.observed_generation),
        conditions,
        partitions: match obs.kafka {
            Step::Ok(p) => Some(p),
            _ => prev.partitions,
        },
        desired_replicas: obs.desired_replicas.or(prev.desired_replicas),
        replicas: obs.gateway.map(|g| g.replicas).or(prev.replicas),
        ready_replicas: obs.gateway.map(|g| g.ready).or(prev.ready_replicas),
        selector: obs.selector.clone().or_else(|| prev.selector.clone()),
        schema_version: match obs.schema {
            Step::Ok(v) => Some(i64::from(v)),
            _ => prev.schema_version,
        },
        dedup_window: obs
            .dedup_window
            .map(|w| i64::try_from(w).unwrap_or(i64::MAX))
            .or(prev.dedup_window),
        retention: obs
            .retention
            .clone()
            .unwrap_or_else(|| prev.retention.clone()),
        layouts: obs.layouts.clone().or_else(|| prev.layouts.clone()),
        config_hash: obs.config_hash.clone().or_else(|| prev.config_hash.clone()),
        processing: obs
            .processing
            .clone()
            .unwrap_or_else(|| prev.processing.clone()),
        last_error: obs.failure().map(|(_, m)| m),
        lag: match &obs.lag {
            Step::Ok(l) => Some(l.clone()),
            _ => prev.lag.clone(),
        },
        autoscaling: match &obs.autoscaling {
            Step::Ok(a) => a.clone(),
            _ => prev.autoscaling.clone(),
        },
        collector_image: obs
            .collector_image
            .clone()
            .or_else(|| prev.collector_image.clone()),
        collector_upgrade: obs
            .collector_upgrade
            .clone()
            .unwrap_or_else(|| prev.collector_upgrade.clone()),
        collector_config_revision: match &obs.collector_config {
            Some(seen) => seen.known.revision().map(i64::from),
            None => prev.collector_config_revision,
        },
    }
}
