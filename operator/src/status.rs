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
use crate::health::{Diagnosis, Failure};

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
    pub desired_replicas: Option<i32>,
    pub config_hash: Option<String>,
    /// The image the gateway was given; not run, the stored one stands.
    pub collector_image: Option<String>,
    /// `Some(newer)` while `upgradePolicy: Manual` holds the gateway back; not run: stored.
    pub collector_upgrade: Option<Option<String>>,
    pub selector: Option<String>,
    pub gateway: Option<Gateway>,
    /// Why the gateway's pods or rollout are failing, when they are (`crate::health`).
    pub gateway_failure: Option<Diagnosis>,
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
        config_hash: obs.config_hash.clone().or_else(|| prev.config_hash.clone()),
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
            [
                "Ready",
                "KafkaReachable",
                "SchemaReady",
                "GatewayAvailable",
                "Progressing"
            ]
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

    fn cond<'a>(s: &'a TracePipelineStatus, type_: &str) -> &'a Condition {
        find(&s.conditions, type_).unwrap()
    }

    #[test]
    fn a_scale_step_that_keeps_serving_is_progressing_not_unready() {
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
        assert_eq!(ready_of(&s2).status, "True", "still serving");
        assert_eq!(ready_of(&s2).last_transition_time, at(0));
        assert_eq!(cond(&s2, condition::GATEWAY_AVAILABLE).reason, "Serving");
        let p = cond(&s2, condition::PROGRESSING);
        assert_eq!((p.status.as_str(), p.reason.as_str()), ("True", "Scaling"));
        let reasons: Vec<&str> = events(&s1, &s2).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["PartitionsChanged", "Scaled"], "no Warning");
        obs.gateway = Some(Gateway {
            ready: 3,
            ..obs.gateway.unwrap()
        });
        let s3 = next(&s2, &obs, &at(40));
        let p = cond(&s3, condition::PROGRESSING);
        assert_eq!(
            (p.status.as_str(), p.reason.as_str()),
            ("False", "RolloutComplete")
        );
        assert!(events(&s2, &s3).is_empty());
    }

    #[test]
    fn a_rollout_is_progressing_and_a_first_rollout_is_not_ready_yet() {
        let s1 = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        let mut obs = healthy(2);
        obs.gateway = Some(Gateway {
            desired: 2,
            replicas: 3,
            updated: 1,
            ready: 2,
            observed: true,
        });
        let s2 = next(&s1, &obs, &at(10));
        assert_eq!(ready_of(&s2).status, "True");
        assert_eq!(cond(&s2, condition::PROGRESSING).reason, "RollingOut");
        // A new pipeline with nothing ready serves nothing yet: not Ready, no Warning.
        let mut fresh = healthy(1);
        fresh.gateway = Some(Gateway {
            desired: 2,
            replicas: 2,
            updated: 2,
            ready: 0,
            observed: true,
        });
        let empty = TracePipelineStatus::default();
        let s = next(&empty, &fresh, &at(0));
        assert_eq!(ready_of(&s).reason, "RollingOut");
        assert!(events(&empty, &s).iter().all(|e| !e.warning));
    }

    fn failing(failure: Failure, message: &str) -> Observation {
        let mut obs = healthy(1);
        obs.gateway = Some(Gateway {
            desired: 2,
            replicas: 2,
            updated: 2,
            ready: 1,
            observed: true,
        });
        obs.gateway_failure = Some(Diagnosis {
            failure,
            message: message.to_owned(),
        });
        obs
    }

    #[test]
    fn a_failing_pod_is_named_on_gateway_available_and_ready_with_one_warning() {
        let s1 = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        let obs = failing(
            Failure::CrashLoopBackOff,
            "pod gw-1: container collector keeps exiting",
        );
        let s2 = next(&s1, &obs, &at(10));
        let gw = cond(&s2, condition::GATEWAY_AVAILABLE);
        assert_eq!(
            (gw.status.as_str(), gw.reason.as_str()),
            ("False", "CrashLoopBackOff")
        );
        assert!(
            gw.message
                .starts_with("pod gw-1: container collector keeps exiting; 1 of 2")
        );
        assert_eq!(ready_of(&s2).reason, "CrashLoopBackOff");
        let e = events(&s1, &s2);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].warning);
        assert_eq!(e[0].reason, "CrashLoopBackOff");
        // Still failing the same way: nothing new.
        let s3 = next(&s2, &obs, &at(40));
        assert_eq!(s3, s2);
        assert!(events(&s2, &s3).is_empty());
        // Worse: an OOM kill is a new Warning.
        let oom = failing(
            Failure::OOMKilled,
            "pod gw-1: container collector was OOMKilled",
        );
        let s4 = next(&s3, &oom, &at(50));
        let reasons: Vec<&str> = events(&s3, &s4).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["OOMKilled"]);
        // Healed.
        let s5 = next(&s4, &healthy(1), &at(60));
        let reasons: Vec<&str> = events(&s4, &s5).iter().map(|e| e.reason).collect();
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
    fn a_stuck_rollout_stops_progress_and_readiness_but_not_availability() {
        let s1 = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        let obs = failing(
            Failure::ProgressDeadlineExceeded,
            "ReplicaSet \"gw-7\" has timed out progressing.",
        );
        let s2 = next(&s1, &obs, &at(700));
        assert_eq!(cond(&s2, condition::GATEWAY_AVAILABLE).status, "True");
        let p = cond(&s2, condition::PROGRESSING);
        assert_eq!(
            (p.status.as_str(), p.reason.as_str()),
            ("False", "ProgressDeadlineExceeded")
        );
        assert_eq!(ready_of(&s2).reason, "ProgressDeadlineExceeded");
        let reasons: Vec<&str> = events(&s1, &s2).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["ProgressDeadlineExceeded"]);
    }

    #[test]
    fn a_retention_change_is_shown_and_announced_once() {
        let ttl = |d: u32| Some(format!("toDateTime(Timestamp) + toIntervalDay({d})"));
        let mut obs = healthy(1);
        obs.retention = Some(ttl(30));
        let s1 = next(&TracePipelineStatus::default(), &obs, &at(0));
        assert_eq!(s1.retention, ttl(30));
        assert!(
            events(&TracePipelineStatus::default(), &s1)
                .iter()
                .all(|e| e.reason != "RetentionChanged")
        );
        obs.retention = Some(ttl(7));
        let s2 = next(&s1, &obs, &at(10));
        let reasons: Vec<&str> = events(&s1, &s2).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["RetentionChanged"]);
        assert!(events(&s2, &next(&s2, &obs, &at(20))).is_empty());
        // A schema step that did not run keeps it.
        obs.retention = None;
        assert_eq!(next(&s2, &obs, &at(30)).retention, ttl(7));
    }

    #[test]
    fn a_held_back_upgrade_is_reported_once() {
        let s1 = next(&TracePipelineStatus::default(), &healthy(1), &at(0));
        let mut obs = healthy(1);
        obs.collector_image = Some("c:0.1.0".into());
        obs.collector_upgrade = Some(Some("c:0.2.0".into()));
        let s2 = next(&s1, &obs, &at(10));
        assert_eq!(s2.collector_image.as_deref(), Some("c:0.1.0"));
        assert_eq!(s2.collector_upgrade.as_deref(), Some("c:0.2.0"));
        let reasons: Vec<&str> = events(&s1, &s2).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["CollectorUpgradeAvailable"]);
        assert!(events(&s2, &next(&s2, &obs, &at(20))).is_empty());
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
