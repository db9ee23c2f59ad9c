//! IO shell around the pure core: the reconcile's sizing step. Who owns the replica count
//! ([`Owner`]) → how many replicas the gateway runs; with `spec.autoscaling`, one new sample
//! ([`sampler::sample`], from what the reconcile already read: [`Seen`]) into the pipeline's
//! window, the decision ([`decide()`]), its `status.autoscaling` ([`report`]), its
//! `ScaledUp`/`ScaledDown` Event and its metric. It reads nothing of its own but the pods'
//! /metrics of a due sample, through the reconcile's door.
//!
//! State: the window of samples per pipeline, in memory. What the decisions must remember
//! across operator restarts and leader changes (last step, measured capacity) lives in the
//! status; a new leader only waits one lookback for fresh rates.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::sampler::{self, PodMetricsSource};
use super::{Decision, History, Owner, Window, decide, owner, report};
use crate::crd::{AutoscalingSpec, AutoscalingStatus, TracePipeline};
use crate::error::Error;
use crate::kafka::PartitionOffsets;
use crate::metrics::Metrics;

/// What this reconcile already read, for the autoscaler: nothing is read twice.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// Partitions of the topics, summed.
    pub partitions: i32,
    /// The group's offsets, the read the lag comes from (`None`: it failed).
    pub offsets: Option<&'a [PartitionOffsets]>,
    /// The gateway's pods, the reconcile's one list (`None`: it failed).
    pub pods: Option<&'a [Pod]>,
    /// The live gateway Deployment's replicas (`None`: no Deployment yet), from the
    /// reconcile's one read of it.
    pub current_replicas: Option<i32>,
}

/// What the sizing step settled for one reconcile.
#[derive(Debug, Default)]
pub struct Sizing {
    /// Replicas to run when another owner than the partitions decided; `None`: the
    /// partition count's rule.
    pub replicas: Option<i32>,
    /// The new `status.autoscaling` (`None` clears it).
    pub status: Option<AutoscalingStatus>,
    /// `(ScaledUp|ScaledDown, action, note)` when the autoscaler changed the count; the
    /// action names the step (`Scale1To4`), so every distinct step is an Event of its own.
    pub event: Option<(&'static str, String, String)>,
    /// How soon the next sample is due.
    pub requeue: Option<Duration>,
}

/// Samples are taken about this often: six within a lookback, between 2 and 15 seconds.
pub fn sample_interval(spec: &AutoscalingSpec) -> Duration {
    let secs = f64::from(spec.lookback_seconds.max(1)) / 6.0;
    Duration::from_secs_f64(secs.clamp(2.0, 15.0))
}

/// The autoscaler of every pipeline this operator reconciles.
#[derive(Default)]
pub struct Autoscaler {
    windows: Mutex<HashMap<String, Window>>,
}

impl Autoscaler {
    pub fn new() -> Self {
        Self::default()
    }

    fn windows(&self) -> std::sync::MutexGuard<'_, HashMap<String, Window>> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets a deleted pipeline's samples.
    pub fn forget(&self, key: &str) {
        self.windows().remove(key);
    }

    /// The replicas for `tp` over the partitions of its topics, from what the reconcile saw
    /// (`seen`); the pods' /metrics, when a sample is due, through `source`.
    pub async fn size<S: PodMetricsSource + ?Sized>(
        &self,
        metrics: &Metrics,
        key: &str,
        tp: &TracePipeline,
        seen: Seen<'_>,
        source: &S,
    ) -> Result<Sizing, Error> {
        let partitions = seen.partitions;
        let owner = Owner::of(&tp.spec);
        let Some(spec) = &tp.spec.autoscaling else {
            self.forget(key);
            return Ok(Sizing {
                // `Desired::with_replicas` caps it by the partitions.
                replicas: match owner {
                    Owner::ScaleSubresource { replicas } => Some(replicas),
                    _ => None,
                },
                ..Default::default()
            });
        };
        let interval = sample_interval(spec);
        // One sample per interval, however often the pipeline is reconciled (a status
        // patch triggers a reconcile of its own).
        let due = self
            .windows()
            .get(key)
            .and_then(Window::newest)
            .is_none_or(|t| {
                Timestamp::now().duration_since(t).as_secs_f64() >= interval.as_secs_f64() * 0.8
            });
        if due {
            match (seen.offsets, seen.pods) {
                (Some(offsets), Some(pods)) => {
                    let sample = sampler::sample(source, tp, offsets, pods, Timestamp::now()).await;
                    self.windows()
                        .entry(key.to_owned())
                        .or_default()
                        .push(sample, spec);
                }
                _ => tracing::warn!(
                    pipeline = %key,
                    "autoscaler: no sample (the group's offsets or the gateway's pods could not be read)"
                ),
            }
        }
        let current = seen.current_replicas.unwrap_or(spec.min.max(1));
        let previous = tp
            .status
            .as_ref()
            .and_then(|s| s.autoscaling.clone())
            .unwrap_or_default();
        let history = History::from_status(&previous);
        let now = Timestamp::now();
        let partitions_u = u32::try_from(partitions.max(0)).unwrap_or(0);
        let current_u = u32::try_from(current.max(0)).unwrap_or(0);
        let decision = {
            let mut windows = self.windows();
            let window = windows.entry(key.to_owned()).or_default();
            decide(
                spec,
                window.contiguous(),
                current_u,
                partitions_u,
                &history,
                now,
            )
        };
        let decision = match owner {
            Owner::ScaleSubresource { replicas } => {
                owner::report_only(decision, replicas, partitions)
            }
            _ => decision,
        };
        if due {
            metrics.decided(direction(&decision), decision.reason.metric_label());
        }
        let event = match owner {
            Owner::Autoscaler => decision.event_reason().map(|reason| {
                let action = format!("Scale{}To{}", decision.from, decision.replicas);
                (reason, action, decision.message())
            }),
            _ => None,
        };
        if let Some((reason, _, note)) = &event {
            tracing::info!(pipeline = %key, reason, "{note}");
        }
        Ok(Sizing {
            replicas: i32::try_from(decision.replicas).ok(),
            status: Some(report::status(&previous, &decision, &Time(now))),
            event,
            requeue: Some(interval),
        })
    }
}

fn direction(d: &Decision) -> &'static str {
    match d.replicas.cmp(&d.from) {
        std::cmp::Ordering::Greater => "up",
        std::cmp::Ordering::Less => "down",
        std::cmp::Ordering::Equal => "hold",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_samples_a_lookback_within_two_and_fifteen_seconds() {
        let at = |lookback| {
            sample_interval(&AutoscalingSpec {
                lookback_seconds: lookback,
                ..Default::default()
            })
            .as_secs_f64()
        };
        assert_eq!(at(60), 10.0);
        assert_eq!(at(10), 2.0);
        assert_eq!(at(30), 5.0);
        assert_eq!(at(3600), 15.0);
    }
}
