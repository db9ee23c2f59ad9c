//! The operator's Kafka reads through OAUTHBEARER on the stack's SASL_SSL listener, without a
//! cluster: with tokens from the stand-in OIDC provider (`e2e/oidc`, over HTTPS trusted through
//! the Kafka CA) the pipeline's client reads partitions, the group's offsets (the lag), the
//! oldest unconsumed record and, through its admin client, the broker's
//! `offsets.retention.minutes`. A wrong client secret is named by the token endpoint's answer
//! (`TokenFailed`: the endpoint and HTTP 401, condition reason `KafkaAuthFailed`), and a token
//! the broker cannot verify (signed with another key) by the broker's refusal (`AuthFailed`).
#![cfg(feature = "stack-tests")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::create_topic;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tracehouse_contract::oauth::OAuthClient;
use tracehouse_e2e::oidc::{ForeignKey, OidcProvider};
use tracehouse_e2e::{delete_topics, kafka_brokers, stack_var, unique_name};
use tracehouse_operator::error::Error;
use tracehouse_operator::kafka::{KafkaAccess, KafkaClient, KafkaError, PartitionOffsets};

const T: Duration = Duration::from_secs(10);
const CLIENT_ID: &str = "tracehouse-operator";

fn access(token_endpoint: &str, secret: &str) -> KafkaAccess {
    let ca = std::fs::read_to_string(stack_var("TRACEHOUSE_CA_FILE")).unwrap();
    KafkaAccess {
        brokers: stack_var("KAFKA_SASL_SSL_BROKERS"),
        properties: BTreeMap::from([
            ("security.protocol".into(), "SASL_SSL".into()),
            ("sasl.mechanism".into(), "OAUTHBEARER".into()),
            ("ssl.ca.pem".into(), ca.clone()),
        ]),
        oauth: Some(OAuthClient {
            token_endpoint: token_endpoint.to_owned(),
            client_id: CLIENT_ID.to_owned(),
            client_secret: secret.to_owned(),
            scope: Some("kafka".into()),
            extensions: BTreeMap::from([("logicalCluster".into(), "lkc-local".into())]),
            ca_pem: Some(ca),
        }),
    }
}

/// Three records on partition 0 and the group's commit at 1, through the plaintext listener.
async fn records_and_a_commit(topic: &str, group: &str) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("producer");
    for _ in 0..3 {
        producer
            .send(
                FutureRecord::<(), [u8]>::to(topic)
                    .partition(0)
                    .payload(b"x"),
                T,
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("producing to {topic}: {e}"));
    }
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(1))
        .unwrap();
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
}

async fn partitions(
    access: &KafkaAccess,
    topic: &str,
) -> Result<BTreeMap<String, i32>, KafkaError> {
    let client = Arc::new(KafkaClient::connect(
        access,
        &unique_name("th-oauth-probe"),
        T,
    )?);
    client.partitions(&[topic.to_owned()], T).await
}

#[tokio::test]
async fn the_operators_reads_go_through_oauthbearer_and_refusals_are_named() {
    let topic = unique_name("th-oauth");
    let group = unique_name("th-oauth-group");
    create_topic(&topic, 2).await;
    let body = async {
        records_and_a_commit(&topic, &group).await;
        let idp = OidcProvider::start(CLIENT_ID, "the-client-secret", 300);

        let client = Arc::new(
            KafkaClient::connect(&access(&idp.url, "the-client-secret"), &group, T).unwrap(),
        );
        let counts = client
            .partitions(std::slice::from_ref(&topic), T)
            .await
            .unwrap();
        assert_eq!(counts, BTreeMap::from([(topic.clone(), 2)]));
        let offsets = client.offsets(&counts, T).await.unwrap();
        let at = |partition, committed, end| PartitionOffsets {
            topic: topic.clone(),
            partition,
            committed,
            end,
        };
        assert_eq!(offsets, [at(0, 1, 3), at(1, 0, 0)]);
        assert!(
            client
                .oldest_unconsumed(&offsets, T)
                .await
                .unwrap()
                .is_some()
        );
        // The admin client takes the pipeline's token too.
        let retention = client.offsets_retention(&topic, T).await.unwrap();
        assert!(retention.is_some_and(|m| m > 0), "{retention:?}");
        // One token served every read (and the admin client).
        assert_eq!((idp.issued(), idp.refused()), (1, 0));

        // A wrong client secret: the endpoint's refusal, named, before any broker is asked.
        let err = partitions(&access(&idp.url, "not-the-secret"), &topic)
            .await
            .unwrap_err();
        let KafkaError::TokenFailed { detail, .. } = &err else {
            panic!("expected TokenFailed, got {err}");
        };
        assert_eq!(
            detail,
            &format!(
                "the token endpoint {} answered HTTP 401 Unauthorized: invalid_client: client authentication failed",
                idp.url
            )
        );
        assert!(!err.to_string().contains("not-the-secret"));
        assert_eq!(Error::Kafka(err).reason(), "KafkaAuthFailed");

        // A token the broker cannot verify: the broker's refusal.
        let foreign_key = ForeignKey::new();
        let forger =
            OidcProvider::start_with_key(&foreign_key.path, CLIENT_ID, "the-client-secret", 300);
        let err = partitions(&access(&forger.url, "the-client-secret"), &topic)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, KafkaError::AuthFailed { detail, .. } if detail.contains("invalid_token")),
            "{err}"
        );
        assert_eq!(forger.issued(), 1);
    };
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    delete_topics(&[&topic]).await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
