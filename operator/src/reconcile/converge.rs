//! One reconcile of one pipeline, as a sequence: observe the brokers, build the desired
//! objects (pure, `builders`), size the gateway, bring the schema up to date, then apply the
//! objects in order — the Deployment last. Each step that can fail records its reason in the
//! [`Observation`] before the error goes on, so the status names the step that failed.

use k8s_openapi::Resource as _;
use k8s_openapi::api::apps::v1::Deployment;

use super::Context;
use crate::autoscale::{KafkaView, Sizing};
use crate::builders::{self, Owned};
use crate::crd::{SchemaMode, TracePipeline};
use crate::error::Error;
use crate::objects::{self, Change};
use crate::reconcile::backends::SchemaRequest;
use crate::reconcile::gateway;
use crate::schema_step;
use crate::secrets::Secrets;
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
    let secrets = Secrets::for_pipeline(ctx.client.clone(), tp);
    let timeout = ctx.settings.kafka_timeout;

    // The brokers: partition counts, the dead-letter topic, and the lag — before anything
    // that needs ClickHouse or the collectors: a pipeline whose gateway is down has the lag
    // that matters most.
    let access = secrets.kafka_access(&spec.kafka).await?;
    let counts = ctx
        .backends
        .partitions(&access, &spec.kafka.topics, timeout)
        .await
        .map_err(|e| failed(&mut obs.kafka, e.into()))?;
    if let Some(topic) = &spec.kafka.dead_letter_topic {
        ctx.backends
            .dead_letter_topic(&access, topic, timeout)
            .await
            .map_err(|e| failed(&mut obs.kafka, e.into()))?;
    }
    let partitions = counts.values().sum::<i32>();
    obs.kafka = Step::Ok(partitions);
    match ctx
        .backends
        .lag(&access, &tp.consumer_group(), &counts, timeout)
        .await
    {
        Ok(l) => obs.lag = Step::Ok(l),
        // An observation, not a step: the stored lag stands, the reconcile goes on.
        Err(e) => tracing::warn!(error = %e, "cannot read the consumer lag"),
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
    options.dedup_window = schema_step::dedup_window(
        options.dedup_window,
        partitions,
        spec.collector.batch.linger_ms,
    );

    // Who sizes the gateway: the scale subresource, the autoscaler or the partitions.
    let kafka = KafkaView {
        access: &access,
        counts: &counts,
        timeout,
    };
    let mut sizing = ctx
        .autoscaler
        .size(&ctx.client, &ctx.metrics, &super::key(tp), tp, kafka)
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
        .clickhouse_connection(ch, ch.ddl_credentials.as_ref().or(ch.credentials.as_ref()))
        .await?;
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
    let deployment = apply_objects(ctx, &objects).await?;
    obs.config_hash = Some(desired.config_hash);
    obs.collector_image = Some(desired.image);
    obs.collector_upgrade = Some(desired.upgrade_available);
    obs.gateway = deployment.as_ref().map(Gateway::of);
    obs.gateway_failure = gateway::diagnose(tp, ctx, deployment.as_ref()).await;
    Ok(sizing)
}

/// Applies `objects` in order (each only if it differs from the live one); returns the live
/// Deployment, if one was among them.
async fn apply_objects(ctx: &Context, objects: &[Owned]) -> Result<Option<Deployment>, Error> {
    let mut deployment = None;
    for object in objects {
        let (live, change) = objects::ensure(&ctx.client, object).await?;
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
