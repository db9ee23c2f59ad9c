//! One librdkafka client for one pipeline, kept across reconciles and autoscaler samples
//! (`clients.rs` keeps them): every read of the brokers the operator makes for the pipeline —
//! partition counts, the group's committed and end offsets, the oldest unconsumed record, the
//! broker's `offsets.retention.minutes` — goes through it, so a pipeline costs one TLS and
//! SASL handshake per broker for as long as its Kafka settings stay the same, not one per read.
//!
//! The client reads only: it is a consumer of the pipeline's group that never subscribes, so
//! it never joins the group, never commits, and never creates a topic by asking about it. The
//! oldest-record read assigns the partitions it needs and unassigns them when done. A metadata
//! request always goes to a broker (librdkafka never answers `fetch_metadata` from its cache),
//! so a partition increase is seen at the next reconcile with the same client.
//!
//! librdkafka blocks, so each read runs on the blocking pool with a deadline, one at a time
//! per client (`busy`): the security failure librdkafka reports meanwhile through its error
//! callback belongs to that read ([`super::classify`]), and an assignment is never shared.
//!
//! OAUTHBEARER: the client (and the admin client below) takes its tokens from the pipeline's
//! [`TokenSource`] through a [`WithToken`] link, made with the client; a read that fails
//! while the token endpoint refuses or does not answer is named by that failure
//! ([`KafkaError::TokenFailed`]), since the brokers were never asked.
//!
//! The broker's configuration is the one read librdkafka's Rust binding offers only on an
//! admin client (a second librdkafka instance; calling `rd_kafka_DescribeConfigs` on this
//! client's handle would take `unsafe`, which the workspace denies). So it is made only for a
//! pipeline that is stopped, dropped after its one request, and its answer kept for
//! [`RETENTION_REFRESH`] ([`RETENTION_RETRY`] after a failure): one extra handshake per stopped
//! pipeline per hour.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use tracehouse_contract::oauth::{TokenSource, WithToken};

use super::{KafkaAccess, KafkaError, PartitionOffsets, Reports};
use crate::kafka::Failure;

/// How long a broker's `offsets.retention.minutes` is trusted before it is read again.
pub const RETENTION_REFRESH: Duration = Duration::from_secs(3600);
/// How long after a failed read of it the next is tried (a broker that refuses
/// DescribeConfigs must not cost a new admin connection every reconcile).
pub const RETENTION_RETRY: Duration = Duration::from_secs(300);

/// The broker setting after which an empty group's committed offsets expire.
const RETENTION_SETTING: &str = "offsets.retention.minutes";

/// The reads of one pipeline's brokers, over one librdkafka client.
pub struct KafkaClient {
    access: KafkaAccess,
    consumer: WithToken<BaseConsumer<Reports>>,
    /// The pipeline's OAUTHBEARER tokens, for this client and its admin client.
    tokens: Option<Arc<TokenSource>>,
    /// One read at a time (see the module's notes).
    busy: Mutex<()>,
    /// The broker's `offsets.retention.minutes` (`None`: not set, or not readable), and
    /// until when it is trusted.
    retention: Mutex<Option<(Instant, Option<u64>)>>,
}

impl std::fmt::Debug for KafkaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaClient")
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

/// librdkafka's configuration for `access` (`group`: the consumer group whose committed
/// offsets are read; `None` for the admin client).
fn config(access: &KafkaAccess, group: Option<&str>, timeout: Duration) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &access.brokers).set(
        "socket.timeout.ms",
        timeout.as_millis().clamp(10, 300_000).to_string(),
    );
    if let Some(group) = group {
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("allow.auto.create.topics", "false")
            // One record per partition is all the oldest-record read takes; a batch is
            // still returned whole.
            .set("max.partition.fetch.bytes", "65536")
            // Info: a plaintext client on a TLS listener is only logged at that level (see
            // `classify`); the context classifies log lines and prints none.
            .set_log_level(RDKafkaLogLevel::Info);
    }
    for (k, v) in &access.properties {
        config.set(k, v);
    }
    if group.is_some() {
        // A committed offset retention has since deleted: the oldest record kept is the one.
        config.set("auto.offset.reset", "earliest");
    }
    config
}

impl KafkaClient {
    /// A client of `group` on the brokers of `access`; connects on its first read.
    pub fn connect(
        access: &KafkaAccess,
        group: &str,
        timeout: Duration,
    ) -> Result<Self, KafkaError> {
        let tls = access
            .properties
            .get("security.protocol")
            .is_some_and(|p| p.to_ascii_uppercase().contains("SSL"));
        let consumer = config(access, Some(group), timeout)
            .create_with_context(Reports {
                tls,
                last: Mutex::default(),
            })
            .map_err(|e| failure(&access.brokers, e, None))?;
        // The token request gets part of a read's time, so its failure is known when the
        // read gives up waiting for a token.
        let tokens = access
            .oauth
            .clone()
            .map(|o| TokenSource::with_timeout(o, timeout.mul_f64(0.6)));
        Ok(Self {
            access: access.clone(),
            consumer: WithToken::new(consumer, tokens.as_ref()),
            tokens,
            busy: Mutex::new(()),
            retention: Mutex::new(None),
        })
    }

    /// Starts a read: waits for the one before it, serves what librdkafka queued since (error
    /// events between reads, of a connection the broker closed while idle), and forgets the
    /// security failure it may have reported then, so only this read's can name its failure.
    fn begin(&self) -> MutexGuard<'_, ()> {
        let guard = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..64 {
            if self.consumer.poll(Duration::ZERO).is_none() {
                break;
            }
        }
        self.consumer
            .context()
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        guard
    }

    fn failed(&self, e: rdkafka::error::KafkaError) -> KafkaError {
        failure(&self.access.brokers, e, Some(&self.consumer))
    }

    /// Runs `read` on the blocking pool.
    async fn blocking<T, F>(self: &Arc<Self>, read: F) -> Result<T, KafkaError>
    where
        T: Send + 'static,
        F: FnOnce(&Self) -> Result<T, KafkaError> + Send + 'static,
    {
        let me = self.clone();
        tokio::task::spawn_blocking(move || read(&me))
            .await
            .map_err(|e| KafkaError::Task(e.to_string()))?
    }

    /// Partitions per topic, each topic's count read from the brokers.
    pub async fn partitions(
        self: &Arc<Self>,
        topics: &[String],
        timeout: Duration,
    ) -> Result<BTreeMap<String, i32>, KafkaError> {
        let topics = topics.to_vec();
        self.blocking(move |c| c.partitions_blocking(&topics, timeout))
            .await
    }

    /// Checks that the dead-letter topic exists, as the consumed topics are checked: a missing
    /// one is named at reconcile instead of when the first oversized record needs it.
    pub async fn dead_letter_topic(
        self: &Arc<Self>,
        topic: &str,
        timeout: Duration,
    ) -> Result<(), KafkaError> {
        match self.partitions(&[topic.to_owned()], timeout).await {
            Ok(_) => Ok(()),
            Err(KafkaError::TopicNotFound { topic, brokers }) => {
                Err(KafkaError::DeadLetterTopicNotFound { topic, brokers })
            }
            Err(e) => Err(e),
        }
    }

    /// The group's committed offset and the end offset of every partition (`counts`:
    /// partitions per topic, from [`Self::partitions`]); the start offset where the group
    /// has not committed.
    pub async fn offsets(
        self: &Arc<Self>,
        counts: &BTreeMap<String, i32>,
        timeout: Duration,
    ) -> Result<Vec<PartitionOffsets>, KafkaError> {
        let counts = counts.clone();
        self.blocking(move |c| c.offsets_blocking(&counts, timeout))
            .await
    }

    /// The timestamp (milliseconds since the epoch) of the oldest record the group has not
    /// committed: the record at the committed offset of every partition that is behind. `None`
    /// when no partition is behind, or when none of those records arrived within `timeout` (a
    /// fetch that found them deleted by retention moves on to the next record, which is then
    /// the oldest left).
    pub async fn oldest_unconsumed(
        self: &Arc<Self>,
        offsets: &[PartitionOffsets],
        timeout: Duration,
    ) -> Result<Option<i64>, KafkaError> {
        let behind: Vec<PartitionOffsets> = offsets
            .iter()
            .filter(|p| p.end > p.committed)
            .cloned()
            .collect();
        if behind.is_empty() {
            return Ok(None);
        }
        self.blocking(move |c| c.oldest_blocking(&behind, timeout))
            .await
    }

    /// The broker's `offsets.retention.minutes` (`None` when it does not say), read through
    /// an admin client at most once per [`RETENTION_REFRESH`] (after a failed read, the next
    /// is tried [`RETENTION_RETRY`] later; until then it does not say); `topic` is one of the
    /// pipeline's, whose metadata names a broker to ask.
    pub async fn offsets_retention(
        self: &Arc<Self>,
        topic: &str,
        timeout: Duration,
    ) -> Result<Option<u64>, KafkaError> {
        if let Some((until, minutes)) = *self.retention.lock().unwrap_or_else(|p| p.into_inner())
            && Instant::now() < until
        {
            return Ok(minutes);
        }
        let read = self.read_retention(topic, timeout).await;
        let (trusted_for, minutes) = match &read {
            Ok(minutes) => (RETENTION_REFRESH, *minutes),
            Err(_) => (RETENTION_RETRY, None),
        };
        *self.retention.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now() + trusted_for, minutes));
        read
    }

    async fn read_retention(
        self: &Arc<Self>,
        topic: &str,
        timeout: Duration,
    ) -> Result<Option<u64>, KafkaError> {
        let topic = topic.to_owned();
        let broker = self
            .blocking(move |c| {
                let _read = c.begin();
                let metadata = c
                    .consumer
                    .fetch_metadata(Some(&topic), timeout)
                    .map_err(|e| c.failed(e))?;
                Ok(metadata.brokers().iter().map(|b| b.id()).min())
            })
            .await?;
        let Some(broker) = broker else {
            return Ok(None);
        };
        let admin: AdminClient<DefaultClientContext> = config(&self.access, None, timeout)
            .create()
            .map_err(|e| failure(&self.access.brokers, e, None))?;
        let admin = WithToken::new(admin, self.tokens.as_ref());
        let options = AdminOptions::new().request_timeout(Some(timeout));
        let asked = [ResourceSpecifier::Broker(broker)];
        let answer = tokio::time::timeout(timeout, admin.describe_configs(&asked, &options)).await;
        // Dropping a librdkafka client waits for its threads: not on the async workers.
        tokio::task::spawn_blocking(move || drop(admin));
        match answer {
            Err(_) => Err(KafkaError::Unreachable {
                brokers: self.access.brokers.clone(),
                source: rdkafka::error::KafkaError::AdminOp(
                    rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
                ),
            }),
            Ok(Err(e)) => Err(failure(&self.access.brokers, e, None)),
            // A broker that refuses to describe itself (an ACL) answers per resource: it
            // does not say.
            Ok(Ok(results)) => Ok(results
                .into_iter()
                .flatten()
                .find_map(|r| r.get(RETENTION_SETTING)?.value.as_deref()?.parse().ok())),
        }
    }

    fn partitions_blocking(
        &self,
        topics: &[String],
        timeout: Duration,
    ) -> Result<BTreeMap<String, i32>, KafkaError> {
        let _read = self.begin();
        let brokers = &self.access.brokers;
        let mut out = BTreeMap::new();
        for topic in topics {
            let metadata = self
                .consumer
                .fetch_metadata(Some(topic), timeout)
                .map_err(|e| self.failed(e))?;
            let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
                return Err(KafkaError::TopicNotFound {
                    topic: topic.clone(),
                    brokers: brokers.clone(),
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
                        brokers: brokers.clone(),
                    });
                }
                Some(error) => {
                    return Err(KafkaError::Topic {
                        topic: topic.clone(),
                        brokers: brokers.clone(),
                        error,
                    });
                }
            }
        }
        Ok(out)
    }

    fn offsets_blocking(
        &self,
        counts: &BTreeMap<String, i32>,
        timeout: Duration,
    ) -> Result<Vec<PartitionOffsets>, KafkaError> {
        let _read = self.begin();
        let mut tpl = TopicPartitionList::new();
        for (topic, &n) in counts {
            for p in 0..n {
                tpl.add_partition(topic, p);
            }
        }
        let committed = self
            .consumer
            .committed_offsets(tpl, timeout)
            .map_err(|e| self.failed(e))?;
        let mut out = Vec::with_capacity(committed.count());
        for e in committed.elements() {
            let (start, end) = self
                .consumer
                .fetch_watermarks(e.topic(), e.partition(), timeout)
                .map_err(|e| self.failed(e))?;
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

    fn oldest_blocking(
        &self,
        behind: &[PartitionOffsets],
        timeout: Duration,
    ) -> Result<Option<i64>, KafkaError> {
        let _read = self.begin();
        let mut tpl = TopicPartitionList::new();
        for p in behind {
            tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(p.committed))
                .map_err(|e| failure(&self.access.brokers, e, None))?;
        }
        self.consumer.assign(&tpl).map_err(|e| self.failed(e))?;
        // A partition an earlier read paused would stay paused across the assignment.
        let _ = self.consumer.resume(&tpl);
        let oldest = self.first_records(behind.len(), timeout);
        // The next read starts from nothing assigned, whatever this one found.
        let _ = self.consumer.unassign();
        oldest
    }

    /// Polls until one record of each of `partitions` assigned partitions arrived (or the
    /// deadline): the oldest timestamp among them.
    fn first_records(
        &self,
        partitions: usize,
        timeout: Duration,
    ) -> Result<Option<i64>, KafkaError> {
        let deadline = Instant::now() + timeout;
        let mut seen = BTreeSet::new();
        let mut oldest: Option<i64> = None;
        while seen.len() < partitions {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.consumer.poll(left.min(Duration::from_millis(200))) {
                Some(Ok(m)) => {
                    if seen.insert((m.topic().to_owned(), m.partition()))
                        && let Some(ms) = m.timestamp().to_millis()
                    {
                        oldest = Some(oldest.map_or(ms, |o| o.min(ms)));
                    }
                    // Done with this partition: stop fetching it.
                    let mut one = TopicPartitionList::new();
                    one.add_partition(m.topic(), m.partition());
                    let _ = self.consumer.pause(&one);
                }
                Some(Err(e)) => return Err(self.failed(e)),
                None => {}
            }
        }
        Ok(oldest)
    }
}

/// Why `consumer` could not reach the brokers: no OAUTHBEARER token (the token endpoint's
/// refusal), else the security failure librdkafka reported meanwhile, if any, else
/// unreachable.
fn failure(
    brokers: &str,
    source: rdkafka::error::KafkaError,
    consumer: Option<&WithToken<BaseConsumer<Reports>>>,
) -> KafkaError {
    if let Some(detail) = consumer.and_then(|c| c.token_failure()) {
        return KafkaError::TokenFailed {
            brokers: brokers.to_owned(),
            detail,
        };
    }
    let named = consumer.and_then(|c| {
        // librdkafka's error events wait in the queue until polled: serve them so the
        // context sees why the brokers could not be reached.
        for _ in 0..5 {
            let _ = c.poll(Duration::from_millis(20));
        }
        c.context()
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    });
    let brokers = brokers.to_owned();
    match named {
        Some((Failure::Auth, detail)) => KafkaError::AuthFailed { brokers, detail },
        Some((Failure::Tls, detail)) => KafkaError::TlsFailed { brokers, detail },
        Some((Failure::ProtocolMismatch, detail)) => {
            KafkaError::ProtocolMismatch { brokers, detail }
        }
        None => KafkaError::Unreachable { brokers, source },
    }
}
