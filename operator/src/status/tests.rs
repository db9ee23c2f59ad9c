//! The status derivation and its Events, from observations (pure, no stack).

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
            memory_limit_bytes: None,
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
        memory_limit_bytes: None,
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
        memory_limit_bytes: None,
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
        memory_limit_bytes: None,
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
        memory_limit_bytes: None,
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
        memory_limit_bytes: None,
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

#[test]
fn layouts_turned_off_in_the_spec_are_kept_and_said_so() {
    let first = next(
        &TracePipelineStatus::default(),
        &Observation {
            layouts: Some("attributeItems".into()),
            ..healthy(1)
        },
        &at(0),
    );
    assert_eq!(first.layouts.as_deref(), Some("attributeItems"));
    let kept = next(
        &first,
        &Observation {
            layouts: Some("attributeItems".into()),
            kept_layouts: vec!["attributeItems"],
            ..healthy(2)
        },
        &at(10),
    );
    let schema = find(&kept.conditions, condition::SCHEMA_READY).unwrap();
    assert_eq!(schema.status, "True");
    assert!(
        schema
            .message
            .contains("keeps the layouts attributeItems though spec.clickhouse.schema.layouts"),
        "{}",
        schema.message
    );
    // Not read this time (the schema step did not run): the stored value stands.
    let later = next(&kept, &healthy(2), &at(20));
    assert_eq!(later.layouts.as_deref(), Some("attributeItems"));
}

#[test]
fn a_stopped_group_is_timed_from_when_it_stopped_and_warned_once_per_stage() {
    use crate::offsets_retention::{Consumers, Retention, Stopped};
    let mut obs = healthy(1);
    obs.consumers = Some(Consumers {
        stopped: None,
        retention: Retention::Assumed,
    });
    let s1 = next(&TracePipelineStatus::default(), &obs, &at(0));
    assert_eq!(cond(&s1, condition::CONSUMING).status, "True");
    // Stopped at t=100 with a 100-minute retention.
    obs.consumers = Some(Consumers {
        stopped: Some(Stopped::NoReadyCollector),
        retention: Retention::Read(100),
    });
    let s2 = next(&s1, &obs, &at(100));
    let c = cond(&s2, condition::CONSUMING);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NoReadyCollector")
    );
    assert_eq!(c.last_transition_time, at(100));
    assert!(events(&s1, &s2).iter().all(|e| !e.warning));
    // Nothing new an hour later: the same status, nothing written.
    assert_eq!(next(&s2, &obs, &at(100 + 3600)), s2);
    // 80 minutes after the stop: one Warning; again later: none.
    let s3 = next(&s2, &obs, &at(100 + 80 * 60));
    assert_eq!(
        cond(&s3, condition::CONSUMING).reason,
        "OffsetsExpiringSoon"
    );
    assert_eq!(
        cond(&s3, condition::CONSUMING).last_transition_time,
        at(100)
    );
    let warned: Vec<&str> = events(&s2, &s3)
        .iter()
        .filter(|e| e.warning)
        .map(|e| e.reason)
        .collect();
    assert_eq!(warned, ["OffsetsExpiringSoon"]);
    assert_eq!(next(&s3, &obs, &at(100 + 90 * 60)), s3);
    let s4 = next(&s3, &obs, &at(100 + 100 * 60));
    let warned: Vec<&str> = events(&s3, &s4).iter().map(|e| e.reason).collect();
    assert_eq!(warned, ["OffsetsMayHaveExpired"]);
    // Consuming again: True, and the next stop is timed afresh.
    obs.consumers = Some(Consumers {
        stopped: None,
        retention: Retention::Read(100),
    });
    let s5 = next(&s4, &obs, &at(100_000));
    assert_eq!(cond(&s5, condition::CONSUMING).status, "True");
    assert!(events(&s4, &s5).iter().all(|e| !e.warning));
    // Not looked (an earlier step failed): the stored condition stands.
    obs.consumers = None;
    assert_eq!(
        cond(&next(&s5, &obs, &at(200_000)), condition::CONSUMING),
        cond(&s5, condition::CONSUMING)
    );
}

fn skewed(known: skew::Known, not_applied: &[&str]) -> Observation {
    let mut obs = healthy(1);
    obs.collector_image = Some("tracehouse/collector:old".into());
    obs.collector_config = Some(skew::Seen {
        image: "tracehouse/collector:old".into(),
        known,
        required: 1,
        not_applied: not_applied
            .iter()
            .map(|f| skew::NotApplied {
                field: (*f).to_owned(),
                revision: 2,
            })
            .collect(),
    });
    obs
}

#[test]
fn a_setting_the_collector_does_not_know_is_named_not_ready_with_one_warning() {
    let s1 = next(
        &TracePipelineStatus::default(),
        &skewed(skew::Known::Read(1), &[]),
        &at(0),
    );
    let applied = cond(&s1, condition::CONFIG_APPLIED);
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("True", "Applied")
    );
    assert_eq!(ready_of(&s1).status, "True");
    assert_eq!(s1.collector_config_revision, Some(1));

    // The user sets spec.processing: left out, named, the pipeline not Ready — one Warning,
    // not a PipelineNotReady beside it.
    let obs = skewed(skew::Known::Read(1), &["spec.processing"]);
    let s2 = next(&s1, &obs, &at(10));
    let c = cond(&s2, condition::CONFIG_APPLIED);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "CollectorTooOld")
    );
    assert!(
        c.message.contains("spec.processing (config revision 2)"),
        "{}",
        c.message
    );
    assert_eq!(ready_of(&s2).status, "False");
    assert_eq!(ready_of(&s2).reason, "CollectorTooOld");
    assert_eq!(
        cond(&s2, condition::GATEWAY_AVAILABLE).status,
        "True",
        "spans still flow"
    );
    let e = events(&s1, &s2);
    assert_eq!(
        e.iter().map(|e| (e.reason, e.warning)).collect::<Vec<_>>(),
        [("CollectorTooOld", true)]
    );
    // Nothing changed: nothing to write, nothing to tell.
    let again = next(&s2, &obs, &at(40));
    assert_eq!(again, s2);
    assert!(events(&s2, &again).is_empty());
    // One more setting left out: told again.
    let more = next(
        &s2,
        &skewed(
            skew::Known::Read(1),
            &["spec.kafka.commitFormat", "spec.processing"],
        ),
        &at(50),
    );
    let reasons: Vec<&str> = events(&s2, &more).iter().map(|e| e.reason).collect();
    assert_eq!(reasons, ["CollectorTooOld"]);

    // The gateway moves to the operator's own image: everything applied, Ready again.
    let mut own = skewed(skew::Known::Own, &[]);
    own.collector_image = Some("tracehouse/collector:0.1.0".into());
    let s3 = next(&more, &own, &at(60));
    assert_eq!(cond(&s3, condition::CONFIG_APPLIED).status, "True");
    assert_eq!(ready_of(&s3).status, "True");
    assert_eq!(
        s3.collector_config_revision, None,
        "only read for another image"
    );
    let reasons: Vec<&str> = events(&more, &s3).iter().map(|e| e.reason).collect();
    assert_eq!(reasons, ["ConfigApplied", "PipelineReady"]);
}

#[test]
fn not_looked_the_stored_config_condition_and_revision_stand() {
    let s1 = next(
        &TracePipelineStatus::default(),
        &skewed(skew::Known::Read(1), &["spec.processing"]),
        &at(0),
    );
    let mut paused = healthy(1);
    paused.paused = true;
    let s2 = next(&s1, &paused, &at(10));
    assert_eq!(
        cond(&s2, condition::CONFIG_APPLIED),
        cond(&s1, condition::CONFIG_APPLIED)
    );
    assert_eq!(s2.collector_config_revision, Some(1));
}
