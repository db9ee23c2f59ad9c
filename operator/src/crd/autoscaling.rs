//! What a user writes under `spec.autoscaling`, and what the operator reports under
//! `status.autoscaling`.
//!
//! Every field has a default that works without tuning; the doc comments are what
//! `kubectl explain tp.spec.autoscaling` shows. Durations are whole seconds and fractions are
//! whole percentages, as Kubernetes APIs keep floats out of specs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Size the gateway from its consumer lag and memory instead of from the partition count
/// alone. The operator reads the consumer group's lag from Kafka and each collector's
/// /metrics, computes the replicas that keep the lag under `targetLagSeconds`, adds replicas
/// when a collector nears its memory limit, and moves only between replica counts that spread
/// the partitions well (see `maxStep`), never more replicas than partitions. Scale-downs
/// wait for `scaleDownStabilizationSeconds` of lower load, and no step follows another within
/// `cooldownSeconds`: each step costs the consumer group a rebalance. `spec.replicas.count`,
/// when set, wins: the scale subresource owns the count and the autoscaler only reports.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.max) || self.max >= self.min",
    "message": "spec.autoscaling.max must be greater than or equal to spec.autoscaling.min",
    "fieldPath": ".max"
}]))]
pub struct AutoscalingSpec {
    /// How far behind the gateway may fall, in seconds: the age of the oldest record not yet
    /// in ClickHouse. Above it the gateway scales out to drain the backlog within this time.
    #[serde(default = "default_target_lag_seconds")]
    #[schemars(range(min = 1, max = 86_400))]
    pub target_lag_seconds: i32,
    /// Fewest replicas (capped by the partition count).
    #[serde(default = "default_min")]
    #[schemars(range(min = 1, max = 10_000))]
    pub min: i32,
    /// Most replicas. Default: the partition count, the most that each get a partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000))]
    pub max: Option<i32>,
    /// Scale out, whatever the lag, when a collector's resident memory reaches this percentage
    /// of its container memory limit.
    #[serde(default = "default_memory_high_water_percent")]
    #[schemars(range(min = 1, max = 100))]
    pub memory_high_water_percent: i32,
    /// Also scale out when a collector's in-flight bytes reach this percentage of
    /// `spec.collector.maxInflightBytes`. Off by default: a full budget is how a collector
    /// holds back when ClickHouse is slow, and more replicas do not make ClickHouse faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub inflight_high_water_percent: Option<i32>,
    /// Seconds of history the incoming and consumed rates are measured over. A decision
    /// needs two samples within it, the newest no older than half of it; otherwise it holds.
    #[serde(default = "default_lookback_seconds")]
    #[schemars(range(min = 10, max = 3_600))]
    pub lookback_seconds: i32,
    /// Scale in only after the load has needed fewer replicas for this many seconds: the
    /// highest need seen over the window decides.
    #[serde(default = "default_scale_down_stabilization_seconds")]
    #[schemars(range(min = 0, max = 86_400))]
    pub scale_down_stabilization_seconds: i32,
    /// Seconds after any scaling step before the next one, while the consumer group
    /// rebalances and the measurements settle.
    #[serde(default = "default_cooldown_seconds")]
    #[schemars(range(min = 0, max = 86_400))]
    pub cooldown_seconds: i32,
    /// Most rungs one step moves, up or down. The rungs are the replica counts worth running
    /// for the partition count: for each number of partitions per replica, the fewest
    /// replicas that reach it, leaving out an uneven split when one more replica makes it
    /// even. With 8 partitions: 1, 2, 4, 8; with 10: 1, 2, 3, 5, 10; with 7: 1, 2, 3, 4, 7.
    #[serde(default = "default_max_step")]
    #[schemars(range(min = 1, max = 100))]
    pub max_step: i32,
}

impl Default for AutoscalingSpec {
    fn default() -> Self {
        Self {
            target_lag_seconds: default_target_lag_seconds(),
            min: default_min(),
            max: None,
            memory_high_water_percent: default_memory_high_water_percent(),
            inflight_high_water_percent: None,
            lookback_seconds: default_lookback_seconds(),
            scale_down_stabilization_seconds: default_scale_down_stabilization_seconds(),
            cooldown_seconds: default_cooldown_seconds(),
            max_step: default_max_step(),
        }
    }
}

fn default_target_lag_seconds() -> i32 {
    30
}

fn default_min() -> i32 {
    1
}

fn default_memory_high_water_percent() -> i32 {
    85
}

fn default_lookback_seconds() -> i32 {
    60
}

/// The HorizontalPodAutoscaler's default scale-down stabilization.
fn default_scale_down_stabilization_seconds() -> i32 {
    300
}

fn default_cooldown_seconds() -> i32 {
    60
}

fn default_max_step() -> i32 {
    2
}

/// What the autoscaler measured and did, for `status.autoscaling`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingStatus {
    /// Records the consumer group is behind, summed over the partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_records: Option<i64>,
    /// Age in seconds of the oldest record not yet in ClickHouse (the largest over the pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<i64>,
    /// Spans per second arriving on the topics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incoming_spans_per_second: Option<i64>,
    /// Records per second one replica consumed while it had a backlog: the capacity the
    /// replica count is computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_records_per_second: Option<i64>,
    /// Replicas the autoscaler wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Replicas running when it decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i32>,
    /// CamelCase reason of the latest decision (`LagAboveTarget`, `Cooldown`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The latest decision with its numbers (what a hold waits for, what wanted more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the autoscaler last changed the replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// CamelCase reason of that change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_reason: Option<String>,
    /// The numbers behind that change, as its Event said them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_autoscaling_block_gets_every_default() {
        let a: AutoscalingSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(a, AutoscalingSpec::default());
        assert_eq!(a.target_lag_seconds, 30);
        assert_eq!(a.min, 1);
        assert_eq!(a.max, None);
        assert_eq!(a.max_step, 2);
        assert_eq!(a.inflight_high_water_percent, None);
    }

    #[test]
    fn fields_are_camel_case() {
        let v = serde_json::to_value(AutoscalingSpec {
            max: Some(8),
            ..Default::default()
        })
        .unwrap();
        for key in [
            "targetLagSeconds",
            "min",
            "max",
            "memoryHighWaterPercent",
            "lookbackSeconds",
            "scaleDownStabilizationSeconds",
            "cooldownSeconds",
            "maxStep",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
    }

    #[test]
    fn the_crd_carries_the_autoscaling_schema_and_its_cel_rule() {
        let crd = serde_json::to_value(crate::crd::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["autoscaling"];
        assert!(
            spec["description"]
                .as_str()
                .unwrap()
                .contains("consumer lag"),
            "{spec}"
        );
        let rules = spec["x-kubernetes-validations"].as_array().unwrap();
        assert_eq!(rules.len(), 1, "{rules:?}");
        assert_eq!(rules[0]["rule"], "!has(self.max) || self.max >= self.min");
        assert_eq!(
            rules[0]["message"],
            "spec.autoscaling.max must be greater than or equal to spec.autoscaling.min"
        );
        assert_eq!(rules[0]["fieldPath"], ".max");
        let props = &spec["properties"];
        assert_eq!(props["targetLagSeconds"]["default"], 30);
        assert_eq!(props["targetLagSeconds"]["minimum"].as_f64(), Some(1.0));
        assert_eq!(props["maxStep"]["minimum"].as_f64(), Some(1.0));
        assert_eq!(
            props["memoryHighWaterPercent"]["maximum"].as_f64(),
            Some(100.0)
        );
        assert!(
            props["maxStep"]["description"]
                .as_str()
                .unwrap()
                .contains("With 8 partitions: 1, 2, 4, 8"),
            "{props}"
        );
    }
}
