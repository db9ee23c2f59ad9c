//! How many partitions the pipeline's topics have, read from the brokers' metadata.
//!
//! A fresh client per call: metadata is read at most once per reconcile (every requeue
//! period), and a fresh client never answers from a stale metadata cache, so a partition
//! increase is seen at the next reconcile. librdkafka blocks, so the call runs on the
//! blocking pool with a deadline.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaRespErr;

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

fn partitions_blocking(
    access: &KafkaAccess,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, i32>, KafkaError> {
    let unreachable = |source| KafkaError::Unreachable {
        brokers: access.brokers.clone(),
        source,
    };
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &access.brokers)
        // Metadata only: never join a group, never create a topic by asking about it.
        .set("group.id", "tracehouse-operator-metadata")
        .set("allow.auto.create.topics", "false")
        .set(
            "socket.timeout.ms",
            timeout.as_millis().clamp(10, 300_000).to_string(),
        )
        .set("log_level", "3");
    for (k, v) in &access.properties {
        config.set(k, v);
    }
    let consumer: BaseConsumer = config.create().map_err(unreachable)?;
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
