//! Produce: generated traces into a Kafka topic, as fast as possible or at a fixed rate.
//!
//! One Kafka record is one encoded `ExportTraceServiceRequest` of
//! [`GeneratorConfig::spans_per_record`] spans (the last one may be shorter), as the
//! OpenTelemetry Collector's kafka exporter writes them. The topic is created with
//! [`ProduceOptions::partitions`] partitions if it does not exist (an existing topic keeps
//! its own partition count). Records go round-robin over the partitions with no key, or,
//! with [`Partitioning::Keyless`], are left to librdkafka's partitioner like the exporter's.
//!
//! Generation and encoding run on one blocking thread; librdkafka compresses and sends on
//! its own threads. The producer is idempotent (`enable.idempotence=true`) so its own
//! retries can never duplicate a record: a duplicate seen by `verify` is the collector's.
//! [`produce`] returns only once every record is acknowledged by the broker, and fails if
//! any was not.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use std::{fmt, str::FromStr};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};

use crate::encode::{Encoding, encode_into};
use crate::generate::{Generator, GeneratorConfig};

/// Record-batch compression of the producer (`compression.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// No compression (the exporter's default).
    #[default]
    None,
    Lz4,
    Zstd,
    Snappy,
    Gzip,
}

impl Compression {
    /// librdkafka's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
            Self::Snappy => "snappy",
            Self::Gzip => "gzip",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Compression {
    type Err = ProduceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "none" => Self::None,
            "lz4" => Self::Lz4,
            "zstd" => Self::Zstd,
            "snappy" => Self::Snappy,
            "gzip" => Self::Gzip,
            other => {
                return Err(ProduceError::Invalid(format!(
                    "unknown compression {other:?}: expected none, lz4, zstd, snappy or gzip"
                )));
            }
        })
    }
}

/// How records are spread over partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioning {
    /// Record `i` goes to partition `i % partitions`, no key: even load, deterministic.
    #[default]
    RoundRobin,
    /// No key and no partition: librdkafka's default partitioner places the records, as
    /// with the exporter's default settings.
    Keyless,
}

/// What to produce, and where.
#[derive(Debug, Clone)]
pub struct ProduceOptions {
    /// Kafka bootstrap servers, `host:port[,host:port]`.
    pub brokers: String,
    /// Topic (the exporter's default is `otlp_spans`).
    pub topic: String,
    /// Partitions to create the topic with if it does not exist.
    pub partitions: i32,
    /// Replication factor to create the topic with if it does not exist.
    pub replication_factor: i32,
    /// Total spans to produce.
    pub spans: u64,
    /// Target rate in spans per second; `None` for as fast as possible.
    pub rate: Option<f64>,
    pub encoding: Encoding,
    pub compression: Compression,
    pub partitioning: Partitioning,
    /// Seed, generator id, spans per record and the size knobs.
    pub generator: GeneratorConfig,
    /// Extra librdkafka producer settings, applied last (they win).
    pub kafka_config: Vec<(String, String)>,
}

impl Default for ProduceOptions {
    fn default() -> Self {
        Self {
            brokers: "localhost:9092".to_string(),
            topic: "otlp_spans".to_string(),
            partitions: 8,
            replication_factor: 1,
            spans: 1_000,
            rate: None,
            encoding: Encoding::OtlpProto,
            compression: Compression::None,
            partitioning: Partitioning::RoundRobin,
            generator: GeneratorConfig::default(),
            kafka_config: Vec::new(),
        }
    }
}

/// Where a run stands; handed to the progress callback about once a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Spans handed to the producer so far.
    pub spans: u64,
    /// Spans to produce in all.
    pub total: u64,
    pub records: u64,
    /// Payload bytes so far (before Kafka compression).
    pub bytes: u64,
    pub elapsed: Duration,
}

impl Progress {
    /// Average spans per second since the start.
    pub fn rate(&self) -> f64 {
        per_second(self.spans, self.elapsed)
    }

    /// Time left at the average rate so far.
    pub fn eta(&self) -> Option<Duration> {
        let rate = self.rate();
        (rate > 0.0).then(|| Duration::from_secs_f64((self.total - self.spans) as f64 / rate))
    }
}

/// The outcome of a run: everything here was acknowledged by the broker.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProduceReport {
    pub topic: String,
    /// Partitions of the topic (its real count if it already existed).
    pub partitions: i32,
    pub encoding: Encoding,
    pub compression: Compression,
    pub partitioning: Partitioning,
    pub generator_id: String,
    pub seed: u64,
    pub records: u64,
    /// Spans produced; their `loadgen.seq` values are `0..spans`.
    pub spans: u64,
    /// Payload bytes (the encoded requests, before Kafka compression).
    pub bytes: u64,
    /// Wall time from the first record to the last acknowledgement.
    pub seconds: f64,
    pub spans_per_second: f64,
    /// Payload megabytes (10^6 bytes) per second.
    pub mb_per_second: f64,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("invalid options: {0}")]
    Invalid(String),
    #[error("kafka: {context}")]
    Kafka {
        context: &'static str,
        #[source]
        source: KafkaError,
    },
    #[error("cannot create topic {topic}: {code}")]
    CreateTopic {
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("topic {0} has no partitions in the broker's metadata")]
    NoPartitions(String),
    #[error("{failed} of {records} records were not delivered; first error: {first}")]
    Delivery {
        failed: u64,
        records: u64,
        first: String,
    },
    #[error("not all records acknowledged within {0:?}")]
    FlushTimeout(Duration),
    #[error("the producing thread panicked")]
    Panicked,
}

fn kafka(context: &'static str) -> impl FnOnce(KafkaError) -> ProduceError {
    move |source| ProduceError::Kafka { context, source }
}

/// Produces `opts.spans` spans; see the module docs.
pub async fn produce(opts: &ProduceOptions) -> Result<ProduceReport, ProduceError> {
    produce_with_progress(opts, |_| {}).await
}

/// [`produce`], calling `on_progress` about once a second from the producing thread.
pub async fn produce_with_progress<F>(
    opts: &ProduceOptions,
    on_progress: F,
) -> Result<ProduceReport, ProduceError>
where
    F: FnMut(&Progress) + Send + 'static,
{
    validate(opts)?;
    ensure_topic(opts).await?;
    let opts = opts.clone();
    tokio::task::spawn_blocking(move || run(&opts, on_progress))
        .await
        .map_err(|_| ProduceError::Panicked)?
}

fn validate(opts: &ProduceOptions) -> Result<(), ProduceError> {
    if opts.partitions < 1 || opts.replication_factor < 1 {
        return Err(ProduceError::Invalid(
            "partitions and replication factor must be at least 1".into(),
        ));
    }
    if opts.generator.spans_per_record == 0 {
        return Err(ProduceError::Invalid(
            "spans per record must be at least 1".into(),
        ));
    }
    if let Some(rate) = opts.rate
        && !(rate.is_finite() && rate > 0.0)
    {
        return Err(ProduceError::Invalid(format!(
            "rate must be positive, not {rate}"
        )));
    }
    Ok(())
}

/// Creates the topic unless it exists.
async fn ensure_topic(opts: &ProduceOptions) -> Result<(), ProduceError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &opts.brokers)
        .create()
        .map_err(kafka("admin client"))?;
    let topic = NewTopic::new(
        &opts.topic,
        opts.partitions,
        TopicReplication::Fixed(opts.replication_factor),
    );
    let results = admin
        .create_topics(
            &[topic],
            &AdminOptions::new()
                .request_timeout(Some(Duration::from_secs(30)))
                .operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .map_err(kafka("create topic"))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(ProduceError::CreateTopic { topic, code }),
        }
    }
    Ok(())
}

/// Counts acknowledgements; called on librdkafka's polling thread.
#[derive(Default)]
struct Deliveries {
    delivered: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((err, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert_with(|| err.to_string());
            }
        }
    }
}

/// How long to wait for outstanding acknowledgements at the end.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);

fn run<F: FnMut(&Progress)>(
    opts: &ProduceOptions,
    mut on_progress: F,
) -> Result<ProduceReport, ProduceError> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &opts.brokers)
        .set("compression.type", opts.compression.as_str())
        // No duplicates from the producer's own retries, whatever the network does.
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "120000")
        // Bounded memory: at most 256 MiB of records waiting in the client.
        .set("queue.buffering.max.kbytes", "262144");
    for (k, v) in &opts.kafka_config {
        config.set(k, v);
    }
    let producer: ThreadedProducer<Deliveries> = config
        .create_with_context(Deliveries::default())
        .map_err(kafka("producer"))?;
    let partitions = partition_count(&producer, &opts.topic)?;

    let mut generator = Generator::new(opts.generator.clone());
    let per_record = generator.config().spans_per_record as u64;
    let start = Instant::now();
    let mut next_progress = start + Duration::from_secs(1);
    let (mut spans, mut records, mut bytes) = (0u64, 0u64, 0u64);
    let mut payload = Vec::new();

    while spans < opts.spans {
        if producer.context().failed.load(Ordering::Relaxed) > 0 {
            break; // Reported below, after the in-flight records settle.
        }
        if let Some(rate) = opts.rate {
            // Pace by spans already sent: the next record leaves at `spans / rate`.
            let due = start + Duration::from_secs_f64(spans as f64 / rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let n = per_record.min(opts.spans - spans);
        encode_into(
            &generator.next_request(n as usize),
            opts.encoding,
            &mut payload,
        );
        let partition = (records % partitions as u64) as i32;
        let mut record = BaseRecord::<(), [u8]>::to(&opts.topic).payload(payload.as_slice());
        if opts.partitioning == Partitioning::RoundRobin {
            record = record.partition(partition);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    // The client's queue is full: wait for acknowledgements to drain it.
                    record = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((e, _)) => return Err(kafka("send")(e)),
            }
        }
        spans += n;
        records += 1;
        bytes += payload.len() as u64;
        let now = Instant::now();
        if now >= next_progress {
            next_progress = now + Duration::from_secs(1);
            on_progress(&Progress {
                spans,
                total: opts.spans,
                records,
                bytes,
                elapsed: now - start,
            });
        }
    }

    producer.flush(FLUSH_TIMEOUT).map_err(|e| match e {
        KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut) => {
            ProduceError::FlushTimeout(FLUSH_TIMEOUT)
        }
        e => kafka("flush")(e),
    })?;
    let elapsed = start.elapsed();
    let ctx = producer.context();
    let failed = ctx.failed.load(Ordering::Relaxed);
    let delivered = ctx.delivered.load(Ordering::Relaxed);
    if failed > 0 || delivered != records {
        let first = ctx
            .first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        return Err(ProduceError::Delivery {
            failed: records - delivered.min(records),
            records,
            first: first.unwrap_or_else(|| format!("{delivered} acknowledged")),
        });
    }
    on_progress(&Progress {
        spans,
        total: opts.spans,
        records,
        bytes,
        elapsed,
    });
    let seconds = elapsed.as_secs_f64();
    Ok(ProduceReport {
        topic: opts.topic.clone(),
        partitions,
        encoding: opts.encoding,
        compression: opts.compression,
        partitioning: opts.partitioning,
        generator_id: opts.generator.generator_id.clone(),
        seed: opts.generator.seed,
        records,
        spans,
        bytes,
        seconds,
        spans_per_second: per_second(spans, elapsed),
        mb_per_second: per_second(bytes, elapsed) / 1e6,
    })
}

/// The topic's partition count, waiting briefly for a just-created topic to appear.
fn partition_count(
    producer: &ThreadedProducer<Deliveries>,
    topic: &str,
) -> Result<i32, ProduceError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metadata = producer
            .client()
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .map_err(kafka("metadata"))?;
        let count = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len() as i32);
        if count > 0 {
            return Ok(count);
        }
        if Instant::now() >= deadline {
            return Err(ProduceError::NoPartitions(topic.to_string()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn per_second(n: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 { n as f64 / s } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_names_round_trip() {
        for c in [
            Compression::None,
            Compression::Lz4,
            Compression::Zstd,
            Compression::Snappy,
            Compression::Gzip,
        ] {
            assert_eq!(c.as_str().parse::<Compression>().unwrap(), c);
        }
        assert!("brotli".parse::<Compression>().is_err());
    }

    #[test]
    fn invalid_options_are_refused_before_any_io() {
        let bad_rate = ProduceOptions {
            rate: Some(0.0),
            ..ProduceOptions::default()
        };
        assert!(matches!(validate(&bad_rate), Err(ProduceError::Invalid(_))));
        let bad_parts = ProduceOptions {
            partitions: 0,
            ..ProduceOptions::default()
        };
        assert!(matches!(
            validate(&bad_parts),
            Err(ProduceError::Invalid(_))
        ));
        assert!(validate(&ProduceOptions::default()).is_ok());
    }

    #[test]
    fn progress_eta_uses_the_average_rate() {
        let p = Progress {
            spans: 250,
            total: 1000,
            records: 3,
            bytes: 0,
            elapsed: Duration::from_secs(1),
        };
        assert_eq!(p.rate(), 250.0);
        assert_eq!(p.eta(), Some(Duration::from_secs(3)));
    }
}
