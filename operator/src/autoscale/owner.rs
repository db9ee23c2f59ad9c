//! Who sets the gateway's replica count — exactly one owner at any time, read from the spec
//! alone — and the window of samples the autoscaler keeps between reconciles.
//!
//! The owners, first match wins:
//! 1. `spec.replicas.count` is set → the **scale subresource** (`kubectl scale tp`, an HPA,
//!    KEDA) owns the count; the operator applies it (capped by the partitions) and, with
//!    `spec.autoscaling`, only reports the lag it measures;
//! 2. `spec.autoscaling` is set → the **autoscaler** ([`super::decide()`]);
//! 3. otherwise → the **partitions**: `ceil(partitions / partitionsPerReplica)` in
//!    `[min, max]` (`crate::builders::desired_replicas`).
//!
//! The operator is the only writer of the Deployment's `replicas` in every case: an external
//! autoscaler scales the TracePipeline, never the Deployment, so nothing fights over it.

use std::collections::VecDeque;

use k8s_openapi::jiff::Timestamp;

use super::decide::{Decision, Hold, Reason};
use super::sample::Sample;
use crate::crd::{AutoscalingSpec, TracePipelineSpec};

/// Who decides how many replicas run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// `spec.replicas.count`, written through the scale subresource or by hand.
    ScaleSubresource { replicas: i32 },
    /// The lag-and-memory autoscaler.
    Autoscaler,
    /// The partition count alone.
    Partitions,
}

impl Owner {
    pub fn of(spec: &TracePipelineSpec) -> Self {
        match (spec.replicas.count, &spec.autoscaling) {
            (Some(replicas), _) => Self::ScaleSubresource { replicas },
            (None, Some(_)) => Self::Autoscaler,
            (None, None) => Self::Partitions,
        }
    }
}

/// `decision` as a report only: the scale subresource's `replicas` (capped by the
/// `partitions`) stand, whatever the autoscaler would have done; its signals are kept.
pub fn report_only(decision: Decision, replicas: i32, partitions: i32) -> Decision {
    let replicas = u32::try_from(replicas.min(partitions).max(0)).unwrap_or(0);
    Decision {
        replicas,
        reason: Reason::Hold(Hold::ScaleSubresource { replicas }),
        ..decision
    }
}

/// The samples one pipeline's decisions read, oldest first, reaching back as far as a
/// decision looks: the stabilization window plus a lookback behind its oldest sample.
#[derive(Debug, Clone, Default)]
pub struct Window {
    samples: VecDeque<Sample>,
}

impl Window {
    /// Seconds of samples a decision under `spec` reads.
    pub fn horizon_seconds(spec: &AutoscalingSpec) -> i64 {
        i64::from(spec.scale_down_stabilization_seconds.max(0))
            + i64::from(spec.lookback_seconds.max(1))
    }

    /// Adds `sample` and forgets what fell out of the horizon. A sample older than the
    /// newest (a clock step back) replaces the window: rates across it would be nonsense.
    pub fn push(&mut self, sample: Sample, spec: &AutoscalingSpec) {
        if self.samples.back().is_some_and(|b| b.at >= sample.at) {
            self.samples.clear();
        }
        let horizon = Self::horizon_seconds(spec);
        let at = sample.at;
        self.samples.push_back(sample);
        while self
            .samples
            .front()
            .is_some_and(|f| at.duration_since(f.at).as_secs() > horizon)
        {
            self.samples.pop_front();
        }
    }

    /// Contiguous samples for [`super::decide()`].
    pub fn contiguous(&mut self) -> &[Sample] {
        self.samples.make_contiguous()
    }

    pub fn newest(&self) -> Option<Timestamp> {
        self.samples.back().map(|o| o.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscale::decide::Signals;
    use crate::crd::ReplicasSpec;

    fn spec(count: Option<i32>, autoscaling: bool) -> TracePipelineSpec {
        let mut s = crate::crd::fixtures::sample().spec;
        s.replicas = ReplicasSpec {
            count,
            ..Default::default()
        };
        s.autoscaling = autoscaling.then(AutoscalingSpec::default);
        s
    }

    #[test]
    fn exactly_one_owner_for_every_combination_of_fields() {
        assert_eq!(
            Owner::of(&spec(Some(3), true)),
            Owner::ScaleSubresource { replicas: 3 }
        );
        assert_eq!(
            Owner::of(&spec(Some(0), false)),
            Owner::ScaleSubresource { replicas: 0 }
        );
        assert_eq!(Owner::of(&spec(None, true)), Owner::Autoscaler);
        assert_eq!(Owner::of(&spec(None, false)), Owner::Partitions);
    }

    #[test]
    fn a_report_keeps_the_signals_and_the_subresource_count_capped_by_partitions() {
        let d = Decision {
            from: 2,
            replicas: 4,
            reason: Reason::Steady,
            signals: Some(Signals {
                lag_records: 17,
                ..Default::default()
            }),
        };
        let r = report_only(d.clone(), 12, 8);
        assert_eq!(r.replicas, 8);
        assert_eq!(r.from, 2);
        assert_eq!(r.signals, d.signals);
        assert_eq!(r.reason.reason(), "ScaleSubresource");
        assert_eq!(report_only(d, -1, 8).replicas, 0);
    }

    fn sample(secs: i64) -> Sample {
        Sample {
            at: Timestamp::from_second(1_800_000_000 + secs).unwrap(),
            partitions: vec![],
            pods: vec![],
        }
    }

    #[test]
    fn the_window_keeps_the_stabilization_window_plus_one_lookback() {
        let spec = AutoscalingSpec {
            lookback_seconds: 20,
            scale_down_stabilization_seconds: 60,
            ..Default::default()
        };
        let mut w = Window::default();
        for t in (0..=200).step_by(5) {
            w.push(sample(t), &spec);
        }
        let first = w.contiguous()[0].at;
        assert_eq!(first, sample(120).at, "200 - (60 + 20)");
        assert_eq!(w.contiguous().len(), 17);
        assert_eq!(w.newest(), Some(sample(200).at));
    }

    #[test]
    fn a_clock_step_back_starts_the_window_again() {
        let spec = AutoscalingSpec::default();
        let mut w = Window::default();
        w.push(sample(10), &spec);
        w.push(sample(20), &spec);
        w.push(sample(15), &spec);
        assert_eq!(w.contiguous().len(), 1);
        assert_eq!(w.newest(), Some(sample(15).at));
    }
}
