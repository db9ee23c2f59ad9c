//! The reconciler: one shape for every pipeline, controller-rs style.
//!
//! `reconcile` hands off to [`apply`], which observes and converges in order —
//! Kafka partitions → desired objects (pure, `builders`) → schema migrations → server-side
//! apply of ConfigMap, Service, PodDisruptionBudget and, last, the Deployment — then writes
//! the status (only if it changed) and one Event per state change. Every failure lands in
//! the status and is retried by `error_policy` with exponential backoff; a healthy pipeline
//! is requeued every `requeue` so a partition increase is noticed without any watch on Kafka.
//!
//! No finalizer: nothing has to happen before a pipeline goes (its objects carry owner
//! references, so Kubernetes garbage-collects them; ClickHouse data is never dropped), and a
//! finalizer would strand every pipeline, and its namespace, in `Terminating` once the
//! operator is uninstalled. The one older releases added is removed ([`release_finalizer`]).
//! What the operator holds in memory about a deleted pipeline (gauges, autoscaler samples)
//! is dropped when its next requeue finds it gone ([`forget`], from [`run`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracehouse_schema::ConnectionConfig;

use crate::autoscale::{Autoscaler, KafkaView, Sampler, Sizing};
use crate::builders::{self, Names};
use crate::crd::{
    CredentialsSecretRef, KafkaSpec, SchemaMode, TracePipeline, TracePipelineSpec,
    TracePipelineStatus,
};
use crate::defaults::CollectorDefaults;
use crate::error::Error;
use crate::health::{self, PodFacts};
use crate::kafka::{self, KafkaAccess};
use crate::lag;
use crate::metrics::Metrics;
use crate::migrations;
use crate::objects::{self, Change};
use crate::secrets::Secrets;
use crate::status::{self, Gateway, Observation, Step};
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
    /// Consecutive failures per pipeline (`namespace/name`), for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, metrics: Arc<Metrics>, settings: Settings) -> anyhow::Result<Self> {
        let sampler = Sampler::new(Duration::from_secs(2))?;
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
            autoscaler: Autoscaler::new(sampler),
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

/// Entry point of the controller for one pipeline.
pub async fn reconcile(tp: Arc<TracePipeline>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started();
    let key = key(&tp);
    release_finalizer(&tp, &ctx).await?;
    if tp.metadata.deletion_timestamp.is_some() {
        // Held by someone else's finalizer (or foreground deletion): nothing to converge.
        return Ok(Action::await_change());
    }
    let action = apply(&tp, &ctx).await?;
    ctx.succeeded(&key);
    Ok(action)
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
    tracing::info!(pipeline = %key(tp), "removed the finalizer of an older release");
    Ok(())
}

/// Drops what the operator keeps in memory about a pipeline that is gone.
fn forget(ctx: &Context, namespace: &str, name: &str) {
    ctx.metrics.pipelines.forget_named(namespace, name);
    ctx.autoscaler.forget(&format!("{namespace}/{name}"));
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
    let result = if tp.spec.paused {
        // Frozen: look, never touch.
        observe_gateway(tp, ctx, &mut obs)
            .await
            .map(|()| Sizing::default())
    } else {
        converge(tp, ctx, &mut obs).await
    };
    if let Err(e) = &result {
        obs.error = Some((e.reason(), e.to_string()));
    }
    let published = publish(tp, ctx, &prev, &obs).await;
    let sizing = result?;
    published?;
    if let Some((reason, action, note)) = sizing.event {
        publish_event_as(tp, ctx, EventType::Normal, reason, &action, note).await;
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

async fn converge(
    tp: &TracePipeline,
    ctx: &Context,
    obs: &mut Observation,
) -> Result<Sizing, Error> {
    let spec = &tp.spec;
    let secrets = Secrets::for_pipeline(ctx.client.clone(), tp);

    let access = kafka_access(&secrets, &spec.kafka).await?;
    let counts =
        match kafka::partitions(&access, &spec.kafka.topics, ctx.settings.kafka_timeout).await {
            Ok(p) => p,
            Err(e) => {
                let e = Error::from(e);
                obs.kafka = Step::Failed {
                    reason: e.reason(),
                    message: e.to_string(),
                };
                return Err(e);
            }
        };
    let partitions = counts.values().sum::<i32>();
    obs.kafka = Step::Ok(partitions);
    if let Some(topic) = &spec.kafka.dead_letter_topic
        && let Err(e) = kafka::dead_letter_topic(&access, topic, ctx.settings.kafka_timeout).await
    {
        let e = Error::from(e);
        obs.kafka = Step::Failed {
            reason: e.reason(),
            message: e.to_string(),
        };
        return Err(e);
    }
    // From the brokers, before anything that needs ClickHouse or the collectors: the lag of
    // a pipeline whose gateway is down is the lag that matters most.
    match lag::read(
        &access,
        &tp.consumer_group(),
        &counts,
        ctx.settings.kafka_timeout,
    )
    .await
    {
        Ok(l) => obs.lag = Step::Ok(l),
        // An observation, not a step: the stored lag stands, the reconcile goes on.
        Err(e) => tracing::warn!(pipeline = %key(tp), error = %e, "cannot read the consumer lag"),
    }

    // Pure; a spec the collector would refuse never reaches ClickHouse or the cluster.
    let mut desired = builders::desired_with(tp, partitions, &ctx.settings.collector_defaults)?
        .with_secrets_hash(
            secrets
                .fingerprint(&builders::referenced_secrets(tp))
                .await?,
        );
    let mut options = builders::table_options(&spec.clickhouse)?;
    // Sized from the partitions (issue 30, finding 6): `apply` changes it as they grow.
    options.dedup_window = migrations::dedup_window(
        options.dedup_window,
        partitions,
        spec.collector.batch.linger_ms,
    );

    // Who sizes the gateway: the scale subresource, the autoscaler or the partitions.
    let mut sizing = ctx
        .autoscaler
        .size(
            &ctx.client,
            &ctx.metrics,
            &key(tp),
            tp,
            KafkaView {
                access: &access,
                counts: &counts,
                timeout: ctx.settings.kafka_timeout,
            },
        )
        .await?;
    if let Some(replicas) = sizing.replicas {
        desired = desired.with_replicas(replicas);
    }
    obs.autoscaling = Step::Ok(sizing.status.take());
    obs.desired_replicas = Some(desired.replicas);

    // The schema first: collectors must never start against a table that is not there.
    // The schema owner's credentials when the spec names them, else the writer's.
    let connection = clickhouse_connection(
        &secrets,
        spec,
        spec.clickhouse
            .ddl_credentials
            .as_ref()
            .or(spec.clickhouse.credentials.as_ref()),
    )
    .await?;
    let target = format!("{}.{}", spec.clickhouse.database, spec.clickhouse.table);
    let ensured = tokio::time::timeout(
        ctx.settings.schema_timeout,
        migrations::ensure(
            &connection,
            &options,
            &ctx.settings.identity,
            ctx.settings.schema_lock_timeout,
            spec.clickhouse.schema_mode == SchemaMode::Verify,
        ),
    )
    .await;
    match ensured {
        Ok(Ok(outcome)) if !outcome.missing.is_empty() => {
            let e = Error::SchemaNotApplied {
                target,
                missing: outcome.missing,
            };
            obs.schema = Step::Failed {
                reason: e.reason(),
                message: e.to_string(),
            };
            return Err(e);
        }
        Ok(Ok(outcome)) => {
            if !outcome.applied.is_empty() {
                tracing::info!(pipeline = %key(tp), %target, applied = ?outcome.applied, "schema migrations applied");
                ctx.metrics.wrote("SchemaMigration");
            }
            obs.schema = Step::Ok(outcome.version);
            obs.dedup_window = outcome.dedup_window;
            obs.retention = Some(outcome.retention);
        }
        Ok(Err(source)) => {
            let e = Error::Schema { target, source };
            obs.schema = Step::Failed {
                reason: e.reason(),
                message: e.to_string(),
            };
            return Err(e);
        }
        Err(_) => {
            let e = Error::SchemaTimeout {
                target,
                seconds: ctx.settings.schema_timeout.as_secs(),
            };
            obs.schema = Step::Failed {
                reason: e.reason(),
                message: e.to_string(),
            };
            return Err(e);
        }
    }

    // The Deployment last, so its pods find their ConfigMap in place.
    let client = &ctx.client;
    let (_, c) = objects::ensure(client, &desired.config_map).await?;
    count(ctx, "ConfigMap", c);
    let (_, c) = objects::ensure(client, &desired.service).await?;
    count(ctx, "Service", c);
    let (_, c) = objects::ensure(client, &desired.pdb).await?;
    count(ctx, "PodDisruptionBudget", c);
    let (deployment, c) = objects::ensure(client, &desired.deployment).await?;
    count(ctx, "Deployment", c);
    obs.config_hash = Some(desired.config_hash);
    obs.collector_image = Some(desired.image);
    obs.collector_upgrade = Some(desired.upgrade_available);
    obs.gateway = Some(Gateway::of(&deployment));
    obs.gateway_failure = diagnose_gateway(tp, ctx, Some(&deployment)).await;
    Ok(sizing)
}

fn count(ctx: &Context, kind: &'static str, change: Change) {
    if change != Change::Unchanged {
        ctx.metrics.wrote(kind);
    }
}

/// Reads the gateway Deployment without changing anything (paused pipelines).
async fn observe_gateway(
    tp: &TracePipeline,
    ctx: &Context,
    obs: &mut Observation,
) -> Result<(), Error> {
    let ns = tp.namespace().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let name = Names::of(&tp.name_any()).deployment;
    let deployment = api.get_opt(&name).await?;
    obs.gateway = deployment.as_ref().map(Gateway::of);
    if deployment.is_some() {
        obs.gateway_failure = diagnose_gateway(tp, ctx, deployment.as_ref()).await;
    }
    Ok(())
}

/// Why the gateway's pods fail, if they do (`crate::health`). Best effort: a pod list the
/// API refuses is logged and reads as "nothing known", never fails the reconcile.
async fn diagnose_gateway(
    tp: &TracePipeline,
    ctx: &Context,
    deployment: Option<&Deployment>,
) -> Option<health::Diagnosis> {
    let ns = tp.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = builders::selector_string(tp);
    let list = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l.items,
        Err(e) => {
            tracing::warn!(pipeline = %key(tp), error = %e, "cannot list the gateway pods");
            return None;
        }
    };
    let now = Time(Timestamp::now());
    let mut notes = Vec::with_capacity(list.len());
    for pod in &list {
        let unscheduled = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_none_or(str::is_empty);
        // Only unscheduled pods: a scheduler's reason is in an Event when it left no condition.
        notes.push(if unscheduled {
            scheduling_note(ctx, &ns, &pod.name_any()).await
        } else {
            None
        });
    }
    let facts: Vec<PodFacts<'_>> = list
        .iter()
        .zip(notes)
        .map(|(pod, scheduling_note)| PodFacts {
            pod,
            scheduling_note,
        })
        .collect();
    health::diagnose(&facts, deployment, &now)
}

/// The newest `FailedScheduling` Event's note for pod `name`.
async fn scheduling_note(ctx: &Context, ns: &str, name: &str) -> Option<String> {
    let events: Api<CoreEvent> = Api::namespaced(ctx.client.clone(), ns);
    let fields =
        format!("involvedObject.kind=Pod,involvedObject.name={name},reason=FailedScheduling");
    let list = events
        .list(&ListParams::default().fields(&fields))
        .await
        .inspect_err(|e| tracing::debug!(pod = name, error = %e, "cannot list scheduling Events"))
        .ok()?;
    list.items
        .into_iter()
        .max_by_key(|e| {
            e.last_timestamp
                .as_ref()
                .or(e.first_timestamp.as_ref())
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
        })
        .and_then(|e| e.message)
}

/// How the operator itself reaches the brokers: the spec's properties plus security
/// settings with the Secrets' contents inline (the pods get files; we get values).
async fn kafka_access(secrets: &Secrets, spec: &KafkaSpec) -> Result<KafkaAccess, Error> {
    let mut properties = spec.properties.clone();
    for (k, v) in builders::kafka_security_properties(spec.tls.as_ref(), spec.sasl.as_ref()) {
        if !k.ends_with(".location") {
            properties.insert(k, v);
        }
    }
    if let Some(tls) = &spec.tls {
        if let Some(ca) = &tls.ca {
            properties.insert("ssl.ca.pem".into(), secrets.key(ca).await?);
        }
        if let Some(name) = &tls.client_cert_secret_name {
            let (cert_key, key_key) = tls.client_keys();
            properties.insert(
                "ssl.certificate.pem".into(),
                secrets.value(name, cert_key).await?,
            );
            properties.insert("ssl.key.pem".into(), secrets.value(name, key_key).await?);
        }
    }
    if let Some(sasl) = &spec.sasl {
        let c = secrets.credentials(&sasl.credentials).await?;
        properties.insert("sasl.username".into(), c.username);
        properties.insert("sasl.password".into(), c.password);
    }
    Ok(KafkaAccess {
        brokers: spec.bootstrap_servers.clone(),
        properties,
    })
}

async fn clickhouse_connection(
    secrets: &Secrets,
    spec: &TracePipelineSpec,
    credentials: Option<&CredentialsSecretRef>,
) -> Result<ConnectionConfig, Error> {
    let ch = &spec.clickhouse;
    let (user, password) = match credentials {
        Some(r) => {
            let c = secrets.credentials(r).await?;
            (Some(c.username), Some(c.password))
        }
        None => (None, None),
    };
    Ok(ConnectionConfig {
        url: ch.endpoint.clone(),
        user,
        password,
        tls: secrets.clickhouse_tls(ch.tls.as_ref()).await?,
    })
}

/// Writes the next status if it differs from the stored one, then one Event per change.
///
/// `prev` comes from the controller's cache, which can lag behind our own last write: a
/// Deployment event right after a status write reconciles with the object as it was before
/// that write. Compared with that stale copy the status looks changed, and writing it would
/// repeat the write (and its Events), or move a condition's transition time. So a status
/// that looks changed is compared once more with the stored one, read from the API server
/// (a quorum read), and written only if it still differs: nothing changed, nothing written.
async fn publish(
    tp: &TracePipeline,
    ctx: &Context,
    prev: &TracePipelineStatus,
    obs: &Observation,
) -> Result<(), Error> {
    let now = Time(Timestamp::now());
    let mut next = status::next(prev, obs, &now);
    // Every reconcile, changed or not: a restarted operator fills its gauges again.
    ctx.metrics.pipelines.observe(tp, &next);
    if next == *prev {
        return Ok(());
    }
    let api: Api<TracePipeline> =
        Api::namespaced(ctx.client.clone(), &tp.namespace().unwrap_or_default());
    let stored = match api.get_opt(&tp.name_any()).await? {
        // Deleted meanwhile: nothing to report on.
        None => return Ok(()),
        Some(fresh) => fresh.status.unwrap_or_default(),
    };
    if stored != *prev {
        next = status::next(&stored, obs, &now);
        ctx.metrics.pipelines.observe(tp, &next);
        if next == stored {
            return Ok(());
        }
    }
    let prev = &stored;
    let body = serde_json::json!({
        "apiVersion": TracePipeline::api_version(&()),
        "kind": TracePipeline::kind(&()),
        "status": next,
    });
    api.patch_status(
        &tp.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    ctx.metrics.wrote("TracePipelineStatus");
    for e in status::events(prev, &next) {
        let type_ = if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish_event(tp, ctx, type_, e.reason, e.note).await;
    }
    Ok(())
}

/// Publishes an Event; a failure is logged, never fatal (Events are best effort).
async fn publish_event(
    tp: &TracePipeline,
    ctx: &Context,
    type_: EventType,
    reason: &str,
    note: String,
) {
    publish_event_as(tp, ctx, type_, reason, "Reconcile", note).await;
}

/// [`publish_event`] for `action`. The recorder folds Events of the same reason and action
/// into one series that keeps the first note, so each distinct step gets its own action.
async fn publish_event_as(
    tp: &TracePipeline,
    ctx: &Context,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        // Notes are limited to 1 kB by the API.
        note: Some(note.chars().take(1000).collect()),
        action: action.to_owned(),
        secondary: None,
    };
    match ctx.recorder.publish(&event, &tp.object_ref(&())).await {
        Ok(()) => ctx.metrics.wrote("Event"),
        Err(e) => tracing::warn!(pipeline = %key(tp), reason, error = %e, "cannot publish Event"),
    }
}

/// Fails fast when the CRD is not installed, instead of a watch that errors forever.
pub async fn check_crd(client: &Client) -> anyhow::Result<()> {
    let api: Api<TracePipeline> = Api::all(client.clone());
    api.list(&ListParams::default().limit(1))
        .await
        .map(|_| ())
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot list TracePipelines ({e}): is the CRD installed? \
                 `kubectl apply --server-side -f crds/tracepipelines.yaml`"
            )
        })
}

/// Runs the controller until `shutdown` is cancelled. `namespace` limits it to one
/// namespace; `None` watches the whole cluster.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>, shutdown: CancellationToken) {
    let client = ctx.client.clone();
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
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_the_cap() {
        let max = Duration::from_secs(300);
        let delays: Vec<u64> = (1..=11).map(|a| backoff(a, max).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff(u32::MAX, max), max);
    }
}
