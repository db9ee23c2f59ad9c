//! Why a decision keeps or changes the replica count: the reasons, with the numbers behind
//! each, as the Event text (`Display`), a CamelCase Event reason and a metric label.

use std::fmt;

/// Which memory signal crossed its high-water mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Resident memory against the container's memory limit.
    Resident,
    /// In-flight bytes against the collector's in-flight budget.
    Inflight,
}

/// Why the count stays what it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Hold {
    /// The topics have no partitions (yet).
    NoPartitions,
    /// The newest sample is older than half the lookback.
    StaleMetrics { age_seconds: f64 },
    /// Fewer than two samples within the lookback: no rate yet.
    TooFewSamples { samples: usize },
    /// A pod's /metrics could not be read.
    MetricsMissing { pod: String },
    /// A pod is not ready, or the pods are not the replica count: a rollout, a restart or a
    /// scale is under way, and the numbers describe a gateway in motion.
    PodNotReady {
        ready: u32,
        pods: u32,
        replicas: u32,
    },
    /// Within `cooldownSeconds` of the last step.
    Cooldown { remaining_seconds: f64 },
    /// The load needs fewer replicas now, but not over the whole stabilization window.
    Stabilizing { need: f64, peak_need: f64 },
    /// A lower rung would put a pod back above its memory high-water mark.
    MemoryHeadroom { projected_percent: f64 },
    /// The lag is above target but nothing is being committed: the sink is stuck, and more
    /// consumers would not move it.
    NotConsuming { lag_records: i64 },
    /// Fewer replicas might do, but a replica's capacity was never measured (the gateway has
    /// not had a backlog to measure it against).
    CapacityUnknown,
    /// More replicas are wanted (`wanted`, with its numbers), but the count is at `max` or
    /// the partition count.
    AtMaximum { replicas: u32, wanted: Box<Reason> },
    /// `spec.replicas.count` is set: the scale subresource (kubectl scale, an HPA, KEDA)
    /// owns the count, and the autoscaler only reports what it measures.
    ScaleSubresource { replicas: u32 },
}

/// Why the decision is what it is; each carries the numbers behind it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The lag is above target: enough replicas to keep up and drain the backlog in time.
    LagAboveTarget {
        lag_seconds: f64,
        lag_records: i64,
        target_seconds: u32,
        incoming_records_per_second: f64,
        need: f64,
        replica_capacity: f64,
    },
    /// A pod crossed the memory high-water mark: one rung up, whatever the lag.
    MemoryPressure {
        pod: String,
        kind: MemoryKind,
        used_bytes: u64,
        limit_bytes: u64,
        high_water_percent: u32,
    },
    /// The load has needed fewer replicas for the whole stabilization window.
    LoadDeclined {
        peak_need: f64,
        window_seconds: u32,
        replica_capacity: f64,
    },
    /// Nothing arrived and nothing was behind for the whole stabilization window: the lowest
    /// rung, with or without a measured capacity (no load needs no capacity to size).
    Idle { window_seconds: u32 },
    /// The partition count changed and the current count is no rung of the new ladder.
    PartitionsChanged { from: u32, to: u32, need: f64 },
    /// The count is outside `[min, max]` or above the partitions: back inside at once.
    OutOfBounds { min: u32, max: u32 },
    /// The count fits the load.
    Steady,
    /// No change, for this reason.
    Hold(Hold),
}

impl Reason {
    /// CamelCase, for the status and the Event.
    pub fn reason(&self) -> &'static str {
        self.names().0
    }

    /// Label of the decision metric (`reason`): the same name in snake_case.
    pub fn metric_label(&self) -> &'static str {
        self.names().1
    }

    fn names(&self) -> (&'static str, &'static str) {
        match self {
            Self::LagAboveTarget { .. } => ("LagAboveTarget", "lag_above_target"),
            Self::MemoryPressure { .. } => ("MemoryPressure", "memory_pressure"),
            Self::LoadDeclined { .. } => ("LoadDeclined", "load_declined"),
            Self::Idle { .. } => ("Idle", "idle"),
            Self::PartitionsChanged { .. } => ("PartitionsChanged", "partitions_changed"),
            Self::OutOfBounds { .. } => ("OutOfBounds", "out_of_bounds"),
            Self::Steady => ("Steady", "steady"),
            Self::Hold(h) => match h {
                Hold::NoPartitions => ("NoPartitions", "no_partitions"),
                Hold::StaleMetrics { .. } => ("StaleMetrics", "stale_metrics"),
                Hold::TooFewSamples { .. } => ("TooFewSamples", "too_few_samples"),
                Hold::MetricsMissing { .. } => ("MetricsMissing", "metrics_missing"),
                Hold::PodNotReady { .. } => ("PodNotReady", "pod_not_ready"),
                Hold::Cooldown { .. } => ("Cooldown", "cooldown"),
                Hold::Stabilizing { .. } => ("Stabilizing", "stabilizing"),
                Hold::MemoryHeadroom { .. } => ("MemoryHeadroom", "memory_headroom"),
                Hold::NotConsuming { .. } => ("NotConsuming", "not_consuming"),
                Hold::CapacityUnknown => ("CapacityUnknown", "capacity_unknown"),
                Hold::AtMaximum { .. } => ("AtMaximum", "at_maximum"),
                Hold::ScaleSubresource { .. } => ("ScaleSubresource", "scale_subresource"),
            },
        }
    }
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LagAboveTarget {
                lag_seconds,
                lag_records,
                target_seconds,
                incoming_records_per_second,
                need,
                replica_capacity,
            } => write!(
                f,
                "lag {lag_seconds:.0}s ({lag_records} records) above the {target_seconds}s \
                 target: {incoming_records_per_second:.0} records/s incoming and the backlog \
                 need {need:.2} replicas at {replica_capacity:.0} records/s each"
            ),
            Self::MemoryPressure {
                pod,
                kind,
                used_bytes,
                limit_bytes,
                high_water_percent,
            } => {
                let what = match kind {
                    MemoryKind::Resident => "resident memory",
                    MemoryKind::Inflight => "in-flight bytes",
                };
                write!(
                    f,
                    "{pod}: {what} {} MiB of {} MiB, above the {high_water_percent}% high-water mark",
                    mib(*used_bytes),
                    mib(*limit_bytes)
                )
            }
            Self::LoadDeclined {
                peak_need,
                window_seconds,
                replica_capacity,
            } => write!(
                f,
                "the load needed at most {peak_need:.2} replicas at {replica_capacity:.0} \
                 records/s each over the last {window_seconds}s"
            ),
            Self::Idle { window_seconds } => write!(
                f,
                "nothing arrived and nothing was behind over the last {window_seconds}s"
            ),
            Self::PartitionsChanged { from, to, need } => write!(
                f,
                "partitions went from {from} to {to}; the load needs {need:.2} replicas"
            ),
            Self::OutOfBounds { min, max } => write!(
                f,
                "outside [{min}, {max}] (spec.autoscaling min and max, capped by the partitions)"
            ),
            Self::Steady => f.write_str("the replica count fits the load"),
            Self::Hold(h) => match h {
                Hold::NoPartitions => f.write_str("the topics have no partitions"),
                Hold::StaleMetrics { age_seconds } => {
                    write!(f, "newest sample is {age_seconds:.0}s old: holding")
                }
                Hold::TooFewSamples { samples } => write!(
                    f,
                    "{samples} sample(s) within the lookback, two are needed for a rate: holding"
                ),
                Hold::MetricsMissing { pod } => {
                    write!(f, "no metrics from {pod}: holding")
                }
                Hold::PodNotReady {
                    ready,
                    pods,
                    replicas,
                } => write!(
                    f,
                    "{ready} of {pods} pods ready for {replicas} replicas: holding"
                ),
                Hold::Cooldown { remaining_seconds } => write!(
                    f,
                    "cooling down after the last step for {remaining_seconds:.0}s more"
                ),
                Hold::Stabilizing { need, peak_need } => write!(
                    f,
                    "the load needs {need:.2} replicas now but needed {peak_need:.2} within the \
                     stabilization window"
                ),
                Hold::MemoryHeadroom { projected_percent } => write!(
                    f,
                    "fewer replicas would put a pod at about {projected_percent:.0}% of its \
                     memory limit"
                ),
                Hold::NotConsuming { lag_records } => write!(
                    f,
                    "{lag_records} records behind and nothing committed: the sink is stuck, more \
                     replicas would not help"
                ),
                Hold::CapacityUnknown => f.write_str(
                    "a replica's capacity has not been measured yet (no backlog seen): holding",
                ),
                Hold::AtMaximum { replicas, wanted } => {
                    write!(f, "{wanted}; but {replicas} is the most allowed")
                }
                Hold::ScaleSubresource { replicas } => write!(
                    f,
                    "spec.replicas.count sets {replicas} replicas (the scale subresource owns \
                     the count): reporting only"
                ),
            },
        }
    }
}
