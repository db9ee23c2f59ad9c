//! Pod status from the node agent's view of its containers: phase, conditions and
//! container statuses, computed the way the kubelet reports them. Pure.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// How a container run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
    pub container_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
        container_id: String,
    },
    Terminated(Terminated),
}

/// The node agent's record of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub restart_count: i32,
    pub ready: bool,
    /// The startup probe passed (or there is none) in the current run.
    pub started: bool,
    pub state: RunState,
    pub last: Option<Terminated>,
}

impl ContainerView {
    pub fn waiting(name: &str, image: &str, reason: &str, message: Option<String>) -> Self {
        Self {
            name: name.to_owned(),
            image: image.to_owned(),
            image_id: String::new(),
            restart_count: 0,
            ready: false,
            started: false,
            state: RunState::Waiting {
                reason: reason.to_owned(),
                message,
            },
            last: None,
        }
    }

    /// Ran at least once (Pending → Running for the pod phase).
    fn has_run(&self) -> bool {
        !matches!(self.state, RunState::Waiting { .. }) || self.last.is_some()
    }

    pub fn to_status(&self) -> ContainerStatus {
        let running = matches!(self.state, RunState::Running { .. });
        ContainerStatus {
            name: self.name.clone(),
            image: self.image.clone(),
            image_id: self.image_id.clone(),
            container_id: match &self.state {
                RunState::Running { container_id, .. } => Some(container_id.clone()),
                RunState::Terminated(t) => t.container_id.clone(),
                RunState::Waiting { .. } => None,
            },
            restart_count: self.restart_count,
            ready: self.ready && running,
            started: Some(self.started && running),
            state: Some(state(&self.state)),
            last_state: Some(
                self.last
                    .as_ref()
                    .map(|t| state(&RunState::Terminated(t.clone())))
                    .unwrap_or_default(),
            ),
            ..Default::default()
        }
    }
}

fn state(s: &RunState) -> ContainerState {
    match s {
        RunState::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        RunState::Running { started_at, .. } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(*started_at)),
            }),
            ..Default::default()
        },
        RunState::Terminated(t) => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: t.exit_code,
                signal: t.signal,
                reason: Some(t.reason.clone()),
                message: t.message.clone(),
                started_at: t.started_at.map(Time),
                finished_at: Some(Time(t.finished_at)),
                container_id: t.container_id.clone(),
            }),
            ..Default::default()
        },
    }
}

pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_SUCCEEDED: &str = "Succeeded";
pub const PHASE_FAILED: &str = "Failed";

/// The pod phase. `restart_policy` is `Always`, `OnFailure` or `Never`.
pub fn phase(containers: &[ContainerView], restart_policy: &str) -> &'static str {
    if containers.is_empty() {
        return PHASE_PENDING;
    }
    let terminated: Vec<&Terminated> = containers
        .iter()
        .filter_map(|c| match &c.state {
            RunState::Terminated(t) => Some(t),
            _ => None,
        })
        .collect();
    if restart_policy != "Always" && terminated.len() == containers.len() {
        return if terminated.iter().all(|t| t.exit_code == 0) {
            PHASE_SUCCEEDED
        } else {
            PHASE_FAILED
        };
    }
    if containers.iter().all(ContainerView::has_run) {
        PHASE_RUNNING
    } else {
        PHASE_PENDING
    }
}

/// Inputs of [`pod_status`] besides the containers.
#[derive(Debug, Clone)]
pub struct PodFacts<'a> {
    pub restart_policy: &'a str,
    pub pod_ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
    pub start_time: Timestamp,
    pub generation: Option<i64>,
    /// The status last reported: keeps `lastTransitionTime` of conditions that did not change.
    pub previous: Option<&'a PodStatus>,
    pub now: Timestamp,
}

/// Init containers that have not completed successfully yet, by name.
fn incomplete(init: &[ContainerView]) -> Vec<&str> {
    init.iter()
        .filter(|c| !matches!(&c.state, RunState::Terminated(t) if t.exit_code == 0))
        .map(|c| c.name.as_str())
        .collect()
}

/// The full pod status. `init` are the init containers, which run one after the other, each
/// to completion, before `containers` start.
pub fn pod_status(
    containers: &[ContainerView],
    init: &[ContainerView],
    facts: &PodFacts<'_>,
) -> PodStatus {
    let incomplete = incomplete(init);
    let initialized = incomplete.is_empty();
    let init_failed = init
        .iter()
        .any(|c| matches!(&c.state, RunState::Terminated(t) if t.exit_code != 0))
        && facts.restart_policy == "Never";
    let phase = if init_failed {
        PHASE_FAILED
    } else if !initialized {
        PHASE_PENDING
    } else {
        phase(containers, facts.restart_policy)
    };
    let unready: Vec<&str> = containers
        .iter()
        .filter(|c| !(c.ready && matches!(c.state, RunState::Running { .. })))
        .map(|c| c.name.as_str())
        .collect();
    let (ready, reason, message) = if phase == PHASE_SUCCEEDED || phase == PHASE_FAILED {
        (false, Some("PodCompleted"), None)
    } else if unready.is_empty() {
        (true, None, None)
    } else {
        (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let condition = |type_: &str, status: bool, reason: Option<&str>, message: Option<String>| {
        let status = if status { "True" } else { "False" }.to_owned();
        let previous = facts
            .previous
            .and_then(|p| p.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_));
        let transition = match previous {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => Some(Time(facts.now)),
        };
        PodCondition {
            type_: type_.to_owned(),
            status,
            reason: reason.map(str::to_owned),
            message,
            last_transition_time: transition,
            observed_generation: facts.generation,
            last_probe_time: None,
        }
    };
    let ip = facts.pod_ip.to_string();
    let host = facts.host_ip.to_string();
    PodStatus {
        phase: Some(phase.to_owned()),
        conditions: Some(vec![
            condition("PodReadyToStartContainers", true, None, None),
            if initialized {
                condition("Initialized", true, None, None)
            } else {
                condition(
                    "Initialized",
                    false,
                    Some("ContainersNotInitialized"),
                    Some(format!(
                        "containers with incomplete status: [{}]",
                        incomplete.join(" ")
                    )),
                )
            },
            condition("Ready", ready, reason, message.clone()),
            condition("ContainersReady", ready, reason, message),
            condition("PodScheduled", true, None, None),
        ]),
        pod_ip: Some(ip.clone()),
        pod_ips: Some(vec![PodIP { ip }]),
        host_ip: Some(host.clone()),
        host_ips: Some(vec![HostIP { ip: host }]),
        start_time: Some(
            facts
                .previous
                .and_then(|p| p.start_time.clone())
                .unwrap_or(Time(facts.start_time)),
        ),
        observed_generation: facts.generation,
        container_statuses: Some(containers.iter().map(ContainerView::to_status).collect()),
        init_container_statuses: (!init.is_empty())
            .then(|| init.iter().map(ContainerView::to_status).collect()),
        qos_class: facts.previous.and_then(|p| p.qos_class.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn running(name: &str, ready: bool) -> ContainerView {
        ContainerView {
            ready,
            started: true,
            state: RunState::Running {
                started_at: t(0),
                container_id: "process://1".into(),
            },
            ..ContainerView::waiting(name, "tracehouse/collector", "", None)
        }
    }

    fn exited(name: &str, code: i32) -> ContainerView {
        ContainerView {
            state: RunState::Terminated(Terminated {
                exit_code: code,
                signal: None,
                reason: if code == 0 { "Completed" } else { "Error" }.into(),
                message: None,
                started_at: Some(t(0)),
                finished_at: t(1),
                container_id: None,
            }),
            ..ContainerView::waiting(name, "tracehouse/collector", "", None)
        }
    }

    fn facts<'a>(previous: Option<&'a PodStatus>, now: i64) -> PodFacts<'a> {
        PodFacts {
            restart_policy: "Always",
            pod_ip: Ipv4Addr::new(127, 0, 0, 2),
            host_ip: Ipv4Addr::LOCALHOST,
            start_time: t(0),
            generation: Some(1),
            previous,
            now: t(now),
        }
    }

    fn condition<'a>(s: &'a PodStatus, type_: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap()
    }

    #[test]
    fn phase_follows_the_kubelet() {
        let creating = ContainerView::waiting("a", "i", "ContainerCreating", None);
        assert_eq!(
            phase(std::slice::from_ref(&creating), "Always"),
            PHASE_PENDING
        );
        assert_eq!(
            phase(&[running("a", false), creating], "Always"),
            PHASE_PENDING
        );
        assert_eq!(
            phase(&[running("a", false), running("b", true)], "Always"),
            PHASE_RUNNING
        );
        // Crash-looping with restartPolicy Always is still Running.
        let mut backoff = ContainerView::waiting("a", "i", "CrashLoopBackOff", None);
        backoff.last = match exited("a", 1).state {
            RunState::Terminated(t) => Some(t),
            _ => None,
        };
        assert_eq!(phase(&[backoff], "Always"), PHASE_RUNNING);
        assert_eq!(
            phase(&[exited("a", 0), exited("b", 0)], "Never"),
            PHASE_SUCCEEDED
        );
        assert_eq!(
            phase(&[exited("a", 0), exited("b", 2)], "OnFailure"),
            PHASE_FAILED
        );
        assert_eq!(
            phase(&[exited("a", 0), running("b", true)], "Never"),
            PHASE_RUNNING
        );
    }

    #[test]
    fn ready_conditions_name_unready_containers() {
        let s = pod_status(
            &[running("a", true), running("b", false)],
            &[],
            &facts(None, 5),
        );
        let ready = condition(&s, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [b]")
        );
        assert_eq!(condition(&s, "PodScheduled").status, "True");
        assert_eq!(s.pod_ip.as_deref(), Some("127.0.0.2"));
        let statuses = s.container_statuses.unwrap();
        assert!(statuses[0].ready && !statuses[1].ready);
        assert_eq!(statuses[0].container_id.as_deref(), Some("process://1"));
    }

    #[test]
    fn transition_times_only_move_when_a_condition_flips() {
        let first = pod_status(&[running("a", false)], &[], &facts(None, 5));
        let same = pod_status(&[running("a", false)], &[], &facts(Some(&first), 9));
        assert_eq!(first, same, "nothing changed, so nothing to report");
        let flipped = pod_status(&[running("a", true)], &[], &facts(Some(&first), 9));
        assert_eq!(
            condition(&flipped, "Ready").last_transition_time,
            Some(Time(t(9)))
        );
        assert_eq!(
            condition(&flipped, "PodScheduled").last_transition_time,
            Some(Time(t(5)))
        );
    }

    #[test]
    fn pod_is_pending_and_not_initialized_until_init_containers_succeed() {
        let waiting = ContainerView::waiting("main", "i", "PodInitializing", None);
        let running_init = running("migrate", false);
        let s = pod_status(
            std::slice::from_ref(&waiting),
            &[running_init],
            &facts(None, 1),
        );
        assert_eq!(s.phase.as_deref(), Some(PHASE_PENDING));
        let init = condition(&s, "Initialized");
        assert_eq!(init.status, "False");
        assert_eq!(
            init.message.as_deref(),
            Some("containers with incomplete status: [migrate]")
        );
        assert_eq!(s.init_container_statuses.as_ref().map(Vec::len), Some(1));

        let done = pod_status(
            &[running("main", true)],
            &[exited("migrate", 0)],
            &facts(None, 2),
        );
        assert_eq!(done.phase.as_deref(), Some(PHASE_RUNNING));
        assert_eq!(condition(&done, "Initialized").status, "True");

        let mut never = facts(None, 3);
        never.restart_policy = "Never";
        let failed = pod_status(
            std::slice::from_ref(&waiting),
            &[exited("migrate", 1)],
            &never,
        );
        assert_eq!(failed.phase.as_deref(), Some(PHASE_FAILED));
        assert!(
            pod_status(&[running("main", true)], &[], &facts(None, 4))
                .init_container_statuses
                .is_none()
        );
    }

    #[test]
    fn container_status_carries_restarts_and_last_state() {
        let mut c = running("a", true);
        c.restart_count = 2;
        c.last = match exited("a", 3).state {
            RunState::Terminated(t) => Some(t),
            _ => None,
        };
        let s = c.to_status();
        assert_eq!(s.restart_count, 2);
        assert_eq!(s.last_state.unwrap().terminated.unwrap().exit_code, 3);
        assert!(s.state.unwrap().running.is_some());
    }
}
