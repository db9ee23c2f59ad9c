//! The gateway's failure diagnosis, pure: why a gateway is not coming up, named from its pods
//! and its Deployment the way `kubectl describe` would show it — `ImagePullBackOff`,
//! `CrashLoopBackOff`, `OOMKilled`, `Unschedulable`, `CreateContainerConfigError`,
//! `ProgressDeadlineExceeded` — so the status says more than "0 of N ready". (The operator's
//! own `/healthz` is `metrics.rs`.)
//!
//! Kubelets flip a failing container between states on every retry (`ErrImagePull` ↔
//! `ImagePullBackOff`, `Running` ↔ `CrashLoopBackOff`, a restarted OOM-killed process that runs
//! again until the next kill). A verdict that followed those flips would rewrite the status and
//! raise a Warning Event on each, so the verdicts are made stable: each family has one reason,
//! the message carries no counters or times, and a recent bad termination keeps counting for
//! [`RECENT`] after the container runs again, unless it is ready by then.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Label the Deployment controller gives each revision's pods.
const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// How long a bad termination (an OOM kill, a crash) is remembered for a container that is
/// not ready again: longer than the kubelet's longest crash-loop backoff (5 min).
pub const RECENT: Duration = Duration::from_secs(600);
/// A pod no scheduler has placed after this long is unschedulable, even when the scheduler
/// left no `PodScheduled` condition (the local stack's binder only records an Event).
pub const UNSCHEDULED_AFTER: Duration = Duration::from_secs(20);

/// Why the gateway is failing, most fundamental first (a pod that is not scheduled cannot
/// pull; one that cannot pull cannot crash).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    Unschedulable,
    ImagePullBackOff,
    CreateContainerConfigError,
    OOMKilled,
    CrashLoopBackOff,
    ProgressDeadlineExceeded,
}

impl Failure {
    /// Every reason, for documentation and tests.
    pub const ALL: [Failure; 6] = [
        Self::Unschedulable,
        Self::ImagePullBackOff,
        Self::CreateContainerConfigError,
        Self::OOMKilled,
        Self::CrashLoopBackOff,
        Self::ProgressDeadlineExceeded,
    ];

    /// The CamelCase reason of the condition and the Warning Event.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Unschedulable => "Unschedulable",
            Self::ImagePullBackOff => "ImagePullBackOff",
            Self::CreateContainerConfigError => "CreateContainerConfigError",
            Self::OOMKilled => "OOMKilled",
            Self::CrashLoopBackOff => "CrashLoopBackOff",
            Self::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
        }
    }

    /// Whether `reason` is one of ours.
    pub fn is_failure_reason(reason: &str) -> bool {
        Self::ALL.iter().any(|f| f.reason() == reason)
    }
}

/// A named failure and what to tell the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    pub failure: Failure,
    pub message: String,
}

/// What the operator knows about a pod besides the pod itself: the newest `FailedScheduling`
/// Event's note, looked up only for pods that are not scheduled.
#[derive(Debug, Clone)]
pub struct PodFacts<'a> {
    pub pod: &'a Pod,
    pub scheduling_note: Option<String>,
}

fn age(t: Option<&Time>, now: &Time) -> Option<Duration> {
    let t = t?;
    let secs = now.0.as_second().saturating_sub(t.0.as_second());
    Some(Duration::from_secs(secs.max(0).unsigned_abs()))
}

fn scheduled(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Why this pod is not scheduled, if it is not and has waited long enough to say so.
fn unschedulable(facts: &PodFacts<'_>, now: &Time) -> Option<String> {
    let pod = facts.pod;
    if scheduled(pod) {
        return None;
    }
    let condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .filter(|c| c.status == "False");
    let note = condition
        .and_then(|c| c.message.clone())
        .or_else(|| facts.scheduling_note.clone());
    let waited = age(pod.metadata.creation_timestamp.as_ref(), now).unwrap_or_default();
    let said = condition.is_some_and(|c| c.reason.as_deref() == Some("Unschedulable"));
    (said || waited >= UNSCHEDULED_AFTER).then(|| {
        note.unwrap_or_else(|| "no node accepted it (no scheduling message yet)".to_owned())
    })
}

/// Why this container is failing, if it is.
fn container(c: &ContainerStatus, now: &Time) -> Option<(Failure, String)> {
    let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
    let waiting_reason = waiting.and_then(|w| w.reason.as_deref()).unwrap_or("");
    let waiting_message = waiting.and_then(|w| w.message.clone());
    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let recent_bad_end = last.filter(|t| {
        age(t.finished_at.as_ref(), now).is_some_and(|a| a < RECENT)
            && (t.exit_code != 0 || t.reason.as_deref() == Some("OOMKilled"))
    });
    match waiting_reason {
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" => {
            // Not the kubelet's words: they change on every retry (the registry's answer,
            // then "Back-off pulling image"), and the pod's Events keep them.
            return Some((
                Failure::ImagePullBackOff,
                format!(
                    "image {} cannot be pulled (check its name and tag, and \
                     spec.collector.imagePullSecrets; `kubectl describe pod` shows the \
                     registry's answer)",
                    c.image
                ),
            ));
        }
        "CreateContainerConfigError" | "CreateContainerError" => {
            return Some((
                Failure::CreateContainerConfigError,
                format!(
                    "container {} cannot be created: {}",
                    c.name,
                    waiting_message.unwrap_or_default()
                ),
            ));
        }
        _ => {}
    }
    let ready = c.ready;
    if let Some(t) = recent_bad_end.filter(|_| !ready) {
        let oom = t.reason.as_deref() == Some("OOMKilled");
        let what = if oom {
            "was killed for running out of memory (OOMKilled): raise spec.collector.resources.limits.memory or lower spec.collector.maxInflightBytes".to_owned()
        } else {
            let said = t
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {}", last_line(m)))
                .unwrap_or_default();
            format!(
                "keeps exiting with code {} ({}){said}",
                t.exit_code,
                t.reason.as_deref().unwrap_or("Error")
            )
        };
        let failure = if oom {
            Failure::OOMKilled
        } else {
            Failure::CrashLoopBackOff
        };
        return Some((failure, format!("container {} {what}", c.name)));
    }
    if waiting_reason == "CrashLoopBackOff" {
        return Some((
            Failure::CrashLoopBackOff,
            format!("container {} keeps exiting", c.name),
        ));
    }
    None
}

/// The last line of a termination message (a log tail with `FallbackToLogsOnError`), capped.
fn last_line(m: &str) -> String {
    let line = m.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(m);
    line.chars().take(300).collect()
}

/// The Deployment's own verdict that a rollout is stuck.
fn deadline_exceeded(d: &Deployment) -> Option<String> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "Progressing"
                && c.status == "False"
                && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        })
        .map(|c| c.message.clone().unwrap_or_default())
}

/// The gateway's most fundamental failure, if any: over `pods` (those of the gateway, live
/// ones only) and its Deployment. `None` when nothing is known to be wrong (pods that are
/// merely starting are not a failure).
pub fn diagnose(
    pods: &[PodFacts<'_>],
    deployment: Option<&Deployment>,
    now: &Time,
) -> Option<Diagnosis> {
    // Pods of the newest revision first: after an edit, the old revision's failing pod may
    // stay (a rollout with no unavailability budget cannot remove it), and the user wants to
    // know about the spec they just wrote.
    let revision = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()?
            .get(TEMPLATE_HASH_LABEL)
            .cloned()
    };
    let newest = pods
        .iter()
        .filter(|f| f.pod.metadata.deletion_timestamp.is_none())
        .max_by_key(|f| {
            (
                f.pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
                f.pod.metadata.name.clone(),
            )
        })
        .and_then(|f| revision(f.pod));
    let mut found: Vec<(bool, Failure, String, String)> = Vec::new();
    for facts in pods {
        let pod = facts.pod;
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let old = newest.is_some() && revision(pod) != newest;
        if let Some(why) = unschedulable(facts, now) {
            found.push((old, Failure::Unschedulable, name, why));
            continue;
        }
        let status = pod.status.as_ref();
        let inits = status.and_then(|s| s.init_container_statuses.as_ref());
        let mains = status.and_then(|s| s.container_statuses.as_ref());
        for c in inits
            .into_iter()
            .flatten()
            .chain(mains.into_iter().flatten())
        {
            if let Some((failure, why)) = container(c, now) {
                found.push((old, failure, name.clone(), why));
            }
        }
    }
    // The newest revision's, most fundamental failure first, then by pod name: the same
    // pods give the same verdict.
    found.sort();
    if let Some((old, failure, pod, why)) = found.first() {
        let others = found
            .iter()
            .filter(|f| f.0 == *old && f.1 == *failure)
            .count()
            - 1;
        let and = match others {
            0 => String::new(),
            1 => " (and 1 more pod)".to_owned(),
            n => format!(" (and {n} more pods)"),
        };
        return Some(Diagnosis {
            failure: *failure,
            message: format!("pod {pod}{and}: {why}"),
        });
    }
    deployment.and_then(deadline_exceeded).map(|m| Diagnosis {
        failure: Failure::ProgressDeadlineExceeded,
        message: m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    fn ts(secs: i64) -> String {
        at(secs).0.to_string()
    }

    fn pod(name: &str, created: i64, node: Option<&str>, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": name, "creationTimestamp": ts(created) },
            "spec": { "containers": [{ "name": "collector" }], "nodeName": node },
            "status": status,
        }))
        .unwrap()
    }

    fn waiting(reason: &str, message: &str) -> serde_json::Value {
        json!({ "phase": "Pending", "containerStatuses": [{
            "name": "collector", "image": "tracehouse/collector:nope", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": { "waiting": { "reason": reason, "message": message } },
        }]})
    }

    fn one(p: &Pod, now: i64) -> Option<Diagnosis> {
        diagnose(
            &[PodFacts {
                pod: p,
                scheduling_note: None,
            }],
            None,
            &at(now),
        )
    }

    #[test]
    fn a_missing_image_is_one_stable_verdict_across_the_kubelets_retries() {
        let first = pod(
            "gw-1",
            0,
            Some("n"),
            waiting("ErrImagePull", "manifest unknown"),
        );
        let d = one(&first, 5).unwrap();
        assert_eq!(d.failure, Failure::ImagePullBackOff);
        assert!(
            d.message
                .starts_with("pod gw-1: image tracehouse/collector:nope cannot be pulled"),
            "{}",
            d.message
        );
        let backoff = pod(
            "gw-1",
            0,
            Some("n"),
            waiting("ImagePullBackOff", "Back-off pulling image"),
        );
        let again = one(&backoff, 30).unwrap();
        assert_eq!(
            again, d,
            "no change between ErrImagePull and ImagePullBackOff"
        );
        let retried = one(&backoff, 90).unwrap();
        assert_eq!(retried, again, "no change between retries");
    }

    fn crashed(reason: &str, exit: i32, finished: i64, ready: bool, now_waiting: bool) -> Pod {
        let state = if now_waiting {
            json!({ "waiting": { "reason": "CrashLoopBackOff", "message": "back-off 40s" } })
        } else {
            json!({ "running": { "startedAt": ts(finished + 1) } })
        };
        pod(
            "gw-2",
            0,
            Some("n"),
            json!({ "phase": "Running", "containerStatuses": [{
                "name": "collector", "image": "i", "imageID": "", "ready": ready,
                "restartCount": 4, "state": state,
                "lastState": { "terminated": {
                    "exitCode": exit, "reason": reason, "message": "starting\nerror: no such topic\n",
                    "finishedAt": ts(finished), "startedAt": ts(finished - 3) } },
            }]}),
        )
    }

    #[test]
    fn a_crash_loop_stays_named_while_the_container_runs_between_crashes() {
        let waiting = one(&crashed("Error", 1, 100, false, true), 110).unwrap();
        assert_eq!(waiting.failure, Failure::CrashLoopBackOff);
        assert_eq!(
            waiting.message,
            "pod gw-2: container collector keeps exiting with code 1 (Error): error: no such topic"
        );
        let running = one(&crashed("Error", 1, 100, false, false), 130).unwrap();
        assert_eq!(running, waiting, "same verdict between two crashes");
        // Ready again: it recovered.
        assert_eq!(one(&crashed("Error", 1, 100, true, false), 130), None);
        // Long ago: forgotten.
        assert_eq!(
            one(&crashed("Error", 1, 100, false, false), 100 + 601),
            None
        );
    }

    #[test]
    fn an_oom_kill_is_named_as_such_and_says_what_to_change() {
        let d = one(&crashed("OOMKilled", 137, 100, false, true), 120).unwrap();
        assert_eq!(d.failure, Failure::OOMKilled);
        assert!(d.message.contains("OOMKilled"), "{}", d.message);
        assert!(d.message.contains("limits.memory"), "{}", d.message);
        let between = one(&crashed("OOMKilled", 137, 100, false, false), 150).unwrap();
        assert_eq!(between, d);
    }

    #[test]
    fn an_unscheduled_pod_is_unschedulable_after_a_grace_or_when_the_scheduler_says_so() {
        let pending = pod("gw-3", 0, None, json!({ "phase": "Pending" }));
        assert_eq!(one(&pending, 5), None, "just created");
        let facts = PodFacts {
            pod: &pending,
            scheduling_note: Some("0/1 nodes are available: node selector zone=x".into()),
        };
        let d = diagnose(&[facts], None, &at(25)).unwrap();
        assert_eq!(d.failure, Failure::Unschedulable);
        assert_eq!(
            d.message,
            "pod gw-3: 0/1 nodes are available: node selector zone=x"
        );
        let told = pod(
            "gw-3",
            0,
            None,
            json!({ "phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient memory." }] }),
        );
        let d = one(&told, 1).unwrap();
        assert_eq!(d.failure, Failure::Unschedulable);
        assert!(
            d.message.ends_with("3 Insufficient memory."),
            "{}",
            d.message
        );
    }

    #[test]
    fn the_most_fundamental_failure_wins_and_others_are_counted() {
        let a = crashed("Error", 1, 100, false, true);
        let b = pod("gw-9", 0, Some("n"), waiting("ErrImagePull", "not found"));
        let c = pod(
            "gw-8",
            0,
            Some("n"),
            waiting("ImagePullBackOff", "Back-off"),
        );
        let facts: Vec<PodFacts<'_>> = [&a, &b, &c]
            .into_iter()
            .map(|pod| PodFacts {
                pod,
                scheduling_note: None,
            })
            .collect();
        let d = diagnose(&facts, None, &at(110)).unwrap();
        assert_eq!(d.failure, Failure::ImagePullBackOff);
        assert!(
            d.message.starts_with("pod gw-8 (and 1 more pod): "),
            "{}",
            d.message
        );
    }

    #[test]
    fn a_starting_pod_is_no_failure_and_a_stuck_rollout_is() {
        let starting = pod(
            "gw-4",
            0,
            Some("n"),
            waiting("ContainerCreating", "pulling"),
        );
        assert_eq!(one(&starting, 100), None);
        let d: Deployment = serde_json::from_value(json!({
            "status": { "conditions": [{
                "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                "message": "ReplicaSet \"gw-5d\" has timed out progressing." }] }
        }))
        .unwrap();
        let verdict = diagnose(&[], Some(&d), &at(0)).unwrap();
        assert_eq!(verdict.failure, Failure::ProgressDeadlineExceeded);
        assert!(Failure::is_failure_reason("OOMKilled"));
        assert!(!Failure::is_failure_reason("RollingOut"));
    }

    #[test]
    fn a_missing_secret_key_is_a_config_error() {
        let p = pod(
            "gw-6",
            0,
            Some("n"),
            waiting("CreateContainerConfigError", "secret \"ch\" not found"),
        );
        let d = one(&p, 50).unwrap();
        assert_eq!(d.failure, Failure::CreateContainerConfigError);
        assert!(d.message.contains("secret \"ch\" not found"));
    }

    #[test]
    fn the_newest_revisions_failure_wins_over_an_old_pod_left_behind() {
        let mut old = pod("gw-a", 0, None, json!({ "phase": "Pending" }));
        old.metadata.labels = Some([(TEMPLATE_HASH_LABEL.to_owned(), "old".to_owned())].into());
        let mut new = crashed("Error", 1, 100, false, true);
        new.metadata.creation_timestamp = Some(at(50));
        new.metadata.labels = Some([(TEMPLATE_HASH_LABEL.to_owned(), "new".to_owned())].into());
        let facts: Vec<PodFacts<'_>> = [&old, &new]
            .into_iter()
            .map(|pod| PodFacts {
                pod,
                scheduling_note: None,
            })
            .collect();
        let d = diagnose(&facts, None, &at(110)).unwrap();
        assert_eq!(d.failure, Failure::CrashLoopBackOff, "{d:?}");
        // Only the old pod fails: it is still named.
        let healthy_new = crashed("Error", 1, 100, true, false);
        let mut healthy_new = healthy_new;
        healthy_new.metadata.creation_timestamp = Some(at(50));
        healthy_new.metadata.labels = new.metadata.labels.clone();
        let facts: Vec<PodFacts<'_>> = [&old, &healthy_new]
            .into_iter()
            .map(|pod| PodFacts {
                pod,
                scheduling_note: None,
            })
            .collect();
        assert_eq!(
            diagnose(&facts, None, &at(110)).unwrap().failure,
            Failure::Unschedulable
        );
    }
}
