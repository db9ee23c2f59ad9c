//! The operator's own reads of the brokers, and the Kafka vocabulary the rest of the operator
//! shares, below its readers.
//!
//! - [`client`]: one librdkafka client for one pipeline — how many partitions its topics
//!   have, where its consumer group stands in each ([`PartitionOffsets`]), when the oldest
//!   record the group has not consumed was written, and the broker's
//!   `offsets.retention.minutes`; [`clients`]: one such client per pipeline, kept across
//!   reconciles and autoscaler samples while its settings stay the same.
//! - [`security`]: the librdkafka security settings a spec implies, pure: the builders render
//!   them for the collector, `secrets.rs` for the operator's client ([`KafkaAccess`]).
//! - [`KafkaError`] and [`classify`]: librdkafka reports why it cannot connect (wrong
//!   password, unknown CA, a plaintext client on a TLS listener) only through its error
//!   callback, while the read merely times out; the client's context keeps the last such
//!   report so the failure can be named (pure).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::types::RDKafkaRespErr;
use tracehouse_contract::oauth::OAuthClient;

pub mod client;
pub mod clients;
pub mod security;

pub use client::KafkaClient;
pub use clients::Clients;

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
    /// OAUTHBEARER without a token: the token endpoint refused the client credentials or did
    /// not answer (`detail` names it and its HTTP status), so the brokers were never asked.
    #[error("no OAUTHBEARER token for the Kafka brokers {brokers}: {detail}")]
    TokenFailed { brokers: String, detail: String },
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
    /// The group's committed offset ([`KafkaClient::offsets`] gives the partition's start offset when the
    /// group has not committed yet).
    pub committed: i64,
    /// The partition's end offset (high watermark).
    pub end: i64,
}

/// How to reach the brokers: bootstrap servers and librdkafka client properties (security
/// settings with inline PEMs and SASL credentials, never file paths), and for OAUTHBEARER
/// the OAuth client whose tokens the client takes.
#[derive(Clone, Default)]
pub struct KafkaAccess {
    pub brokers: String,
    pub properties: BTreeMap<String, String>,
    pub oauth: Option<OAuthClient>,
}

impl fmt::Debug for KafkaAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self.properties.keys().map(String::as_str).collect();
        f.debug_struct("KafkaAccess")
            .field("brokers", &self.brokers)
            .field("property_keys", &keys)
            .field("oauth", &self.oauth)
            .finish()
    }
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
