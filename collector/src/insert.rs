//! The insert stage: one encoded batch into ClickHouse — retried with its token, bisected
//! when ClickHouse refuses part of it for good, its skipped records dead-lettered with
//! where they came from — then acknowledged to the source.
//!
//! The two things it talks to are small traits ([`Inserter`]: ClickHouse, [`DeadLetterSink`]:
//! the dead-letter topic), so the rules below are unit-tested without either:
//! - a batch is acknowledged only when every record is in ClickHouse or parked in the
//!   dead-letter topic (or skipped with no dead-letter topic configured);
//! - a permanent rejection isolates the refused records by bisection (each half is
//!   re-encoded from the batch's records and inserted under the token of its own range), so
//!   every good row lands and the partition never stalls;
//! - transient failures retry forever with backoff and the same token (a duplicate is a
//!   no-op), until shutdown's deadline abandons the batch: then nothing is acknowledged and
//!   the next owner replays it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::batch::{RecordBatch, SkipReason, Skipped};
use crate::freshness;
use crate::log_limit::RateLimit;
use crate::metrics::{Metrics, ReasonLabels};
use crate::retry::{Backoff, Verdict};
use crate::sink::{InsertError, Sink};
use crate::source::Ack;
use crate::workers::{self, Encoded, EncoderFactory};

/// Where rows go: one insert attempt of a compressed body under a deduplication token.
pub trait Inserter: Send + Sync + 'static {
    fn insert(
        &self,
        query: &str,
        token: &str,
        body: Bytes,
    ) -> impl Future<Output = Result<(), InsertError>> + Send;
}

impl Inserter for Sink {
    fn insert(
        &self,
        query: &str,
        token: &str,
        body: Bytes,
    ) -> impl Future<Output = Result<(), InsertError>> + Send {
        Sink::insert(self, query, token, body)
    }
}

/// Where skipped records go: one attempt to park a record with its provenance.
pub trait DeadLetterSink: Send + Sync + 'static {
    fn park(
        &self,
        batch: &RecordBatch,
        skipped: &Skipped,
        payload: &[u8],
    ) -> impl Future<Output = Result<(), String>> + Send;
}

/// The dead-letter topic: the record's payload, with headers naming its source topic,
/// partition and offset, and why it was skipped.
#[derive(Clone)]
pub struct KafkaDeadLetters {
    pub producer: FutureProducer,
    pub topic: String,
}

impl DeadLetterSink for KafkaDeadLetters {
    async fn park(
        &self,
        batch: &RecordBatch,
        skipped: &Skipped,
        payload: &[u8],
    ) -> Result<(), String> {
        let offset = skipped.offset.to_string();
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
                value: Some(skipped.reason.label().as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.detail",
                value: Some(skipped.detail.as_bytes()),
            });
        let record = FutureRecord::<(), [u8]>::to(&self.topic)
            .payload(payload)
            .headers(headers);
        self.producer
            .send(record, Duration::from_secs(30))
            .await
            .map(|_| ())
            .map_err(|(e, _)| e.to_string())
    }
}

/// Everything an insert task needs; shared by all of them.
pub struct Inserts<I, D> {
    pub sink: I,
    pub dead_letters: Option<D>,
    pub query: String,
    pub factory: EncoderFactory,
    pub metrics: Arc<Metrics>,
    pub acks: crossbeam_channel::Sender<Ack>,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Set when shutdown's drain deadline passed: stop retrying, leave batches uncommitted.
    pub abandon: Arc<AtomicBool>,
    pub skip_log: std::sync::Mutex<RateLimit>,
}

impl<I: Inserter, D: DeadLetterSink> Inserts<I, D> {
    /// Insert one encoded batch (splitting it on permanent rejections), dead-letter its
    /// skipped records and acknowledge it. On abandonment nothing is acknowledged: the batch
    /// stays uncommitted and is replayed later. The batch's payload is freed here; its budget
    /// permit travels with the acknowledgement until the source has taken it.
    pub async fn insert_batch(&self, encoded: Encoded) {
        let batch = encoded.batch.clone();
        let mut skipped: Vec<Skipped> = batch.skipped.clone();
        self.metrics.spans_decoded.inc_by(encoded.rows);
        if !self.insert_slice(encoded, &mut skipped).await {
            return;
        }
        for s in &skipped {
            self.metrics
                .records_skipped
                .get_or_create(&ReasonLabels {
                    reason: s.reason.label(),
                })
                .inc();
            if let Ok(mut limit) = self.skip_log.lock()
                && limit.allow()
            {
                tracing::warn!(topic = %batch.topic, partition = batch.partition, offset = s.offset, reason = s.reason.label(), detail = %s.detail, suppressed = limit.suppressed, "record skipped");
            }
        }
        if let Some(dl) = &self.dead_letters
            && !self.dead_letter(dl, &batch, &skipped).await
        {
            // Could not park the skipped records before shutdown: leave the batch uncommitted.
            return;
        }
        let _ = self.acks.send(Ack::new(batch));
    }

    /// Insert one slice; false when abandoned.
    fn insert_slice<'a>(
        &'a self,
        encoded: Encoded,
        skipped: &'a mut Vec<Skipped>,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            skipped.extend(encoded.undecodable.iter().cloned());
            if encoded.rows == 0 {
                return true;
            }
            let token = encoded.batch.token(encoded.range);
            let mut backoff = Backoff::new(self.retry_initial, self.retry_max);
            loop {
                if self.abandon.load(Ordering::Relaxed) {
                    return false;
                }
                let started = Instant::now();
                let e = match self
                    .sink
                    .insert(&self.query, &token, encoded.body.clone())
                    .await
                {
                    Ok(()) => {
                        let m = &self.metrics;
                        m.insert_duration.observe(started.elapsed().as_secs_f64());
                        m.inserts.inc();
                        m.rows_inserted.inc_by(encoded.rows);
                        m.bytes_inserted.inc_by(encoded.body.len() as u64);
                        m.batch_rows.observe(encoded.rows as f64);
                        m.batch_bytes.observe(encoded.body.len() as f64);
                        m.span_freshness
                            .observe_acknowledged(&encoded.end_times, freshness::unix_now_ns());
                        return true;
                    }
                    Err(e) => e,
                };
                let reason = ReasonLabels { reason: e.reason() };
                self.metrics.insert_errors.get_or_create(&reason).inc();
                if matches!(e.verdict(), Verdict::Permanent) {
                    return self.split(encoded, skipped, &e.to_string()).await;
                }
                let delay = backoff.next_delay();
                self.metrics.insert_retries.get_or_create(&reason).inc();
                if backoff.attempts() == 1 || backoff.attempts().is_power_of_two() {
                    tracing::warn!(error = %e, token = %token, attempt = backoff.attempts(), retry_in_ms = delay.as_millis() as u64, "insert failed; retrying");
                }
                tokio::time::sleep(delay).await;
            }
        })
    }

    /// A permanent rejection: isolate the refused records by bisection, insert the rest. A
    /// single refused record is skipped as [`SkipReason::Rejected`] with ClickHouse's error.
    async fn split(&self, encoded: Encoded, skipped: &mut Vec<Skipped>, error: &str) -> bool {
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
            let factory = self.factory.clone();
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
            if !self.insert_slice(encoded, skipped).await {
                return false;
            }
        }
        true
    }

    /// Park skipped records that carry a payload; true when all were parked, false when
    /// shutdown abandoned the attempt.
    async fn dead_letter(&self, dl: &D, batch: &RecordBatch, skipped: &[Skipped]) -> bool {
        for s in skipped {
            let Some(payload) = &s.payload else { continue };
            let mut backoff = Backoff::new(self.retry_initial, self.retry_max);
            loop {
                if self.abandon.load(Ordering::Relaxed) {
                    return false;
                }
                match dl.park(batch, s, payload).await {
                    Ok(()) => {
                        self.metrics.records_dead_lettered.inc();
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "dead-letter produce failed; retrying");
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                }
            }
        }
        true
    }
}

#[cfg(test)]
#[path = "insert_tests.rs"]
mod tests;
