//! How many partitions the pipeline's topics have, read from the brokers' metadata, and where
//! the consumer group stands in each ([`offsets`], for the autoscaler).
//!
//! A fresh client per call: metadata is read at most once per reconcile (every requeue
//! period), and a fresh client never answers from a stale metadata cache, so a partition
//! increase is seen at the next reconcile. librdkafka blocks, so the call runs on the
//! blocking pool with a deadline.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::autoscale::PartitionOffsets;

#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("cannot read metadata from the Kafka brokers {brokers}: {source}")]
    Unreachable {
        brokers: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    #[error("topic {topic:?} does not exist on the Kafka brokers {brokers}")]
    TopicNotFound { topic: String, brokers: String },
    #[error("topic {topic:?} on {brokers}: {error:?}")]
    Topic {
        topic: String,
        brokers: String,
        error: RDKafkaRespErr,
    },
    #[error("the Kafka metadata task failed: {0}")]
    Task(String),
}

/// How to reach the brokers: bootstrap servers and librdkafka client properties (security
/// settings with inline PEMs and SASL credentials, never file paths).
#[derive(Clone, Default)]
pub struct KafkaAccess {
    pub brokers: String,
    pub properties: BTreeMap<String, String>,
}

impl fmt::Debug for KafkaAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self.properties.keys().map(String::as_str).collect();
        f.debug_struct("KafkaAccess")
            .field("brokers", &self.brokers)
            .field("property_keys", &keys)
            .finish()
    }
}

/// Partitions per topic, each topic's count read from the brokers.
pub async fn partitions(
    access: &KafkaAccess,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, i32>, KafkaError> {
    let access = access.clone();
    let topics = topics.to_vec();
    tokio::task::spawn_blocking(move || partitions_blocking(&access, &topics, timeout))
        .await
        .map_err(|e| KafkaError::Task(e.to_string()))?
}

/// The consumer `group`'s committed offset and the end offset of every partition (`counts`:
/// partitions per topic, from [`partitions`]); the start offset where the group has not
/// committed. Reads only: the client never joins the group, so the gateway's assignment is
/// untouched.
pub async fn offsets(
    access: &KafkaAccess,
    group: &str,
    counts: &BTreeMap<String, i32>,
    timeout: Duration,
) -> Result<Vec<PartitionOffsets>, KafkaError> {
    let access = access.clone();
    let counts = counts.clone();
    let group = group.to_owned();
    tokio::task::spawn_blocking(move || offsets_blocking(&access, &group, &counts, timeout))
        .await
        .map_err(|e| KafkaError::Task(e.to_string()))?
}

fn offsets_blocking(
    access: &KafkaAccess,
    group: &str,
    counts: &BTreeMap<String, i32>,
    timeout: Duration,
) -> Result<Vec<PartitionOffsets>, KafkaError> {
    let unreachable = |source| KafkaError::Unreachable {
        brokers: access.brokers.clone(),
        source,
    };
    let consumer = client(access, group, timeout).map_err(unreachable)?;
    let mut tpl = TopicPartitionList::new();
    for (topic, &n) in counts {
        for p in 0..n {
            tpl.add_partition(topic, p);
        }
    }
    let committed = consumer
        .committed_offsets(tpl, timeout)
        .map_err(unreachable)?;
    let mut out = Vec::with_capacity(committed.count());
    for e in committed.elements() {
        let (start, end) = consumer
            .fetch_watermarks(e.topic(), e.partition(), timeout)
            .map_err(unreachable)?;
        let committed = match e.offset() {
            Offset::Offset(o) => o,
            _ => start,
        };
        out.push(PartitionOffsets {
            topic: e.topic().to_owned(),
            partition: e.partition(),
            committed,
            end,
        });
    }
    Ok(out)
}

fn client(
    access: &KafkaAccess,
    group: &str,
    timeout: Duration,
) -> Result<BaseConsumer, rdkafka::error::KafkaError> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &access.brokers)
        // Reads only: never join a group, never create a topic by asking about it.
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .set(
            "socket.timeout.ms",
            timeout.as_millis().clamp(10, 300_000).to_string(),
        )
        .set("log_level", "3");
    for (k, v) in &access.properties {
        config.set(k, v);
    }
    config.create()
}

fn partitions_blocking(
    access: &KafkaAccess,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, i32>, KafkaError> {
    let unreachable = |source| KafkaError::Unreachable {
        brokers: access.brokers.clone(),
        source,
    };
    let consumer = client(access, "tracehouse-operator-metadata", timeout).map_err(unreachable)?;
    let mut out = BTreeMap::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(unreachable)?;
        let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Err(KafkaError::TopicNotFound {
                topic: topic.clone(),
                brokers: access.brokers.clone(),
            });
        };
        match t.error() {
            None if !t.partitions().is_empty() => {
                out.insert(
                    topic.clone(),
                    i32::try_from(t.partitions().len()).unwrap_or(i32::MAX),
                );
            }
            None | Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => {
                return Err(KafkaError::TopicNotFound {
                    topic: topic.clone(),
                    brokers: access.brokers.clone(),
                });
            }
            Some(error) => {
                return Err(KafkaError::Topic {
                    topic: topic.clone(),
                    brokers: access.brokers.clone(),
                    error,
                });
            }
        }
    }
    Ok(out)
}
