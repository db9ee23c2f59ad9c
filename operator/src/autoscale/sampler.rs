//! IO shell around the pure core: the autoscaler's eyes. One [`Sample`] of a pipeline, made
//! of what the reconcile already read — the consumer group's offsets (the same read the lag
//! comes from) and the gateway's pods (the one pod list) — and every ready pod's /metrics,
//! read through a [`PodMetricsSource`] (the reconcile's `Backends`, faked in its tests) and
//! parsed by [`scrape::pod_metrics`]. No metrics server or adapter: the operator reads both
//! itself.
//!
//! Thin IO: what the numbers mean is the core's business ([`super::decide()`]). A pod whose
//! /metrics cannot be read is sampled with `metrics: None`, and the decision holds on it.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{PodMetrics, PodSample, Sample, scrape};
use crate::builders::METRICS_PORT;
use crate::crd::TracePipeline;
use crate::gateway_pods::{is_ready, memory_limit};
use crate::kafka::PartitionOffsets;

/// Where a gateway pod's /metrics text comes from.
pub trait PodMetricsSource: Send + Sync {
    /// The /metrics text of the pod at `ip`, or why it could not be read.
    fn pod_metrics<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<String, String>>;
}

/// The collector's /metrics address on pod `ip` (IPv6 in brackets).
pub fn metrics_url(ip: &str) -> String {
    if ip.contains(':') {
        format!("http://[{ip}]:{METRICS_PORT}/metrics")
    } else {
        format!("http://{ip}:{METRICS_PORT}/metrics")
    }
}

/// One sample of `tp` at `at`: `offsets` of every partition, and `pods` with each ready one's
/// /metrics, all read at once.
pub async fn sample<S: PodMetricsSource + ?Sized>(
    source: &S,
    tp: &TracePipeline,
    offsets: &[PartitionOffsets],
    pods: &[Pod],
    at: Timestamp,
) -> Sample {
    let budget = tp
        .spec
        .collector
        .max_inflight_bytes
        .bytes()
        .and_then(|b| u64::try_from(b).ok())
        .unwrap_or(0);
    let scrapes = pods.iter().map(|pod| async move {
        let ready = is_ready(pod);
        let limit = pod.spec.as_ref().and_then(memory_limit);
        let metrics = match pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) {
            Some(ip) if ready => read(source, ip, budget, limit).await,
            _ => None,
        };
        PodSample {
            name: pod.name_any(),
            ready,
            metrics,
        }
    });
    Sample {
        at,
        partitions: offsets.to_vec(),
        pods: futures::future::join_all(scrapes).await,
    }
}

async fn read<S: PodMetricsSource + ?Sized>(
    source: &S,
    ip: &str,
    budget: u64,
    limit: Option<u64>,
) -> Option<PodMetrics> {
    match source.pod_metrics(ip).await {
        Ok(text) => match scrape::pod_metrics(&text, budget, limit) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::debug!(ip, error = %e, "collector metrics incomplete");
                None
            }
        },
        Err(e) => {
            tracing::debug!(ip, error = %e, "cannot scrape collector metrics");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_urls_bracket_ipv6_addresses() {
        assert_eq!(
            metrics_url("10.0.0.7"),
            format!("http://10.0.0.7:{METRICS_PORT}/metrics")
        );
        assert_eq!(
            metrics_url("fd00::7"),
            format!("http://[fd00::7]:{METRICS_PORT}/metrics")
        );
    }
}
