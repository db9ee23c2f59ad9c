//! One pod's life on this node: IP, volumes, images, one supervisor per container, status
//! reports, and the end — graceful stop on deletion followed by the final `delete` with grace 0.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::container::{ContainerRun, Stop};
use super::fetch::{self, TokenCache};
use crate::ctx::Ctx;
use crate::images::Image;
use crate::sources::{Placement, referenced};
use crate::status::{ContainerView, PHASE_FAILED, PHASE_SUCCEEDED, PodFacts, RunState, pod_status};
use crate::volumes::{self, VolumeContent};

/// Volumes are re-read this often, so ConfigMap/Secret changes reach running pods.
const VOLUME_RESYNC: Duration = Duration::from_secs(10);
/// The kubelet's default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// Why a pod's processes stop.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// `deletionTimestamp` is set: stop within the grace period, then remove the pod object.
    Deleted(Duration),
    /// The pod object is gone from the API (force-deleted, or its namespace is).
    Gone,
    /// The node agent shuts down; the pod stays and runs again when the agent comes back.
    Shutdown,
}

pub async fn run(
    ctx: Arc<Ctx>,
    mut updates: watch::Receiver<Arc<Pod>>,
    gone: CancellationToken,
    shutdown: CancellationToken,
    done: mpsc::Sender<String>,
    uid: String,
) {
    let pod = updates.borrow_and_update().clone();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let span = tracing::info_span!("pod", pod = %format!("{ns}/{name}"));
    let ending = run_pod(&ctx, &pod, &api, &mut updates, &gone, &shutdown, &uid)
        .instrument(span)
        .await;
    if let Ending::Deleted(_) = ending {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&name, &dp).await {
            Ok(_) => tracing::info!(pod = %format!("{ns}/{name}"), "pod stopped and removed"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "cannot remove pod")
            }
        }
    }
    ctx.ips
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .release(&uid);
    let dir = ctx.pods_dir.join(&uid);
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove pod directory");
    }
    // The manager may be gone already (shutdown); then nobody needs to know.
    let _ = done.try_send(uid);
}

/// Sends status patches, only when the status changed.
struct Reporter {
    api: Api<Pod>,
    name: String,
    restart_policy: String,
    placement: Placement,
    start_time: Timestamp,
    generation: Option<i64>,
    last: Option<PodStatus>,
    main: Vec<Arc<watch::Sender<ContainerView>>>,
    init: Vec<Arc<watch::Sender<ContainerView>>>,
}

impl Reporter {
    async fn report(&mut self) {
        let snapshot = |views: &[Arc<watch::Sender<ContainerView>>]| -> Vec<ContainerView> {
            views.iter().map(|v| v.borrow().clone()).collect()
        };
        let containers = snapshot(&self.main);
        let init = snapshot(&self.init);
        let status = pod_status(
            &containers,
            &init,
            &PodFacts {
                restart_policy: &self.restart_policy,
                pod_ip: self.placement.pod_ip,
                host_ip: self.placement.host_ip,
                start_time: self.start_time,
                generation: self.generation,
                previous: self.last.as_ref(),
                now: Timestamp::now(),
            },
        );
        if self.last.as_ref() == Some(&status) {
            return;
        }
        let patch = serde_json::json!({ "status": status });
        match self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.last = Some(status),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            // Not recorded as sent, so the next change or resync tries again.
            Err(e) => tracing::warn!(pod = %self.name, error = %e, "cannot update pod status"),
        }
    }
}

async fn run_pod(
    ctx: &Arc<Ctx>,
    pod: &Arc<Pod>,
    api: &Api<Pod>,
    updates: &mut watch::Receiver<Arc<Pod>>,
    gone: &CancellationToken,
    shutdown: &CancellationToken,
    uid: &str,
) -> Ending {
    let spec = pod.spec.clone().unwrap_or_default();
    let grace = spec
        .termination_grace_period_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(DEFAULT_GRACE, Duration::from_secs);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some(PHASE_SUCCEEDED | PHASE_FAILED))
        || pod.metadata.deletion_timestamp.is_some()
    {
        // Finished before this agent saw it (or being deleted while the agent was down):
        // nothing to run, only the end to wait for.
        return ending(updates, gone, shutdown, grace).await;
    }

    let preferred = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok());
    let allocated = ctx
        .ips
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .allocate(uid, preferred);
    let pod_ip = match allocated {
        Ok(ip) => ip,
        Err(e) => {
            tracing::error!(error = %e, "cannot give the pod an IP");
            ctx.event(
                pod,
                EventType::Warning,
                "FailedCreatePodSandBox",
                e.to_string(),
            )
            .await;
            return ending(updates, gone, shutdown, grace).await;
        }
    };
    let placement = Placement {
        pod_ip,
        host_ip: ctx.host_ip,
    };
    let pod_dir = ctx.pods_dir.join(uid);
    let volumes_dir = pod_dir.join("volumes");
    if let Err(e) = std::fs::create_dir_all(&volumes_dir) {
        tracing::error!(dir = %volumes_dir.display(), error = %e, "cannot create pod directory");
        return ending(updates, gone, shutdown, grace).await;
    }

    let mut reporter = Reporter {
        api: api.clone(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        restart_policy: spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into()),
        placement,
        start_time: Timestamp::now(),
        generation: pod.metadata.generation,
        last: pod.status.clone(),
        main: Vec::new(),
        init: Vec::new(),
    };
    let init_containers = spec.init_containers.clone().unwrap_or_default();
    let first_reason = if init_containers.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let previous = pod.status.as_ref();
    let init_views = views_of(
        &init_containers,
        "ContainerCreating",
        previous.and_then(|s| s.init_container_statuses.as_deref()),
    );
    let views = views_of(
        &spec.containers,
        first_reason,
        previous.and_then(|s| s.container_statuses.as_deref()),
    );
    reporter.main = views.clone();
    reporter.init = init_views.clone();
    reporter.report().await;

    // Volumes first: no container starts before its files are in place.
    let mut tokens = TokenCache::default();
    let mut attempt = 0;
    let mut last_error = String::new();
    loop {
        match sync_volumes(ctx, pod, placement, &volumes_dir, &mut tokens).await {
            Ok(()) => break,
            Err(message) => {
                tracing::warn!(error = %message, "volumes not ready");
                if message != last_error {
                    ctx.event(pod, EventType::Warning, "FailedMount", message.clone())
                        .await;
                }
                for v in views.iter().chain(&init_views) {
                    v.send_modify(|v| {
                        if let RunState::Waiting { reason, message: m } = &mut v.state
                            && (reason == "ContainerCreating" || reason == "PodInitializing")
                        {
                            *m = Some(message.clone());
                        }
                    });
                }
                reporter.report().await;
                last_error = message;
                let delay = ctx.restart_backoff.delay(attempt);
                attempt += 1;
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    e = ending(updates, gone, shutdown, grace) => return e,
                }
            }
        }
    }

    // Images next: every container's image from local storage, unpacked.
    let all: Vec<(&Container, &Arc<watch::Sender<ContainerView>>)> = init_containers
        .iter()
        .zip(&init_views)
        .chain(spec.containers.iter().zip(&views))
        .collect();
    let mut images = match pull_images(
        ctx,
        pod,
        &all,
        &mut reporter,
        updates,
        gone,
        shutdown,
        grace,
    )
    .await
    {
        Ok(images) => images.into_iter(),
        Err(end) => return end,
    };
    let init_images: Vec<Arc<Image>> = images.by_ref().take(init_containers.len()).collect();
    let main_images: Vec<Arc<Image>> = images.collect();

    let changed = Arc::new(Notify::new());
    let (stop_tx, stop_rx) = watch::channel(None::<Stop>);
    let container_run =
        |c: &Container, image: Arc<Image>, view: &Arc<watch::Sender<ContainerView>>, init: bool| {
            ContainerRun {
                ctx: ctx.clone(),
                pod: pod.clone(),
                container: c.clone(),
                image,
                placement,
                pod_dir: pod_dir.clone(),
                view: view.clone(),
                changed: changed.clone(),
                stop: stop_rx.clone(),
                grace,
                init,
            }
        };

    // Init containers, one after the other, each to successful completion.
    for ((c, image), view) in init_containers.iter().zip(init_images).zip(&init_views) {
        let mut task = tokio::spawn(container_run(c, image, view, true).supervise());
        let interrupted = loop {
            tokio::select! {
                _ = &mut task => break None,
                () = changed.notified() => reporter.report().await,
                e = ending(updates, gone, shutdown, grace) => break Some(e),
            }
        };
        if let Some(end) = interrupted {
            return finish(ctx, end, grace, &stop_tx, vec![task], &mut reporter).await;
        }
        reporter.report().await;
        let succeeded = matches!(&view.borrow().state, RunState::Terminated(t) if t.exit_code == 0);
        if !succeeded {
            // Failed with restartPolicy Never: the pod has failed; wait for its end.
            tracing::info!(container = %c.name, "init container failed; pod failed");
            return ending(updates, gone, shutdown, grace).await;
        }
    }

    let mut tasks = Vec::new();
    for ((c, image), view) in spec.containers.iter().zip(main_images).zip(&views) {
        tasks.push(tokio::spawn(
            container_run(c, image, view, false).supervise(),
        ));
    }

    let mut resync = tokio::time::interval(VOLUME_RESYNC);
    resync.tick().await;
    let end = loop {
        tokio::select! {
            () = changed.notified() => reporter.report().await,
            e = ending(updates, gone, shutdown, grace) => break e,
            _ = resync.tick() => {
                if let Err(message) = sync_volumes(ctx, pod, placement, &volumes_dir, &mut tokens).await {
                    tracing::warn!(error = %message, "volume resync failed; keeping the current files");
                }
                reporter.report().await;
            }
        }
    };
    finish(ctx, end, grace, &stop_tx, tasks, &mut reporter).await
}

/// The views of `containers` before they start. Restart counts carry over from `previous`
/// statuses: the API remembers them across agent restarts.
fn views_of(
    containers: &[Container],
    waiting_reason: &str,
    previous: Option<&[ContainerStatus]>,
) -> Vec<Arc<watch::Sender<ContainerView>>> {
    containers
        .iter()
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            let mut view = ContainerView::waiting(&c.name, &image, waiting_reason, None);
            view.restart_count = previous
                .and_then(|cs| cs.iter().find(|s| s.name == c.name))
                .map_or(0, |s| s.restart_count);
            Arc::new(watch::channel(view).0)
        })
        .collect()
}

/// Every container's image from local storage, in order, as a kubelet pulls them before the
/// containers start. An image that is not there leaves its container `Waiting` with
/// `ErrImagePull` (first failure) then `ImagePullBackOff`, retried with backoff until the
/// image appears or the pod ends.
#[allow(clippy::too_many_arguments)]
async fn pull_images(
    ctx: &Ctx,
    pod: &Pod,
    containers: &[(&Container, &Arc<watch::Sender<ContainerView>>)],
    reporter: &mut Reporter,
    updates: &mut watch::Receiver<Arc<Pod>>,
    gone: &CancellationToken,
    shutdown: &CancellationToken,
    grace: Duration,
) -> Result<Vec<Arc<Image>>, Ending> {
    let mut pulled: Vec<Option<Arc<Image>>> = vec![None; containers.len()];
    let mut attempt: u32 = 0;
    loop {
        let mut failed = false;
        for ((c, view), slot) in containers.iter().zip(pulled.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            let image = c.image.clone().unwrap_or_default();
            match ctx.images.pull(&image).await {
                Ok(img) => {
                    ctx.event(
                        pod,
                        EventType::Normal,
                        "Pulled",
                        format!("Container image \"{image}\" already present on machine"),
                    )
                    .await;
                    *slot = Some(Arc::new(img));
                }
                Err(e) => {
                    failed = true;
                    tracing::warn!(container = %c.name, error = %e, "image pull failed");
                    let reason = if attempt == 0 {
                        "ErrImagePull"
                    } else {
                        "ImagePullBackOff"
                    };
                    if attempt == 0 {
                        ctx.event(
                            pod,
                            EventType::Warning,
                            "Failed",
                            format!("Failed to pull image \"{image}\": {e}"),
                        )
                        .await;
                    }
                    view.send_modify(|v| {
                        v.state = RunState::Waiting {
                            reason: reason.to_owned(),
                            message: Some(e.to_string()),
                        };
                    });
                }
            }
        }
        if !failed {
            return Ok(pulled.into_iter().flatten().collect());
        }
        reporter.report().await;
        let delay = ctx.restart_backoff.delay(attempt);
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            e = ending(updates, gone, shutdown, grace) => return Err(e),
        }
        // Back off: a retry that fails again reports ImagePullBackOff.
        for ((_, view), slot) in containers.iter().zip(&pulled) {
            if slot.is_none() {
                view.send_modify(|v| {
                    if let RunState::Waiting { reason, .. } = &mut v.state {
                        "ImagePullBackOff".clone_into(reason);
                    }
                });
            }
        }
    }
}

/// Stops the running containers within the grace period that fits `end`.
async fn finish(
    ctx: &Ctx,
    end: Ending,
    grace: Duration,
    stop_tx: &watch::Sender<Option<Stop>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    reporter: &mut Reporter,
) -> Ending {
    let stop_grace = match end {
        Ending::Deleted(g) => g,
        Ending::Gone => grace,
        Ending::Shutdown => grace.min(ctx.shutdown_grace),
    };
    tracing::info!(?end, grace = ?stop_grace, "stopping pod containers");
    let _ = stop_tx.send(Some(Stop { grace: stop_grace }));
    let deadline = stop_grace + Duration::from_secs(10);
    if tokio::time::timeout(deadline, futures::future::join_all(tasks))
        .await
        .is_err()
    {
        tracing::warn!(?deadline, "containers did not stop in time");
    }
    if let Ending::Deleted(_) = end {
        reporter.report().await;
    }
    end
}

/// Waits until the pod ends (deletion requested, gone, or agent shutdown).
async fn ending(
    updates: &mut watch::Receiver<Arc<Pod>>,
    gone: &CancellationToken,
    shutdown: &CancellationToken,
    default_grace: Duration,
) -> Ending {
    loop {
        {
            let pod = updates.borrow_and_update();
            if pod.metadata.deletion_timestamp.is_some() {
                let grace = pod
                    .metadata
                    .deletion_grace_period_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .map_or(default_grace, Duration::from_secs);
                return Ending::Deleted(grace);
            }
        }
        tokio::select! {
            changed = updates.changed() => if changed.is_err() { return Ending::Gone },
            () = gone.cancelled() => return Ending::Gone,
            () = shutdown.cancelled() => return Ending::Shutdown,
        }
    }
}

/// Fetches the pod's sources and brings every volume directory up to date.
async fn sync_volumes(
    ctx: &Ctx,
    pod: &Pod,
    placement: Placement,
    volumes_dir: &Path,
    tokens: &mut TokenCache,
) -> Result<(), String> {
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    if volumes.is_empty() {
        return Ok(());
    }
    let sources = fetch::sources(&ctx.client, pod, &referenced(pod), Some(tokens))
        .await
        .map_err(|e| e.to_string())?;
    for v in volumes {
        let dir: PathBuf = volumes_dir.join(&v.name);
        match volumes::content(pod, v, placement, &sources).map_err(|e| e.to_string())? {
            VolumeContent::Files(files) => {
                volumes::sync_dir(&dir, &files).map_err(|e| e.to_string())?
            }
            VolumeContent::Scratch => {
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?
            }
            VolumeContent::Host(_) => {}
        }
    }
    Ok(())
}
