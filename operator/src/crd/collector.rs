//! `spec.collector` and `spec.replicas`: the gateway's pods (image, resources, placement,
//! batching and memory limits, as the collector's own configuration names them) and how
//! many of them run.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements,
    SecurityContext, Toleration, TopologySpreadConstraint,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tracehouse_contract::config::{BatchConfig, ClickHouseConfig, LimitsConfig};

use super::ByteSize;

/// The gateway collector pods.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// Byte sizes are integers or quantities (`ByteSize`); the rules read both forms.
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(type(self.maxInflightBytes) == string ? quantity(string(self.maxInflightBytes)).asInteger() : int(self.maxInflightBytes)) >= (type(self.batch.maxBytes) == string ? quantity(string(self.batch.maxBytes)).asInteger() : int(self.batch.maxBytes)) + (type(self.maxRecordBytes) == string ? quantity(string(self.maxRecordBytes)).asInteger() : int(self.maxRecordBytes))",
    "message": "spec.collector.maxInflightBytes must be at least spec.collector.batch.maxBytes + spec.collector.maxRecordBytes (one full batch plus one record)",
    "fieldPath": ".maxInflightBytes"
}, {
    "rule": "(type(self.maxInflightBytes) == int || isQuantity(string(self.maxInflightBytes))) && (type(self.maxInflightBytes) == string ? quantity(string(self.maxInflightBytes)).asInteger() : int(self.maxInflightBytes)) >= 1 && (type(self.maxInflightBytes) == string ? quantity(string(self.maxInflightBytes)).asInteger() : int(self.maxInflightBytes)) <= 68719476736",
    "message": "spec.collector.maxInflightBytes must be an integer or a quantity (512Mi) between 1 byte and 64Gi",
    "fieldPath": ".maxInflightBytes"
}, {
    "rule": "(type(self.maxRecordBytes) == int || isQuantity(string(self.maxRecordBytes))) && (type(self.maxRecordBytes) == string ? quantity(string(self.maxRecordBytes)).asInteger() : int(self.maxRecordBytes)) >= 1 && (type(self.maxRecordBytes) == string ? quantity(string(self.maxRecordBytes)).asInteger() : int(self.maxRecordBytes)) <= 68719476736",
    "message": "spec.collector.maxRecordBytes must be an integer or a quantity (512Mi) between 1 byte and 64Gi",
    "fieldPath": ".maxRecordBytes"
}]))]
pub struct CollectorSpec {
    /// Collector image. Default: `tracehouse/collector:<operator version>`, so upgrading the
    /// operator upgrades the collectors it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// `Always`, `IfNotPresent` or `Never` (default: Kubernetes' rule for the tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// CPU and memory of each collector. Default: the chart's `collector.resources`, else
    /// requests 500m CPU and 512Mi, limit 1Gi memory; keep the memory limit well above
    /// `maxInflightBytes`. A CPU limit also sizes the collector's encoder threads (one per
    /// CPU of the quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Security context of the gateway pods, replacing the default as a whole. Default: the
    /// chart's `collector.podSecurityContext`, else non-root as the image's user (`runAsUser`
    /// and `runAsGroup` 65532) with the `RuntimeDefault` seccomp profile. On OpenShift's
    /// `restricted-v2` SCC, which assigns each namespace a UID range and refuses any other,
    /// leave `runAsUser`, `runAsGroup` and `fsGroup` out:
    /// `{runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    /// Security context of the collector container, replacing the default as a whole.
    /// Default: the chart's `collector.securityContext`, else no privilege escalation, a
    /// read-only root filesystem, non-root and every capability dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// When a batch is closed and inserted.
    #[serde(default)]
    pub batch: BatchSpec,
    /// Record bytes one collector holds (batching, encoding, inserting) before it pauses
    /// its partitions: the in-flight budget that bounds its memory.
    #[serde(default = "default_max_inflight_bytes")]
    pub max_inflight_bytes: ByteSize,
    /// Larger records are skipped as oversized (and dead-lettered when configured).
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: ByteSize,
    /// Inserts one collector runs at once.
    #[serde(default = "default_max_inflight_inserts")]
    #[schemars(range(min = 1, max = 256))]
    pub max_inflight_inserts: i32,
    /// Log filter of the collector (`RUST_LOG` syntax), e.g. `info` or `debug`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub log_level: Option<String>,
    /// Extra environment variables of the collector container; later entries win over the
    /// operator's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Whether a gateway on the default image (no `image` set) follows the operator's:
    /// `Auto` rolls it to the new default on an operator upgrade; `Manual` keeps the image it
    /// runs (`status.collectorImage`) until this is `Auto` again or `image` is set. Default:
    /// the chart's `collector.upgradePolicy` (`Auto` unless changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_policy: Option<UpgradePolicy>,
    /// Secrets to pull the collector image with. Default: the chart's
    /// `collector.imagePullSecrets`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Service account of the gateway pods (e.g. for workload identity). Default: the
    /// chart's `collector.serviceAccountName`, else the namespace's `default`. Its token is
    /// not mounted: the collector never calls the Kubernetes API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// Node labels the gateway pods require; merged over the chart's
    /// `collector.nodeSelector` (these win).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the gateway pods. Default: the chart's `collector.tolerations`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity of the gateway pods. Default: the chart's `collector.affinity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// How the gateway pods spread. Default: the chart's
    /// `collector.topologySpreadConstraints`, else one pod per zone and per node as far as
    /// possible (`ScheduleAnyway`, so it never blocks scheduling). `[]` turns spreading off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// Priority class of the gateway pods. Default: the chart's `collector.priorityClassName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Extra annotations of the gateway pods; merged over the chart's
    /// `collector.podAnnotations` (these win; the operator's own keys win over both).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
    /// Extra labels of the gateway pods; merged over the chart's `collector.podLabels` (these
    /// win; the operator's own labels win over both).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
}

/// Whether a gateway on the default image follows the operator's upgrades.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpgradePolicy {
    /// Roll to the operator's default collector image when it changes.
    Auto,
    /// Keep the image the gateway runs; `status.collectorUpgrade` names the newer default.
    Manual,
}

impl Default for CollectorSpec {
    fn default() -> Self {
        Self {
            image: None,
            image_pull_policy: None,
            resources: None,
            pod_security_context: None,
            security_context: None,
            batch: BatchSpec::default(),
            max_inflight_bytes: default_max_inflight_bytes(),
            max_record_bytes: default_max_record_bytes(),
            max_inflight_inserts: default_max_inflight_inserts(),
            log_level: None,
            env: Vec::new(),
            upgrade_policy: None,
            image_pull_secrets: Vec::new(),
            service_account_name: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            affinity: None,
            topology_spread_constraints: None,
            priority_class_name: None,
            pod_annotations: BTreeMap::new(),
            pod_labels: BTreeMap::new(),
        }
    }
}

/// Upper bound of every byte size in the spec (64 GiB): keeps the CEL sums far from overflow.
/// The CEL rules spell it out (68719476736).
pub const MAX_BYTES: i64 = 64 << 30;

/// The collector image this operator release runs by default, unless the chart's
/// `collector.image` says otherwise (`crate::defaults`).
pub fn default_image() -> String {
    format!("tracehouse/collector:{}", env!("CARGO_PKG_VERSION"))
}

fn to_i64(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn default_max_inflight_bytes() -> ByteSize {
    to_i64(LimitsConfig::default().max_inflight_bytes).into()
}

fn default_max_record_bytes() -> ByteSize {
    to_i64(LimitsConfig::default().max_record_bytes).into()
}

fn default_max_inflight_inserts() -> i32 {
    i32::try_from(ClickHouseConfig::default().max_inflight_inserts).unwrap_or(4)
}

/// Image pull policy.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

/// When a batch is closed: whichever limit is reached first.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(type(self.maxBytes) == int || isQuantity(string(self.maxBytes))) && (type(self.maxBytes) == string ? quantity(string(self.maxBytes)).asInteger() : int(self.maxBytes)) >= 1 && (type(self.maxBytes) == string ? quantity(string(self.maxBytes)).asInteger() : int(self.maxBytes)) <= 68719476736",
    "message": "spec.collector.batch.maxBytes must be an integer or a quantity (512Mi) between 1 byte and 64Gi",
    "fieldPath": ".maxBytes"
}]))]
pub struct BatchSpec {
    /// Close a batch when its records' payloads reach this many bytes.
    #[serde(default = "default_batch_max_bytes")]
    pub max_bytes: ByteSize,
    /// … or when it holds this many records.
    #[serde(default = "default_batch_max_records")]
    #[schemars(range(min = 1, max = 100_000_000))]
    pub max_records: i64,
    /// … or when its oldest record has waited this many milliseconds.
    #[serde(default = "default_batch_linger_ms")]
    #[schemars(range(min = 0, max = 600_000))]
    pub linger_ms: i64,
}

impl Default for BatchSpec {
    fn default() -> Self {
        Self {
            max_bytes: default_batch_max_bytes(),
            max_records: default_batch_max_records(),
            linger_ms: default_batch_linger_ms(),
        }
    }
}

fn default_batch_max_bytes() -> ByteSize {
    to_i64(BatchConfig::default().max_bytes).into()
}

fn default_batch_max_records() -> i64 {
    to_i64(BatchConfig::default().max_records)
}

fn default_batch_linger_ms() -> i64 {
    i64::try_from(BatchConfig::default().linger_ms).unwrap_or(1_000)
}

/// Gateway size, never more replicas than partitions (an extra consumer would sit idle). One
/// owner sets it: `count` when it is set (the scale subresource: `kubectl scale tp`, an HPA or
/// KEDA), else `spec.autoscaling` when it is set, else `ceil(partitions /
/// partitionsPerReplica)` clamped to `[min, max]`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.max >= self.min",
    "message": "spec.replicas.max must be greater than or equal to spec.replicas.min",
    "fieldPath": ".max"
}]))]
pub struct ReplicasSpec {
    /// Partitions each collector consumes.
    #[serde(default = "default_partitions_per_replica")]
    #[schemars(range(min = 1, max = 10_000))]
    pub partitions_per_replica: i32,
    /// Exactly this many replicas (capped by the partition count), whatever the partitions
    /// and `spec.autoscaling` say. This is the field the scale subresource reads and writes:
    /// set it, or `kubectl scale tp`, to hand the count to an HPA or KEDA; the operator then
    /// only reports the lag (`status.autoscaling`). Remove it to give the count back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10_000))]
    pub count: Option<i32>,
    /// Fewest replicas when sized by partitions (still capped by the partition count).
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 1, max = 10_000))]
    pub min: i32,
    /// Most replicas.
    #[serde(default = "default_max_replicas")]
    #[schemars(range(min = 1, max = 10_000))]
    pub max: i32,
}

impl Default for ReplicasSpec {
    fn default() -> Self {
        Self {
            partitions_per_replica: default_partitions_per_replica(),
            count: None,
            min: default_min_replicas(),
            max: default_max_replicas(),
        }
    }
}

fn default_partitions_per_replica() -> i32 {
    4
}

fn default_min_replicas() -> i32 {
    1
}

fn default_max_replicas() -> i32 {
    10
}
