//! The pipeline: wires source → workers → inserts → acknowledgements, and shuts it down.
//!
//! Queues are bounded, and the in-flight byte budget bounds all of them together: the
//! source pauses its partitions when the budget is spent, so a slow or absent ClickHouse
//! turns into consumer lag, never into unbounded memory or dropped data.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::{Semaphore, mpsc};

use crate::batch::{CutPolicy, RecordBatch, SkipReason, Skipped};
use crate::config::Config;
use crate::http::Health;
use crate::metrics::{Metrics, ReasonLabels};
use crate::retry::{Backoff, Verdict};
use crate::sink::Sink;
use crate::source::{self, Ack, Budget, RateLimit, SourceConfig};
use crate::workers::{self, Encoded, EncoderFactory};

/// Everything an insert task needs.
struct InsertCtx {
    sink: Sink,
    query: String,
    factory: EncoderFactory,
    metrics: Arc<Metrics>,
    budget: Arc<Budget>,
    acks: crossbeam_channel::Sender<Ack>,
    dead_letters: Option<DeadLetters>,
    retry_initial: Duration,
    retry_max: Duration,
    /// Set when shutdown's drain deadline passed: stop retrying, leave batches uncommitted.
    abandon: Arc<AtomicBool>,
    skip_log: std::sync::Mutex<RateLimit>,
}

/// Copies skipped records to the dead-letter topic, with where they came from and why.
#[derive(Clone)]
struct DeadLetters {
    producer: FutureProducer,
    topic: String,
}

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
                            tracing::warn!(error = %e, "ClickHouse is not reachable yet");
                            logged = true;
                        }
                        health.clickhouse_ok.store(false, Ordering::Relaxed)
                    }
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
    }

    let budget = Arc::new(Budget::new(cfg.limits.max_inflight_bytes));
    let threads = match cfg.limits.encode_threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    // Unbounded in count but bounded in bytes: every batch holds budget bytes, and the source
    // pauses its partitions when the budget is spent. A count bound here would block the
    // Kafka thread instead — and a blocked Kafka thread can neither pause nor heartbeat.
    let (batch_tx, batch_rx) = crossbeam_channel::unbounded::<RecordBatch>();
    let (encoded_tx, mut encoded_rx) =
        mpsc::channel::<Encoded>(cfg.clickhouse.max_inflight_inserts);
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
            Some(DeadLetters {
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
        cut: CutPolicy {
            max_bytes: cfg.batch.max_bytes,
            max_records: cfg.batch.max_records,
        },
        linger: Duration::from_millis(cfg.batch.linger_ms),
        max_record_bytes: cfg.limits.max_record_bytes,
        keep_skipped_payloads: dead_letters.is_some(),
        // Leave a little of the shutdown deadline for the final commit and exit.
        drain_deadline: Duration::from_millis(cfg.shutdown_deadline_ms).mul_f64(0.8),
    };
    let source = source::spawn(
        source_cfg,
        metrics.clone(),
        budget.clone(),
        batch_tx,
        ack_rx,
        heartbeat,
    )?;
    health.started.store(true, Ordering::Relaxed);

    let abandon = Arc::new(AtomicBool::new(false));
    let ctx = Arc::new(InsertCtx {
        query: factory().insert_query(),
        sink,
        factory,
        metrics: metrics.clone(),
        budget,
        acks: ack_tx,
        dead_letters,
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
                    insert_batch(&ctx, encoded).await;
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

/// Insert one encoded batch (splitting it on permanent rejections), dead-letter its skipped
/// records, acknowledge it, and release its budget. On abandonment (shutdown deadline)
/// nothing is acknowledged: the batch stays uncommitted and is replayed later.
async fn insert_batch(ctx: &InsertCtx, encoded: Encoded) {
    let batch = encoded.batch.clone();
    let mut skipped: Vec<Skipped> = batch.skipped.clone();
    let mut rows = 0;
    ctx.metrics.spans_decoded.inc_by(encoded.rows);
    let done = insert_slice(ctx, encoded, &mut skipped, &mut rows).await;
    if done {
        for s in &skipped {
            ctx.metrics
                .records_skipped
                .get_or_create(&ReasonLabels {
                    reason: s.reason.label(),
                })
                .inc();
            if let Ok(mut limit) = ctx.skip_log.lock()
                && limit.allow()
            {
                tracing::warn!(topic = %batch.topic, partition = batch.partition, offset = s.offset, reason = s.reason.label(), detail = %s.detail, suppressed = limit.suppressed, "record skipped");
            }
        }
        if let Some(dl) = &ctx.dead_letters
            && !dead_letter(ctx, dl, &batch, &skipped).await
        {
            // Could not park the skipped records: leave the batch uncommitted.
            ctx.budget.release(batch.budget_bytes);
            return;
        }
        let _ = ctx.acks.send(Ack {
            topic: batch.topic.clone(),
            partition: batch.partition,
            generation: batch.generation,
            range: batch.range,
        });
    }
    ctx.budget.release(batch.budget_bytes);
}

/// Returns false when abandoned.
fn insert_slice<'a>(
    ctx: &'a InsertCtx,
    encoded: Encoded,
    skipped: &'a mut Vec<Skipped>,
    rows_total: &'a mut u64,
) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
    Box::pin(async move {
        skipped.extend(encoded.undecodable.iter().cloned());
        if encoded.rows == 0 {
            return true;
        }
        let token = encoded.batch.token(encoded.range);
        let mut backoff = Backoff::new(ctx.retry_initial, ctx.retry_max);
        loop {
            if ctx.abandon.load(Ordering::Relaxed) {
                return false;
            }
            let started = Instant::now();
            match ctx
                .sink
                .insert(&ctx.query, &token, encoded.body.clone())
                .await
            {
                Ok(()) => {
                    ctx.metrics
                        .insert_duration
                        .observe(started.elapsed().as_secs_f64());
                    ctx.metrics.inserts.inc();
                    ctx.metrics.rows_inserted.inc_by(encoded.rows);
                    ctx.metrics.bytes_inserted.inc_by(encoded.body.len() as u64);
                    ctx.metrics.batch_rows.observe(encoded.rows as f64);
                    ctx.metrics.batch_bytes.observe(encoded.body.len() as f64);
                    *rows_total += encoded.rows;
                    return true;
                }
                Err(e) => {
                    ctx.metrics
                        .insert_errors
                        .get_or_create(&ReasonLabels { reason: e.reason() })
                        .inc();
                    match e.verdict() {
                        Verdict::Permanent => {
                            return split(ctx, encoded, skipped, rows_total, &e.to_string()).await;
                        }
                        Verdict::Retry | Verdict::Fatal => {
                            let delay = backoff.next_delay();
                            ctx.metrics
                                .insert_retries
                                .get_or_create(&ReasonLabels { reason: e.reason() })
                                .inc();
                            if backoff.attempts() == 1 || backoff.attempts().is_power_of_two() {
                                tracing::warn!(error = %e, token = %token, attempt = backoff.attempts(), retry_in_ms = delay.as_millis() as u64, "insert failed; retrying");
                            }
                            tokio::time::sleep(delay).await;
                        }
                    }
                }
            }
        }
    })
}

/// A permanent rejection: isolate the bad records by bisection, insert the rest.
async fn split(
    ctx: &InsertCtx,
    encoded: Encoded,
    skipped: &mut Vec<Skipped>,
    rows_total: &mut u64,
    error: &str,
) -> bool {
    let records = encoded.records.clone();
    let batch = encoded.batch.clone();
    if records.len() <= 1 {
        let r = &batch.records[records.start];
        skipped.push(Skipped {
            offset: r.offset,
            reason: SkipReason::Rejected,
            detail: error.to_string(),
            payload: Some(batch.payload(r).to_vec()),
        });
        return true;
    }
    let mid = records.start + records.len() / 2;
    for half in [records.start..mid, mid..records.end] {
        let factory = ctx.factory.clone();
        let b = batch.clone();
        let encoded = tokio::task::spawn_blocking(move || {
            let mut enc = factory();
            workers::encode_slice(enc.as_mut(), &b, half)
        })
        .await
        .expect("encode task");
        // Undecodable records were already counted for the whole slice.
        let encoded = Encoded {
            undecodable: Vec::new(),
            ..encoded
        };
        if !insert_slice(ctx, encoded, skipped, rows_total).await {
            return false;
        }
    }
    true
}

/// Copy skipped records to the dead-letter topic; true when all were delivered.
async fn dead_letter(
    ctx: &InsertCtx,
    dl: &DeadLetters,
    batch: &RecordBatch,
    skipped: &[Skipped],
) -> bool {
    for s in skipped {
        let Some(payload) = &s.payload else { continue };
        let offset = s.offset.to_string();
        let partition = batch.partition.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "tracehouse.source.topic",
                value: Some(batch.topic.as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.source.partition",
                value: Some(partition.as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.source.offset",
                value: Some(offset.as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.reason",
                value: Some(s.reason.label().as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.detail",
                value: Some(s.detail.as_bytes()),
            });
        let mut backoff = Backoff::new(ctx.retry_initial, ctx.retry_max);
        loop {
            if ctx.abandon.load(Ordering::Relaxed) {
                return false;
            }
            let record = FutureRecord::<(), [u8]>::to(&dl.topic)
                .payload(payload)
                .headers(headers.clone());
            match dl.producer.send(record, Duration::from_secs(30)).await {
                Ok(_) => {
                    ctx.metrics.records_dead_lettered.inc();
                    break;
                }
                Err((e, _)) => {
                    tracing::warn!(error = %e, topic = %dl.topic, "dead-letter produce failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }
    true
}
