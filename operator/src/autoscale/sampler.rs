//! IO shell around the pure core: the autoscaler's eyes. One [`Sample`] of a pipeline, taken
//! now — the consumer group's offsets from Kafka ([`kafka::offsets`]) and every gateway pod's
//! readiness and /metrics ([`scrape::pod_metrics`]). No metrics server or adapter: the
//! operator reads both itself.
//!
//! Thin IO: what the numbers mean is the core's business ([`super::decide()`]). A pod whose /metrics
//! cannot be read is sampled with `metrics: None`, and the decision holds on it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::{PodMetrics, PodSample, Sample, scrape};
use crate::builders::{self, METRICS_PORT};
use crate::crd::TracePipeline;
use crate::error::Error;
use crate::kafka::{self, KafkaAccess};
use crate::quantity::quantity_bytes;

/// What the reconcile already read of a pipeline's Kafka, for the autoscaler: how to reach
/// the brokers, and the topics' partitions.
#[derive(Clone, Copy)]
pub struct KafkaView<'a> {
    pub access: &'a KafkaAccess,
    /// Partitions per topic.
    pub counts: &'a BTreeMap<String, i32>,
    /// Bounds each request to the brokers.
    pub timeout: Duration,
}

impl KafkaView<'_> {
    /// Partitions of the topics, summed.
    pub fn partitions(&self) -> i32 {
        self.counts.values().sum()
    }
}

/// Reads the samples; one per operator.
#[derive(Clone)]
pub struct Sampler {
    http: reqwest::Client,
}

impl Sampler {
    /// `timeout` bounds each pod's scrape.
    pub fn new(timeout: Duration) -> anyhow::Result<Self> {
        // reqwest is built without a default TLS provider; the scrapes are plain HTTP, but
        // the client still wants one installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()?;
        Ok(Self { http })
    }

    /// One sample of `tp`: offsets of every partition `kafka` counts, and the gateway's pods.
    pub async fn observe(
        &self,
        client: &Client,
        tp: &TracePipeline,
        kafka: KafkaView<'_>,
    ) -> Result<Sample, Error> {
        let partitions = kafka::offsets(
            kafka.access,
            &tp.consumer_group(),
            kafka.counts,
            kafka.timeout,
        )
        .await?;
        let pods = self.pods(client, tp).await?;
        Ok(Sample {
            at: Timestamp::now(),
            partitions,
            pods,
        })
    }

    async fn pods(&self, client: &Client, tp: &TracePipeline) -> Result<Vec<PodSample>, Error> {
        let api: Api<Pod> = Api::namespaced(client.clone(), &tp.namespace().unwrap_or_default());
        let list = api
            .list(&ListParams::default().labels(&builders::selector_string(tp)))
            .await?;
        let budget = tp
            .spec
            .collector
            .max_inflight_bytes
            .bytes()
            .and_then(|b| u64::try_from(b).ok())
            .unwrap_or(0);
        let scrapes = list.items.iter().map(|pod| async move {
            let ready = is_ready(pod);
            let metrics = match pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) {
                Some(ip) if ready => self.scrape(ip, budget, memory_limit(pod)).await,
                _ => None,
            };
            PodSample {
                name: pod.name_any(),
                ready,
                metrics,
            }
        });
        Ok(futures::future::join_all(scrapes).await)
    }

    async fn scrape(&self, ip: &str, budget: u64, limit: Option<u64>) -> Option<PodMetrics> {
        let url = format!("http://{ip}:{METRICS_PORT}/metrics");
        let text = async {
            self.http
                .get(&url)
                .send()
                .await?
                .error_for_status()?
                .text()
                .await
        };
        match text.await {
            Ok(text) => match scrape::pod_metrics(&text, budget, limit) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::debug!(%url, error = %e, "collector metrics incomplete");
                    None
                }
            },
            Err(e) => {
                tracing::debug!(%url, error = %e, "cannot scrape collector metrics");
                None
            }
        }
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The collector container's memory limit.
fn memory_limit(pod: &Pod) -> Option<u64> {
    let spec = pod.spec.as_ref()?;
    let c = spec
        .containers
        .iter()
        .find(|c| c.name == builders::CONTAINER)
        .or(spec.containers.first())?;
    let q = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
    quantity_bytes(&q.0).and_then(|b| u64::try_from(b).ok())
}
