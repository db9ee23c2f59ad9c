//! How many partitions the pipeline's topics have, read from the brokers' metadata, and where
//! the consumer group stands in each ([`offsets`], for the autoscaler).
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
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;
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

/// Pure: what an error librdkafka reported through its error callback says. `None` for
/// failures that are not about security (a broker down, a timeout).
pub fn classify(code: RDKafkaErrorCode, reason: &str) -> Option<Failure> {
    let r = reason.to_ascii_lowercase();
    match code {
        RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed => {
            Some(Failure::Auth)
        }
        RDKafkaErrorCode::SSL => Some(Failure::Tls),
        _ if r.contains("authentication") && r.contains("sasl") => Some(Failure::Auth),
        _ if r.contains("ssl handshake failed") || r.contains("certificate verify failed") => {
            Some(Failure::Tls)
        }
        _ if r.contains("incorrect security.protocol")
            || r.contains("connecting to a ssl listener")
            || r.contains("connecting to a plaintext listener") =>
        {
            Some(Failure::ProtocolMismatch)
        }
        _ => None,
    }
}

/// Keeps the last security failure librdkafka reported.
#[derive(Default)]
struct Reports(Mutex<Option<(Failure, String)>>);

impl ClientContext for Reports {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        let Some(code) = error.rdkafka_error_code() else {
            return;
        };
        if let Some(f) = classify(code, reason) {
            self.record(f, reason);
        }
    }

    /// A plaintext client on a TLS listener is only ever logged ("Disconnected while
    /// requesting ApiVersion: might be caused by incorrect security.protocol …").
    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, _fac: &str, message: &str) {
        if let Some(f) = classify(RDKafkaErrorCode::Fail, message) {
            self.record(f, message);
        }
    }
}

impl Reports {
    fn record(&self, failure: Failure, detail: &str) {
        // librdkafka's texts name brokers and mechanisms, never the password.
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((failure, detail.to_owned()));
    }
}

impl ConsumerContext for Reports {}

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
        .set("log_level", "3");
    for (k, v) in &access.properties {
        config.set(k, v);
    }
    config
        .create_with_context(Reports::default())
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
            .0
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
            assert_eq!(classify(code, reason), want, "{reason}");
        }
    }
}
