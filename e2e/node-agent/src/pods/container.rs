//! One container of a pod: prepare (env, mounts, command), run the process, probe it, restart
//! it with exponential backoff according to the pod's `restartPolicy`, and stop it on request.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use tokio::sync::{Notify, mpsc, watch};

use super::fetch;
use crate::ctx::Ctx;
use crate::env::{self, EnvError};
use crate::probe::{Action, Prober, Timing, Verdict};
use crate::process::{ProcessError, ProcessSpec, Running, exit_code};
use crate::sources::{Placement, Refs, referenced};
use crate::status::{ContainerView, RunState, Terminated};
use crate::volumes::{Mounts, SERVICE_ACCOUNT_MOUNT, VolumeError};

/// A container that ran at least this long starts its restart backoff from the beginning again.
const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(120);
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A stop request from the pod worker.
#[derive(Debug, Clone, Copy)]
pub struct Stop {
    pub grace: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Fetch(#[from] fetch::FetchError),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    Volume(#[from] VolumeError),
    #[error(
        "command {command:?} is not provided by image {image:?}: only its own binary ({binary}) can run"
    )]
    Command {
        command: String,
        image: String,
        binary: String,
    },
    #[error("writing the pod kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Start(#[from] ProcessError),
}

impl PrepareError {
    /// The container's `Waiting` reason, following the kubelet's vocabulary.
    fn reason(&self) -> &'static str {
        match self {
            Self::Fetch(_) | Self::Env(_) | Self::Kubeconfig { .. } => "CreateContainerConfigError",
            Self::Volume(_) => "CreateContainerError",
            Self::Command { .. } | Self::Start(_) => "RunContainerError",
        }
    }
}

pub struct ContainerRun {
    pub ctx: Arc<Ctx>,
    pub pod: Arc<Pod>,
    pub container: Container,
    pub binary: PathBuf,
    pub placement: Placement,
    pub pod_dir: PathBuf,
    pub view: Arc<watch::Sender<ContainerView>>,
    pub changed: Arc<Notify>,
    pub stop: watch::Receiver<Option<Stop>>,
    /// The pod's termination grace period, for liveness-probe kills.
    pub grace: Duration,
    /// An init container: runs to completion (restarted on failure unless the pod's policy is
    /// `Never`), and `supervise` returns when it has completed.
    pub init: bool,
}

/// How one run of the process ended.
enum RunEnd {
    Exited(Terminated),
    /// Stopped on request: no restart.
    Stopped(Terminated),
}

impl ContainerRun {
    fn pod_name(&self) -> String {
        format!(
            "{}/{}",
            self.pod.metadata.namespace.as_deref().unwrap_or(""),
            self.pod.metadata.name.as_deref().unwrap_or("")
        )
    }

    fn update(&self, f: impl FnOnce(&mut ContainerView)) {
        self.view.send_modify(f);
        self.changed.notify_one();
    }

    /// Resolves when a stop is requested (or the pod worker is gone).
    async fn stopped(stop: &mut watch::Receiver<Option<Stop>>) -> Stop {
        match stop.wait_for(Option::is_some).await {
            Ok(s) => s.unwrap_or(Stop {
                grace: Duration::ZERO,
            }),
            Err(_) => Stop {
                grace: Duration::ZERO,
            },
        }
    }

    /// Sleeps `d`; `true` when a stop was requested meanwhile.
    async fn sleep_or_stop(&mut self, d: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => false,
            _ = Self::stopped(&mut self.stop) => true,
        }
    }

    pub async fn supervise(mut self) {
        let pod_policy = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        // Init containers are retried on failure only; success ends them for good.
        let policy = match (self.init, pod_policy.as_str()) {
            (true, "Never") => "Never".to_owned(),
            (true, _) => "OnFailure".to_owned(),
            (false, _) => pod_policy,
        };
        let name = self.container.name.clone();
        let mut attempt: u32 = 0;
        loop {
            let end = match self.run_once().await {
                Ok(end) => end,
                Err(e) => {
                    let delay = self.ctx.restart_backoff.delay(attempt);
                    attempt = attempt.saturating_add(1);
                    tracing::warn!(pod = %self.pod_name(), container = %name, error = %e, ?delay, "container cannot start");
                    self.ctx
                        .event(
                            &self.pod,
                            EventType::Warning,
                            "Failed",
                            format!("Error: {e}"),
                        )
                        .await;
                    self.update(|v| {
                        v.ready = false;
                        v.state = RunState::Waiting {
                            reason: e.reason().to_owned(),
                            message: Some(e.to_string()),
                        };
                    });
                    if self.sleep_or_stop(delay).await {
                        return;
                    }
                    continue;
                }
            };
            let t = match end {
                RunEnd::Stopped(t) => {
                    self.update(|v| {
                        v.ready = false;
                        v.state = RunState::Terminated(t);
                    });
                    return;
                }
                RunEnd::Exited(t) => t,
            };
            let restart = match policy.as_str() {
                "Always" => true,
                "OnFailure" => t.exit_code != 0,
                _ => false,
            };
            if !restart {
                self.update(|v| {
                    v.ready = false;
                    v.state = RunState::Terminated(t);
                });
                if !self.init {
                    Self::stopped(&mut self.stop).await;
                }
                return;
            }
            let ran_for = t
                .started_at
                .map(|s| t.finished_at.duration_since(s).unsigned_abs())
                .unwrap_or_default();
            if ran_for >= BACKOFF_RESET_AFTER {
                attempt = 0;
            }
            let delay = self.ctx.restart_backoff.delay(attempt);
            attempt = attempt.saturating_add(1);
            let message = format!(
                "back-off {}s restarting failed container={name} pod={}",
                delay.as_secs(),
                self.pod.metadata.name.as_deref().unwrap_or("")
            );
            tracing::info!(pod = %self.pod_name(), container = %name, exit_code = t.exit_code, ?delay, "container exited; restarting after backoff");
            self.ctx
                .event(&self.pod, EventType::Warning, "BackOff", message.clone())
                .await;
            let last = t.clone();
            self.update(|v| {
                v.ready = false;
                v.started = false;
                v.last = Some(t);
                v.state = RunState::Waiting {
                    reason: "CrashLoopBackOff".into(),
                    message: Some(message),
                };
            });
            if self.sleep_or_stop(delay).await {
                self.update(|v| v.state = RunState::Terminated(last));
                return;
            }
            self.update(|v| v.restart_count += 1);
        }
    }

    /// Prepares and runs the process once, probing it while it runs.
    async fn run_once(&mut self) -> Result<RunEnd, PrepareError> {
        let mut stop = self.stop.clone();
        let spec = tokio::select! {
            spec = self.prepare() => spec?,
            _ = Self::stopped(&mut stop) => {
                let t = self.view.borrow().last.clone().unwrap_or_else(never_started);
                return Ok(RunEnd::Stopped(t));
            }
        };
        let restarts = self.view.borrow().restart_count;
        let banner = format!(
            "{} container {} start (restart {restarts}) at {}",
            self.pod_name(),
            self.container.name,
            Timestamp::now()
        );
        let mut process = Running::spawn(&spec, &banner)?;
        let started_at = Timestamp::now();
        let started = Instant::now();
        let container_id = format!("process://{}", process.pid());
        tracing::info!(pod = %self.pod_name(), container = %self.container.name, pid = process.pid(), program = %spec.program.display(), "container started");
        self.ctx
            .event(
                &self.pod,
                EventType::Normal,
                "Started",
                format!(
                    "Started container {} (pid {})",
                    self.container.name,
                    process.pid()
                ),
            )
            .await;
        let has_startup = self.container.startup_probe.is_some();
        let has_readiness = self.container.readiness_probe.is_some();
        self.update(|v| {
            v.image_id = format!("file://{}", spec.program.display());
            v.started = !has_startup;
            v.ready = !has_startup && !has_readiness;
            v.state = RunState::Running {
                started_at,
                container_id: container_id.clone(),
            };
        });

        let (unhealthy_tx, mut unhealthy_rx) = mpsc::channel::<String>(1);
        let probes = tokio::spawn(probe_container(
            self.container.clone(),
            self.placement,
            self.view.clone(),
            self.changed.clone(),
            unhealthy_tx,
        ));

        let (status, message, stopped) = tokio::select! {
            status = process.wait() => (status, None, false),
            Some(msg) = unhealthy_rx.recv() => {
                tracing::info!(pod = %self.pod_name(), container = %self.container.name, reason = %msg, "probe failed; killing container");
                self.ctx.event(&self.pod, EventType::Warning, "Unhealthy", msg.clone()).await;
                self.ctx.event(&self.pod, EventType::Normal, "Killing", format!("Container {} failed its probe, will be restarted", self.container.name)).await;
                (process.stop(self.grace).await, Some(msg), false)
            }
            s = Self::stopped(&mut stop) => {
                self.ctx.event(&self.pod, EventType::Normal, "Killing", format!("Stopping container {}", self.container.name)).await;
                (process.stop(s.grace).await, None, true)
            }
        };
        // The probes must not touch the view after this point.
        probes.abort();
        let _ = probes.await;
        let (exit_code, signal) = exit_code(status?);
        tracing::info!(pod = %self.pod_name(), container = %self.container.name, exit_code, ran = ?started.elapsed(), "container exited");
        let t = Terminated {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_owned(),
            message,
            started_at: Some(started_at),
            finished_at: Timestamp::now(),
            container_id: Some(container_id),
        };
        Ok(if stopped {
            RunEnd::Stopped(t)
        } else {
            RunEnd::Exited(t)
        })
    }

    /// Everything the process needs: environment, mounts, program and arguments.
    async fn prepare(&self) -> Result<ProcessSpec, PrepareError> {
        let refs = referenced(&self.pod);
        // Only env/envFrom references matter here; volumes are the pod worker's business.
        let env_refs = Refs {
            tokens: Vec::new(),
            ..refs
        };
        let sources = fetch::sources(&self.ctx.client, &self.pod, &env_refs, None).await?;
        let resolved = env::resolve(&self.pod, &self.container, self.placement, &sources)?;
        let mounts = Mounts::of(&self.pod, &self.container, &self.pod_dir.join("volumes"))?;

        let mut env_vars = self.base_env();
        if let (Some(sa_dir), Some(cluster)) =
            (mounts.host_path(SERVICE_ACCOUNT_MOUNT), &self.ctx.cluster)
        {
            let path = self
                .pod_dir
                .join(format!("{}.kubeconfig", self.container.name));
            let ns = self.pod.metadata.namespace.as_deref().unwrap_or("default");
            std::fs::write(
                &path,
                pod_kubeconfig(&cluster.server, &cluster.ca_file, &sa_dir, ns),
            )
            .map_err(|source| PrepareError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            env_vars.push(("KUBECONFIG".into(), path.display().to_string()));
        }
        for (k, v) in resolved {
            let v = mounts.rewrite(&v);
            match env_vars.iter_mut().find(|(name, _)| *name == k) {
                Some(slot) => slot.1 = v,
                None => env_vars.push((k, v)),
            }
        }

        let image = self.container.image.clone().unwrap_or_default();
        let words = |list: &Option<Vec<String>>| -> Vec<String> {
            list.iter()
                .flatten()
                .map(|w| mounts.rewrite(&env::expand_with(w, &env_vars)))
                .collect()
        };
        let command = words(&self.container.command);
        let mut args = words(&self.container.args);
        if let Some(first) = self.container.command.as_ref().and_then(|c| c.first()) {
            if !is_entrypoint(first, &self.binary) {
                return Err(PrepareError::Command {
                    command: first.clone(),
                    image,
                    binary: self.binary.display().to_string(),
                });
            }
            let mut all: Vec<String> = command.into_iter().skip(1).collect();
            all.append(&mut args);
            args = all;
        }
        let cwd = self
            .container
            .working_dir
            .as_deref()
            .and_then(|w| mounts.host_path(w))
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| self.pod_dir.clone());
        let ns = self.pod.metadata.namespace.as_deref().unwrap_or("default");
        let pod_name = self.pod.metadata.name.as_deref().unwrap_or("");
        let uid = self.pod.metadata.uid.as_deref().unwrap_or("");
        Ok(ProcessSpec {
            program: self.binary.clone(),
            args,
            env: env_vars,
            cwd,
            log: self
                .ctx
                .log_dir
                .join(format!("{ns}_{pod_name}_{}.log", self.container.name)),
            pid_file: self
                .ctx
                .pids_dir
                .join(format!("{uid}_{}.pid", self.container.name)),
        })
    }

    /// What every container gets before its own env: PATH, HOSTNAME, HOME (the pod directory,
    /// so nothing writes into the real home) and the API server's address, as the kubelet's
    /// `KUBERNETES_SERVICE_*` variables.
    fn base_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("PATH".to_owned(), PATH.to_owned()),
            (
                "HOSTNAME".to_owned(),
                self.pod.metadata.name.clone().unwrap_or_default(),
            ),
            ("HOME".to_owned(), self.pod_dir.display().to_string()),
        ];
        if let Some((host, port)) = self
            .ctx
            .cluster
            .as_ref()
            .and_then(|c| c.server.strip_prefix("https://"))
            .and_then(|hp| hp.trim_end_matches('/').rsplit_once(':'))
        {
            env.push(("KUBERNETES_SERVICE_HOST".into(), host.to_owned()));
            env.push(("KUBERNETES_SERVICE_PORT".into(), port.to_owned()));
            env.push(("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_owned()));
        }
        env
    }
}

/// A run that never started, as the final state of a container stopped before its first start.
fn never_started() -> Terminated {
    Terminated {
        exit_code: 0,
        signal: None,
        reason: "ContainerCannotRun".into(),
        message: Some("stopped before it started".into()),
        started_at: None,
        finished_at: Timestamp::now(),
        container_id: None,
    }
}

/// `command[0]` may name the image's own entrypoint (by path or file name); anything else
/// would be a different program than the image provides.
fn is_entrypoint(command: &str, binary: &Path) -> bool {
    let base = |p: &Path| p.file_name().map(|n| n.to_os_string());
    Path::new(command) == binary
        || (base(Path::new(command)).is_some() && base(Path::new(command)) == base(binary))
}

/// A kubeconfig that authenticates as the pod's service account with the projected token
/// (re-read by clients when it rotates) and trusts the cluster CA.
fn pod_kubeconfig(server: &str, ca_file: &Path, sa_dir: &Path, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: pod\n  user:\n    tokenFile: {token}\ncontexts:\n- name: pod\n  context:\n    cluster: cluster\n    user: pod\n    namespace: {namespace}\ncurrent-context: pod\n",
        ca = ca_file.display(),
        token = sa_dir.join("token").display(),
    )
}

/// Startup probe first; then readiness and liveness side by side. A failed startup or
/// liveness probe is sent on `unhealthy`, which makes the supervisor kill the process.
async fn probe_container(
    container: Container,
    placement: Placement,
    view: Arc<watch::Sender<ContainerView>>,
    changed: Arc<Notify>,
    unhealthy: mpsc::Sender<String>,
) {
    let prober = |probe: &k8s_openapi::api::core::v1::Probe| Prober {
        action: Action::of(probe, &container).unwrap_or_else(|e| Action::Invalid(e.to_string())),
        timing: Timing::of(probe),
        pod_ip: placement.pod_ip.into(),
    };
    let set = |f: &dyn Fn(&mut ContainerView)| {
        view.send_modify(|v| f(v));
        changed.notify_one();
    };
    if let Some(p) = &container.startup_probe {
        let mut failure = None;
        prober(p)
            .run(|v| {
                if let Verdict::Unhealthy(m) = v {
                    failure = Some(m);
                }
                ControlFlow::Break(())
            })
            .await;
        if let Some(m) = failure {
            let _ = unhealthy.send(format!("Startup probe failed: {m}")).await;
            return;
        }
        set(&|v| {
            v.started = true;
            v.ready = container.readiness_probe.is_none();
        });
    }
    let readiness = async {
        match &container.readiness_probe {
            Some(p) => {
                prober(p)
                    .run(|v| {
                        let ready = v == Verdict::Healthy;
                        set(&|view| view.ready = ready);
                        ControlFlow::Continue(())
                    })
                    .await;
            }
            None => std::future::pending().await,
        }
    };
    let liveness = async {
        match &container.liveness_probe {
            Some(p) => {
                let mut failure = String::new();
                prober(p)
                    .run(|v| match v {
                        Verdict::Healthy => ControlFlow::Continue(()),
                        Verdict::Unhealthy(m) => {
                            failure = m;
                            ControlFlow::Break(())
                        }
                    })
                    .await;
                let _ = unhealthy
                    .send(format!("Liveness probe failed: {failure}"))
                    .await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::join!(readiness, liveness);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_may_only_name_the_images_own_binary() {
        let bin = Path::new("/work/target/debug/tracehouse-collector");
        assert!(is_entrypoint(
            "/work/target/debug/tracehouse-collector",
            bin
        ));
        assert!(is_entrypoint("tracehouse-collector", bin));
        assert!(is_entrypoint("/usr/local/bin/tracehouse-collector", bin));
        assert!(!is_entrypoint("/bin/sh", bin));
        assert!(!is_entrypoint("", bin));
    }

    #[test]
    fn pod_kubeconfig_points_at_the_projected_token() {
        let k = pod_kubeconfig(
            "https://127.0.0.1:16443",
            Path::new("/pki/ca.crt"),
            Path::new("/pod/volumes/sa"),
            "team",
        );
        let v: serde_yaml::Value = serde_yaml::from_str(&k).unwrap();
        assert_eq!(
            v["users"][0]["user"]["tokenFile"].as_str(),
            Some("/pod/volumes/sa/token")
        );
        assert_eq!(
            v["clusters"][0]["cluster"]["server"].as_str(),
            Some("https://127.0.0.1:16443")
        );
        assert_eq!(
            v["contexts"][0]["context"]["namespace"].as_str(),
            Some("team")
        );
    }
}
