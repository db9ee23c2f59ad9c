//! The reconciler: one shape for every pipeline, controller-rs style.
//!
//! [`reconcile`] runs in a tracing span of its own (`reconcile{pipeline, generation}`) and
//! hands off to `apply`: observe and converge in order (`converge.rs`: Kafka partitions →
//! desired objects (pure, `builders`) → schema migrations → one apply loop over the desired
//! objects, the Deployment last), then report (`report.rs`: the status only if it changed,
//! one Event per state change). Every failure lands in the status and is retried by
//! [`error_policy`] with exponential backoff; a healthy pipeline is requeued every `requeue`
//! so a partition increase is noticed without any watch on Kafka.
//!
//! The brokers, the gateway pods' /metrics and ClickHouse are reached through [`Backends`]
//! (`backends.rs`, one Kafka client per pipeline), each read once per reconcile, so the whole
//! sequence is tested against a fake API server and fake backends (`tests.rs`, and
//! `skew_tests.rs` for a gateway on an older collector) in the no-stack tier; `gateway.rs`
//! reads the gateway's pods without changing them.
//!
//! No finalizer: nothing has to happen before a pipeline goes (its objects carry owner
//! references, so Kubernetes garbage-collects them; ClickHouse data is never dropped), and a
//! finalizer would strand every pipeline, and its namespace, in `Terminating` once the
//! operator is uninstalled. The one older releases added is removed ([`release_finalizer`]).
//! What the operator holds in memory about a deleted pipeline (gauges, autoscaler samples,
//! its Kafka client) is dropped when its next requeue finds it gone ([`forget`], from [`run`]).

mod backends;
mod converge;
#[cfg(test)]
mod fake_api;
mod gateway;
mod report;
#[cfg(test)]
mod skew_tests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use self::backends::{Backends, Live, SchemaRequest};
use crate::autoscale::{Autoscaler, Sizing};
use crate::builders;
use crate::crd::TracePipeline;
use crate::defaults::CollectorDefaults;
use crate::endpoints::{self, AllowList};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::status::Observation;
use crate::{FIELD_MANAGER, FINALIZER};

/// Requeue of a pipeline whose gateway is rolling out, scaling or failing.
const MOVING_REQUEUE: Duration = Duration::from_secs(15);

/// Tunables of the reconciler.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Requeue of a healthy pipeline: how soon a partition increase is noticed.
    pub requeue: Duration,
    /// Deadline of one Kafka metadata read.
    pub kafka_timeout: Duration,
    /// Deadline of the whole schema step (status, lock, migrations).
    pub schema_timeout: Duration,
    /// How long to wait for another applier's schema lock.
    pub schema_lock_timeout: Duration,
    /// Longest retry delay after failures.
    pub max_backoff: Duration,
    /// Who we are, in Events and the migration ledger.
    pub identity: String,
    /// The chart's defaults for every gateway (image, pull secrets, placement, metadata).
    pub collector_defaults: CollectorDefaults,
    /// The Kafka and ClickHouse hosts a pipeline may name (empty: any).
    pub allowed_endpoints: AllowList,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            requeue: Duration::from_secs(30),
            kafka_timeout: Duration::from_secs(10),
            schema_timeout: Duration::from_secs(90),
            schema_lock_timeout: Duration::from_secs(30),
            max_backoff: Duration::from_secs(300),
            identity: FIELD_MANAGER.to_owned(),
            collector_defaults: CollectorDefaults::default(),
            allowed_endpoints: AllowList::default(),
        }
    }
}

/// Shared state of the reconcilers.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    /// Samples and decides the gateway size of pipelines with `spec.autoscaling`.
    pub autoscaler: Autoscaler,
    /// The brokers and ClickHouse ([`Live`] but in tests).
    pub backends: Arc<dyn Backends>,
    /// Consecutive failures per pipeline (`namespace/name`), for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, metrics: Arc<Metrics>, settings: Settings) -> anyhow::Result<Self> {
        // Each gateway pod's /metrics read is bounded by 2 s.
        let live = Live::new(Duration::from_secs(2))?;
        Self::with_backends(client, metrics, settings, Arc::new(live))
    }

    /// [`Context::new`] reaching the brokers and ClickHouse through `backends`.
    pub fn with_backends(
        client: Client,
        metrics: Arc<Metrics>,
        settings: Settings,
        backends: Arc<dyn Backends>,
    ) -> anyhow::Result<Self> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.to_owned(),
                instance: Some(settings.identity.clone()),
            },
        );
        Ok(Self {
            client,
            recorder,
            metrics,
            settings,
            autoscaler: Autoscaler::new(),
            backends,
            failures: Mutex::new(HashMap::new()),
        })
    }

    fn failed(&self, key: &str) -> u32 {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = f.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

fn key(tp: &TracePipeline) -> String {
    format!("{}/{}", tp.namespace().unwrap_or_default(), tp.name_any())
}

/// Retry delay after the `attempt`-th consecutive failure: 1 s doubling up to `max`.
pub fn backoff(attempt: u32, max: Duration) -> Duration {
    let exp = attempt.saturating_sub(1).min(20);
    Duration::from_secs(1u64 << exp).min(max)
}

/// Entry point of the controller for one pipeline; everything it logs carries the span
/// `reconcile{pipeline, generation}`.
pub async fn reconcile(tp: Arc<TracePipeline>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key(&tp);
    let span = tracing::info_span!(
        "reconcile",
        pipeline = %key,
        generation = tp.metadata.generation.unwrap_or_default()
    );
    async move {
        let _timer = ctx.metrics.reconcile_started();
        release_finalizer(&tp, &ctx).await?;
        if tp.metadata.deletion_timestamp.is_some() {
            // Held by someone else's finalizer (or foreground deletion): nothing to converge.
            return Ok(Action::await_change());
        }
        let action = apply(&tp, &ctx).await?;
        ctx.succeeded(&key);
        Ok(action)
    }
    .instrument(span)
    .await
}

/// Removes the finalizer older releases put on every pipeline, so that uninstalling this
/// operator later can never leave the pipeline (or its namespace) `Terminating`. The patch
/// carries the resource version it was made from: a concurrent change of the list fails it
/// (409) and the reconcile is retried, never overwrites another controller's finalizer.
async fn release_finalizer(tp: &TracePipeline, ctx: &Context) -> Result<(), Error> {
    let finalizers = tp.finalizers();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let kept: Vec<&String> = finalizers.iter().filter(|f| *f != FINALIZER).collect();
    let patch = serde_json::json!({
        "metadata": { "finalizers": kept, "resourceVersion": tp.resource_version() },
    });
    let api: Api<TracePipeline> =
        Api::namespaced(ctx.client.clone(), &tp.namespace().unwrap_or_default());
    api.patch(
        &tp.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    ctx.metrics.wrote("Finalizer");
    tracing::info!("removed the finalizer of an older release");
    Ok(())
}

/// Drops what the operator keeps in memory about a pipeline that is gone.
fn forget(ctx: &Context, namespace: &str, name: &str) {
    ctx.metrics.pipelines.forget_named(namespace, name);
    ctx.autoscaler.forget(&format!("{namespace}/{name}"));
    ctx.backends.forget(&format!("{namespace}/{name}"));
    ctx.succeeded(&format!("{namespace}/{name}"));
    tracing::info!(pipeline = %format!("{namespace}/{name}"), "pipeline deleted: its gateway is garbage-collected, its ClickHouse data kept");
}

/// Counts the failure and retries with backoff.
pub fn error_policy(tp: Arc<TracePipeline>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.error(error.metric_label());
    let attempt = ctx.failed(&key(&tp));
    let delay = backoff(attempt, ctx.settings.max_backoff);
    tracing::warn!(pipeline = %key(&tp), kind = error.metric_label(), attempt, ?delay, "reconcile failed: {error}");
    Action::requeue(delay)
}

/// Brings the pipeline's world in line with its spec, then reports.
async fn apply(tp: &TracePipeline, ctx: &Context) -> Result<Action, Error> {
    let prev = tp.status.clone().unwrap_or_default();
    let mut obs = Observation {
        generation: tp.metadata.generation,
        paused: tp.spec.paused,
        selector: Some(builders::selector_string(tp)),
        ..Default::default()
    };
    let refused = ctx.settings.allowed_endpoints.refuse(
        &tp.spec.kafka.bootstrap_servers,
        &tp.spec.clickhouse.endpoint,
    );
    let result = if let Some(refused) = refused {
        // A host outside the allow-list: nothing dialled, nothing applied, said in the status.
        obs.error = Some((endpoints::NOT_ALLOWED, refused.to_string()));
        Ok(Sizing::default())
    } else if tp.spec.paused {
        // Frozen: look, never touch.
        obs.consumers = Some(converge::paused(tp, ctx).await);
        gateway::observe(tp, ctx, &mut obs)
            .await
            .map(|()| Sizing::default())
    } else {
        converge::converge(tp, ctx, &mut obs).await
    };
    if let Err(e) = &result {
        obs.error = Some((e.reason(), e.to_string()));
    }
    let published = report::publish(tp, ctx, &prev, &obs).await;
    let sizing = result?;
    published?;
    if let Some((reason, action, note)) = sizing.event {
        report::event(tp, ctx, EventType::Normal, reason, &action, note).await;
    }
    let mut requeue = sizing
        .requeue
        .map_or(ctx.settings.requeue, |r| r.min(ctx.settings.requeue));
    // Pod states do not touch the Deployment, so nothing wakes us when a pod starts to fail:
    // look again sooner while the gateway moves or fails, to name a failure within a minute.
    if obs.gateway_failure.is_some() || obs.gateway.is_some_and(|g| !g.is_rolled_out()) {
        requeue = requeue.min(MOVING_REQUEUE);
    }
    Ok(Action::requeue(requeue))
}

/// The namespaces the controller watches: every namespace, or only the listed ones
/// (namespaced mode, where the operator's RBAC is a Role in each and nothing cluster-wide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    Cluster,
    Namespaces(Vec<String>),
}

impl Watch {
    /// From the operator's flags: the names given (empty and repeated ones dropped, order
    /// kept); none at all watches the whole cluster.
    pub fn from_names<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut list: Vec<String> = Vec::new();
        for name in names {
            let name = name.as_ref().trim();
            if !name.is_empty() && !list.iter().any(|n| n == name) {
                list.push(name.to_owned());
            }
        }
        if list.is_empty() {
            Self::Cluster
        } else {
            Self::Namespaces(list)
        }
    }

    /// `None` for the whole cluster, else each watched namespace.
    fn scopes(&self) -> Vec<Option<&str>> {
        match self {
            Self::Cluster => vec![None],
            Self::Namespaces(list) => list.iter().map(|n| Some(n.as_str())).collect(),
        }
    }
}

impl std::fmt::Display for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cluster => f.write_str("<all>"),
            Self::Namespaces(list) => f.write_str(&list.join(",")),
        }
    }
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Fails fast when the CRD is not installed (or a watched namespace cannot be read), instead
/// of a watch that errors forever. Lists where the controller will watch, so namespaced mode
/// needs no cluster-wide permission.
pub async fn check_crd(client: &Client, watch: &Watch) -> anyhow::Result<()> {
    for ns in watch.scopes() {
        api::<TracePipeline>(client, ns)
            .list(&ListParams::default().limit(1))
            .await
            .map(|_| ())
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot list TracePipelines in {} ({e}): is the CRD installed? \
                     `kubectl apply --server-side -f crds/tracepipelines.yaml`; in namespaced \
                     mode, does the namespace exist with the operator's Role bound in it?",
                    ns.unwrap_or("every namespace")
                )
            })?;
    }
    Ok(())
}

/// Runs the controller until `shutdown` is cancelled, over the whole cluster or each watched
/// namespace.
///
/// Namespaced mode runs one `Controller` per namespace, side by side, sharing the one
/// [`Context`] (keys are `namespace/name`, so nothing they keep in it collides). Simpler than
/// one `Controller::for_stream` over merged watcher streams, and correct where that is not:
/// a reflector store fed by several watchers takes one watcher's re-list (`Init` … `InitDone`)
/// for the whole store and would drop the other namespaces' objects from it.
pub async fn run(ctx: Arc<Context>, watch: Watch, shutdown: CancellationToken) {
    let controllers = watch
        .scopes()
        .into_iter()
        .map(|ns| run_in(ctx.clone(), ns.map(str::to_owned), shutdown.clone()));
    futures::future::join_all(controllers).await;
}

/// One controller over `namespace` (`None`: every namespace).
async fn run_in(ctx: Arc<Context>, namespace: Option<String>, shutdown: CancellationToken) {
    let client = ctx.client.clone();
    let ns = namespace.as_deref();
    // Only objects we manage are watched (and cached).
    let owned =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={FIELD_MANAGER}"));
    Controller::new(
        api::<TracePipeline>(&client, ns),
        watcher::Config::default().any_semantic(),
    )
    .owns(api::<Deployment>(&client, ns), owned.clone())
    .owns(api::<ConfigMap>(&client, ns), owned.clone())
    .owns(api::<Service>(&client, ns), owned.clone())
    .owns(api::<PodDisruptionBudget>(&client, ns), owned)
    .graceful_shutdown_on(async move { shutdown.cancelled().await })
    .run(reconcile, error_policy, ctx.clone())
    .for_each(|result| {
        let ctx = ctx.clone();
        async move {
            match result {
                Ok((obj, _)) => tracing::debug!(pipeline = %obj, "reconciled"),
                // A requeue (or an owned object's deletion) for a pipeline that is gone.
                Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => {
                    forget(
                        &ctx,
                        obj.namespace.as_deref().unwrap_or_default(),
                        &obj.name,
                    );
                }
                Err(e) => tracing::debug!(error = %e, "reconcile did not complete"),
            }
        }
    })
    .await;
}

#[cfg(test)]
mod watch_tests {
    use super::Watch;

    #[test]
    fn no_namespace_watches_the_cluster() {
        assert_eq!(Watch::from_names(Vec::<String>::new()), Watch::Cluster);
        assert_eq!(Watch::from_names(["", " "]), Watch::Cluster);
        assert_eq!(Watch::Cluster.scopes(), vec![None]);
    }

    #[test]
    fn listed_namespaces_are_watched_once_each_in_order() {
        let w = Watch::from_names(["team-b", "team-a", "team-b", ""]);
        assert_eq!(w, Watch::Namespaces(vec!["team-b".into(), "team-a".into()]));
        assert_eq!(w.scopes(), vec![Some("team-b"), Some("team-a")]);
        assert_eq!(w.to_string(), "team-b,team-a");
    }
}
