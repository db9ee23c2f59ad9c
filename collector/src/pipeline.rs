//! The pipeline: wires source → workers → inserts → acknowledgements, and shuts it down.
//!
//! Queues are bounded, and the in-flight byte budget bounds all of them together: the
//! source pauses its partitions when the budget is spent, so a slow or absent ClickHouse
//! turns into consumer lag, never into unbounded memory or dropped data.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use rdkafka::config::ClientConfig;
use tokio::sync::{Semaphore, mpsc};

use crate::batch::{CutPolicy, RecordBatch};
use crate::budget::Budget;
use crate::config::Config;
use crate::http::Health;
use crate::insert::{Inserts, KafkaDeadLetters};
use crate::log_limit::RateLimit;
use crate::metrics::Metrics;
use crate::sink::Sink;
use crate::source::{self, Ack, Holdings, MachineConfig, SourceConfig};
use crate::workers::{self, Encoded, EncoderFactory};

/// Run the collector until `shutdown` resolves; then drain within the configured deadline.
pub async fn run(
    cfg: Config,
    factory: EncoderFactory,
    registry: Registry,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let credentials = cfg.clickhouse.credentials()?;
    let sink = Sink::new(
        &cfg.clickhouse.url,
        credentials,
        &cfg.clickhouse.tls()?,
        Duration::from_millis(cfg.clickhouse.request_timeout_ms),
    )?;
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

    // Ready once ClickHouse answered; keep checking in the background so /readyz follows it.
    {
        let sink = sink.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let mut logged = false;
            loop {
                match sink.ping().await {
                    Ok(()) => health.clickhouse_ok.store(true, Ordering::Relaxed),
                    Err(e) => {
                        if !logged {
                            let https = sink.is_https();
                            match tracehouse_schema::tls::classify(&e.to_string(), https) {
                                Some(f) => {
                                    tracing::error!(error = %e, tls = f.describe(), "ClickHouse TLS failed; retrying every 5 s")
                                }
                                None => {
                                    tracing::warn!(error = %e, "ClickHouse is not reachable yet")
                                }
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

    let budget = Budget::new(cfg.limits.max_inflight_bytes);
    let threads = match cfg.limits.encode_threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    // Unbounded in count, bounded in bytes by type: a batch carries its budget permit and
    // an acknowledgement carries its batch (see `source`'s module docs).
    let (batch_tx, batch_rx) = crossbeam_channel::unbounded::<RecordBatch>();
    // One encoded body waits for an insert slot (and one more in the dispatcher): encoding
    // further ahead only holds more compressed bodies (2-4 MiB each on full spans) while
    // ClickHouse is the bottleneck; batches not yet encoded wait as payloads, which the
    // budget counts anyway.
    let (encoded_tx, mut encoded_rx) = mpsc::channel::<Encoded>(1);
    let (ack_tx, ack_rx) = crossbeam_channel::unbounded::<Ack>();
    let worker_handles = workers::spawn(threads, factory.clone(), batch_rx, encoded_tx);

    let dead_letters = match &cfg.kafka.dead_letter_topic {
        Some(topic) => {
            let mut pc = ClientConfig::new();
            pc.set("bootstrap.servers", &cfg.kafka.brokers)
                .set("message.timeout.ms", "30000")
                .set("compression.type", "lz4")
                .set("message.max.bytes", "67108864");
            for (k, v) in &cfg.kafka.properties {
                pc.set(k, v);
            }
            Some(KafkaDeadLetters {
                producer: pc.create()?,
                topic: topic.clone(),
            })
        }
        None => None,
    };

    let source_cfg = SourceConfig {
        brokers: cfg.kafka.brokers.clone(),
        topics: cfg.kafka.topics.clone(),
        group_id: cfg.kafka.group_id.clone(),
        properties: cfg
            .kafka
            .properties
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        machine: MachineConfig {
            cut: CutPolicy {
                max_bytes: cfg.batch.max_bytes,
                max_records: cfg.batch.max_records,
            },
            linger: Duration::from_millis(cfg.batch.linger_ms),
            max_record_bytes: cfg.limits.max_record_bytes,
            keep_skipped_payloads: dead_letters.is_some(),
        },
        // Leave a little of the shutdown deadline for the final commit and exit.
        drain_deadline: Duration::from_millis(cfg.shutdown_deadline_ms).mul_f64(0.8),
    };
    let holdings = Holdings::new();
    let source = source::spawn(
        source_cfg,
        metrics.clone(),
        budget,
        batch_tx,
        ack_rx,
        heartbeat,
        holdings.clone(),
    )?;
    health.started.store(true, Ordering::Relaxed);

    let abandon = Arc::new(AtomicBool::new(false));
    let ctx = Arc::new(Inserts {
        query: factory().insert_query(),
        sink,
        factory,
        metrics: metrics.clone(),
        acks: ack_tx,
        dead_letters,
        dead_letter_max_bytes: cfg.kafka.dead_letter_max_bytes,
        holdings,
        breaker: crate::breaker::RejectBreaker::new(cfg.clickhouse.reject_breaker_records),
        retry_initial: Duration::from_millis(cfg.clickhouse.retry_initial_ms),
        retry_max: Duration::from_millis(cfg.clickhouse.retry_max_ms),
        abandon: abandon.clone(),
        skip_log: std::sync::Mutex::new(RateLimit::new(Duration::from_secs(5))),
    });
    let inserts = Arc::new(Semaphore::new(cfg.clickhouse.max_inflight_inserts));
    let dispatcher = {
        let ctx = ctx.clone();
        let inserts = inserts.clone();
        tokio::spawn(async move {
            while let Some(encoded) = encoded_rx.recv().await {
                let permit = inserts
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("semaphore never closed");
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    ctx.metrics.inflight_inserts.inc();
                    ctx.insert_batch(encoded).await;
                    ctx.metrics.inflight_inserts.dec();
                    drop(permit);
                });
            }
        })
    };

    shutdown.await;
    let deadline = Instant::now() + Duration::from_millis(cfg.shutdown_deadline_ms);
    tracing::info!(
        deadline_ms = cfg.shutdown_deadline_ms,
        "shutting down: draining in-flight batches"
    );
    health.stopping.store(true, Ordering::Relaxed);
    source.stop.store(true, Ordering::Relaxed);
    // The source drains acknowledgements until its own (earlier) deadline, commits, leaves.
    let source_thread = source.thread;
    let joined = tokio::task::spawn_blocking(move || source_thread.join());
    let remaining = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(remaining, joined).await {
        Ok(_) => tracing::info!("kafka source stopped"),
        Err(_) => tracing::warn!("kafka source did not stop before the deadline"),
    }
    abandon.store(true, Ordering::Relaxed);
    dispatcher.abort();
    http.abort();
    drop(worker_handles); // workers end when their input closes; no need to wait on them
    Ok(())
}
