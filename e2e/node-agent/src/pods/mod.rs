//! The pods bound to this node: one worker task per pod, fed by a watch on
//! `spec.nodeName=<node>`, like the kubelet's pod workers.

mod container;
mod fetch;
mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::ctx::Ctx;

struct Worker {
    updates: watch::Sender<Arc<Pod>>,
    gone: CancellationToken,
    task: JoinHandle<()>,
}

/// Runs until `shutdown`; then every pod's processes are stopped (within the pods' grace
/// periods, capped by `Ctx::shutdown_grace`) before this returns.
pub async fn run(ctx: Arc<Ctx>, shutdown: CancellationToken) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", ctx.node_name));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let mut workers: HashMap<String, Worker> = HashMap::new();
    // Pods whose worker has finished (deleted or gone): a late event must not start them again.
    let mut retired: HashSet<String> = HashSet::new();
    let mut relisted: Option<HashSet<String>> = None;
    // Bounded: a worker that ends waits for the manager to take note, never the reverse.
    let (done_tx, mut done_rx) = mpsc::channel::<String>(64);

    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(uid) = done_rx.recv() => {
                workers.remove(&uid);
                retired.insert(uid);
            }
            event = events.next() => match event {
                None => break,
                Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying with backoff"),
                Some(Ok(Event::Init)) => relisted = Some(HashSet::new()),
                Some(Ok(Event::InitApply(pod))) => {
                    if let (Some(seen), Some(uid)) = (relisted.as_mut(), pod.metadata.uid.clone()) {
                        seen.insert(uid);
                    }
                    upsert(&ctx, &mut workers, &retired, pod, &shutdown, &done_tx);
                }
                Some(Ok(Event::InitDone)) => {
                    // Pods that vanished while the watch was down.
                    if let Some(seen) = relisted.take() {
                        for (uid, w) in &workers {
                            if !seen.contains(uid) {
                                w.gone.cancel();
                            }
                        }
                    }
                }
                Some(Ok(Event::Apply(pod))) => upsert(&ctx, &mut workers, &retired, pod, &shutdown, &done_tx),
                Some(Ok(Event::Delete(pod))) => {
                    if let Some(uid) = pod.metadata.uid.as_deref() {
                        if let Some(w) = workers.get(uid) {
                            w.gone.cancel();
                        }
                        retired.remove(uid);
                    }
                }
            },
        }
    }

    // Workers see the shutdown token themselves and stop their containers.
    let deadline = ctx.shutdown_grace + Duration::from_secs(10);
    let tasks = workers.into_values().map(|w| w.task);
    if tokio::time::timeout(deadline, futures::future::join_all(tasks))
        .await
        .is_err()
    {
        tracing::warn!(?deadline, "some pods did not stop in time");
    }
}

fn upsert(
    ctx: &Arc<Ctx>,
    workers: &mut HashMap<String, Worker>,
    retired: &HashSet<String>,
    pod: Pod,
    shutdown: &CancellationToken,
    done: &mpsc::Sender<String>,
) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    if retired.contains(&uid) {
        return;
    }
    if let Some(w) = workers.get(&uid) {
        w.updates.send_replace(Arc::new(pod));
        return;
    }
    tracing::info!(
        pod = %format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or("")),
        %uid,
        "pod assigned to this node"
    );
    let (updates, rx) = watch::channel(Arc::new(pod));
    let gone = CancellationToken::new();
    let task = tokio::spawn(worker::run(
        ctx.clone(),
        rx,
        gone.clone(),
        shutdown.child_token(),
        done.clone(),
        uid.clone(),
    ));
    workers.insert(
        uid,
        Worker {
            updates,
            gone,
            task,
        },
    );
}
