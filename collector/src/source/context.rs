//! The consumer's rdkafka context ([`SourceContext`]): rebalances forwarded to the
//! [`Machine`] (a revoke commits what it may, an assignment opens partitions), commit
//! results counted, librdkafka's log routed to `tracing`; and [`commit`], the one door to
//! Kafka's offset commit, used by the rebalance callbacks and the source loop.

use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::holdings::Holdings;
use super::machine::{Command, CommitOffset, Machine, PartitionId};
use crate::metrics::{Metrics, PartitionLabels};

/// rdkafka context: forwards rebalances to the machine, reports commit results and logs.
pub(super) struct SourceContext {
    pub(super) machine: Mutex<Machine>,
    pub(super) metrics: Arc<Metrics>,
    /// Partitions and generations held now, for the insert stage and the watermark thread.
    pub(super) holdings: Holdings,
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility = fac, "{log_message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility = fac, "{log_message}")
            }
            _ => tracing::debug!(target: "librdkafka", facility = fac, "{log_message}"),
        }
    }
}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let ids = partition_ids(tpl);
        let mut out = Vec::new();
        {
            let mut machine = self.machine.lock().expect("machine lock");
            machine.revoke(&ids, &mut out);
            self.published(&machine);
        }
        for id in &ids {
            let l = labels(id);
            self.metrics.lag_records.remove(&l);
            self.metrics.lag_seconds.remove(&l);
            self.metrics.oldest_in_flight_seconds.remove(&l);
        }
        for cmd in out {
            match cmd {
                Command::Commit { offsets, sync } => {
                    commit(consumer, &self.metrics, &offsets, sync, "commit on revoke");
                }
                other => debug_assert!(false, "a revoke only commits: {other:?}"),
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let mut machine = self.machine.lock().expect("machine lock");
                for id in partition_ids(tpl) {
                    machine.assign(id);
                }
                self.published(&machine);
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(e) = result {
            self.metrics.commit_errors.inc();
            tracing::warn!(error = %e, partitions = offsets.count(), "offset commit failed; will be retried with the next one");
        }
    }
}

impl SourceContext {
    /// Tell the watermark thread and the metrics which partitions are held now.
    pub(super) fn published(&self, machine: &Machine) {
        self.metrics
            .assigned_partitions
            .set(machine.assigned().count() as i64);
        self.holdings.publish(machine.held());
    }
}

fn partition_ids(tpl: &TopicPartitionList) -> Vec<PartitionId> {
    tpl.elements()
        .iter()
        .map(|e| PartitionId::new(e.topic(), e.partition()))
        .collect()
}

pub(super) fn labels(id: &PartitionId) -> PartitionLabels {
    PartitionLabels {
        topic: id.topic.to_string(),
        partition: id.partition,
    }
}

pub(super) fn tpl_of(ids: &[PartitionId]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for id in ids {
        tpl.add_partition(&id.topic, id.partition);
    }
    tpl
}

/// Commit `offsets` with their metadata; failures are counted and logged, never fatal (a
/// lost commit is redone by the next one, and a replay deduplicates). True when it went out.
pub(super) fn commit(
    consumer: &BaseConsumer<SourceContext>,
    metrics: &Metrics,
    offsets: &[CommitOffset],
    sync: bool,
    what: &str,
) -> bool {
    let mut tpl = TopicPartitionList::new();
    for c in offsets {
        let (topic, partition) = (&*c.partition.topic, c.partition.partition);
        if tpl
            .add_partition_offset(topic, partition, Offset::Offset(c.offset))
            .is_ok()
            && let Some(mut elem) = tpl.find_partition(topic, partition)
        {
            elem.set_metadata(c.metadata.clone());
        }
    }
    let mode = if sync {
        CommitMode::Sync
    } else {
        CommitMode::Async
    };
    match consumer.commit(&tpl, mode) {
        Ok(()) => {
            metrics.commits.inc();
            true
        }
        Err(e) => {
            metrics.commit_errors.inc();
            tracing::warn!(error = %e, "{what} failed; the next commit redoes it, and a replay deduplicates");
            false
        }
    }
}
