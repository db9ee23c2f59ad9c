//! One sample of what the autoscaler reads — the consumer group's offsets from Kafka and each
//! gateway pod's /metrics — and the rates two samples give.
//!
//! Counters, not rates, come in: the window of samples is the only memory the rates need, so
//! the shell that takes them stays a reader.

use k8s_openapi::jiff::Timestamp;

use crate::kafka::PartitionOffsets;

/// Everything read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: Timestamp,
    /// Every partition of the consumed topics.
    pub partitions: Vec<PartitionOffsets>,
    /// Every pod of the gateway Deployment.
    pub pods: Vec<PodSample>,
}

/// One gateway pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSample {
    pub name: String,
    /// The pod's Ready condition.
    pub ready: bool,
    /// Its /metrics, or `None` when the scrape failed.
    pub metrics: Option<PodMetrics>,
}

/// The numbers the autoscaler takes from one collector's /metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodMetrics {
    /// `tracehouse_consumer_lag_seconds`, the largest over the pod's partitions.
    pub lag_seconds: f64,
    /// `tracehouse_records_consumed_total`, summed over topics.
    pub records_total: u64,
    /// `tracehouse_spans_decoded_total`.
    pub spans_total: u64,
    /// `tracehouse_inflight_bytes`.
    pub inflight_bytes: u64,
    /// The pod's in-flight budget (`spec.collector.maxInflightBytes`).
    pub inflight_budget_bytes: u64,
    /// `tracehouse_process_resident_memory_bytes`.
    pub rss_bytes: u64,
    /// The collector container's memory limit, if it has one.
    pub memory_limit_bytes: Option<u64>,
}

impl Sample {
    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }

    /// Records the group is behind, summed over the partitions.
    pub fn backlog(&self) -> i64 {
        self.partitions
            .iter()
            .map(|p| (p.end - p.committed).max(0))
            .sum()
    }

    /// The oldest unwritten record's age: the largest lag any pod reports.
    pub fn lag_seconds(&self) -> Option<f64> {
        self.pods
            .iter()
            .filter_map(|p| p.metrics.map(|m| m.lag_seconds))
            .reduce(f64::max)
    }

    pub fn ready_pods(&self) -> usize {
        self.pods.iter().filter(|p| p.ready).count()
    }

    /// The same partition's offsets; `hint` is where it sits in the other sample, which is
    /// where it almost always sits here too (the shell lists partitions in one order).
    fn offsets(&self, of: &PartitionOffsets, hint: usize) -> Option<&PartitionOffsets> {
        let same = |p: &&PartitionOffsets| p.topic == of.topic && p.partition == of.partition;
        self.partitions
            .get(hint)
            .filter(same)
            .or_else(|| self.partitions.iter().find(same))
    }
}

/// Records per second between two samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Produced to the topics.
    pub incoming: f64,
    /// Committed by the group.
    pub consumed: f64,
    pub seconds: f64,
}

/// The rates from `a` to the later `b`, over the partitions both have (a partition added in
/// between has no earlier offset to count from). `None` unless `b` is later.
pub fn rates(a: &Sample, b: &Sample) -> Option<Rates> {
    let seconds = b.at.duration_since(a.at).as_secs_f64();
    if seconds <= 0.0 {
        return None;
    }
    let (mut produced, mut committed) = (0i64, 0i64);
    for (i, p) in b.partitions.iter().enumerate() {
        if let Some(q) = a.offsets(p, i) {
            // Offsets only move forward; a topic recreated under the same name must not
            // count as negative traffic.
            produced += (p.end - q.end).max(0);
            committed += (p.committed - q.committed).max(0);
        }
    }
    Some(Rates {
        incoming: produced as f64 / seconds,
        consumed: committed as f64 / seconds,
        seconds,
    })
}

/// Spans per record the pods decoded from `a` to `b` (pods present in both whose counters did
/// not restart). `None` when no records were consumed.
pub fn spans_per_record(a: &Sample, b: &Sample) -> Option<f64> {
    let (mut spans, mut records) = (0u64, 0u64);
    for p in &b.pods {
        let earlier = a
            .pods
            .iter()
            .find(|q| q.name == p.name)
            .and_then(|q| q.metrics);
        if let (Some(m), Some(e)) = (p.metrics, earlier)
            && m.records_total >= e.records_total
            && m.spans_total >= e.spans_total
        {
            spans += m.spans_total - e.spans_total;
            records += m.records_total - e.records_total;
        }
    }
    (records > 0).then(|| spans as f64 / records as f64)
}
