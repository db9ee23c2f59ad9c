//! The insert stage: one encoded batch into ClickHouse — retried with its token, bisected
//! when ClickHouse refuses part of it for good, its skipped records dead-lettered with
//! where they came from — then acknowledged to the source.
//!
//! The two things it talks to are small traits ([`Inserter`]: ClickHouse,
//! [`DeadLetterSink`]: the dead-letter topic), so the rules below are unit-tested without
//! either:
//! 1. a batch is acknowledged only when every record is in ClickHouse or parked in the
//!    dead-letter topic (or skipped with no dead-letter topic configured);
//! 2. a permanent rejection isolates the refused records by bisection (each half is
//!    re-encoded from the batch's records and inserted under the token of its own range), so
//!    every good row lands and the partition never stalls; a deterministic error is never
//!    retried as transient ([`retry`]);
//! 3. transient failures retry with backoff and the same token (a duplicate is a no-op)
//!    while the batch's partition is held in the batch's generation ([`Holdings`]) and
//!    until shutdown's deadline abandons it: then nothing is acknowledged and the owner
//!    replays it;
//! 4. when every record is refused, the configuration is suspect: the
//!    [`RejectBreaker`] stops skipping and the refused record is retried instead;
//! 5. a dead-letter copy that the topic can never take is made smaller, then given up and
//!    counted ([`dead_letter`]), so it never holds its batch forever;
//! 6. a bundle ([`crate::bundle`]) is one insert under the bundle's token, retried while
//!    any member's partition is held (its other members' owners replay the same bundle
//!    under the same token); each member held is acknowledged on its own. A permanent
//!    rejection sends the members one by one under their own tokens (then rule 2) — as
//!    deterministic as the rejection, so a replay of the bundle does the same;
//! 7. a body over `clickhouse.max_body_bytes` (a proxy's known limit) is split before it is
//!    sent, and a proxy's 413 splits it after (`sink::InsertError::Http`): halves go under
//!    their own ranges' tokens, as in rule 2, so a replay under the same limit splits the
//!    same way and deduplicates (a 413 stores nothing). A limit changed between a batch's
//!    first send and its replay can store it twice, whole and in halves: change
//!    `max_body_bytes` or the proxy's limit while no batch is in flight, or accept that.

// The ClickHouse side, as `source/` is the Kafka side: the HTTP sink and its error
// classes, the retry policy, the rejection breaker, the dead-letter topic, the encoder
// the configuration selects.
pub mod breaker;
pub mod dead_letter;
pub mod encoder;
pub mod format;
pub mod retry;
pub mod sink;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use breaker::RejectBreaker;
pub use dead_letter::{DeadLetterSink, KafkaDeadLetters, Letter, ParkError};
use retry::{Backoff, Verdict};
use sink::{InsertError, Sink};

use crate::batch::{RecordBatch, SkipReason, Skipped};
use crate::freshness;
use crate::freshness::EndTimes;
use crate::log_limit::RateLimit;
use crate::metrics::{Metrics, ReasonLabels};
use crate::source::{Ack, Holdings};
use crate::workers::{self, Body, Encoded, EncodedBundle, EncoderFactory, ToInsert};

/// Where rows go: one insert attempt of a body, sent as it is compressed, under a
/// deduplication token.
pub trait Inserter: Send + Sync + 'static {
    fn insert(
        &self,
        query: &str,
        token: &str,
        body: Body,
    ) -> impl Future<Output = Result<(), InsertError>> + Send;
}

impl Inserter for Sink {
    fn insert(
        &self,
        query: &str,
        token: &str,
        body: Body,
    ) -> impl Future<Output = Result<(), InsertError>> + Send {
        Sink::insert(self, query, token, body)
    }
}

/// Everything an insert task needs; shared by all of them.
pub struct Inserts<I, D> {
    pub sink: I,
    pub dead_letters: Option<D>,
    /// The bound of a dead-letter copy ([`dead_letter`]).
    pub dead_letter_max_bytes: usize,
    pub query: String,
    pub factory: EncoderFactory,
    pub metrics: Arc<Metrics>,
    pub acks: crossbeam_channel::Sender<Ack>,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Set when shutdown's drain deadline passed: stop retrying, leave batches uncommitted.
    pub abandon: Arc<AtomicBool>,
    /// Which partitions the source holds now: batches of others stop retrying.
    pub holdings: Holdings,
    pub breaker: RejectBreaker,
    pub skip_log: std::sync::Mutex<RateLimit>,
    /// Bodies larger than this are split before they are sent (0: no limit; rule 7).
    pub max_body_bytes: usize,
}

/// Why an insert task stopped before the batch was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Shutdown's deadline passed.
    Abandoned,
    /// The partition is no longer held in the batch's generation.
    Revoked,
}

type Done = Result<(), Stop>;

impl<I: Inserter, D: DeadLetterSink> Inserts<I, D> {
    /// Insert what the workers encoded.
    pub async fn insert(&self, work: ToInsert) {
        match work {
            ToInsert::Batch(encoded) => self.insert_batch(encoded).await,
            ToInsert::Bundle(bundle) => self.insert_bundle(bundle).await,
        }
    }

    /// Whether `body` is over `clickhouse.max_body_bytes` (rule 7).
    fn too_large(&self, body: &Body) -> bool {
        self.max_body_bytes > 0 && body.len() > self.max_body_bytes
    }

    fn count_split(&self, reason: &'static str) {
        self.metrics
            .insert_splits
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Insert a bundle (rule 6).
    pub async fn insert_bundle(&self, bundle: EncodedBundle) {
        if self.too_large(&bundle.body) {
            self.count_split("max_body_bytes");
            return self.members_alone(bundle).await;
        }
        let token = bundle.desc.token();
        let may_continue = || {
            if self.abandon.load(Ordering::Relaxed) {
                return Err(Stop::Abandoned);
            }
            let held = bundle.parts.iter().any(|p| {
                let b = &p.batch;
                self.holdings.holds(&b.topic, b.partition, b.generation)
            });
            if held { Ok(()) } else { Err(Stop::Revoked) }
        };
        let refused = match self
            .until_done(
                &bundle.body,
                bundle.rows,
                &bundle.end_times,
                &token,
                may_continue,
            )
            .await
        {
            Ok(refused) => refused,
            Err(Stop::Abandoned) => return,
            Err(Stop::Revoked) => {
                self.metrics
                    .batches_dropped
                    .get_or_create(&ReasonLabels { reason: "revoked" })
                    .inc_by(bundle.parts.len() as u64);
                tracing::info!(token = %token, "no member of the bundle is held any more: it stops retrying, its members' owners replay it");
                return;
            }
        };
        if let Some(e) = refused {
            tracing::warn!(error = %e, token = %token, members = bundle.parts.len(), "ClickHouse refused the bundle; inserting its batches one by one");
            self.count_split(e.reason());
            return self.members_alone(bundle).await;
        }
        self.metrics.spans_decoded.inc_by(bundle.rows);
        for part in bundle.parts {
            let batch = part.batch;
            if !self
                .holdings
                .holds(&batch.topic, batch.partition, batch.generation)
            {
                continue; // its owner acknowledges it (rule 6)
            }
            let mut skipped: Vec<Skipped> = batch.skipped.clone();
            skipped.extend(part.undecodable);
            if self.after_insert(&batch, &skipped).await.is_ok() {
                let _ = self.acks.send(Ack::new(batch));
            }
        }
    }

    /// Insert a bundle's members one by one, each under its own token (rules 6 and 7).
    async fn members_alone(&self, bundle: EncodedBundle) {
        for part in bundle.parts {
            let factory = self.factory.clone();
            let batch = part.batch;
            let encoded = tokio::task::spawn_blocking(move || {
                let mut enc = factory();
                let n = batch.records.len();
                workers::encode_slice(enc.as_mut(), &batch, 0..n)
            })
            .await
            .expect("encode task");
            self.insert_batch(encoded).await;
        }
    }

    /// Insert one encoded batch (splitting it on permanent rejections), dead-letter its
    /// skipped records and acknowledge it. Abandoned or revoked, nothing is acknowledged:
    /// the batch stays uncommitted and is replayed. The batch's payload is freed here; its
    /// budget permit travels with the acknowledgement until the source has taken it.
    pub async fn insert_batch(&self, encoded: Encoded) {
        let batch = encoded.batch.clone();
        let mut skipped: Vec<Skipped> = batch.skipped.clone();
        self.metrics.spans_decoded.inc_by(encoded.rows);
        let done = match self.insert_slice(encoded, &mut skipped).await {
            Ok(()) => self.after_insert(&batch, &skipped).await,
            stop => stop,
        };
        match done {
            Ok(()) => {
                let _ = self.acks.send(Ack::new(batch));
            }
            Err(Stop::Revoked) => {
                self.metrics
                    .batches_dropped
                    .get_or_create(&ReasonLabels { reason: "revoked" })
                    .inc();
                tracing::info!(topic = %batch.topic, partition = batch.partition, first = batch.range.first, last = batch.range.last, "partition given away: the batch stops retrying, its new owner replays it");
            }
            Err(Stop::Abandoned) => {}
        }
    }

    /// Count and log the skipped records, then park them.
    async fn after_insert(&self, batch: &RecordBatch, skipped: &[Skipped]) -> Done {
        for s in skipped {
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
        match &self.dead_letters {
            Some(dl) => self.dead_letter(dl, batch, skipped).await,
            None => Ok(()),
        }
    }

    /// Whether attempts on `batch` may go on (rule 3).
    fn may_continue(&self, batch: &RecordBatch) -> Done {
        if self.abandon.load(Ordering::Relaxed) {
            Err(Stop::Abandoned)
        } else if !self
            .holdings
            .holds(&batch.topic, batch.partition, batch.generation)
        {
            Err(Stop::Revoked)
        } else {
            Ok(())
        }
    }

    /// One attempt; on success, the metrics of an acknowledged insert.
    async fn attempt(
        &self,
        body: &Body,
        rows: u64,
        end_times: &EndTimes,
        token: &str,
    ) -> Result<(), InsertError> {
        let started = Instant::now();
        self.sink.insert(&self.query, token, body.clone()).await?;
        let m = &self.metrics;
        m.insert_duration.observe(started.elapsed().as_secs_f64());
        m.inserts.inc();
        m.rows_inserted.inc_by(rows);
        m.bytes_inserted.inc_by(body.len() as u64);
        m.batch_rows.observe(rows as f64);
        m.batch_bytes.observe(body.len() as f64);
        m.span_freshness
            .observe_acknowledged(end_times, freshness::unix_now_ns());
        self.breaker.succeeded();
        m.reject_breaker_open.set(0);
        Ok(())
    }

    fn count_failure(&self, e: &InsertError, retried: bool) {
        let reason = ReasonLabels { reason: e.reason() };
        self.metrics.insert_errors.get_or_create(&reason).inc();
        if retried {
            self.metrics.insert_retries.get_or_create(&reason).inc();
        }
    }

    /// Insert one slice (bisecting it on a permanent rejection).
    fn insert_slice<'a>(
        &'a self,
        encoded: Encoded,
        skipped: &'a mut Vec<Skipped>,
    ) -> Pin<Box<dyn Future<Output = Done> + Send + 'a>> {
        Box::pin(async move {
            skipped.extend(encoded.undecodable.iter().cloned());
            if encoded.rows == 0 {
                return Ok(());
            }
            if self.too_large(&encoded.body) && encoded.records.len() > 1 {
                self.count_split("max_body_bytes");
                return self.halves(encoded, skipped).await;
            }
            let token = encoded.batch.token(encoded.range);
            let refused = self
                .until_done(
                    &encoded.body,
                    encoded.rows,
                    &encoded.end_times,
                    &token,
                    || self.may_continue(&encoded.batch),
                )
                .await?;
            match refused {
                None => Ok(()),
                Some(e) => self.split(encoded, skipped, e).await,
            }
        })
    }

    /// Attempts of one body under `token` (rule 3): transient failures retried with backoff
    /// while `may_continue` allows; `None` once ClickHouse acknowledged it, the error once
    /// it refused it for good.
    async fn until_done(
        &self,
        body: &Body,
        rows: u64,
        end_times: &EndTimes,
        token: &str,
        may_continue: impl Fn() -> Done,
    ) -> Result<Option<InsertError>, Stop> {
        // Nothing to write (every span of it dropped or sampled out by the processing rules,
        // or records without spans): no request, and nothing is lost by not sending one.
        if rows == 0 {
            return Ok(None);
        }
        let mut backoff = Backoff::new(self.retry_initial, self.retry_max);
        loop {
            may_continue()?;
            let e = match self.attempt(body, rows, end_times, token).await {
                Ok(()) => return Ok(None),
                Err(e) => e,
            };
            let permanent = matches!(e.verdict(), Verdict::Permanent);
            self.count_failure(&e, !permanent);
            if permanent {
                return Ok(Some(e));
            }
            let delay = backoff.next_delay();
            if backoff.attempts() == 1 || backoff.attempts().is_power_of_two() {
                tracing::warn!(error = %e, token = %token, attempt = backoff.attempts(), retry_in_ms = delay.as_millis() as u64, "insert failed; retrying");
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// A permanent rejection: isolate the refused records by bisection, insert the rest. A
    /// single refused record is skipped as [`SkipReason::Rejected`] with ClickHouse's error,
    /// unless the [`RejectBreaker`] says every record is refused.
    async fn split(&self, encoded: Encoded, skipped: &mut Vec<Skipped>, e: InsertError) -> Done {
        if encoded.records.len() <= 1 {
            return self.refused_alone(encoded, skipped, e).await;
        }
        self.count_split(e.reason());
        self.halves(encoded, skipped).await
    }

    /// Insert the two halves of a slice of several records, each under its own range's token.
    async fn halves(&self, encoded: Encoded, skipped: &mut Vec<Skipped>) -> Done {
        let records = encoded.records.clone();
        let batch = encoded.batch.clone();
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
            self.insert_slice(encoded, skipped).await?;
        }
        Ok(())
    }

    /// One record refused alone: skipped, or — with the breaker open — retried until an
    /// insert succeeds somewhere (the configuration was fixed) or the breaker closes.
    async fn refused_alone(
        &self,
        encoded: Encoded,
        skipped: &mut Vec<Skipped>,
        mut e: InsertError,
    ) -> Done {
        let batch = encoded.batch.clone();
        let token = batch.token(encoded.range);
        let mut backoff = Backoff::new(self.retry_initial, self.retry_max);
        loop {
            // Refusals that follow from the record's own content never open the breaker: too
            // many partitions, or rows too large for a proxy's body limit.
            let data_bound = matches!(&e, InsertError::Server { message, .. } if retry::is_too_many_partitions(message))
                || matches!(&e, InsertError::Http { status: 413, .. });
            let open = if data_bound {
                self.breaker.is_open()
            } else {
                self.breaker.refused()
            };
            if !open {
                let r = &batch.records[encoded.records.start];
                skipped.push(Skipped {
                    offset: r.offset,
                    reason: SkipReason::Rejected,
                    detail: e.to_string(),
                    payload: Some(batch.payload(r).to_vec()),
                });
                return Ok(());
            }
            self.metrics.reject_breaker_open.set(1);
            let delay = backoff.next_delay();
            if backoff.attempts() == 1 || backoff.attempts().is_power_of_two() {
                tracing::error!(error = %e, token = %token, retry_in_ms = delay.as_millis() as u64, "ClickHouse refuses every record: suspecting the configuration (table shape, a proxy dropping decompress=1); not skipping, retrying the record");
            }
            tokio::time::sleep(delay).await;
            loop {
                self.may_continue(&batch)?;
                match self
                    .attempt(&encoded.body, encoded.rows, &encoded.end_times, &token)
                    .await
                {
                    Ok(()) => return Ok(()),
                    Err(next) if matches!(next.verdict(), Verdict::Permanent) => {
                        self.count_failure(&next, false);
                        e = next;
                        break;
                    }
                    Err(next) => {
                        self.count_failure(&next, true);
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                }
            }
        }
    }

    /// Park the skipped records that carry a payload, each as large a copy as the topic
    /// takes ([`dead_letter`]).
    async fn dead_letter(&self, dl: &D, batch: &RecordBatch, skipped: &[Skipped]) -> Done {
        for s in skipped {
            let Some(payload) = &s.payload else { continue };
            self.park(dl, batch, s, payload).await?;
        }
        Ok(())
    }

    async fn park(&self, dl: &D, batch: &RecordBatch, s: &Skipped, payload: &[u8]) -> Done {
        let copies = dead_letter::copies(payload, self.dead_letter_max_bytes);
        let degraded = |reason| {
            self.metrics
                .dead_letter_degraded
                .get_or_create(&ReasonLabels { reason })
                .inc();
        };
        for (i, copy) in copies.iter().enumerate() {
            let letter = Letter {
                batch,
                skipped: s,
                payload: copy,
                original_bytes: payload.len(),
            };
            let mut backoff = Backoff::new(self.retry_initial, self.retry_max);
            let refused = loop {
                self.may_continue(batch)?;
                match dl.park(&letter).await {
                    Ok(()) => {
                        self.metrics.records_dead_lettered.inc();
                        match (i, letter.truncated()) {
                            (0, true) => degraded("truncated"),
                            (0, false) => {}
                            _ => degraded("headers_only"),
                        }
                        return Ok(());
                    }
                    Err(e) if e.permanent => break e,
                    Err(e) => {
                        let delay = backoff.next_delay();
                        if backoff.attempts() == 1 || backoff.attempts().is_power_of_two() {
                            tracing::warn!(error = %e, attempt = backoff.attempts(), "dead-letter produce failed; retrying");
                        }
                        tokio::time::sleep(delay).await;
                    }
                }
            };
            tracing::warn!(error = %refused, topic = %batch.topic, partition = batch.partition, offset = s.offset, copy_bytes = copy.len(), "the dead-letter topic refuses this copy for good");
        }
        degraded("given_up");
        tracing::error!(topic = %batch.topic, partition = batch.partition, offset = s.offset, reason = s.reason.label(), bytes = payload.len(), "the dead-letter topic refused every copy of a skipped record; it is given up (see its provenance here)");
        Ok(())
    }
}

#[cfg(test)]
mod bundle_tests;
#[cfg(test)]
mod tests;
