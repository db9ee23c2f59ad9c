//! How many partitions the pipeline's topics have, read from the brokers' metadata, where
//! the consumer group stands in each ([`offsets`]), and when the oldest record the group has
//! not consumed was written ([`oldest_unconsumed`]).
//!
//! The Kafka vocabulary the rest of the operator shares lives here, below its readers:
//! [`PartitionOffsets`] (what [`offsets`] reads; the lag in `lag.rs` and the autoscaler's
//! samples are made of it) and [`security`] (the librdkafka security settings a spec implies,
//! pure: the builders render them for the collector, `secrets.rs` for this client).
//!
//! A fresh client per call: metadata is read at most once per reconcile (every requeue
//! period), and a fresh client never answers from a stale metadata cache, so a partition
//! increase is seen at the next reconcile. librdkafka blocks, so the call runs on the
//! blocking pool with a deadline.
//!
//! librdkafka reports why it cannot connect (wrong password, unknown CA, a plaintext client
//! on a TLS listener) only through its error callback, while the metadata call merely times
//! out; the client's context keeps the last such report so the failure can be named
//! ([`classify`], pure).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

pub mod security;

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
    /// `spec.kafka.deadLetterTopic` is missing: found at reconcile, not when the first
    /// oversized record needs it.
    #[error(
        "dead-letter topic {topic:?} (spec.kafka.deadLetterTopic) does not exist on the Kafka brokers {brokers}"
    )]
    DeadLetterTopicNotFound { topic: String, brokers: String },
    #[error("topic {topic:?} on {brokers}: {error:?}")]
    Topic {
        topic: String,
        brokers: String,
        error: RDKafkaRespErr,
    },
    #[error("the Kafka metadata task failed: {0}")]
    Task(String),
    /// The brokers refused the SASL credentials.
    #[error("Kafka brokers {brokers} refused the SASL credentials: {detail}")]
    AuthFailed { brokers: String, detail: String },
    /// The TLS handshake with the brokers failed (unknown CA, bad or missing certificate).
    #[error("TLS to the Kafka brokers {brokers} failed: {detail}")]
    TlsFailed { brokers: String, detail: String },
    /// The client's `security.protocol` does not match the listener (e.g. plaintext on TLS).
    #[error(
        "Kafka brokers {brokers} hung up during the handshake, security settings do not match the listener: {detail}"
    )]
    ProtocolMismatch { brokers: String, detail: String },
}

/// A connection failure librdkafka named, as a pipeline condition tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Auth,
    Tls,
    ProtocolMismatch,
}

/// Pure: what an error librdkafka reported through its error callback or its log says.
/// `tls`: whether the client itself speaks TLS (`security.protocol` SSL or SASL_SSL). `None`
/// for failures that are not about security (a broker down, a timeout).
///
/// What the brokers answer to each mix-up (librdkafka 2.x against Kafka 4.1, seen on the
/// stack's listeners):
/// - a TLS client on a plaintext listener: "SSL handshake failed … connecting to a PLAINTEXT
///   broker listener?" (a protocol mismatch, not a certificate problem);
/// - a plaintext client on a TLS listener: the broker closes the connection as soon as the
///   first request arrives: "Disconnected … (after 0ms in state APIVERSION_QUERY)", logged at
///   level 6 only; older brokers get librdkafka's own "incorrect security.protocol" hint;
/// - no or a refused client certificate on a mutual-TLS listener: "ssl/tls alert bad
///   certificate" (or "certificate required").
pub fn classify(code: RDKafkaErrorCode, reason: &str, tls: bool) -> Option<Failure> {
    let r = reason.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| r.contains(n));
    match code {
        RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed => {
            Some(Failure::Auth)
        }
        _ if has(&[
            "incorrect security.protocol",
            "connecting to a ssl listener",
            "connecting to a plaintext",
        ]) =>
        {
            Some(Failure::ProtocolMismatch)
        }
        _ if !tls && r.contains("disconnected") && r.contains("in state apiversion_query") => {
            Some(Failure::ProtocolMismatch)
        }
        RDKafkaErrorCode::SSL => Some(Failure::Tls),
        _ if r.contains("authentication") && r.contains("sasl") => Some(Failure::Auth),
        _ if has(&[
            "ssl handshake failed",
            "certificate verify failed",
            "alert bad certificate",
            "alert certificate required",
            "alert unknown ca",
            "alert handshake failure",
        ]) =>
        {
            Some(Failure::Tls)
        }
        _ => None,
    }
}

/// Keeps the last security failure librdkafka reported; `tls` as in [`classify`].
#[derive(Default)]
struct Reports {
    tls: bool,
    last: Mutex<Option<(Failure, String)>>,
}

impl ClientContext for Reports {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        let Some(code) = error.rdkafka_error_code() else {
            return;
        };
        if let Some(f) = classify(code, reason, self.tls) {
            self.record(f, reason);
        }
    }

    /// A plaintext client on a TLS listener and a refused client certificate are only ever
    /// logged (see [`classify`]); nothing is printed from here.
    fn log(&self, _level: RDKafkaLogLevel, _fac: &str, message: &str) {
        if let Some(f) = classify(RDKafkaErrorCode::Fail, message, self.tls) {
            self.record(f, message);
        }
    }
}

impl Reports {
    fn record(&self, failure: Failure, detail: &str) {
        // librdkafka's texts name brokers and mechanisms, never the password.
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((failure, detail.to_owned()));
    }
}

impl ConsumerContext for Reports {}

/// The consumer group's position in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset ([`offsets`] gives the partition's start offset when the
    /// group has not committed yet).
    pub committed: i64,
    /// The partition's end offset (high watermark).
    pub end: i64,
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

/// Checks that the dead-letter topic exists, as the consumed topics are checked: a missing
/// one is named at reconcile instead of when the first oversized record needs it.
pub async fn dead_letter_topic(
    access: &KafkaAccess,
    topic: &str,
    timeout: Duration,
) -> Result<(), KafkaError> {
    match partitions(access, &[topic.to_owned()], timeout).await {
        Ok(_) => Ok(()),
        Err(KafkaError::TopicNotFound { topic, brokers }) => {
            Err(KafkaError::DeadLetterTopicNotFound { topic, brokers })
        }
        Err(e) => Err(e),
    }
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
    let consumer = client(access, group, timeout)?;
    let failed = |e| failure(&access.brokers, e, Some(&consumer));
    let mut tpl = TopicPartitionList::new();
    for (topic, &n) in counts {
        for p in 0..n {
            tpl.add_partition(topic, p);
        }
    }
    let committed = consumer.committed_offsets(tpl, timeout).map_err(failed)?;
    let mut out = Vec::with_capacity(committed.count());
    for e in committed.elements() {
        let (start, end) = consumer
            .fetch_watermarks(e.topic(), e.partition(), timeout)
            .map_err(failed)?;
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

/// The timestamp (milliseconds since the epoch) of the oldest record the group has not
/// committed: the record at the committed offset of every partition that is behind, fetched
/// from the brokers. `None` when no partition is behind, or when none of those records
/// arrived within `timeout` (a fetch that found them deleted by retention moves on to the
/// next record, which is then the oldest left).
///
/// The client is assigned the partitions, never subscribed: it does not join the group,
/// commits nothing, and the gateway's assignment is untouched.
pub async fn oldest_unconsumed(
    access: &KafkaAccess,
    group: &str,
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
    let access = access.clone();
    let group = group.to_owned();
    tokio::task::spawn_blocking(move || oldest_blocking(&access, &group, &behind, timeout))
        .await
        .map_err(|e| KafkaError::Task(e.to_string()))?
}

fn oldest_blocking(
    access: &KafkaAccess,
    group: &str,
    behind: &[PartitionOffsets],
    timeout: Duration,
) -> Result<Option<i64>, KafkaError> {
    use rdkafka::Message;
    let mut access = access.clone();
    // One record per partition is all we read; a batch is still returned whole.
    access
        .properties
        .entry("max.partition.fetch.bytes".into())
        .or_insert_with(|| "65536".into());
    // A committed offset retention has since deleted: the oldest record kept is the one.
    access
        .properties
        .insert("auto.offset.reset".into(), "earliest".into());
    let consumer = client(&access, group, timeout)?;
    let mut tpl = TopicPartitionList::new();
    for p in behind {
        tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(p.committed))
            .map_err(|e| failure(&access.brokers, e, None))?;
    }
    consumer
        .assign(&tpl)
        .map_err(|e| failure(&access.brokers, e, Some(&consumer)))?;
    let deadline = std::time::Instant::now() + timeout;
    let mut seen = std::collections::BTreeSet::new();
    let mut oldest: Option<i64> = None;
    while seen.len() < behind.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        match consumer.poll(left.min(Duration::from_millis(200))) {
            Some(Ok(m)) => {
                if seen.insert((m.topic().to_owned(), m.partition()))
                    && let Some(ms) = m.timestamp().to_millis()
                {
                    oldest = Some(oldest.map_or(ms, |o| o.min(ms)));
                }
                // Done with this partition: stop fetching it.
                let mut one = TopicPartitionList::new();
                one.add_partition(m.topic(), m.partition());
                let _ = consumer.pause(&one);
            }
            Some(Err(e)) => return Err(failure(&access.brokers, e, Some(&consumer))),
            None => {}
        }
    }
    Ok(oldest)
}

/// A client of `group` that reads only: it never joins the group, never commits, never
/// creates a topic by asking about it.
fn client(
    access: &KafkaAccess,
    group: &str,
    timeout: Duration,
) -> Result<BaseConsumer<Reports>, KafkaError> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &access.brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .set(
            "socket.timeout.ms",
            timeout.as_millis().clamp(10, 300_000).to_string(),
        )
        // Info: a plaintext client on a TLS listener is only logged at that level (see
        // `classify`); the context classifies log lines and prints none.
        .set_log_level(RDKafkaLogLevel::Info);
    for (k, v) in &access.properties {
        config.set(k, v);
    }
    let tls = access
        .properties
        .get("security.protocol")
        .is_some_and(|p| p.to_ascii_uppercase().contains("SSL"));
    config
        .create_with_context(Reports {
            tls,
            last: Mutex::default(),
        })
        .map_err(|e| failure(&access.brokers, e, None))
}

/// Why `consumer` could not reach the brokers: the security failure librdkafka reported
/// meanwhile, if any, else unreachable.
fn failure(
    brokers: &str,
    source: rdkafka::error::KafkaError,
    consumer: Option<&BaseConsumer<Reports>>,
) -> KafkaError {
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

fn partitions_blocking(
    access: &KafkaAccess,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, i32>, KafkaError> {
    let consumer = client(access, "tracehouse-operator-metadata", timeout)?;
    let mut out = BTreeMap::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| failure(&access.brokers, e, Some(&consumer)))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_failures_are_named_from_what_librdkafka_reports() {
        let cases = [
            (
                RDKafkaErrorCode::Authentication,
                "SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
                Some(Failure::Auth),
            ),
            (
                RDKafkaErrorCode::SSL,
                "ssl:127.0.0.1:19094: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed",
                Some(Failure::Tls),
            ),
            (
                RDKafkaErrorCode::BrokerTransportFailure,
                "127.0.0.1:19094/bootstrap: Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration (connecting to a SSL listener?) or broker version is < 0.10",
                Some(Failure::ProtocolMismatch),
            ),
            (
                RDKafkaErrorCode::AllBrokersDown,
                "1/1 brokers are down",
                None,
            ),
            (
                RDKafkaErrorCode::BrokerTransportFailure,
                "127.0.0.1:19092/bootstrap: Connect to ipv4#127.0.0.1:19092 failed: Connection refused",
                None,
            ),
        ];
        for (code, reason, want) in cases {
            assert_eq!(classify(code, reason, true), want, "{reason}");
        }
    }

    /// The texts the stack's listeners produced for each mix-up (see `classify`).
    #[test]
    fn listener_mix_ups_are_named() {
        let plain_on_tls = "127.0.0.1:19094/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 0ms in state APIVERSION_QUERY)";
        assert_eq!(
            classify(RDKafkaErrorCode::Fail, plain_on_tls, false),
            Some(Failure::ProtocolMismatch)
        );
        // A TLS client cut off at the same point is not told its protocol is wrong.
        assert_eq!(classify(RDKafkaErrorCode::Fail, plain_on_tls, true), None);
        let tls_on_plain = "ssl://127.0.0.1:19092/bootstrap: SSL handshake failed: Disconnected: SSL connection closed by peer: connecting to a PLAINTEXT broker listener? (after 1ms in state SSL_HANDSHAKE)";
        assert_eq!(
            classify(RDKafkaErrorCode::Fail, tls_on_plain, true),
            Some(Failure::ProtocolMismatch)
        );
        let no_cert = "ssl://127.0.0.1:19095/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate: SSL alert number 42 (after 0ms in state APIVERSION_QUERY)";
        assert_eq!(
            classify(RDKafkaErrorCode::Fail, no_cert, true),
            Some(Failure::Tls)
        );
        assert_eq!(
            classify(
                RDKafkaErrorCode::Fail,
                "127.0.0.1:19092/bootstrap: Connect to ipv4#127.0.0.1:19092 failed: Connection refused (after 0ms in state CONNECT)",
                false
            ),
            None
        );
    }
}
