//! One container of a pod: prepare (env, mounts, what to run from its image), run the process
//! in its sandbox, probe it, restart it with exponential backoff according to the pod's
//! `restartPolicy`, and stop it on request.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use tokio::sync::{Notify, mpsc, watch};

use super::fetch;
use crate::ctx::Ctx;
use crate::env::{self, EnvError};
use crate::images::Image;
use crate::probe::{Action, Prober, Timing, Verdict};
use crate::process::{ProcessError, ProcessSpec, Running, exit_code};
use crate::runspec::{self, Accounts, RunSpecError};
use crate::sandbox::{self, Bind, InitSpec};
use crate::sources::{Placement, Refs, referenced};
use crate::status::{ContainerView, RunState, Terminated};
use crate::volumes::{Mounts, VolumeError};

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
    #[error(transparent)]
    RunSpec(#[from] RunSpecError),
    #[error("preparing the container's files {path}: {source}")]
    Files {
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
            Self::Fetch(_) | Self::Env(_) => "CreateContainerConfigError",
            Self::RunSpec(RunSpecError::NoCommand) => "CreateContainerError",
            Self::RunSpec(_) => "CreateContainerConfigError",
            Self::Volume(_) | Self::Files { .. } => "CreateContainerError",
            Self::Start(_) => "RunContainerError",
        }
    }
}

pub struct ContainerRun {
    pub ctx: Arc<Ctx>,
    pub pod: Arc<Pod>,
    pub container: Container,
    /// The container's image, unpacked (resolved by the pod worker before the first start).
    pub image: Arc<Image>,
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
        // The container's own program (under `unshare`) is what `process://` names, so a pid
        // from the status is the program itself, as tests and users expect.
        let main_pid = process
            .first_child(Duration::from_secs(2))
            .await
            .unwrap_or_else(|| process.pid());
        let container_id = format!("process://{main_pid}");
        tracing::info!(pod = %self.pod_name(), container = %self.container.name, pid = main_pid, image = %self.image.reference, "container started");
        self.ctx
            .event(
                &self.pod,
                EventType::Normal,
                "Started",
                format!("Started container {} (pid {main_pid})", self.container.name,),
            )
            .await;
        let has_startup = self.container.startup_probe.is_some();
        let has_readiness = self.container.readiness_probe.is_some();
        self.update(|v| {
            v.image_id = format!("sha256:{}", self.image.id);
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
        for (k, v) in resolved {
            match env_vars.iter_mut().find(|(name, _)| *name == k) {
                Some(slot) => slot.1 = v,
                None => env_vars.push((k, v)),
            }
        }
        let words = |list: &Option<Vec<String>>| -> Option<Vec<String>> {
            list.as_ref()
                .map(|l| l.iter().map(|w| env::expand_with(w, &env_vars)).collect())
        };
        let command = words(&self.container.command);
        let args = words(&self.container.args);
        let etc = |name: &str| -> String {
            std::fs::read_to_string(self.image.rootfs.join("etc").join(name)).unwrap_or_default()
        };
        let (passwd, group) = (etc("passwd"), etc("group"));
        let run = runspec::resolve(
            &self.image.config,
            &self.container,
            command,
            args,
            self.pod
                .spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref()),
            Accounts {
                passwd: &passwd,
                group: &group,
            },
        )?;

        let pod_name = self.pod.metadata.name.as_deref().unwrap_or("");
        let mut binds = self.pod_files(pod_name, &mounts)?;
        binds.extend(mounts.iter().map(|m| Bind {
            host: m.host.clone(),
            path: m.path.clone(),
            read_only: m.read_only,
        }));
        let layer = self.pod_dir.join("containers").join(&self.container.name);
        sandbox::reset_layer(&layer).map_err(|source| PrepareError::Files {
            path: layer.clone(),
            source,
        })?;
        let init = InitSpec {
            rootfs: self.image.rootfs.clone(),
            layer,
            binds,
            read_only_root: run.read_only_root,
            hostname: pod_name.to_owned(),
            uid: run.uid,
            gid: run.gid,
            working_dir: run.working_dir,
            argv: run.argv,
        };
        let (program, args) = sandbox::command(&self.ctx.agent_exe, &init);
        let ns = self.pod.metadata.namespace.as_deref().unwrap_or("default");
        let uid = self.pod.metadata.uid.as_deref().unwrap_or("");
        Ok(ProcessSpec {
            program,
            args,
            env: env_vars,
            cwd: self.pod_dir.clone(),
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

    /// `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf` of the pod, as the kubelet writes
    /// them (unless the container mounts a volume there itself).
    fn pod_files(&self, pod_name: &str, mounts: &Mounts) -> Result<Vec<Bind>, PrepareError> {
        let dir = self.pod_dir.join("etc");
        let io = |path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| PrepareError::Files { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        let files = [
            (
                "hosts",
                format!(
                    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{}\t{pod_name}\n",
                    self.placement.pod_ip
                ),
            ),
            ("hostname", format!("{pod_name}\n")),
            ("resolv.conf", resolv),
        ];
        let mut binds = Vec::new();
        for (name, content) in files {
            let path = format!("/etc/{name}");
            if mounts.has(&path) {
                continue;
            }
            let host = dir.join(name);
            std::fs::write(&host, content).map_err(io(&host))?;
            binds.push(Bind {
                host,
                path,
                read_only: false,
            });
        }
        Ok(binds)
    }

    /// What every container gets before its own env: the image's env (with a standard PATH
    /// when it sets none), HOSTNAME, HOME (`/` unless the image sets it) and the API server's
    /// address as the kubelet's `KUBERNETES_SERVICE_*` variables, which with the mounted
    /// service-account token make in-cluster configuration work.
    fn base_env(&self) -> Vec<(String, String)> {
        let mut env = self.image.config.env.clone();
        let mut default = |k: &str, v: String| {
            if !env.iter().any(|(name, _)| name == k) {
                env.push((k.to_owned(), v));
            }
        };
        default("PATH", PATH.to_owned());
        default("HOME", "/".to_owned());
        env.retain(|(k, _)| k != "HOSTNAME");
        env.push((
            "HOSTNAME".to_owned(),
            self.pod.metadata.name.clone().unwrap_or_default(),
        ));
        if let Some((host, port)) = self
            .ctx
            .api_server
            .strip_prefix("https://")
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
