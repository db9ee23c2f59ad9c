//! Pure status logic: what a reconcile observed → the next `TracePipelineStatus`, and the
//! Events that describe the difference between two statuses.
//!
//! Keeping both pure is what makes "a reconcile with nothing changed writes nothing" hold by
//! construction: condition transition times are carried over when a condition's status did
//! not change, so an unchanged world yields a status equal to the stored one (no patch), and
//! Events are derived from the status diff only (no diff, no Event).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::autoscale::AutoscalingStatus;
use crate::crd::{TracePipelineStatus, condition};

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
        }
    }

    /// Every desired replica runs the current template and is ready, and no old one is left.
    pub fn is_rolled_out(&self) -> bool {
        self.observed
            && self.updated >= self.desired
            && self.ready >= self.desired
            && self.replicas == self.desired
    }
}

/// Everything one reconcile learned.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub generation: Option<i64>,
    pub paused: bool,
    /// Partitions of the topics, summed.
    pub kafka: Step<i32>,
    /// Schema version recorded in ClickHouse.
    pub schema: Step<u32>,
    /// The traces table's insert-deduplication window, when the schema step read it.
    pub dedup_window: Option<u64>,
    pub desired_replicas: Option<i32>,
    pub config_hash: Option<String>,
    pub selector: Option<String>,
    pub gateway: Option<Gateway>,
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
            format!("every migration up to version {v} is recorded"),
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
    let gateway = match &obs.gateway {
        Some(gw) if gw.is_rolled_out() => Some(condition(
            pc,
            condition::GATEWAY_AVAILABLE,
            true,
            "RolloutComplete",
            format!("{} of {} replicas ready", gw.ready, gw.desired),
            g,
            now,
        )),
        Some(gw) => Some(condition(
            pc,
            condition::GATEWAY_AVAILABLE,
            false,
            "RollingOut",
            format!(
                "{} of {} replicas ready, {} updated, {} running",
                gw.ready, gw.desired, gw.updated, gw.replicas
            ),
            g,
            now,
        )),
        None => find(pc, condition::GATEWAY_AVAILABLE).cloned(),
    };

    let not_true = [&kafka, &schema, &gateway]
        .into_iter()
        .find_map(|c| match c {
            Some(c) if c.status == "True" => None,
            Some(c) => Some((c.reason.clone(), c.message.clone())),
            None => Some(("Pending".to_owned(), "not reconciled yet".to_owned())),
        });
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
        config_hash: obs.config_hash.clone().or_else(|| prev.config_hash.clone()),
        last_error: obs.failure().map(|(_, m)| m),
        autoscaling: match &obs.autoscaling {
            Step::Ok(a) => a.clone(),
            _ => prev.autoscaling.clone(),
        },
    }
}

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
    let status_of = |c: &Option<Condition>| c.as_ref().map(|c| c.status.clone());
    if status_of(&now) != status_of(&was)
        && let Some(c) = &now
    {
        if c.status == "True" {
            out.push(normal("PipelineReady", c.message.clone()));
        } else if c.reason != "Paused" && status_of(&was).as_deref() == Some("True") {
            out.push(EventSpec {
                warning: true,
                reason: "PipelineNotReady",
                note: format!("{}: {}", c.reason, c.message),
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    fn healthy(generation: i64) -> Observation {
        Observation {
            generation: Some(generation),
            kafka: Step::Ok(8),
            schema: Step::Ok(5),
            desired_replicas: Some(2),
            config_hash: Some("sha256:aa".into()),
            selector: Some("a=b".into()),
            gateway: Some(Gateway {
                desired: 2,
                replicas: 2,
                updated: 2,
                ready: 2,
                observed: true,
            }),
            ..Default::default()
        }
    }

    fn ready_of(s: &TracePipelineStatus) -> &Condition {
        find(&s.conditions, condition::READY).unwrap()
    }

    #[test]
    fn a_healthy_pipeline_is_ready_with_its_numbers() {
        let s = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        assert_eq!(ready_of(&s).status, "True");
        assert_eq!(s.partitions, Some(8));
        assert_eq!(s.desired_replicas, Some(2));
        assert_eq!(s.ready_replicas, Some(2));
        assert_eq!(s.schema_version, Some(5));
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(s.last_error, None);
        let types: Vec<&str> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["Ready", "KafkaReachable", "SchemaReady", "GatewayAvailable"]
        );
    }

    #[test]
    fn nothing_changed_means_an_equal_status_and_no_events() {
        let first = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        let again = next(&first, &healthy(1), &at(300));
        assert_eq!(again, first, "transition times are kept");
        assert!(events(&first, &again).is_empty());
    }

    #[test]
    fn a_failed_step_keeps_the_last_known_numbers_and_names_the_reason() {
        let good = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        let mut obs = healthy(1);
        obs.kafka = Step::Failed {
            reason: "KafkaUnreachable",
            message: "brokers down".into(),
        };
        obs.schema = Step::NotRun;
        obs.gateway = None;
        obs.desired_replicas = None;
        let bad = next(&good, &obs, &at(10));
        assert_eq!(bad.partitions, Some(8));
        assert_eq!(bad.schema_version, Some(5));
        assert_eq!(ready_of(&bad).status, "False");
        assert_eq!(ready_of(&bad).reason, "KafkaUnreachable");
        assert_eq!(ready_of(&bad).last_transition_time, at(10));
        assert_eq!(bad.last_error.as_deref(), Some("brokers down"));
        let schema = find(&bad.conditions, condition::SCHEMA_READY).unwrap();
        assert_eq!(
            schema.last_transition_time,
            at(0),
            "untouched condition kept"
        );
        let reasons: Vec<&str> = events(&good, &bad).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["PipelineNotReady", "ReconcileFailed"]);
        // Failing the same way again changes nothing.
        let again = next(&bad, &obs, &at(40));
        assert_eq!(again, bad);
        assert!(events(&bad, &again).is_empty());
    }

    #[test]
    fn scaling_and_rollouts_are_events_and_ready_follows_the_rollout() {
        let s1 = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        let mut obs = healthy(1);
        obs.kafka = Step::Ok(12);
        obs.desired_replicas = Some(3);
        obs.gateway = Some(Gateway {
            desired: 3,
            replicas: 3,
            updated: 3,
            ready: 2,
            observed: true,
        });
        let s2 = next(&s1, &obs, &at(30));
        assert_eq!(ready_of(&s2).reason, "RollingOut");
        let reasons: Vec<&str> = events(&s1, &s2).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["PartitionsChanged", "Scaled", "PipelineNotReady"]);
        obs.gateway = Some(Gateway {
            ready: 3,
            ..obs.gateway.unwrap()
        });
        let s3 = next(&s2, &obs, &at(40));
        assert_eq!(ready_of(&s3).status, "True");
        let reasons: Vec<&str> = events(&s2, &s3).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["PipelineReady"]);
    }

    #[test]
    fn the_deduplication_window_is_shown_and_its_changes_announced_once() {
        let mut obs = healthy(1);
        obs.dedup_window = Some(2_880);
        let s1 = next(&TracePipelineStatus::default(), &obs, &at(0));
        assert_eq!(s1.dedup_window, Some(2_880));
        obs.dedup_window = Some(46_080);
        let s2 = next(&s1, &obs, &at(10));
        let window: Vec<_> = events(&s1, &s2)
            .into_iter()
            .filter(|e| e.reason == "DedupWindowChanged")
            .collect();
        assert_eq!(window.len(), 1);
        assert!(
            window[0].note.contains("46080 blocks (was 2880)"),
            "{}",
            window[0].note
        );
        assert!(events(&s2, &next(&s2, &obs, &at(20))).is_empty());
        // A failed schema step reads nothing: the shown window stays.
        let mut failed = healthy(1);
        failed.schema = Step::NotRun;
        assert_eq!(next(&s2, &failed, &at(30)).dedup_window, Some(46_080));
    }

    #[test]
    fn pausing_and_resuming_are_announced_once() {
        let s1 = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        let paused = Observation {
            generation: Some(2),
            paused: true,
            gateway: healthy(1).gateway,
            ..Default::default()
        };
        let s2 = next(&s1, &paused, &at(10));
        assert_eq!(ready_of(&s2).reason, "Paused");
        assert_eq!(s2.partitions, Some(8), "numbers stay while paused");
        let reasons: Vec<&str> = events(&s1, &s2).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["Paused"]);
        assert!(events(&s2, &next(&s2, &paused, &at(20))).is_empty());
        let s3 = next(&s2, &healthy(3), &at(30));
        let reasons: Vec<&str> = events(&s2, &s3).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["Resumed", "PipelineReady"]);
    }

    #[test]
    fn config_changes_announce_creation_then_rollouts() {
        let empty = TracePipelineStatus::default();
        let s1 = next(&empty, &healthy(1), &at(0));
        assert!(
            events(&empty, &s1)
                .iter()
                .any(|e| e.reason == "GatewayCreated")
        );
        let mut obs = healthy(2);
        obs.config_hash = Some("sha256:bb".into());
        let s2 = next(&s1, &obs, &at(5));
        assert!(events(&s1, &s2).iter().any(|e| e.reason == "ConfigChanged"));
    }

    #[test]
    fn a_gateway_with_old_pods_left_is_not_available() {
        let g = Gateway {
            desired: 2,
            replicas: 3,
            updated: 2,
            ready: 3,
            observed: true,
        };
        assert!(!g.is_rolled_out());
        assert!(
            !Gateway {
                observed: false,
                replicas: 2,
                ..g
            }
            .is_rolled_out()
        );
        assert!(Gateway { replicas: 2, ..g }.is_rolled_out());
    }
}
