//! Autoscaling the gateway on time lag and memory: a pure core, unit-tested, inside a thin IO
//! shell.
//!
//! - The core, pure: who owns the replica count ([`owner`], with the window of samples a
//!   decision reads), the partition ladder ([`ladder`]), one [`Sample`] and the rates two of
//!   them give ([`sample`]), a collector's /metrics text read ([`scrape`]), the decision
//!   ([`decide()`], and its [`reason`]s) and the `status.autoscaling` it leaves ([`report`]).
//!   What a user writes and reads (`spec.autoscaling`, `status.autoscaling`) is the
//!   resource's: [`crate::crd::AutoscalingSpec`], [`crate::crd::AutoscalingStatus`].
//! - The shell, IO: [`sampler`] makes the samples from what the reconcile read once (the
//!   group's offsets, the gateway's pods) and each ready pod's /metrics; [`sizing`] is the
//!   reconcile's sizing step around the core (the window per pipeline, the decision, its
//!   `status.autoscaling`, Event and metric). Applying the count is the reconcile's job.
//!
//! **The step rule.** The gateway only ever runs a rung of the partition ladder
//! ([`ladder`]): for P partitions, the fewest replicas for each number of partitions the
//! busiest replica holds (`ceil(P/k)`), leaving out an uneven split when the next even one (a
//! divisor of P) is one replica more; `min` and `max` are rungs too, and nothing is above P.
//! 8 partitions: 1, 2, 4, 8. 10: 1, 2, 3, 5, 10. 7: 1, 2, 3, 4, 7. Why: a group keeps up only
//! as fast as its busiest member, so k replicas are worth `P / ceil(P/k)`: counts between
//! rungs add pods and a rebalance and no throughput, and an uneven split one pod short of an
//! even one is not worth its imbalance (nor the extra rebalance of stopping there). A prime
//! partition count still gets steps between 1 and P. One step moves at most `maxStep` rungs.
//!
//! **The decision** ([`decide()`]), from a window of [`Sample`]s (Kafka offsets per
//! partition, each pod's /metrics), in order:
//! 1. outside `[min, max]` or above the partitions → back inside at once (`OutOfBounds`);
//! 2. hold — don't guess — when the newest sample is older than half the lookback
//!    (`StaleMetrics`), there is no rate yet (`TooFewSamples`), a pod is not ready or the pods
//!    are not the replica count (`PodNotReady`), a pod's /metrics is missing
//!    (`MetricsMissing`), or the last step is within `cooldownSeconds` (`Cooldown`);
//! 3. up when the lag is above `targetLagSeconds`: the load needs
//!    `max(incoming, backlog / target) / capacity` replicas' worth — keep up, and drain the
//!    backlog within the target — where the capacity is what one replica's worth committed
//!    while the group had more work than it could take (the median over the lookback's busy
//!    intervals, else the last measurement, kept in the status). The fitting rung, at most
//!    `maxStep` rungs up (`LagAboveTarget`); none when the current count already drains the
//!    backlog in time (`Steady`), and never a scale-in while behind. Behind with nothing
//!    committed holds (`NotConsuming`: the sink is stuck, more consumers would not move it);
//! 4. one rung up, whatever the lag, when a pod's resident memory reaches
//!    `memoryHighWaterPercent` of its limit, or its in-flight bytes `inflightHighWaterPercent`
//!    of the budget (`MemoryPressure`); at the top, `AtMaximum` says what wanted more;
//! 5. after partitions were added, an off-ladder count moves to the new ladder's rung for the
//!    window's peak need (`PartitionsChanged`) — Kafka has just rebalanced the group anyway;
//! 6. down only to a rung that would run at most [`SCALE_IN_UTILIZATION`] busy at the
//!    *highest* need of every sample in the last `scaleDownStabilizationSeconds` (the HPA's
//!    rule), with samples reaching back that far (`LoadDeclined`, else `Stabilizing`), and
//!    not when a pod's memory in that window, with its in-flight bytes grown to the lower
//!    rung's load, would cross the high-water mark (`MemoryHeadroom`). Without a measured
//!    capacity there is no scale-in (`CapacityUnknown`) unless the whole window was idle:
//!    nothing arrived and nothing was behind (`Idle`). Scale-out triggers on the lag target,
//!    scale-in on 80 % of a lower rung: the gap is the hysteresis.
//!
//! The decision carries the numbers behind it ([`Signals`], and each [`Reason`] its own) for
//! the status, the `ScaledUp`/`ScaledDown` Events and the decision metrics; [`report`] turns it
//! into `status.autoscaling`, which is also the autoscaler's memory ([`History`]).

pub mod decide;
pub mod ladder;
pub mod owner;
pub mod reason;
pub mod report;
pub mod sample;
pub mod sampler;
pub mod scrape;
pub mod sizing;

#[cfg(test)]
mod decide_tests;
#[cfg(test)]
mod gateway_model;

pub use decide::{
    Decision, History, Hold, MemoryKind, Reason, SCALE_IN_UTILIZATION, Signals, decide,
};
pub use ladder::Ladder;
pub use owner::{Owner, Window};
pub use sample::{PodMetrics, PodSample, Sample};
pub use sampler::PodMetricsSource;
pub use sizing::{Autoscaler, Seen, Sizing};
