//! The `TracePipeline` custom resource (`tracehouse.dev/v1alpha1`): what a user writes, and
//! the status the operator reports back.
//!
//! The CRD YAML in `crds/` is generated from these types (`operator/gen-crds`); doc comments
//! become the descriptions `kubectl explain` shows. Validation lives here too, so the API
//! server refuses a bad spec before the operator ever sees it: OpenAPI bounds and patterns for
//! single fields, CEL rules (`x-kubernetes-validations`) for relations between fields, each with
//! a message naming the field. Secrets are only ever referenced, never written inline.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
/// The choices a spec shares with the collector's configuration and the command lines,
/// defined once by the crates that own them (same spellings, so the CRD and a
/// `collector.yaml` read alike): the record encoding by the collector's decoder, the
/// attribute layout, table engine and insert format by the schema crate, the insert
/// compression by the collector's configuration.
pub use tracehouse_contract::Encoding;
pub use tracehouse_contract::config::Compression;
pub use tracehouse_schema::{Attributes, EngineKind, InsertFormat, Layouts, MapSerialization};

mod autoscaling;
mod bytes;
mod collector;
/// Pipelines the unit tests share.
#[cfg(test)]
pub(crate) mod fixtures;
mod kafka_clickhouse;
mod processing;
pub mod revision;

pub use autoscaling::{AutoscalingSpec, AutoscalingStatus};
pub use bytes::ByteSize;
pub use collector::*;
pub use kafka_clickhouse::*;
pub use processing::ProcessingSpec;

/// API group of the CRD.
pub const GROUP: &str = "tracehouse.dev";
/// Condition types the operator maintains in `status.conditions`.
pub mod condition {
    /// Everything below is true and the pipeline is not paused.
    pub const READY: &str = "Ready";
    /// Every schema migration is recorded in ClickHouse.
    pub const SCHEMA_READY: &str = "SchemaReady";
    /// The brokers answered and every topic exists.
    pub const KAFKA_REACHABLE: &str = "KafkaReachable";
    /// The gateway serves (some collector is ready) and none of its pods is failing: a pod
    /// that cannot be scheduled, pulled, configured or kept running is named here
    /// (`Unschedulable`, `ImagePullBackOff`, `CreateContainerConfigError`, `OOMKilled`,
    /// `CrashLoopBackOff`).
    pub const GATEWAY_AVAILABLE: &str = "GatewayAvailable";
    /// True while the gateway moves (a rollout or a scale step: `RollingOut`, `Scaling`);
    /// False when it is settled (`RolloutComplete`) or stuck (`ProgressDeadlineExceeded`,
    /// which also makes the pipeline not Ready). Moving is not unavailability.
    pub const PROGRESSING: &str = "Progressing";
    /// A ready collector consumes the topics. False while the pipeline is paused or no
    /// gateway pod is ready; its transition time is when consuming stopped, and its reason
    /// warns when that nears (`OffsetsExpiringSoon`) or passes (`OffsetsMayHaveExpired`) the
    /// broker's `offsets.retention.minutes` (`operator/src/offsets_retention.rs`).
    pub const CONSUMING: &str = "Consuming";
    /// `collector.yaml` holds every setting of the spec (`Applied`). False
    /// (`CollectorTooOld`, which also makes the pipeline not Ready) names each setting the
    /// collector the gateway runs does not know, left out of its configuration (an older
    /// image: `upgradePolicy: Manual`, a pinned `spec.collector.image`); `RevisionUnknown`
    /// when that collector has not said what it knows yet (`operator/src/skew.rs`).
    pub const CONFIG_APPLIED: &str = "ConfigApplied";
    /// Every type above.
    pub const ALL: [&str; 7] = [
        READY,
        SCHEMA_READY,
        KAFKA_REACHABLE,
        GATEWAY_AVAILABLE,
        PROGRESSING,
        CONSUMING,
        CONFIG_APPLIED,
    ];
}

/// What the pipeline consumes, where it writes, and how its gateway of collectors runs.
// Every `printcolumn(...)` has a `type_`: not a duplicate, though clippy sees one.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "tracehouse.dev",
    version = "v1alpha1",
    kind = "TracePipeline",
    plural = "tracepipelines",
    shortname = "tp",
    category = "tracehouse",
    namespaced,
    status = "TracePipelineStatus",
    derive = "PartialEq",
    doc = "A pipeline that moves OpenTelemetry spans from Kafka into ClickHouse: the operator applies the traces table's schema migrations, then runs a gateway of tracehouse collectors sized to the topics' partitions.",
    // `kubectl scale tp`, an HPA or KEDA own the count through `spec.replicas.count`.
    scale(
        spec_replicas_path = ".spec.replicas.count",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    )
)]
#[kube(printcolumn(
    name = "Partitions",
    type_ = "integer",
    json_path = ".status.partitions",
    description = "Partitions of the consumed topics"
))]
#[kube(printcolumn(
    name = "Replicas",
    type_ = "integer",
    json_path = ".status.desiredReplicas",
    description = "Desired gateway replicas"
))]
#[kube(printcolumn(
    name = "Available",
    type_ = "integer",
    json_path = ".status.readyReplicas",
    description = "Ready gateway replicas"
))]
#[kube(printcolumn(
    name = "Lag",
    type_ = "integer",
    json_path = ".status.lag.records",
    description = "Records the consumer group is behind, from the brokers"
))]
#[kube(printcolumn(
    name = "Behind",
    type_ = "date",
    json_path = ".status.lag.oldestUnconsumedTime",
    description = "Age of the oldest record not yet consumed (empty when nothing is behind)"
))]
#[kube(printcolumn(
    name = "Spans/s",
    type_ = "integer",
    priority = 1,
    json_path = ".status.autoscaling.incomingSpansPerSecond",
    description = "Spans per second arriving on the topics"
))]
#[kube(printcolumn(
    name = "Schema",
    type_ = "integer",
    json_path = ".status.schemaVersion",
    description = "Applied schema migration version"
))]
#[kube(printcolumn(
    name = "Layouts",
    type_ = "string",
    priority = 1,
    json_path = ".status.layouts",
    description = "Opt-in layouts the traces table has"
))]
#[kube(printcolumn(
    name = "Ready",
    type_ = "string",
    json_path = ".status.conditions[?(@.type==\"Ready\")].status"
))]
#[kube(printcolumn(
    name = "Reason",
    type_ = "string",
    priority = 1,
    json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
))]
#[kube(printcolumn(
    name = "Processing",
    type_ = "string",
    priority = 1,
    json_path = ".status.processing",
    description = "The processing rules by action (empty: every span is written as it came)"
))]
#[kube(printcolumn(
    name = "Age",
    type_ = "date",
    json_path = ".metadata.creationTimestamp"
))]
#[serde(rename_all = "camelCase")]
pub struct TracePipelineSpec {
    /// Freeze the pipeline: while true the operator changes nothing (no migrations, no
    /// scaling, no rollouts); the running collectors keep running as they are.
    #[serde(default)]
    pub paused: bool,
    /// Where the spans come from.
    pub kafka: KafkaSpec,
    /// Where the spans go.
    pub clickhouse: ClickHouseSpec,
    /// The gateway collector pods.
    #[serde(default)]
    pub collector: CollectorSpec,
    /// How many gateway replicas run.
    #[serde(default)]
    pub replicas: ReplicasSpec,
    /// Size the gateway from its consumer lag and memory instead of from the partition count
    /// alone: the replicas that keep the lag under `targetLagSeconds`, one rung more when a
    /// collector nears its memory limit, only replica counts that spread the partitions well
    /// (see `maxStep`), within `min`/`max` and never more than the partitions. Scale-in waits out
    /// `scaleDownStabilizationSeconds`, and steps are `cooldownSeconds` apart: each one
    /// rebalances the consumer group. While `replicas.count` is set, the scale subresource
    /// (kubectl scale, an HPA or KEDA) owns the count and the autoscaler only reports the lag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
    /// Drop, redact and sample spans before they are written (none: every span as it came).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing: Option<ProcessingSpec>,
}

/// What the operator observed and did, as of `observedGeneration`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracePipelineStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `SchemaReady`, `KafkaReachable`, `GatewayAvailable`, `Progressing`,
    /// `Consuming` and `ConfigApplied`, with reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Partitions of the consumed topics, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<i32>,
    /// Replicas the gateway should run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Gateway pods that exist (the scale subresource's current replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Gateway pods that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Label selector of the gateway pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Latest schema migration recorded for the traces table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<i64>,
    /// The traces table's insert-deduplication window (blocks), as the operator last read
    /// it: `spec.clickhouse.schema.dedupWindow` raised to what the partitions need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_window: Option<i64>,
    /// The traces table's retention as ClickHouse has it (its TTL expression, e.g.
    /// `toDateTime(Timestamp) + toIntervalDay(30)`); absent: keeps everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<String>,
    /// The opt-in layouts the traces table has, as its migration ledger records them
    /// (`attributeItems`, `mapSerialization=Buckets`, comma-separated; `none`). A layout
    /// turned off in the spec stays here: nothing is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layouts: Option<String>,
    /// Hash of the collector configuration the gateway runs; changes roll the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// The processing rules in that configuration, by action (`2 drop, 1 redact, 1 sample`);
    /// absent when every span is written as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing: Option<String>,
    /// The last reconcile error, cleared by the next success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// How far the consumer group is behind, read from the brokers at every reconcile
    /// (whether or not collectors run, with or without `spec.autoscaling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<LagStatus>,
    /// What the autoscaler measured and decided (with `spec.autoscaling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingStatus>,
    /// The collector image the gateway runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector_image: Option<String>,
    /// The operator's newer default image, while `upgradePolicy: Manual` holds the gateway
    /// on `collectorImage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector_upgrade: Option<String>,
    /// The collector configuration revision the gateway's collector knows, as it reported it
    /// (`tracehouse_build_info`; 1 for a collector from before that metric), read when the
    /// gateway runs an image other than the operator's default (`collectorImage`). Settings
    /// of a later revision are left out of its configuration and named on `ConfigApplied`.
    /// Absent: the operator's own image, or not read yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector_config_revision: Option<i64>,
}

/// The consumer group's position, from the brokers: committed offsets against end offsets,
/// and the write time of the oldest record not yet committed.
///
/// A time, not an age: it stays put while nothing is consumed (so a stuck pipeline does not
/// rewrite its status every reconcile), and `kubectl get` shows it as an age (the `Behind`
/// column).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LagStatus {
    /// Records produced to the topics and not yet committed by the group, summed over the
    /// partitions.
    pub records: i64,
    /// Partitions with records not yet committed.
    pub partitions_behind: i32,
    /// Timestamp of the oldest record not yet committed (the record at the group's
    /// committed offset, as the brokers hold it); absent when nothing is behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_unconsumed_time: Option<Time>,
}

impl TracePipeline {
    /// The consumer group: the spec's, or `tracehouse.<namespace>.<name>`.
    pub fn consumer_group(&self) -> String {
        self.spec.kafka.consumer_group.clone().unwrap_or_else(|| {
            format!(
                "tracehouse.{}.{}",
                self.metadata.namespace.as_deref().unwrap_or("default"),
                self.metadata.name.as_deref().unwrap_or("")
            )
        })
    }
}

/// Header of the generated CRD file.
pub const GENERATED_HEADER: &str =
    "# Generated from operator/src/crd/ by `operator/gen-crds` — do not edit.\n";

/// Longest pipeline name: the gateway's objects are named `<name>-collector[-metrics]`,
/// and a Service name is a DNS-1035 label of at most 63 characters.
pub const MAX_NAME_LEN: usize = 40;

/// Name of the CustomResourceDefinition object.
pub const CRD_NAME: &str = "tracepipelines.tracehouse.dev";

/// The CustomResourceDefinition as committed and applied: [`crd_unrevised`] with its revision
/// written on it (`tracehouse.dev/crd-revision`, [`revision`]).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = crd_unrevised();
    let number = revision::revision_of(&revision::fingerprint(&crd));
    crd.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(revision::ANNOTATION.to_owned(), number.to_string());
    crd
}

/// This build's CRD revision.
pub fn crd_revision() -> u32 {
    revision::revision_of(&revision::fingerprint(&crd_unrevised()))
}

/// The CustomResourceDefinition, with the constraints on `metadata.name` the derive cannot
/// express (a CRD may restrict `metadata.name`, and nothing else of `metadata`); without the
/// revision annotation, which is computed from this.
pub fn crd_unrevised() -> CustomResourceDefinition {
    let mut crd = TracePipeline::crd();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let name = JSONSchemaProps {
            type_: Some("string".to_owned()),
            description: Some(format!(
                "A DNS-1035 label of at most {MAX_NAME_LEN} characters: the gateway's \
                 Deployment and Service are named after it."
            )),
            max_length: Some(MAX_NAME_LEN as i64),
            pattern: Some("^[a-z]([-a-z0-9]*[a-z0-9])?$".to_owned()),
            ..Default::default()
        };
        schema.properties.get_or_insert_with(BTreeMap::new).insert(
            "metadata".to_owned(),
            JSONSchemaProps {
                type_: Some("object".to_owned()),
                properties: Some(BTreeMap::from([("name".to_owned(), name)])),
                ..Default::default()
            },
        );
    }
    crd
}

/// The CRD as committed in `crds/tracepipelines.yaml`.
pub fn crd_yaml() -> String {
    let body = tracehouse_contract::yaml::to_string(&crd()).expect("a CRD always serializes");
    format!("{GENERATED_HEADER}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_has_the_names_subresources_and_columns_users_rely_on() {
        let crd = crd();
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&["tp".to_owned()][..])
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        let sub = v.subresources.as_ref().unwrap();
        assert!(sub.status.is_some());
        let scale = sub.scale.as_ref().unwrap();
        assert_eq!(scale.spec_replicas_path, ".spec.replicas.count");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        let columns: Vec<&str> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        for c in ["Partitions", "Replicas", "Schema", "Ready", "Age"] {
            assert!(columns.contains(&c), "{c} missing from {columns:?}");
        }
    }

    #[test]
    fn every_cel_rule_message_names_a_spec_field() {
        let crd = serde_json::to_value(crd()).unwrap();
        let mut rules = Vec::new();
        collect_rules(&crd, &mut rules);
        assert!(rules.len() >= 6, "{rules:?}");
        for (rule, message) in rules {
            assert!(message.starts_with("spec."), "{rule}: {message}");
        }
    }

    fn collect_rules(v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::Array(rules)) = m.get("x-kubernetes-validations") {
                    for r in rules {
                        out.push((
                            r["rule"].as_str().unwrap_or_default().to_owned(),
                            r["message"].as_str().unwrap_or_default().to_owned(),
                        ));
                    }
                }
                m.values().for_each(|v| collect_rules(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| collect_rules(v, out)),
            _ => {}
        }
    }

    #[test]
    fn a_minimal_spec_gets_every_default() {
        let tp: TracePipelineSpec = serde_json::from_value(serde_json::json!({
            "kafka": { "bootstrapServers": "k:9092" },
            "clickhouse": { "endpoint": "http://ch:8123" }
        }))
        .unwrap();
        assert_eq!(tp.kafka.topics, ["otlp_spans"]);
        assert_eq!(tp.clickhouse.database, "otel");
        assert_eq!(tp.clickhouse.table, "otel_traces");
        assert_eq!(tp.replicas, ReplicasSpec::default());
        assert_eq!(tp.collector, CollectorSpec::default());
        assert!(!tp.paused);
    }
}

#[cfg(test)]
mod generated {
    /// The committed CRD is what the types generate (like `operator/gen-crds --check`).
    #[test]
    fn committed_crd_yaml_is_up_to_date() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/tracepipelines.yaml");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == super::crd_yaml(),
            "crds/tracepipelines.yaml is stale: run `operator/gen-crds` and commit"
        );
    }
}
