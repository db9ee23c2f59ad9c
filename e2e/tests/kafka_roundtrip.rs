//! The local Kafka broker is real: rdkafka creates a topic, produces and consumes through it.
#![cfg(feature = "stack-tests")]

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tracehouse_e2e::{kafka_brokers, unique_name};

#[tokio::test]
async fn produce_and_consume_through_the_real_broker() {
    let brokers = kafka_brokers();
    let topic = unique_name("e2e_roundtrip");

    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("admin client");
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 3, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create_topics request");
    assert!(
        created.iter().all(|r| r.is_ok()),
        "topic creation: {created:?}"
    );

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("compression.type", "lz4")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("producer");
    let sent: Vec<String> = (0..300).map(|i| format!("record-{i:04}")).collect();
    for (i, payload) in sent.iter().enumerate() {
        let key = format!("k{}", i % 7);
        producer
            .send(
                FutureRecord::to(&topic).payload(payload).key(&key),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("delivery");
    }

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", unique_name("e2e_group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");

    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while received.len() < sent.len() {
        let msg = tokio::time::timeout_at(deadline, consumer.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {} of {} records consumed in 60 s",
                    received.len(),
                    sent.len()
                )
            })
            .expect("consume");
        received.push(String::from_utf8(msg.payload().unwrap().to_vec()).unwrap());
    }
    received.sort();
    assert_eq!(received, sent);
    tracehouse_e2e::delete_topics(&[&topic]).await;
}
