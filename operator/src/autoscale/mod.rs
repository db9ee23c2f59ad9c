//! Autoscaling the gateway on time lag and memory (issue 14): the spec, the partition ladder
//! and the decision, pure and unit-tested. Reading the signals, publishing the status and
//! Events and applying the count are the reconcile's job (not wired yet: `spec.replicas`
//! still sizes the gateway).
//!
//! **The step rule.** The gateway only ever runs a rung of the partition ladder
//! ([`ladder`]): for P partitions, the fewest replicas for each number of partitions the
//! busiest replica holds (`ceil(P/k)`), leaving out an uneven split when the next even one (a
//! divisor of P) is one replica more; `min` and `max` are rungs too, and nothing is above P.
//! 8 partitions: 1, 2, 4, 8. 10: 1, 2, 3, 5, 10. 7: 1, 2, 3, 4, 7. Why: a group keeps up only
//! as fast as its busiest member, so k replicas are worth `P / ceil(P/k)` — replicas between
//! rungs add a pod and a rebalance and no throughput, and an even split costs at most one more
//! pod than the uneven one below it. One step moves at most `maxStep` rungs.
//!
//! **The decision** ([`decide`]), from a window of [`Observation`]s (Kafka offsets per
//! partition, each pod's /metrics), in order:
//! 1. outside `[min, max]` or above the partitions → back inside at once (`OutOfBounds`);
//! 2. hold — don't guess — when the newest sample is older than half the lookback
//!    (`StaleMetrics`), there is no rate yet (`TooFewSamples`), a pod is not ready or the pods
//!    are not the replica count (`PodNotReady`), a pod's /metrics is missing
//!    (`MetricsMissing`), or the last step is within `cooldownSeconds` (`Cooldown`);
//! 3. up when the lag is above `targetLagSeconds`: the load needs
//!    `max(incoming, backlog / target) / capacity` replicas' worth — keep up, and drain the
//!    backlog within the target — where the capacity is what one replica's worth committed
//!    while the group had more work than it could take (measured over the lookback, else the
//!    last measurement). The fitting rung, at most `maxStep` rungs up (`LagAboveTarget`).
//!    Lagging with nothing committed holds (`NotConsuming`: the sink is stuck);
//! 4. up one rung, whatever the lag, when a pod's resident memory reaches
//!    `memoryHighWaterPercent` of its limit (or its in-flight bytes
//!    `inflightHighWaterPercent` of the budget) (`MemoryPressure`);
//! 5. down only to a rung that would run at most [`SCALE_IN_UTILIZATION`] busy at the
//!    *highest* need of every sample in the last `scaleDownStabilizationSeconds` (the HPA's
//!    rule), with samples reaching back that far, and not when the projected memory would
//!    cross the high-water mark (`LoadDeclined`, else `Stabilizing` / `MemoryHeadroom`).
//!    Scale-out triggers on the lag, scale-in on 80 % of a lower rung: the gap is the
//!    hysteresis;
//! 6. after partitions were added, an off-ladder count moves to the new ladder
//!    (`PartitionsChanged`).
//!
//! The decision carries the numbers behind it ([`Signals`], and each [`Reason`] its own) for
//! the status, the `ScaledUp`/`ScaledDown` Events and the decision metrics.

pub mod decide;
pub mod ladder;
pub mod observation;
pub mod spec;

#[cfg(test)]
mod decide_tests;

pub use decide::{
    Decision, History, Hold, MemoryKind, Reason, SCALE_IN_UTILIZATION, Signals, decide,
};
pub use ladder::Ladder;
pub use observation::{Observation, PartitionOffsets, PodMetrics, PodSample};
pub use spec::{AutoscalingSpec, AutoscalingStatus};
