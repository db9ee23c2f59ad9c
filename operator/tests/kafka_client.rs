//! The operator's one Kafka client per pipeline against the stack's broker, without a
//! cluster: the same client reads a pipeline's partitions, its group's offsets and its oldest
//! unconsumed record again and again (a second oldest-record read after the first unassigned
//! and paused its partitions), sees the group's new commits and partitions added since its
//! last read, stays usable after
//! a read that failed, and reads the broker's `offsets.retention.minutes` as the broker
//! itself reports it; the cache hands the same client back until the settings change, and
//! lets it go when the pipeline does.
#![cfg(feature = "stack-tests")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{create_topic, grow_topic};
use rdkafka::admin::{AdminOptions, ResourceSpecifier};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tracehouse_e2e::{delete_topics, kafka_admin, kafka_brokers, unique_name};
use tracehouse_operator::kafka::{Clients, KafkaAccess, KafkaError, PartitionOffsets};

const T: Duration = Duration::from_secs(10);

/// Three records on partition 0, the first written at `first_ms`.
async fn produce(topic: &str, first_ms: i64) {
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("producer");
    for i in 0..3 {
        let record = FutureRecord::<(), [u8]>::to(topic)
            .partition(0)
            .payload(b"x")
            .timestamp(first_ms + i * 1000);
        producer
            .send(record, Duration::from_secs(10))
            .await
            .unwrap_or_else(|(e, _)| panic!("producing to {topic}: {e}"));
    }
}

/// Commits `offset` on `partition` for `group`, as a collector of the group would.
fn commit(topic: &str, group: &str, partition: i32, offset: i64) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset))
        .unwrap();
    consumer
        .commit(&tpl, CommitMode::Sync)
        .unwrap_or_else(|e| panic!("committing {topic}/{partition}@{offset}: {e}"));
}

/// The broker's own answer, through the stack's admin client.
async fn broker_retention_minutes() -> Option<u64> {
    let admin = kafka_admin();
    let options = AdminOptions::new().request_timeout(Some(T));
    // The stack runs one broker; its id is the lowest, as the operator picks.
    let metadata = admin.inner().fetch_metadata(None, T).expect("metadata");
    let id = metadata.brokers().iter().map(|b| b.id()).min()?;
    let answer = admin
        .describe_configs(&[ResourceSpecifier::Broker(id)], &options)
        .await
        .expect("describe_configs");
    answer.into_iter().flatten().find_map(|r| {
        r.get("offsets.retention.minutes")?
            .value
            .as_deref()?
            .parse()
            .ok()
    })
}

fn at(topic: &str, partition: i32, committed: i64, end: i64) -> PartitionOffsets {
    PartitionOffsets {
        topic: topic.to_owned(),
        partition,
        committed,
        end,
    }
}

#[tokio::test]
async fn one_client_reads_a_pipelines_brokers_again_and_sees_them_change() {
    let topic = unique_name("th-client");
    let group = unique_name("th-client-group");
    create_topic(&topic, 2).await;
    let body = async {
        let now_ms = i64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap();
        // Ten minutes ago, whole seconds: a write time the broker accepts as it is.
        let first_ms = (now_ms - 600_000) / 1000 * 1000;
        produce(&topic, first_ms).await;

        let clients = Clients::default();
        let access = KafkaAccess {
            brokers: kafka_brokers(),
            properties: BTreeMap::new(),
            ..Default::default()
        };
        let client = clients.get("shop/orders", &access, &group, T).unwrap();
        let counts = client
            .partitions(std::slice::from_ref(&topic), T)
            .await
            .unwrap();
        assert_eq!(counts, BTreeMap::from([(topic.clone(), 2)]));
        let offsets = client.offsets(&counts, T).await.unwrap();
        assert_eq!(offsets, [at(&topic, 0, 0, 3), at(&topic, 1, 0, 0)]);
        // The oldest record, twice over the same client: the first read's assignment and
        // pauses are gone by the second.
        for _ in 0..2 {
            let oldest = client.oldest_unconsumed(&offsets, T).await.unwrap();
            assert_eq!(oldest, Some(first_ms));
        }

        // The group commits (as its collectors do): the same client reads the new offsets.
        commit(&topic, &group, 0, 2);
        let offsets = client.offsets(&counts, T).await.unwrap();
        assert_eq!(offsets, [at(&topic, 0, 2, 3), at(&topic, 1, 0, 0)]);
        let oldest = client.oldest_unconsumed(&offsets, T).await.unwrap();
        assert_eq!(oldest, Some(first_ms + 2000));

        // A failed read leaves the client usable.
        let missing = unique_name("th-client-missing");
        let err = client.partitions(&[missing], T).await.unwrap_err();
        assert!(matches!(err, KafkaError::TopicNotFound { .. }), "{err}");

        // Partitions added since: the same client sees them at its next read.
        grow_topic(&topic, 4).await;
        let same = clients.get("shop/orders", &access, &group, T).unwrap();
        assert!(Arc::ptr_eq(&client, &same), "the settings did not change");
        let counts = same
            .partitions(std::slice::from_ref(&topic), T)
            .await
            .unwrap();
        assert_eq!(counts, BTreeMap::from([(topic.clone(), 4)]));
        assert_eq!(same.offsets(&counts, T).await.unwrap().len(), 4);

        // The broker's offsets retention, as the broker reports it.
        let minutes = same.offsets_retention(&topic, T).await.unwrap();
        assert!(minutes.is_some(), "the broker names its offsets retention");
        assert_eq!(minutes, broker_retention_minutes().await);
        // Kept for an hour: asked again, the same answer without a new admin client.
        assert_eq!(same.offsets_retention(&topic, T).await.unwrap(), minutes);

        // Changed settings: a new client, which reads as well.
        let mut changed = access.clone();
        changed
            .properties
            .insert("client.id".into(), "tracehouse-operator-test".into());
        let renewed = clients.get("shop/orders", &changed, &group, T).unwrap();
        assert!(!Arc::ptr_eq(&client, &renewed));
        let counts = renewed
            .partitions(std::slice::from_ref(&topic), T)
            .await
            .unwrap();
        assert_eq!(counts[&topic], 4);
        assert_eq!(clients.len(), 1);
        clients.forget("shop/orders");
        assert!(clients.is_empty());
    };
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    delete_topics(&[topic.as_str()]).await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
