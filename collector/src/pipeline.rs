//! The pipeline: wires source → workers → inserts → acknowledgements, and shuts it down.
//! [`run`] reads as the list of its stages; each stage's wiring is a function below.
//!
//! Queues are bounded, and the in-flight byte budget bounds all of them together: the
//! source pauses its partitions when the budget is spent, so a slow or absent ClickHouse
//! turns into consumer lag, never into unbounded memory or dropped data.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use rdkafka::producer::FutureProducer;
use tokio::sync::{Semaphore, mpsc};

use crate::batch::CutPolicy;
use crate::budget::Budget;
use crate::config::{CommitFormat, Config};
use crate::http::Health;
use crate::insert::breaker::RejectBreaker;
use crate::insert::sink::Sink;
use crate::insert::{Inserts, KafkaDeadLetters};
use crate::kafka_clients;
use crate::log_limit::RateLimit;
use crate::metrics::Metrics;
use crate::source::{self, Ack, Holdings, MachineConfig, SourceConfig, backlog_policy};
use crate::workers::{self, EncoderFactory, ToInsert, Work};

/// Run the collector until `shutdown` resolves; then drain within the configured deadline.
pub async fn run(
    cfg: Config,
    factory: EncoderFactory,
    registry: Registry,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let sink = clickhouse_sink(&cfg)?;
    let oauth = kafka_clients::token_source(&cfg.kafka).await?;
    let health = Arc::new(Health::default());
    let heartbeat = Arc::new(AtomicU64::new(0));
    let http = crate::http::serve(
        cfg.metrics_addr,
        registry,
        metrics.clone(),
        health.clone(),
        heartbeat.clone(),
    )
    .await?;
    tracing::info!(addr = %cfg.metrics_addr, "serving /metrics, /healthz, /readyz");
    spawn_readiness(sink.clone(), health.clone());
    tokio::pin!(shutdown);
    if !crate::startup::check(&cfg, oauth.as_ref(), &metrics, &mut shutdown).await {
        http.abort();
        return Ok(());
    }
    // A JSON table's format depends on the server (`insert/format.rs`): known from here on.
    let factory = crate::insert::format::for_server(&cfg, &metrics, &sink, factory).await;

    let budget = Budget::new(cfg.limits.max_inflight_bytes);
    // Unbounded in count, bounded in bytes by type: a batch carries its budget permit and
    // an acknowledgement carries its batch (see `source`'s module docs).
    let (batch_tx, batch_rx) = crossbeam_channel::unbounded::<Work>();
    // One encoded body waits for an insert slot (and one more in the dispatcher): encoding
    // further ahead only holds more compressed bodies (2-4 MiB each on full spans) while
    // ClickHouse is the bottleneck; batches not yet encoded wait as payloads, which the
    // budget counts anyway.
    let (encoded_tx, encoded_rx) = mpsc::channel::<ToInsert>(1);
    let (ack_tx, ack_rx) = crossbeam_channel::unbounded::<Ack>();
    let worker_handles =
        workers::spawn(encode_threads(&cfg), factory.clone(), batch_rx, encoded_tx);
    // The producer's token link lives as long as the run (the inserts hold a clone).
    let (dead_letters, _dead_letter_producer) = dead_letters(&cfg, oauth.as_ref())?;
    let holdings = Holdings::new();
    let source = source::spawn(
        source_config(&cfg, dead_letters.is_some(), oauth),
        metrics.clone(),
        budget,
        batch_tx,
        ack_rx,
        heartbeat,
        holdings.clone(),
    )?;
    health.started.store(true, Ordering::Relaxed);

    let abandon = Arc::new(AtomicBool::new(false));
    let inserts = Arc::new(Inserts {
        query: factory().insert_query(),
        sink,
        factory,
        metrics: metrics.clone(),
        acks: ack_tx,
        dead_letters,
        dead_letter_max_bytes: cfg.kafka.dead_letter_max_bytes,
        holdings,
        breaker: RejectBreaker::new(cfg.clickhouse.reject_breaker_records),
        retry_initial: Duration::from_millis(cfg.clickhouse.retry_initial_ms),
        retry_max: Duration::from_millis(cfg.clickhouse.retry_max_ms),
        abandon: abandon.clone(),
        skip_log: std::sync::Mutex::new(RateLimit::new(Duration::from_secs(5))),
        max_body_bytes: usize::try_from(cfg.clickhouse.max_body_bytes).unwrap_or(usize::MAX),
    });
    let dispatcher = spawn_dispatcher(inserts, encoded_rx, cfg.clickhouse.max_inflight_inserts);

    shutdown.await;
    drain(&cfg, &health, source, &abandon).await;
    dispatcher.abort();
    http.abort();
    drop(worker_handles); // workers end when their input closes; no need to wait on them
    Ok(())
}

/// The ClickHouse endpoint inserts go to.
fn clickhouse_sink(cfg: &Config) -> anyhow::Result<Sink> {
    Ok(Sink::new(
        &cfg.clickhouse.url,
        cfg.clickhouse.credentials()?,
        &crate::startup::clickhouse_tls(&cfg.clickhouse)?,
        Duration::from_millis(cfg.clickhouse.request_timeout_ms),
    )?
    .with_insert_quorum(cfg.clickhouse.insert_quorum.clone()))
}

/// Ready once ClickHouse answered; keep checking in the background so `/readyz` follows it.
fn spawn_readiness(sink: Sink, health: Arc<Health>) {
    tokio::spawn(async move {
        let mut logged = false;
        loop {
            match sink.ping().await {
                Ok(()) => health.clickhouse_ok.store(true, Ordering::Relaxed),
                Err(e) => {
                    if !logged {
                        match tracehouse_schema::tls::classify(&e.to_string(), sink.is_https()) {
                            Some(f) => {
                                tracing::error!(error = %e, tls = f.describe(), "ClickHouse TLS failed; retrying every 5 s")
                            }
                            None => tracing::warn!(error = %e, "ClickHouse is not reachable yet"),
                        }
                        logged = true;
                    }
                    health.clickhouse_ok.store(false, Ordering::Relaxed)
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
}

/// One worker per CPU of the container's quota unless configured (`cpu_quota`).
fn encode_threads(cfg: &Config) -> usize {
    let (threads, sizing) = crate::cpu_quota::encode_threads(cfg.limits.encode_threads);
    tracing::info!(threads, ?sizing, "decode/encode workers");
    threads
}

/// The dead-letter topic's producer, when one is configured, and the producer with its
/// token link (kept by the caller for as long as the inserts may send).
fn dead_letters(
    cfg: &Config,
    oauth: Option<&Arc<kafka_clients::TokenSource>>,
) -> anyhow::Result<(
    Option<KafkaDeadLetters>,
    Option<kafka_clients::WithToken<FutureProducer>>,
)> {
    let Some(topic) = &cfg.kafka.dead_letter_topic else {
        return Ok((None, None));
    };
    let k = &cfg.kafka;
    let producer: FutureProducer =
        kafka_clients::dead_letter_producer(&k.brokers, &k.properties).create()?;
    let linked = kafka_clients::WithToken::new(producer.clone(), oauth);
    Ok((
        Some(KafkaDeadLetters {
            producer,
            topic: topic.clone(),
        }),
        Some(linked),
    ))
}

fn source_config(
    cfg: &Config,
    dead_letters: bool,
    oauth: Option<Arc<kafka_clients::TokenSource>>,
) -> SourceConfig {
    let k = &cfg.kafka;
    let live_cut = CutPolicy {
        max_bytes: cfg.batch.max_bytes,
        max_records: cfg.batch.max_records,
    };
    SourceConfig {
        oauth,
        consumer: kafka_clients::consumer(&k.brokers, &k.group_id, &k.properties),
        watermarks: kafka_clients::watermarks(&k.brokers, &k.properties),
        replayer: kafka_clients::replayer(&k.brokers, &k.group_id, &k.properties),
        topics: k.topics.clone(),
        machine: MachineConfig {
            cut: live_cut,
            // Rule 8's backlog cut, at most half the in-flight budget: one grown batch
            // inserting while the next one fills.
            backlog_cut: backlog_policy(
                live_cut,
                cfg.batch
                    .backlog_max_bytes
                    .min(cfg.limits.max_inflight_bytes / 2),
            ),
            linger: Duration::from_millis(cfg.batch.linger_ms),
            max_linger: Duration::from_millis(cfg.batch.max_linger_ms),
            max_record_bytes: cfg.limits.max_record_bytes,
            keep_skipped_payloads: dead_letters,
            bundle: cfg.batch.bundle,
        },
        write_legacy: k.commit_format == CommitFormat::Th2,
        // Leave a little of the shutdown deadline for the final commit and exit.
        drain_deadline: Duration::from_millis(cfg.shutdown_deadline_ms).mul_f64(0.8),
    }
}

/// Hand each encoded batch to an insert task, at most `slots` at once.
fn spawn_dispatcher(
    inserts: Arc<Inserts<Sink, KafkaDeadLetters>>,
    mut encoded: mpsc::Receiver<ToInsert>,
    slots: usize,
) -> tokio::task::JoinHandle<()> {
    let slots = Arc::new(Semaphore::new(slots));
    tokio::spawn(async move {
        while let Some(batch) = encoded.recv().await {
            let permit = slots
                .clone()
                .acquire_owned()
                .await
                .expect("semaphore never closed");
            let inserts = inserts.clone();
            tokio::spawn(async move {
                inserts.metrics.inflight_inserts.inc();
                inserts.insert(batch).await;
                inserts.metrics.inflight_inserts.dec();
                drop(permit);
            });
        }
    })
}

/// Shutdown: the source drains acknowledgements until its own (earlier) deadline, commits
/// and leaves the group; then whatever is still retrying is abandoned, uncommitted.
async fn drain(cfg: &Config, health: &Health, source: source::Source, abandon: &AtomicBool) {
    let deadline = Instant::now() + Duration::from_millis(cfg.shutdown_deadline_ms);
    tracing::info!(
        deadline_ms = cfg.shutdown_deadline_ms,
        "shutting down: draining in-flight batches"
    );
    health.stopping.store(true, Ordering::Relaxed);
    source.stop.store(true, Ordering::Relaxed);
    let source_thread = source.thread;
    let joined = tokio::task::spawn_blocking(move || source_thread.join());
    let remaining = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(remaining, joined).await {
        Ok(_) => tracing::info!("kafka source stopped"),
        Err(_) => tracing::warn!("kafka source did not stop before the deadline"),
    }
    abandon.store(true, Ordering::Relaxed);
}
