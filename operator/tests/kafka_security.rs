//! The operator's Kafka metadata read against the stack's secured listeners, without a
//! cluster: SCRAM over TLS and mutual TLS read the partitions; a wrong password and an
//! unknown CA come back named (`AuthFailed`, `TlsFailed`), not as a bare "unreachable"; so do
//! the listener mix-ups: a plaintext client on the TLS listener and a TLS client on the
//! plaintext one (`ProtocolMismatch`), and no client certificate on the mutual-TLS listener
//! (`TlsFailed`).
#![cfg(feature = "stack-tests")]

use std::collections::BTreeMap;
use std::time::Duration;

use tracehouse_e2e::stack_var;
use tracehouse_operator::kafka::{KafkaAccess, KafkaClient, KafkaError};

fn pem(var: &str) -> String {
    let path = stack_var(var);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn scram(password: &str, ca_var: &str) -> KafkaAccess {
    KafkaAccess {
        brokers: stack_var("KAFKA_SASL_SSL_BROKERS"),
        properties: BTreeMap::from([
            ("security.protocol".into(), "SASL_SSL".into()),
            ("sasl.mechanism".into(), "SCRAM-SHA-512".into()),
            ("sasl.username".into(), stack_var("KAFKA_SCRAM_USER")),
            ("sasl.password".into(), password.into()),
            ("ssl.ca.pem".into(), pem(ca_var)),
        ]),
        ..Default::default()
    }
}

/// (what, the brokers' variable, client properties, whether the error names the failure).
type MixUp = (
    &'static str,
    &'static str,
    BTreeMap<String, String>,
    fn(&KafkaError) -> bool,
);

async fn read(access: &KafkaAccess) -> Result<BTreeMap<String, i32>, KafkaError> {
    let timeout = Duration::from_secs(10);
    // A fresh client for each mix-up: a failure is named by what its own handshake reported.
    let client = std::sync::Arc::new(KafkaClient::connect(
        access,
        "tracehouse-operator-security-test",
        timeout,
    )?);
    // A topic every stack has once a consumer group committed: the offsets topic.
    client
        .partitions(&["__consumer_offsets".to_owned()], timeout)
        .await
}

#[tokio::test]
async fn secured_listeners_answer_the_right_credentials_and_name_the_wrong_ones() {
    let ok = read(&scram(
        &stack_var("KAFKA_SCRAM_PASSWORD"),
        "TRACEHOUSE_CA_FILE",
    ))
    .await;
    assert!(ok.is_ok(), "SCRAM over TLS: {ok:?}");

    let mtls = KafkaAccess {
        brokers: stack_var("KAFKA_MTLS_BROKERS"),
        properties: BTreeMap::from([
            ("security.protocol".into(), "SSL".into()),
            ("ssl.ca.pem".into(), pem("TRACEHOUSE_CA_FILE")),
            ("ssl.certificate.pem".into(), pem("TRACEHOUSE_CLIENT_CERT")),
            ("ssl.key.pem".into(), pem("TRACEHOUSE_CLIENT_KEY")),
        ]),
        ..Default::default()
    };
    let ok = read(&mtls).await;
    assert!(ok.is_ok(), "mutual TLS: {ok:?}");

    let err = read(&scram("not-the-password", "TRACEHOUSE_CA_FILE"))
        .await
        .unwrap_err();
    assert!(matches!(err, KafkaError::AuthFailed { .. }), "{err}");

    let err = read(&scram(
        &stack_var("KAFKA_SCRAM_PASSWORD"),
        "TRACEHOUSE_OTHER_CA_FILE",
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, KafkaError::TlsFailed { .. }), "{err}");

    // The listener mix-ups: (what, brokers, client properties, the failure it must name).
    let tls_client = || {
        BTreeMap::from([
            ("security.protocol".into(), "SSL".into()),
            ("ssl.ca.pem".into(), pem("TRACEHOUSE_CA_FILE")),
        ])
    };
    let mix_ups: [MixUp; 3] = [
        (
            "a plaintext client on the SASL_SSL listener",
            "KAFKA_SASL_SSL_BROKERS",
            BTreeMap::new(),
            |e| matches!(e, KafkaError::ProtocolMismatch { .. }),
        ),
        (
            "a TLS client on the plaintext listener",
            "KAFKA_BROKERS",
            tls_client(),
            |e| matches!(e, KafkaError::ProtocolMismatch { .. }),
        ),
        (
            "no client certificate on the mutual-TLS listener",
            "KAFKA_MTLS_BROKERS",
            tls_client(),
            |e| matches!(e, KafkaError::TlsFailed { detail, .. } if detail.contains("certificate")),
        ),
    ];
    for (what, brokers, properties, named) in mix_ups {
        let access = KafkaAccess {
            brokers: stack_var(brokers),
            properties,
            ..Default::default()
        };
        let err = read(&access).await.unwrap_err();
        assert!(named(&err), "{what}: {err}");
    }
}
