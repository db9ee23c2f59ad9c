//! A batch: a contiguous offset range of one partition, its record payloads, and the
//! deduplication token that names it.
//!
//! Batches are cut on record count and payload bytes — both known without decoding — so
//! that the same records always make the same batches, and on a previous owner's recorded
//! cuts (see [`crate::offsets`]). Only the linger timer depends on time, and its cuts are
//! recorded before the insert goes out.

use std::sync::Arc;

use crate::budget::{Budget, BudgetPermit};
use crate::pool::{BufPool, PooledBuf};

/// One batch: records `first..=last` of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchRange {
    pub first: i64,
    pub last: i64,
}

impl BatchRange {
    pub fn contains(&self, offset: i64) -> bool {
        self.first <= offset && offset <= self.last
    }
}

/// The log a partition's offsets count in, as tokens and commit metadata name it: the
/// topic's id (KIP-516, read by `source::topic_id`), which differs between two
/// incarnations of a topic and between two clusters carrying a topic of the same name.
/// The legacy (unnamed) log is how cuts recorded before logs had names are replayed: under
/// their old tokens, so an upgrade neither loses nor duplicates what was in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LogId(Option<Arc<str>>);

impl LogId {
    /// Offsets alone (tokens and metadata as before logs had names).
    pub fn legacy() -> Self {
        Self(None)
    }

    /// A log named `id` (a topic id; never holds `#`, `;` or `,`, which would be cut out).
    pub fn named(id: &str) -> Self {
        let clean: String = id
            .chars()
            .filter(|c| !matches!(c, '#' | ';' | ','))
            .collect();
        Self(Some(clean.into()))
    }

    /// The name, if the log has one.
    pub fn name(&self) -> Option<&str> {
        self.0.as_deref()
    }

    pub fn is_legacy(&self) -> bool {
        self.0.is_none()
    }

    /// What tokens start with: `<topic>#<id>`, or `<topic>` for the legacy log (`#` is not
    /// a character Kafka allows in topic names, so no topic name can imitate another's).
    pub fn token_prefix(&self, topic: &str) -> String {
        match &self.0 {
            Some(id) => format!("{topic}#{id}"),
            None => topic.to_string(),
        }
    }
}

/// Why a record was skipped (never inserted, but committed past).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// Not a valid OTLP `ExportTraceServiceRequest` in the configured encoding.
    DecodeError,
    /// Larger than `limits.max_record_bytes`.
    Oversized,
    /// ClickHouse refused the record's rows permanently, even alone.
    Rejected,
    /// The record carried no payload (a tombstone).
    Empty,
    /// Valid, but its rows take more than `limits.max_expanded_record_bytes`.
    Expanded,
}

impl SkipReason {
    pub fn label(self) -> &'static str {
        match self {
            SkipReason::DecodeError => "decode_error",
            SkipReason::Oversized => "oversized",
            SkipReason::Rejected => "rejected",
            SkipReason::Empty => "empty",
            SkipReason::Expanded => "expanded",
        }
    }
}

/// Payload bytes are copied into chunks of this capacity (a record larger than this
/// gets a chunk of its own). Fixed-size chunks never grow, so filling one never copies
/// what it holds, and a recycled chunk fits any batch.
pub const CHUNK_BYTES: usize = 2 << 20;

/// One Kafka record kept for decoding: where its payload sits in [`RecordBatch::data`].
#[derive(Debug, Clone, Copy)]
pub struct RecordRef {
    pub offset: i64,
    /// Index of the chunk in [`RecordBatch::data`].
    pub chunk: u32,
    pub start: usize,
    pub len: usize,
}

/// A record that will not be inserted.
#[derive(Debug, Clone)]
pub struct Skipped {
    pub offset: i64,
    pub reason: SkipReason,
    pub detail: String,
    /// The payload, for the dead-letter topic (oversized payloads are kept too: the
    /// dead-letter topic is where the user goes to find them).
    pub payload: Option<Vec<u8>>,
}

/// Records `range` of one partition, ready to be decoded and inserted.
#[derive(Debug)]
pub struct RecordBatch {
    pub topic: Arc<str>,
    /// The log the range counts in: part of the batch's token (set by the ledger that
    /// registers the batch).
    pub log: LogId,
    pub partition: i32,
    /// Assignment generation of the partition when the batch was cut; acknowledgements
    /// from an older generation (the partition was revoked meanwhile) are dropped.
    pub generation: u64,
    pub range: BatchRange,
    /// Payloads, back to back in [`CHUNK_BYTES`] chunks (not one allocation per record;
    /// recycled through the source's [`BufPool`] when the batch is dropped).
    pub data: Vec<PooledBuf>,
    pub records: Vec<RecordRef>,
    pub skipped: Vec<Skipped>,
    /// Kafka timestamp (ms) of the first record: the batch's age for lag-in-seconds.
    pub first_timestamp_ms: i64,
    /// The bytes this batch holds against the in-flight budget, given back when the batch
    /// is dropped (after its insert was acknowledged, or wherever else it ends).
    pub permit: BudgetPermit,
}

impl RecordBatch {
    /// A batch of `range` that holds no record (a replayed bundle member whose records are
    /// gone from Kafka): acknowledging it still moves its partition's commit.
    pub fn empty(
        topic: Arc<str>,
        log: LogId,
        partition: i32,
        generation: u64,
        range: BatchRange,
    ) -> Self {
        Self {
            topic,
            log,
            partition,
            generation,
            range,
            data: Vec::new(),
            records: Vec::new(),
            skipped: Vec::new(),
            first_timestamp_ms: 0,
            permit: BudgetPermit::default(),
        }
    }

    /// Bytes this batch holds against the in-flight budget.
    pub fn budget_bytes(&self) -> usize {
        self.permit.bytes()
    }

    pub fn payload(&self, r: &RecordRef) -> &[u8] {
        &self.data[r.chunk as usize][r.start..r.start + r.len]
    }

    /// The insert deduplication token of the records `first..=last` of this batch's partition.
    pub fn token(&self, range: BatchRange) -> String {
        dedup_token(&self.topic, &self.log, self.partition, range)
    }
}

/// `<topic>#<log>-<partition>-<first>-<last>` (`<topic>-…` for the legacy log):
/// deterministic in the log and its offsets, so a retried or replayed batch carries the
/// same token and ClickHouse drops the duplicate, while the same offsets of another
/// incarnation of the topic, or of another cluster's topic of that name, do not collide.
pub fn dedup_token(topic: &str, log: &LogId, partition: i32, range: BatchRange) -> String {
    format!(
        "{}-{partition}-{}-{}",
        log.token_prefix(topic),
        range.first,
        range.last
    )
}

/// Limits that close a batch.
#[derive(Debug, Clone, Copy)]
pub struct CutPolicy {
    pub max_bytes: usize,
    pub max_records: usize,
}

impl CutPolicy {
    /// Whether `bytes` and `records` fill a batch: one partition's open batch, or the open
    /// batches a bundle would take, together.
    pub fn full_at(self, bytes: usize, records: usize) -> bool {
        bytes >= self.max_bytes || records >= self.max_records
    }
}

/// The open batch of one partition.
#[derive(Debug)]
pub struct BatchBuilder {
    topic: Arc<str>,
    partition: i32,
    generation: u64,
    first: Option<i64>,
    last: i64,
    data: Vec<PooledBuf>,
    /// Payload bytes in `data`.
    bytes: usize,
    records: Vec<RecordRef>,
    skipped: Vec<Skipped>,
    first_timestamp_ms: i64,
    opened_at: Option<std::time::Instant>,
    /// What the open batch holds against the in-flight budget (detached: counts only).
    permit: BudgetPermit,
    /// Where payload buffers come from and go back to (none: plain allocations).
    pool: Option<BufPool>,
}

impl BatchBuilder {
    pub fn new(topic: Arc<str>, partition: i32, generation: u64) -> Self {
        Self {
            topic,
            partition,
            generation,
            first: None,
            last: -1,
            data: Vec::new(),
            bytes: 0,
            records: Vec::new(),
            skipped: Vec::new(),
            first_timestamp_ms: 0,
            opened_at: None,
            permit: BudgetPermit::default(),
            pool: None,
        }
    }

    /// Hold the open batch's bytes against `budget` (without one, they are only counted).
    pub fn with_budget(mut self, budget: &Arc<Budget>) -> Self {
        self.permit = budget.permit();
        self
    }

    /// Take payload buffers from `pool` (and have closed batches return them there).
    pub fn with_pool(mut self, pool: BufPool) -> Self {
        self.pool = Some(pool);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub fn first_offset(&self) -> Option<i64> {
        self.first
    }

    /// Offset of the open batch's last record (None when empty).
    pub fn last_offset(&self) -> Option<i64> {
        self.first.map(|_| self.last)
    }

    pub fn opened_at(&self) -> Option<std::time::Instant> {
        self.opened_at
    }

    pub fn first_timestamp_ms(&self) -> Option<i64> {
        self.first.map(|_| self.first_timestamp_ms)
    }

    fn start(&mut self, offset: i64, timestamp_ms: i64) {
        if self.first.is_none() {
            self.first = Some(offset);
            self.first_timestamp_ms = timestamp_ms;
            self.opened_at = Some(std::time::Instant::now());
        }
        self.last = offset;
    }

    /// Add a record to decode; its payload bytes are held against the budget.
    pub fn push(&mut self, offset: i64, timestamp_ms: i64, payload: &[u8]) {
        self.start(offset, timestamp_ms);
        let fits = self
            .data
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= payload.len());
        if !fits {
            let chunk = if payload.len() > CHUNK_BYTES {
                PooledBuf::from(Vec::with_capacity(payload.len()))
            } else {
                let mut c = self.pool.as_ref().map(BufPool::take).unwrap_or_default();
                c.vec_mut().reserve_exact(CHUNK_BYTES);
                c
            };
            self.data.push(chunk);
        }
        let chunk = self.data.len() - 1;
        let buf = self.data[chunk].vec_mut();
        let start = buf.len();
        buf.extend_from_slice(payload);
        self.bytes += payload.len();
        self.records.push(RecordRef {
            offset,
            chunk: u32::try_from(chunk).unwrap_or(u32::MAX),
            start,
            len: payload.len(),
        });
        self.permit.grow(payload.len());
    }

    /// Add a record that will be skipped; a payload it keeps is held against the budget.
    pub fn push_skipped(&mut self, offset: i64, timestamp_ms: i64, skipped: Skipped) {
        self.start(offset, timestamp_ms);
        self.permit
            .grow(skipped.payload.as_ref().map_or(0, Vec::len));
        self.skipped.push(skipped);
    }

    /// Bytes the open batch holds against the budget.
    pub fn budget_bytes(&self) -> usize {
        self.permit.bytes()
    }

    /// Whether the policy says the batch is full.
    pub fn is_full(&self, policy: CutPolicy) -> bool {
        let (bytes, records) = self.held();
        policy.full_at(bytes, records)
    }

    /// Payload bytes and records (skipped ones included) of the open batch, as
    /// [`CutPolicy::full_at`] counts them.
    pub fn held(&self) -> (usize, usize) {
        (self.bytes, self.records.len() + self.skipped.len())
    }

    /// Close the batch (None when empty) and start a new one.
    pub fn take(&mut self) -> Option<RecordBatch> {
        let first = self.first.take()?;
        // The budget counts payload bytes, but a chunk is CHUNK_BYTES however little it
        // holds. A batch cut early (linger, a budget pause) under a trickle of records
        // would keep a whole chunk for a few hundred kilobytes, and with the budget full of
        // such batches memory reached ~10× the budget (e2e/chaos `outage` case: 48 MiB
        // budget, 560 MiB resident). So a last chunk less than half full is copied into a
        // buffer of its own size (under CHUNK_BYTES / 2 bytes) and goes back to the pool
        // now: every chunk a batch keeps is at least half full, except a big record's own.
        if let Some(last) = self.data.last_mut()
            && last.len() < last.capacity() / 2
        {
            *last = PooledBuf::from(last.to_vec());
        }
        let batch = RecordBatch {
            topic: self.topic.clone(),
            log: LogId::legacy(),
            partition: self.partition,
            generation: self.generation,
            range: BatchRange {
                first,
                last: self.last,
            },
            data: std::mem::take(&mut self.data),
            records: std::mem::take(&mut self.records),
            skipped: std::mem::take(&mut self.skipped),
            first_timestamp_ms: self.first_timestamp_ms,
            permit: self.permit.take(),
        };
        self.bytes = 0;
        self.opened_at = None;
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_contiguous_offsets_and_name_them() {
        let mut b = BatchBuilder::new("spans".into(), 3, 1);
        let policy = CutPolicy {
            max_bytes: 10,
            max_records: 100,
        };
        b.push(7, 1000, b"abcd");
        b.push_skipped(
            8,
            1001,
            Skipped {
                offset: 8,
                reason: SkipReason::Oversized,
                detail: String::new(),
                payload: None,
            },
        );
        assert!(!b.is_full(policy));
        b.push(9, 1002, b"efghij");
        assert!(b.is_full(policy));
        let batch = b.take().unwrap();
        assert_eq!(batch.range, BatchRange { first: 7, last: 9 });
        assert_eq!(batch.payload(&batch.records[1]), b"efghij");
        assert_eq!(batch.token(batch.range), "spans-3-7-9");
        assert_eq!(batch.budget_bytes(), 10);
        assert!(b.is_empty() && b.take().is_none());
    }

    #[test]
    fn pooled_batches_hand_their_chunks_to_the_next_batch() {
        let pool = BufPool::new(4, CHUNK_BYTES);
        let mut b = BatchBuilder::new("spans".into(), 0, 1).with_pool(pool.clone());
        let big = CHUNK_BYTES / 2 + 1;
        b.push(1, 0, &vec![1; big]);
        let first = b.take().unwrap();
        assert!(first.data[0].is_pooled());
        let ptr = first.data[0].as_ptr();
        // The builder takes no chunk until a record arrives.
        assert_eq!((pool.owned(), pool.idle()), (1, 0));
        drop(first);
        assert_eq!((pool.owned(), pool.idle()), (1, 1));
        b.push(2, 0, &vec![2; big]);
        assert_eq!(pool.idle(), 0);
        let second = b.take().unwrap();
        assert_eq!(second.data[0].as_ptr(), ptr);
        assert_eq!(second.payload(&second.records[0]), vec![2; big]);
        // A batch dropped on another thread (the insert task) returns its chunk too.
        std::thread::spawn(move || drop(second)).join().unwrap();
        assert_eq!((pool.owned(), pool.idle()), (1, 1));
    }

    #[test]
    fn a_small_batch_keeps_its_bytes_not_a_whole_chunk() {
        let pool = BufPool::new(4, CHUNK_BYTES);
        let mut b = BatchBuilder::new("spans".into(), 0, 1).with_pool(pool.clone());
        b.push(1, 0, &[1; 5000]);
        b.push(2, 0, b"xyz");
        let batch = b.take().unwrap();
        // Cut early (a linger, a budget pause): the chunk went back to the pool at once.
        assert!(!batch.data[0].is_pooled());
        assert_eq!(batch.data[0].capacity(), 5003);
        assert_eq!((pool.owned(), pool.idle()), (1, 1));
        assert_eq!(batch.payload(&batch.records[0]), [1; 5000]);
        assert_eq!(batch.payload(&batch.records[1]), b"xyz");
        assert_eq!(batch.budget_bytes(), 5003);
        // The next batch fills the same chunk.
        b.push(3, 0, &vec![3; CHUNK_BYTES - 10]);
        assert!(b.take().unwrap().data[0].is_pooled());
    }

    #[test]
    fn records_fill_chunks_without_splitting_and_big_ones_get_their_own() {
        let pool = BufPool::new(8, CHUNK_BYTES);
        let mut b = BatchBuilder::new("spans".into(), 0, 1).with_pool(pool.clone());
        let third = CHUNK_BYTES / 3 + 1;
        for o in 0..3 {
            b.push(o, 0, &vec![o as u8; third]);
        }
        b.push(3, 0, &vec![9; CHUNK_BYTES + 1]);
        b.push(4, 0, b"tail");
        assert!(b.is_full(CutPolicy {
            max_bytes: 3 * third + CHUNK_BYTES + 5,
            max_records: 100
        }));
        let batch = b.take().unwrap();
        let chunks: Vec<u32> = batch.records.iter().map(|r| r.chunk).collect();
        // Two thirds fit the first chunk, the third starts a second one, the big record
        // has its own (not from the pool), and the small one goes to a fresh chunk.
        assert_eq!(chunks, [0, 0, 1, 2, 3]);
        assert!(!batch.data[2].is_pooled());
        assert!(batch.data[2].capacity() > CHUNK_BYTES);
        for (i, r) in batch.records.iter().enumerate().take(3) {
            assert_eq!(batch.payload(r), vec![i as u8; third]);
        }
        assert_eq!(batch.payload(&batch.records[4]), b"tail");
        assert_eq!(batch.budget_bytes(), 3 * third + CHUNK_BYTES + 5);
        drop(batch);
        assert_eq!((pool.owned(), pool.idle()), (3, 3));
    }

    #[test]
    fn past_the_pool_s_bound_batches_get_plain_chunks() {
        let pool = BufPool::new(1, CHUNK_BYTES);
        let mut a = BatchBuilder::new("spans".into(), 0, 1).with_pool(pool.clone());
        let mut b = BatchBuilder::new("spans".into(), 1, 1).with_pool(pool.clone());
        let (pa, pb) = (vec![b'a'; CHUNK_BYTES / 2], vec![b'b'; CHUNK_BYTES / 2]);
        a.push(1, 0, &pa);
        b.push(1, 0, &pb);
        let (a, b) = (a.take().unwrap(), b.take().unwrap());
        assert!(a.data[0].is_pooled() && !b.data[0].is_pooled());
        assert_eq!((&*a.data[0], &*b.data[0]), (&pa[..], &pb[..]));
        drop((a, b));
        assert_eq!((pool.owned(), pool.idle()), (1, 1));
    }
}
