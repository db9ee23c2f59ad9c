//! Per-pipeline gauges for the dashboards and alerts (charts/tracehouse/dashboards): each
//! TracePipeline's conditions, schema version, partitions and desired replicas, and the
//! gateway's memory limit and in-flight budget — what the collectors' own metrics cannot say.
//!
//! Labelled `namespace` (the pipeline's) and `pipeline`: one small set of series per
//! TracePipeline, removed when it is deleted, so cardinality follows the pipelines that exist.
//! Scrape the operator with `honor_labels: true` so the pipeline's `namespace` is kept over
//! the operator pod's (e2e/lib/prometheus.sh and the chart's PodMonitor do).
//!
//! [`gauges`] is pure (spec + status + the live gateway's memory limit → values);
//! [`PipelineMetrics`] only stores them.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::crd::{TracePipeline, TracePipelineStatus, condition};
use crate::offsets_retention;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PipelineLabels {
    pub namespace: String,
    pub pipeline: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub namespace: String,
    pub pipeline: String,
    pub condition: String,
}

/// The values of one pipeline's gauges.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauges {
    /// Condition type → 1 when `True`, else 0.
    pub conditions: Vec<(String, i64)>,
    pub schema_version: Option<i64>,
    pub partitions: Option<i64>,
    pub desired_replicas: Option<i64>,
    /// The collector container's memory limit, as the gateway Deployment sets it.
    pub memory_limit_bytes: Option<i64>,
    pub inflight_budget_bytes: i64,
    /// From `status.lag` (every pipeline, from the brokers): records behind, and the age of
    /// the oldest unconsumed record at `now` (0 when nothing is behind). With
    /// `spec.autoscaling`, the collectors' own age measure when they report one.
    pub lag_seconds: Option<i64>,
    pub lag_records: Option<i64>,
    /// From the `Consuming` condition's reason: 0 consuming (or stopped within the broker's
    /// `offsets.retention.minutes`), 1 `OffsetsExpiringSoon`, 2 `OffsetsMayHaveExpired`.
    pub offsets_retention_stage: i64,
    /// From `status.autoscaling` (pipelines with `spec.autoscaling`).
    pub incoming_spans_per_second: Option<i64>,
}

/// What the gauges of `tp` should read at `now`, given the status just computed for it and
/// the collector's memory limit in the gateway Deployment the reconcile read (`None`: not read).
pub fn gauges(
    tp: &TracePipeline,
    status: &TracePipelineStatus,
    now: Timestamp,
    memory_limit_bytes: Option<i64>,
) -> Gauges {
    let broker_lag_seconds = status.lag.as_ref().map(|l| {
        l.oldest_unconsumed_time.as_ref().map_or(0, |t| {
            now.as_second().saturating_sub(t.0.as_second()).max(0)
        })
    });
    let consuming = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::CONSUMING);
    let offsets_retention_stage = match consuming.map(|c| c.reason.as_str()) {
        Some(offsets_retention::EXPIRING_SOON) => 1,
        Some(offsets_retention::MAY_HAVE_EXPIRED) => 2,
        _ => 0,
    };
    Gauges {
        offsets_retention_stage,
        conditions: status
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), i64::from(c.status == "True")))
            .collect(),
        schema_version: status.schema_version,
        partitions: status.partitions.map(i64::from),
        desired_replicas: status.desired_replicas.map(i64::from),
        memory_limit_bytes,
        inflight_budget_bytes: tp.spec.collector.max_inflight_bytes.bytes().unwrap_or(0),
        lag_seconds: status
            .autoscaling
            .as_ref()
            .and_then(|a| a.lag_seconds)
            .or(broker_lag_seconds),
        lag_records: status
            .lag
            .as_ref()
            .map(|l| l.records)
            .or_else(|| status.autoscaling.as_ref().and_then(|a| a.lag_records)),
        incoming_spans_per_second: status
            .autoscaling
            .as_ref()
            .and_then(|a| a.incoming_spans_per_second),
    }
}

/// The per-pipeline gauge families, registered under the operator's prefix.
#[derive(Default)]
pub struct PipelineMetrics {
    condition: Family<ConditionLabels, Gauge>,
    schema_version: Family<PipelineLabels, Gauge>,
    partitions: Family<PipelineLabels, Gauge>,
    desired_replicas: Family<PipelineLabels, Gauge>,
    memory_limit_bytes: Family<PipelineLabels, Gauge>,
    inflight_budget_bytes: Family<PipelineLabels, Gauge>,
    lag_seconds: Family<PipelineLabels, Gauge>,
    lag_records: Family<PipelineLabels, Gauge>,
    incoming_spans_per_second: Family<PipelineLabels, Gauge>,
    offsets_retention_stage: Family<PipelineLabels, Gauge>,
}

impl PipelineMetrics {
    /// Registers the families in `registry` (already prefixed `tracehouse_operator`).
    pub fn register(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "pipeline_condition",
            "1 when the TracePipeline condition is True, else 0",
            m.condition.clone(),
        );
        registry.register(
            "pipeline_schema_version",
            "Latest schema migration recorded for the pipeline's traces table",
            m.schema_version.clone(),
        );
        registry.register(
            "pipeline_partitions",
            "Partitions of the pipeline's topics",
            m.partitions.clone(),
        );
        registry.register(
            "pipeline_desired_replicas",
            "Gateway replicas the operator wants for the pipeline",
            m.desired_replicas.clone(),
        );
        registry.register(
            "pipeline_memory_limit_bytes",
            "Memory limit of each gateway collector container",
            m.memory_limit_bytes.clone(),
        );
        registry.register(
            "pipeline_inflight_budget_bytes",
            "In-flight record bytes each collector holds before pausing partitions",
            m.inflight_budget_bytes.clone(),
        );
        registry.register(
            "pipeline_lag_seconds",
            "Age of the oldest record the gateway has not written, as the autoscaler last \
             read it (pipelines with spec.autoscaling)",
            m.lag_seconds.clone(),
        );
        registry.register(
            "pipeline_lag_records",
            "Records the pipeline's consumer group is behind, read from Kafka by the operator",
            m.lag_records.clone(),
        );
        registry.register(
            "pipeline_offsets_retention_stage",
            "The pipeline stopped near or past the broker's offsets.retention.minutes: 0 no, \
             1 OffsetsExpiringSoon (80 %), 2 OffsetsMayHaveExpired (the Consuming condition)",
            m.offsets_retention_stage.clone(),
        );
        registry.register(
            "pipeline_incoming_spans_per_second",
            "Spans per second arriving on the pipeline's topics",
            m.incoming_spans_per_second.clone(),
        );
    }

    /// Sets the gauges of `tp` from the status just computed for it; the memory limit only
    /// when this reconcile read the gateway (`Some`), else it keeps its last value.
    pub fn observe(
        &self,
        tp: &TracePipeline,
        status: &TracePipelineStatus,
        memory_limit_bytes: Option<i64>,
    ) {
        let g = gauges(tp, status, Timestamp::now(), memory_limit_bytes);
        let labels = labels(tp);
        for (condition, value) in g.conditions {
            self.condition
                .get_or_create(&ConditionLabels {
                    namespace: labels.namespace.clone(),
                    pipeline: labels.pipeline.clone(),
                    condition,
                })
                .set(value);
        }
        let set = |family: &Family<PipelineLabels, Gauge>, value: Option<i64>| match value {
            Some(v) => {
                family.get_or_create(&labels).set(v);
            }
            None => {
                family.remove(&labels);
            }
        };
        set(&self.schema_version, g.schema_version);
        set(&self.partitions, g.partitions);
        set(&self.desired_replicas, g.desired_replicas);
        if let Some(limit) = g.memory_limit_bytes {
            self.memory_limit_bytes.get_or_create(&labels).set(limit);
        }
        set(&self.lag_seconds, g.lag_seconds);
        set(&self.lag_records, g.lag_records);
        set(&self.incoming_spans_per_second, g.incoming_spans_per_second);
        self.inflight_budget_bytes
            .get_or_create(&labels)
            .set(g.inflight_budget_bytes);
        self.offsets_retention_stage
            .get_or_create(&labels)
            .set(g.offsets_retention_stage);
    }

    /// Removes every series of `tp` (it is being deleted).
    /// Removes every series of pipeline `namespace/name` (it is gone).
    pub fn forget_named(&self, namespace: &str, name: &str) {
        let labels = PipelineLabels {
            namespace: namespace.to_owned(),
            pipeline: name.to_owned(),
        };
        for c in condition::ALL {
            self.condition.remove(&ConditionLabels {
                namespace: labels.namespace.clone(),
                pipeline: labels.pipeline.clone(),
                condition: c.to_owned(),
            });
        }
        for family in [
            &self.schema_version,
            &self.partitions,
            &self.desired_replicas,
            &self.memory_limit_bytes,
            &self.inflight_budget_bytes,
            &self.lag_seconds,
            &self.lag_records,
            &self.incoming_spans_per_second,
            &self.offsets_retention_stage,
        ] {
            family.remove(&labels);
        }
    }
}

fn labels(tp: &TracePipeline) -> PipelineLabels {
    PipelineLabels {
        namespace: tp.namespace().unwrap_or_default(),
        pipeline: tp.name_any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;

    fn pipeline(collector: serde_json::Value) -> TracePipeline {
        let spec = serde_json::from_value(serde_json::json!({
            "kafka": { "bootstrapServers": "k:9092", "topics": ["t"] },
            "clickhouse": { "endpoint": "http://c:8123" },
            "collector": collector,
        }))
        .unwrap();
        let mut tp = TracePipeline::new("orders", spec);
        tp.metadata.namespace = Some("shop".into());
        tp.metadata.uid = Some("0b7c0c3e-3c1d-4a8e-9a57-1f5f2f4c6d10".into());
        tp
    }

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    /// The `Consuming` condition's warning stages, as a gauge an alert can read.
    #[test]
    fn the_offsets_retention_stage_follows_the_consuming_reason() {
        let tp = pipeline(serde_json::json!({}));
        let stage = |reason: Option<&str>| {
            let conditions = reason
                .map(|r| Condition {
                    reason: r.into(),
                    ..condition(condition::CONSUMING, "False")
                })
                .into_iter()
                .collect();
            let status = TracePipelineStatus {
                conditions,
                ..Default::default()
            };
            gauges(&tp, &status, Timestamp::now(), None).offsets_retention_stage
        };
        assert_eq!(stage(None), 0);
        assert_eq!(stage(Some(offsets_retention::PAUSED)), 0);
        assert_eq!(stage(Some(offsets_retention::EXPIRING_SOON)), 1);
        assert_eq!(stage(Some(offsets_retention::MAY_HAVE_EXPIRED)), 2);
    }

    #[test]
    fn gauges_follow_the_status_and_the_live_gateway() {
        let tp = pipeline(serde_json::json!({
            "maxInflightBytes": 67108864,
            "resources": { "limits": { "memory": "512Mi" } }
        }));
        let status = TracePipelineStatus {
            conditions: vec![
                condition("Ready", "True"),
                condition("SchemaReady", "False"),
            ],
            schema_version: Some(5),
            partitions: Some(8),
            desired_replicas: Some(2),
            ..Default::default()
        };
        let g = gauges(&tp, &status, Timestamp::now(), Some(512 << 20));
        assert_eq!(
            g.conditions,
            [("Ready".to_owned(), 1), ("SchemaReady".to_owned(), 0)]
        );
        assert_eq!(g.schema_version, Some(5));
        assert_eq!(g.partitions, Some(8));
        assert_eq!(g.desired_replicas, Some(2));
        assert_eq!(g.memory_limit_bytes, Some(512 << 20));
        assert_eq!(g.inflight_budget_bytes, 67_108_864);
    }

    #[test]
    fn lag_comes_from_the_brokers_for_every_pipeline() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let tp = pipeline(serde_json::json!({}));
        let now = Timestamp::from_second(1_800_000_100).unwrap();
        let mut status = TracePipelineStatus {
            lag: Some(crate::crd::LagStatus {
                records: 40,
                partitions_behind: 2,
                oldest_unconsumed_time: Some(Time(Timestamp::from_second(1_800_000_000).unwrap())),
            }),
            ..Default::default()
        };
        let g = gauges(&tp, &status, now, None);
        assert_eq!((g.lag_records, g.lag_seconds), (Some(40), Some(100)));
        status.lag = Some(crate::crd::LagStatus::default());
        let g = gauges(&tp, &status, now, None);
        assert_eq!((g.lag_records, g.lag_seconds), (Some(0), Some(0)));
        status.lag = None;
        let g = gauges(&tp, &status, now, None);
        assert_eq!((g.lag_records, g.lag_seconds), (None, None));
    }

    #[test]
    fn series_are_set_and_removed_with_the_pipeline() {
        let mut registry = Registry::default();
        let m = PipelineMetrics::default();
        m.register(registry.sub_registry_with_prefix("tracehouse_operator"));
        let tp = pipeline(serde_json::json!({}));
        let status = TracePipelineStatus {
            conditions: vec![condition("Ready", "True")],
            schema_version: Some(5),
            ..Default::default()
        };
        m.observe(&tp, &status, Some(1 << 30));
        let text = |r: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, r).unwrap();
            out
        };
        let out = text(&registry);
        for line in [
            r#"tracehouse_operator_pipeline_condition{namespace="shop",pipeline="orders",condition="Ready"} 1"#,
            r#"tracehouse_operator_pipeline_schema_version{namespace="shop",pipeline="orders"} 5"#,
            // The live gateway's limit, as the reconcile read it.
            r#"tracehouse_operator_pipeline_memory_limit_bytes{namespace="shop",pipeline="orders"} 1073741824"#,
        ] {
            assert!(out.contains(line), "{line} missing from:\n{out}");
        }
        m.forget_named("shop", "orders");
        let out = text(&registry);
        assert!(!out.contains(r#"pipeline="orders""#), "{out}");
    }
}
