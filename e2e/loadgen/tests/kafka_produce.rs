//! `produce` against the real local Kafka: every span arrives exactly once, in records of
//! the configured size, spread as asked; read back with an independent rdkafka consumer.
#![cfg(feature = "stack-tests")]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{ids_and_seqs, json_ids_and_seqs, stack_var, unique_name};
use prost::Message as _;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use tracehouse_loadgen::{
    Compression, Encoding, ExportTraceServiceRequest, GeneratorConfig, Partitioning,
    ProduceOptions, ProduceReport, produce,
};

/// Consumes the whole topic: `(partition, payload)` of every record, checked against
/// the topic's high watermarks so nothing extra can hide.
async fn consume_all(brokers: &str, topic: &str, records: u64) -> Vec<(i32, Vec<u8>)> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique_name("loadgen_test"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while (out.len() as u64) < records {
        let msg = tokio::time::timeout_at(deadline, consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {records} records consumed in 60 s", out.len()))
            .expect("consume");
        out.push((msg.partition(), msg.payload().expect("payload").to_vec()));
    }
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let mut in_topic = 0;
    for p in metadata.topics()[0].partitions() {
        let (low, high) = consumer
            .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
            .expect("watermarks");
        in_topic += high - low;
    }
    assert_eq!(
        in_topic as u64, records,
        "records in the topic vs records reported"
    );
    out
}

fn assert_every_seq_once(pairs: impl IntoIterator<Item = (String, i64)>, id: &str, spans: u64) {
    let mut seen = vec![0u32; spans as usize];
    {
        for (got_id, seq) in pairs {
            assert_eq!(got_id, id);
            assert!((0..spans as i64).contains(&seq), "seq {seq} out of range");
            seen[seq as usize] += 1;
        }
    }
    let missing: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == 0).collect();
    let repeated: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] > 1).collect();
    assert!(missing.is_empty(), "missing seqs: {missing:?}");
    assert!(repeated.is_empty(), "repeated seqs: {repeated:?}");
}

fn options(topic: &str, id: &str, spans: u64) -> ProduceOptions {
    ProduceOptions {
        brokers: stack_var("KAFKA_BROKERS"),
        topic: topic.to_string(),
        partitions: 4,
        spans,
        generator: GeneratorConfig {
            generator_id: id.to_string(),
            seed: 42,
            spans_per_record: 100,
            ..GeneratorConfig::default()
        },
        ..ProduceOptions::default()
    }
}

fn check_report(r: &ProduceReport, spans: u64, records: u64) {
    assert_eq!((r.spans, r.records, r.partitions), (spans, records, 4));
    assert!(
        r.bytes > 0 && r.seconds > 0.0 && r.spans_per_second > 0.0,
        "{r:?}"
    );
}

#[tokio::test]
async fn proto_lz4_round_robin_every_span_exactly_once() {
    let brokers = stack_var("KAFKA_BROKERS");
    let topic = unique_name("loadgen_proto");
    let spans = 4321; // 43 full records and one of 21 spans
    let opts = ProduceOptions {
        compression: Compression::Lz4,
        ..options(&topic, "proto-test", spans)
    };
    let report = produce(&opts).await.expect("produce");
    check_report(&report, spans, 44);

    let records = consume_all(&brokers, &topic, report.records).await;
    let mut per_partition: HashMap<i32, u64> = HashMap::new();
    let mut bytes = 0;
    let mut decoded = Vec::new();
    for (partition, payload) in &records {
        *per_partition.entry(*partition).or_default() += 1;
        bytes += payload.len() as u64;
        decoded.push(ExportTraceServiceRequest::decode(payload.as_slice()).expect("protobuf"));
    }
    assert_eq!(bytes, report.bytes, "payload bytes");
    // Round-robin: 44 records over 4 partitions, 11 each.
    assert_eq!(
        per_partition,
        HashMap::from([(0, 11), (1, 11), (2, 11), (3, 11)])
    );
    let mut sizes: Vec<usize> = decoded.iter().map(|r| ids_and_seqs(r).len()).collect();
    sizes.sort_unstable();
    assert_eq!(
        (sizes[0], sizes[1], sizes[43]),
        (21, 100, 100),
        "spans per record"
    );
    assert_every_seq_once(decoded.iter().flat_map(ids_and_seqs), "proto-test", spans);
    tracehouse_e2e::delete_topics(&[&topic]).await;
}

#[tokio::test]
async fn json_zstd_keyless_every_span_exactly_once() {
    let brokers = stack_var("KAFKA_BROKERS");
    let topic = unique_name("loadgen_json");
    let spans = 2500;
    let opts = ProduceOptions {
        encoding: Encoding::OtlpJson,
        compression: Compression::Zstd,
        partitioning: Partitioning::Keyless,
        rate: Some(20_000.0),
        ..options(&topic, "json-test", spans)
    };
    let report = produce(&opts).await.expect("produce");
    check_report(&report, spans, 25);
    // 2500 spans at 20 000 spans/s cannot take less than ~0.12 s (the first record is due
    // at once, the 25th after 2400 spans).
    assert!(
        report.seconds >= 0.11,
        "rate not applied: {} s",
        report.seconds
    );

    let records = consume_all(&brokers, &topic, report.records).await;
    let decoded: Vec<_> = records
        .iter()
        .map(|(_, payload)| {
            let text: serde_json::Value = serde_json::from_slice(payload).expect("JSON");
            assert!(text["resourceSpans"].is_array(), "OTLP/JSON request");
            text
        })
        .collect();
    assert_every_seq_once(
        decoded.iter().flat_map(json_ids_and_seqs),
        "json-test",
        spans,
    );
    tracehouse_e2e::delete_topics(&[&topic]).await;
}
