//! One reconcile of one pipeline, as a sequence: read its Secrets (each once), observe the
//! brokers (partitions, then the group's offsets once: the lag and the autoscaler's sample
//! are made of them) and the gateway's pods (listed once), build the desired objects (pure,
//! `builders`), size the gateway, bring the schema up to date, then apply the objects in
//! order — the Deployment last. Each step that can fail records its reason in the
//! [`Observation`] before the error goes on, so the status names the step that failed.

use std::collections::BTreeMap;

use k8s_openapi::Resource as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;

use super::Context;
use crate::autoscale::{Seen, Sizing};
use crate::builders::{self, Owned};
use crate::crd::{SchemaMode, TracePipeline, TracePipelineSpec};
use crate::error::Error;
use crate::gateway_pods;
use crate::kafka::PartitionOffsets;
use crate::lag;
use crate::objects::{self, Change};
use crate::offsets_retention::{Consumers, Retention, Stopped};
use crate::reconcile::backends::{Brokers, SchemaRequest};
use crate::reconcile::gateway;
use crate::schema_step;
use crate::secrets::{self, Secrets};
use crate::skew::{self, Known};
use crate::status::{Gateway, Observation, Step};

/// Records `error` as the failure of `step` and hands it on.
fn failed<T>(step: &mut Step<T>, error: Error) -> Error {
    *step = Step::Failed {
        reason: error.reason(),
        message: error.to_string(),
    };
    error
}

/// Brings the pipeline's world in line with its spec; what it saw goes into `obs`.
pub(super) async fn converge(
    tp: &TracePipeline,
    ctx: &Context,
    obs: &mut Observation,
) -> Result<Sizing, Error> {
    let spec = &tp.spec;
    let key = super::key(tp);
    let group = tp.consumer_group();
    // Every Secret the pipeline names, each read once; all the rest is derived from this.
    let secrets = Secrets::for_pipeline(ctx.client.clone(), tp)
        .read(&secrets::secret_names(tp))
        .await?;
    let access = secrets.kafka_access(&spec.kafka)?;
    let brokers = Brokers {
        pipeline: &key,
        access: &access,
        group: &group,
        timeout: ctx.settings.kafka_timeout,
    };

    // The brokers: partition counts, the dead-letter topic, and the group's offsets — before
    // anything that needs ClickHouse or the collectors: a pipeline whose gateway is down has
    // the lag that matters most.
    let counts = ctx
        .backends
        .partitions(brokers, &spec.kafka.topics)
        .await
        .map_err(|e| failed(&mut obs.kafka, e.into()))?;
    if let Some(topic) = &spec.kafka.dead_letter_topic {
        ctx.backends
            .dead_letter_topic(brokers, topic)
            .await
            .map_err(|e| failed(&mut obs.kafka, e.into()))?;
    }
    let partitions = counts.values().sum::<i32>();
    obs.kafka = Step::Ok(partitions);
    let offsets = group_offsets(ctx, brokers, &counts, obs).await;

    // The gateway's pods, listed once: the autoscaler's sample, the offsets-retention watch
    // and the diagnosis after the apply all read this list. The live Deployment, read once:
    // the autoscaler's current count, and what the apply loop compares with.
    let pods = gateway::pods(tp, ctx).await;
    let live_deployment = gateway::deployment(tp, ctx).await?;
    if let Some(list) = &pods {
        let stopped =
            (!list.iter().any(gateway_pods::is_ready)).then_some(Stopped::NoReadyCollector);
        obs.consumers = Some(consumers(ctx, brokers, spec, stopped).await);
    }

    // Version skew: a gateway on another image than the operator's own is asked what its
    // collector knows (one ready pod of that image), and gets only that.
    let defaults = &ctx.settings.collector_defaults;
    let (image, own) = builders::collector_image(tp, defaults);
    let known = if own {
        Known::Own
    } else {
        let read = match &pods {
            Some(list) => gateway::collector_revision(ctx, list, &image).await,
            None => None,
        };
        skew::known(read, tp.status.as_ref(), &image)
    };

    // Pure; a spec the collector would refuse never reaches ClickHouse or the cluster.
    let desired = builders::desired_for(tp, partitions, defaults, known.revision())?;
    let pods_secrets = secrets.fingerprint(&desired.referenced_secrets)?;
    let mut desired = desired.with_secrets_hash(pods_secrets);
    let mut options = builders::table_options(&spec.clickhouse)?;
    // Sized from the partitions (issue 30, finding 6): `apply` changes it as they grow.
    options.dedup_window = schema_step::dedup_window(
        options.dedup_window,
        partitions,
        spec.collector.batch.linger_ms,
    );

    // Who sizes the gateway: the scale subresource, the autoscaler or the partitions.
    let seen = Seen {
        partitions,
        offsets: offsets.as_deref(),
        pods: pods.as_deref(),
        current_replicas: live_deployment
            .as_ref()
            .and_then(|d| d.spec.as_ref()?.replicas),
    };
    let mut sizing = ctx
        .autoscaler
        .size(&ctx.metrics, &key, tp, seen, ctx.backends.as_ref())
        .await?;
    if let Some(replicas) = sizing.replicas {
        desired = desired.with_replicas(replicas);
    }
    obs.autoscaling = Step::Ok(sizing.status.take());
    obs.desired_replicas = Some(desired.replicas);

    // The schema first: collectors must never start against a table that is not there.
    // The schema owner's credentials when the spec names them, else the writer's.
    let ch = &spec.clickhouse;
    let connection = secrets
        .clickhouse_connection(ch, ch.ddl_credentials.as_ref().or(ch.credentials.as_ref()))?;
    let target = format!("{}.{}", ch.database, ch.table);
    let request = SchemaRequest {
        connection: &connection,
        options: &options,
        applied_by: &ctx.settings.identity,
        lock_timeout: ctx.settings.schema_lock_timeout,
        verify_only: ch.schema_mode == SchemaMode::Verify,
    };
    let ensured = tokio::time::timeout(ctx.settings.schema_timeout, ctx.backends.schema(request));
    let outcome = match ensured.await {
        Err(_) => Err(Error::SchemaTimeout {
            target: target.clone(),
            seconds: ctx.settings.schema_timeout.as_secs(),
        }),
        Ok(Err(source)) => Err(Error::Schema {
            target: target.clone(),
            source,
        }),
        Ok(Ok(o)) if !o.missing.is_empty() => Err(Error::SchemaNotApplied {
            target: target.clone(),
            missing: o.missing,
        }),
        Ok(Ok(o)) => Ok(o),
    };
    let outcome = outcome.map_err(|e| failed(&mut obs.schema, e))?;
    if !outcome.applied.is_empty() {
        tracing::info!(%target, applied = ?outcome.applied, "schema migrations applied");
        ctx.metrics.wrote("SchemaMigration");
    }
    obs.schema = Step::Ok(outcome.version);
    obs.dedup_window = outcome.dedup_window;
    obs.retention = Some(outcome.retention);
    obs.layouts = Some(tracehouse_schema::layouts::label(&outcome.layouts));
    obs.kept_layouts = outcome.kept_layouts.iter().map(|l| l.field()).collect();

    let objects = desired.objects().map_err(|source| Error::Serialize {
        what: "an owned object",
        source,
    })?;
    let deployment = apply_objects(ctx, &objects, live_deployment).await?;
    obs.config_hash = Some(desired.config_hash);
    obs.processing = Some(desired.processing.clone());
    obs.collector_config = Some(skew::Seen {
        image,
        known,
        required: desired.required_revision,
        not_applied: desired.not_applied.clone(),
    });
    obs.collector_image = Some(desired.image);
    obs.collector_upgrade = Some(desired.upgrade_available);
    obs.gateway = deployment.as_ref().map(Gateway::of);
    if let Some(list) = &pods {
        obs.gateway_failure = gateway::diagnose(tp, ctx, list, deployment.as_ref()).await;
    }
    Ok(sizing)
}

/// The group's committed and end offsets, read once: the lag (`obs.lag`) and the autoscaler's
/// sample are made of them. A failed read is an observation, not a step: it is logged, the
/// stored lag stands and the reconcile goes on.
async fn group_offsets(
    ctx: &Context,
    brokers: Brokers<'_>,
    counts: &BTreeMap<String, i32>,
    obs: &mut Observation,
) -> Option<Vec<PartitionOffsets>> {
    let offsets = match ctx.backends.offsets(brokers, counts).await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the consumer group's offsets");
            return None;
        }
    };
    // Only a group that is behind has an oldest unconsumed record to fetch.
    let oldest = if offsets.iter().any(|p| p.end > p.committed) {
        ctx.backends.oldest_unconsumed(brokers, &offsets).await
    } else {
        Ok(None)
    };
    match oldest {
        Ok(oldest) => obs.lag = Step::Ok(lag::summary(&offsets, oldest)),
        Err(e) => tracing::warn!(error = %e, "cannot read the oldest unconsumed record"),
    }
    Some(offsets)
}

/// Whether a collector consumes and, when none does, the broker's offsets retention (read
/// only then; Kafka's default assumed when it cannot be read).
pub(super) async fn consumers(
    ctx: &Context,
    brokers: Brokers<'_>,
    spec: &TracePipelineSpec,
    stopped: Option<Stopped>,
) -> Consumers {
    let mut seen = Consumers {
        stopped,
        retention: Retention::Assumed,
    };
    if stopped.is_none() {
        return seen;
    }
    let Some(topic) = spec.kafka.topics.first() else {
        return seen;
    };
    match ctx.backends.offsets_retention(brokers, topic).await {
        Ok(Some(minutes)) => seen.retention = Retention::Read(minutes),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the broker's offsets.retention.minutes"),
    }
    seen
}

/// A paused pipeline changes nothing, but is still watched: its group has no consumer, and
/// the broker will expire the group's offsets (`crate::offsets_retention`). Reads the
/// pipeline's Secrets once and the broker's retention; what cannot be read assumes Kafka's
/// default.
pub(super) async fn paused(tp: &TracePipeline, ctx: &Context) -> Consumers {
    let key = super::key(tp);
    let group = tp.consumer_group();
    let access = match Secrets::for_pipeline(ctx.client.clone(), tp)
        .read(&secrets::secret_names(tp))
        .await
        .and_then(|s| s.kafka_access(&tp.spec.kafka))
    {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "paused: cannot read the Kafka settings");
            return Consumers {
                stopped: Some(Stopped::Paused),
                retention: Retention::Assumed,
            };
        }
    };
    let brokers = Brokers {
        pipeline: &key,
        access: &access,
        group: &group,
        timeout: ctx.settings.kafka_timeout,
    };
    consumers(ctx, brokers, &tp.spec, Some(Stopped::Paused)).await
}

/// Applies `objects` in order (each only if it differs from the live one; the Deployment
/// compared with `live_deployment`, as the reconcile read it); returns the live Deployment,
/// if one was among them.
async fn apply_objects(
    ctx: &Context,
    objects: &[Owned],
    live_deployment: Option<Deployment>,
) -> Result<Option<Deployment>, Error> {
    let known = serde_json::to_value(&live_deployment)
        .and_then(serde_json::from_value::<Option<DynamicObject>>)
        .map_err(|source| Error::Serialize {
            what: "the live Deployment",
            source,
        })?;
    let mut known = Some(known);
    let mut deployment = None;
    for object in objects {
        let (live, change) = if object.kind == Deployment::KIND {
            objects::ensure_over(&ctx.client, object, known.take()).await?
        } else {
            objects::ensure(&ctx.client, object).await?
        };
        if change != Change::Unchanged {
            ctx.metrics.wrote(object.kind);
        }
        if object.kind == Deployment::KIND {
            let parsed = serde_json::to_value(&live).and_then(serde_json::from_value);
            deployment = Some(parsed.map_err(|source| Error::Serialize {
                what: "the live Deployment",
                source,
            })?);
        }
    }
    Ok(deployment)
}
