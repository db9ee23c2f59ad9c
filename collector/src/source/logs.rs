//! The logs the source reads: which log each topic names ([`TopicLogs`]: as last read, and
//! when it changes because the topic was deleted and created again), and a partition's
//! ledger read from Kafka and checked against that log ([`read_ledger`]: the committed
//! offset and the previous owner's cuts, with the partition's high watermark).
//!
//! The rules that judge what is read are [`crate::offsets`]'s (`PartitionLedger::load`);
//! this file holds what the source remembers between records and the reads themselves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::batch::LogId;
use crate::metrics::{Metrics, ReasonLabels};
use crate::offsets::{LogView, PartitionLedger};

/// What the source knows of a topic's log.
#[derive(Debug, Clone)]
pub(super) struct TopicLog {
    pub(super) log: LogId,
    /// This process saw the topic recreated: a committed offset naming no log counts in
    /// the old one.
    recreated: bool,
    /// Per partition, the last record found below the committed offset in this log: a run
    /// going forward from it is passed over without asking Kafka again.
    rewound: HashMap<i32, i64>,
}

/// The log each topic names, as last read ([`super::topic_id`]).
#[derive(Debug, Default)]
pub(super) struct TopicLogs(HashMap<String, TopicLog>);

impl TopicLogs {
    pub(super) fn get(&self, topic: &str) -> Option<&TopicLog> {
        self.0.get(topic)
    }

    /// Kafka says `topic` names `log` now. True when it named another before: the topic
    /// was deleted and created again (what it remembered of the old log is forgotten).
    pub(super) fn observe(&mut self, topic: &str, log: &LogId) -> bool {
        let entry = self.0.entry(topic.to_string()).or_insert_with(|| {
            tracing::info!(
                topic,
                log = log.name().unwrap_or("(offsets only)"),
                "the topic's log"
            );
            TopicLog {
                log: log.clone(),
                recreated: false,
                rewound: HashMap::new(),
            }
        });
        if entry.log == *log {
            return false;
        }
        tracing::warn!(
            topic,
            was = entry.log.name().unwrap_or("(offsets only)"),
            now = log.name().unwrap_or("(offsets only)"),
            "the topic names another log: it was deleted and created again"
        );
        *entry = TopicLog {
            log: log.clone(),
            recreated: true,
            rewound: HashMap::new(),
        };
        true
    }

    /// Whether a record at `offset` below the committed offset continues a run already
    /// found in this log (no need to ask Kafka again).
    pub(super) fn in_rewound_run(&self, topic: &str, partition: i32, offset: i64) -> bool {
        self.0
            .get(topic)
            .and_then(|t| t.rewound.get(&partition))
            .is_some_and(|&last| offset > last)
    }

    /// A record at `offset` was found below the committed offset of an unchanged log.
    pub(super) fn note_rewound(&mut self, topic: &str, partition: i32, offset: i64) {
        if let Some(t) = self.0.get_mut(topic) {
            t.rewound.insert(partition, offset);
        }
    }

    /// Whether a committed offset that names no log (older metadata) may be trusted as this
    /// log's: not once this process saw the topic recreated.
    pub(super) fn trust_unnamed(&self, topic: &str) -> bool {
        !self.0.get(topic).is_some_and(|t| t.recreated)
    }
}

/// Where a partition's ledger is read, and what it is checked against.
pub(super) struct LedgerAt<'a> {
    pub(super) topic: &'a str,
    pub(super) partition: i32,
    /// The first record the consumer delivered for the partition.
    pub(super) first_seen: i64,
    /// The log the topic names now.
    pub(super) log: &'a LogId,
    pub(super) trust_unnamed: bool,
    pub(super) write_legacy: bool,
}

/// Read the committed offset and the previous owner's recorded cuts for a partition,
/// checked against the log they claim to describe (its id and high watermark); `None`
/// when Kafka could not say.
pub(super) fn read_ledger<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    at: &LedgerAt<'_>,
    metrics: &Metrics,
) -> Option<PartitionLedger> {
    let (topic, partition, first_seen) = (at.topic, at.partition, at.first_seen);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let list = match consumer.committed_offsets(tpl, Duration::from_secs(10)) {
        Ok(list) => list,
        Err(e) => {
            tracing::warn!(topic, partition, error = %e, "cannot read the committed offset; holding the partition's records until Kafka answers");
            return None;
        }
    };
    let committed = list
        .find_partition(topic, partition)
        .and_then(|elem| match elem.offset() {
            Offset::Offset(o) => Some((o, elem.metadata().to_string())),
            _ => None,
        });
    let high = if committed.is_some() {
        match consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)) {
            Ok((_, high)) => Some(high),
            Err(e) => {
                tracing::warn!(topic, partition, error = %e, "cannot read the partition's watermarks; holding its records until Kafka answers");
                return None;
            }
        }
    } else {
        None
    };
    let topic_arc: Arc<str> = Arc::from(topic);
    let view = LogView {
        topic: &topic_arc,
        partition,
        log: at.log,
        first_seen,
        high,
        trust_unnamed: at.trust_unnamed,
        write_legacy: at.write_legacy,
    };
    let (ledger, dropped) =
        PartitionLedger::load(committed.as_ref().map(|(o, m)| (*o, m.as_str())), &view);
    for d in &dropped {
        metrics
            .commit_metadata_dropped
            .get_or_create(&ReasonLabels { reason: d.reason() })
            .inc();
        tracing::warn!(
            topic,
            partition,
            high,
            first_seen,
            reason = d.reason(),
            "dropping recorded commit metadata that cannot describe this log: {d}"
        );
    }
    match &committed {
        Some((offset, metadata)) => {
            tracing::info!(topic, partition, committed = offset, cuts = %metadata, start = ledger.committed(), "resuming from committed offset")
        }
        None => tracing::info!(
            topic,
            partition,
            start = first_seen,
            "nothing committed; starting at the first record"
        ),
    }
    Some(ledger)
}
