//! The reconciler's errors: one variant per thing an operator of the operator acts on
//! differently, each with a low-cardinality metric label and a CamelCase condition reason.

use crate::builders::BuildError;
use crate::kafka::KafkaError;
use crate::secrets::SecretError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be turned into a gateway (the CRD validation is the first line).
    #[error(transparent)]
    InvalidSpec(#[from] BuildError),

    /// A Secret the spec references is missing or lacks a key.
    #[error(transparent)]
    Secret(#[from] SecretError),

    /// The brokers did not answer, or a topic does not exist.
    #[error(transparent)]
    Kafka(#[from] KafkaError),

    /// ClickHouse refused or could not run the schema migrations.
    #[error("schema of {target}: {source}")]
    Schema {
        target: String,
        #[source]
        source: tracehouse_schema::Error,
    },

    /// `schemaMode: Verify` and the table is not as the spec asks.
    #[error(
        "schema of {target} is not applied and spec.clickhouse.schemaMode is Verify: missing {}; apply it (`tracehouse-collector schema apply`) or set schemaMode Apply",
        missing.join(", ")
    )]
    SchemaNotApplied {
        target: String,
        missing: Vec<String>,
    },

    /// The schema step outlived its deadline.
    #[error("schema of {target}: no answer from ClickHouse within {seconds}s")]
    SchemaTimeout { target: String, seconds: u64 },

    /// A call to the Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    /// An object could not be serialized for the API (a bug, not a user error).
    #[error("cannot serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Label of `tracehouse_operator_reconcile_errors_total{kind}`.
    /// Every value [`Error::metric_label`] returns: the error counter exports each at 0 from
    /// the start, so dashboards and alerts read 0, not "No data", before the first failure.
    pub const METRIC_LABELS: [&'static str; 9] = [
        "invalid_spec",
        "secret",
        "kafka_topic_not_found",
        "kafka_auth",
        "kafka_tls",
        "kafka",
        "schema",
        "kube_api",
        "serialize",
    ];

    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => "invalid_spec",
            Self::Secret(_) => "secret",
            Self::Kafka(
                KafkaError::TopicNotFound { .. } | KafkaError::DeadLetterTopicNotFound { .. },
            ) => "kafka_topic_not_found",
            Self::Kafka(KafkaError::AuthFailed { .. } | KafkaError::TokenFailed { .. }) => {
                "kafka_auth"
            }
            Self::Kafka(KafkaError::TlsFailed { .. } | KafkaError::ProtocolMismatch { .. }) => {
                "kafka_tls"
            }
            Self::Kafka(_) => "kafka",
            Self::Schema { .. } | Self::SchemaTimeout { .. } | Self::SchemaNotApplied { .. } => {
                "schema"
            }
            Self::Kube(_) => "kube_api",
            Self::Serialize { .. } => "serialize",
        }
    }

    /// The CamelCase reason this error puts on the status conditions.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => "InvalidSpec",
            Self::Secret(SecretError::NotFound { .. }) => "SecretNotFound",
            Self::Secret(_) => "SecretInvalid",
            Self::Kafka(KafkaError::TopicNotFound { .. }) => "TopicNotFound",
            Self::Kafka(KafkaError::DeadLetterTopicNotFound { .. }) => "DeadLetterTopicNotFound",
            Self::Kafka(KafkaError::AuthFailed { .. } | KafkaError::TokenFailed { .. }) => {
                "KafkaAuthFailed"
            }
            Self::Kafka(KafkaError::TlsFailed { .. }) => "KafkaTlsFailed",
            Self::Kafka(KafkaError::ProtocolMismatch { .. }) => "KafkaProtocolMismatch",
            Self::Kafka(_) => "KafkaUnreachable",
            Self::Schema { source, .. } => match source {
                tracehouse_schema::Error::ChecksumMismatch { .. }
                | tracehouse_schema::Error::ShapeMismatch { .. }
                | tracehouse_schema::Error::UnknownMigration { .. } => "SchemaConflict",
                tracehouse_schema::Error::LockTimeout { .. }
                | tracehouse_schema::Error::LockLost { .. } => "SchemaLocked",
                tracehouse_schema::Error::Tls { .. } => "ClickHouseTlsFailed",
                e if e
                    .server_code()
                    .is_some_and(|c| CLICKHOUSE_AUTH_CODES.contains(&c)) =>
                {
                    "ClickHouseAuthFailed"
                }
                tracehouse_schema::Error::ClickHouse { .. } => "ClickHouseUnavailable",
                _ => "MigrationFailed",
            },
            Self::SchemaTimeout { .. } => "ClickHouseUnavailable",
            Self::SchemaNotApplied { .. } => "SchemaNotApplied",
            Self::Kube(_) => "ApiError",
            Self::Serialize { .. } => "InternalError",
        }
    }
}

/// ClickHouse's "authentication failed" and "unknown user" codes: the credentials, not an
/// outage.
const CLICKHOUSE_AUTH_CODES: [u32; 3] = [192, 193, 516];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_reasons_are_stable_identifiers() {
        let errors = [
            Error::Kafka(KafkaError::TopicNotFound {
                topic: "t".into(),
                brokers: "b".into(),
            }),
            Error::SchemaTimeout {
                target: "otel.otel_traces".into(),
                seconds: 60,
            },
            Error::Secret(SecretError::NotFound {
                namespace: "ns".into(),
                name: "s".into(),
            }),
        ];
        for e in &errors {
            let label = e.metric_label();
            assert!(
                Error::METRIC_LABELS.contains(&label),
                "{label} is not listed"
            );
            assert!(
                label.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{label}"
            );
            let reason = e.reason();
            assert!(
                reason.chars().next().unwrap().is_ascii_uppercase(),
                "{reason}"
            );
            assert!(
                reason.chars().all(|c| c.is_ascii_alphanumeric()),
                "{reason}"
            );
        }
        assert_eq!(errors[0].reason(), "TopicNotFound");
        let named = [
            (
                Error::Kafka(KafkaError::AuthFailed {
                    brokers: "b".into(),
                    detail: "SASL authentication error".into(),
                }),
                "KafkaAuthFailed",
                "kafka_auth",
            ),
            (
                Error::Kafka(KafkaError::DeadLetterTopicNotFound {
                    topic: "dlq".into(),
                    brokers: "b".into(),
                }),
                "DeadLetterTopicNotFound",
                "kafka_topic_not_found",
            ),
            (
                Error::Kafka(KafkaError::TlsFailed {
                    brokers: "b".into(),
                    detail: "certificate verify failed".into(),
                }),
                "KafkaTlsFailed",
                "kafka_tls",
            ),
            (
                Error::Schema {
                    target: "otel.otel_traces".into(),
                    source: tracehouse_schema::Error::Tls {
                        context: "status".into(),
                        failure: tracehouse_schema::TlsFailure::UnknownCa,
                        detail: "invalid peer certificate: UnknownIssuer".into(),
                    },
                },
                "ClickHouseTlsFailed",
                "schema",
            ),
            (
                Error::Kafka(KafkaError::TokenFailed {
                    brokers: "b".into(),
                    detail: "the token endpoint https://idp/token answered HTTP 401 Unauthorized: invalid_client".into(),
                }),
                "KafkaAuthFailed",
                "kafka_auth",
            ),
        ];
        for (e, reason, label) in &named {
            assert_eq!(e.reason(), *reason, "{e}");
            assert_eq!(e.metric_label(), *label, "{e}");
        }
        assert!(
            named[3].0.to_string().contains("unknown CA"),
            "{}",
            named[3].0
        );
        assert_eq!(errors[0].metric_label(), "kafka_topic_not_found");
    }
}
