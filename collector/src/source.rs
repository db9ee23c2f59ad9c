//! Kafka source: one thread that owns the rdkafka consumer, cuts batches, applies
//! back-pressure and commits what ClickHouse acknowledged.
//!
//! Everything that touches the consumer happens on this thread (rdkafka's rebalance
//! callbacks run inside `poll`, on this thread too), so partition state needs no
//! cross-thread locking; the mutex below only satisfies rdkafka's `Sync` bound and is never
//! contended. The thread never blocks on ClickHouse: batches leave through a channel and
//! acknowledgements come back through another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::batch::{BatchBuilder, CHUNK_BYTES, CutPolicy, RecordBatch, SkipReason, Skipped};
use prometheus_client::metrics::counter::Counter;

use crate::metrics::{Metrics, PartitionLabels, TopicLabels};
use crate::offsets::{BatchRange, PartitionLedger};
use crate::pool::BufPool;

/// Payload chunks the pool owns beyond those the in-flight budget can fill: one
/// partly filled chunk per open batch.
const BATCH_POOL_SLACK_CHUNKS: usize = 8;

/// How long a batch replaying a previous owner's recorded cut waits for the records up to
/// that cut before the linger timer closes it anyway (and a replay of it may then insert
/// rows a second time, under another token).
const REPLAY_LINGER: Duration = Duration::from_secs(30);

/// The recorded cut the open batch replays (the offset it must end at), if any.
fn recorded_end(builder: &BatchBuilder, ledger: Option<&mut PartitionLedger>) -> Option<i64> {
    builder
        .first_offset()
        .zip(ledger)
        .and_then(|(first, l)| l.forced_end(first))
}

/// Whether the linger timer closes `builder`'s open batch at `now`; `replay_end` is its
/// [`recorded_end`]. A batch that replays a recorded cut is not cut early: its rows went out
/// under the token of that exact range before, and only the same range deduplicates. The
/// records up to the recorded end exist (the previous owner read them), so they arrive; a
/// batch waits for them up to [`REPLAY_LINGER`] (for instance while its partition is paused).
fn linger_due(
    builder: &BatchBuilder,
    replay_end: Option<i64>,
    linger: Duration,
    now: Instant,
) -> bool {
    let Some(opened) = builder.opened_at() else {
        return false;
    };
    let age = now.saturating_duration_since(opened);
    if replay_end.is_some() {
        age >= REPLAY_LINGER.max(linger)
    } else {
        age >= linger
    }
}

/// Shared accounting of record bytes between Kafka and ClickHouse.
#[derive(Debug)]
pub struct Budget {
    used: AtomicUsize,
    pub max: usize,
}

impl Budget {
    pub fn new(max: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            max,
        }
    }
    pub fn acquire(&self, n: usize) {
        self.used.fetch_add(n, Ordering::Relaxed);
    }
    pub fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// ClickHouse acknowledged every row of `range` (or skipped them for a stated reason).
#[derive(Debug, Clone)]
pub struct Ack {
    pub topic: Arc<str>,
    pub partition: i32,
    pub generation: u64,
    pub range: BatchRange,
}

/// What the source needs to know.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub brokers: String,
    pub topics: Vec<String>,
    pub group_id: String,
    pub properties: Vec<(String, String)>,
    pub cut: CutPolicy,
    pub linger: Duration,
    pub max_record_bytes: usize,
    /// Keep skipped payloads for the dead-letter topic.
    pub keep_skipped_payloads: bool,
    /// How long shutdown may wait for in-flight batches before giving up on them.
    pub drain_deadline: Duration,
}

struct PartitionState {
    topic: Arc<str>,
    partition: i32,
    generation: u64,
    ledger: Option<PartitionLedger>,
    builder: BatchBuilder,
    /// First offset and Kafka timestamp of each pending batch, oldest first.
    pending_ts: std::collections::VecDeque<(i64, i64)>,
    paused: bool,
    records_consumed: Counter,
    bytes_consumed: Counter,
}

impl PartitionState {
    /// The recorded cut the open batch replays, if any ([`recorded_end`]).
    fn replay_end(&mut self) -> Option<i64> {
        recorded_end(&self.builder, self.ledger.as_mut())
    }

    /// The open batch, closed before its size says so (a budget pause, shutdown), unless
    /// it replays a recorded cut: only that cut may close it, because its rows may have
    /// gone out before under that exact range's token. Such a batch waits for its records
    /// (the linger timer gives up after [`REPLAY_LINGER`]), or at shutdown stays unsent
    /// and uncommitted for the next owner, whom the final commit still tells the cut.
    fn close_early(&mut self) -> Option<RecordBatch> {
        if self.replay_end().is_some() {
            return None;
        }
        self.builder.take()
    }
}

#[derive(Default)]
struct State {
    partitions: Vec<PartitionState>,
    next_generation: u64,
    /// Budget bytes of open batches dropped on revoke, to release.
    dropped_bytes: usize,
}

impl State {
    fn find(&mut self, topic: &str, partition: i32) -> Option<&mut PartitionState> {
        self.partitions
            .iter_mut()
            .find(|p| p.partition == partition && &*p.topic == topic)
    }
}

/// High watermarks of assigned partitions, refreshed by the watermark thread.
type Watermarks = Arc<Mutex<HashMap<(String, i32), i64>>>;

/// rdkafka context: rebalance hooks, commit results, logs.
struct SourceContext {
    state: Mutex<State>,
    high_watermarks: Watermarks,
    /// Partitions assigned now, for the watermark thread.
    assigned: Arc<Mutex<Vec<(String, i32)>>>,
    metrics: Arc<Metrics>,
    budget: Arc<Budget>,
    /// Batch payload buffers, recycled when a batch is dropped (after its insert).
    pool: BufPool,
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility = fac, "{log_message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility = fac, "{log_message}")
            }
            _ => tracing::debug!(target: "librdkafka", facility = fac, "{log_message}"),
        }
    }
}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let mut state = self.state.lock().expect("state lock");
        let mut commit = TopicPartitionList::new();
        for elem in tpl.elements() {
            let Some(idx) = state
                .partitions
                .iter()
                .position(|p| &*p.topic == elem.topic() && p.partition == elem.partition())
            else {
                continue;
            };
            let mut p = state.partitions.swap_remove(idx);
            // The open batch was never sent: its records go back to Kafka for the next owner.
            if let Some(batch) = p.builder.take() {
                state.dropped_bytes += batch.budget_bytes;
            }
            if let Some((offset, metadata)) =
                p.ledger.as_mut().and_then(PartitionLedger::take_commit)
            {
                add_commit(&mut commit, &p.topic, p.partition, offset, metadata);
            }
            tracing::info!(topic = %p.topic, partition = p.partition, in_flight = p.ledger.as_ref().map_or(0, PartitionLedger::in_flight), "partition revoked");
            self.metrics
                .lag_records
                .remove(&labels(&p.topic, p.partition));
            self.metrics
                .lag_seconds
                .remove(&labels(&p.topic, p.partition));
        }
        self.budget
            .release(std::mem::take(&mut state.dropped_bytes));
        self.metrics
            .assigned_partitions
            .set(state.partitions.len() as i64);
        self.publish_assigned(&state);
        drop(state);
        if commit.count() > 0 {
            // Synchronous: the next owner must see our acknowledged progress.
            match consumer.commit(&commit, CommitMode::Sync) {
                Ok(()) => {
                    self.metrics.commits.inc();
                }
                Err(e) => {
                    self.metrics.commit_errors.inc();
                    tracing::warn!(error = %e, "commit on revoke failed; the next owner replays (deduplicated)");
                }
            };
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let mut state = self.state.lock().expect("state lock");
                for elem in tpl.elements() {
                    if state.find(elem.topic(), elem.partition()).is_some() {
                        continue;
                    }
                    state.next_generation += 1;
                    let generation = state.next_generation;
                    let topic: Arc<str> = elem.topic().into();
                    state.partitions.push(PartitionState {
                        builder: BatchBuilder::new(topic.clone(), elem.partition(), generation)
                            .with_pool(self.pool.clone()),
                        topic,
                        partition: elem.partition(),
                        generation,
                        ledger: None,
                        pending_ts: Default::default(),
                        paused: false,
                        records_consumed: self
                            .metrics
                            .records_consumed
                            .get_or_create(&TopicLabels {
                                topic: elem.topic().to_string(),
                            })
                            .clone(),
                        bytes_consumed: self
                            .metrics
                            .bytes_consumed
                            .get_or_create(&TopicLabels {
                                topic: elem.topic().to_string(),
                            })
                            .clone(),
                    });
                    tracing::info!(
                        topic = elem.topic(),
                        partition = elem.partition(),
                        generation,
                        "partition assigned"
                    );
                }
                self.metrics
                    .assigned_partitions
                    .set(state.partitions.len() as i64);
                self.publish_assigned(&state);
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(e) = result {
            self.metrics.commit_errors.inc();
            tracing::warn!(error = %e, partitions = offsets.count(), "offset commit failed; will be retried with the next one");
        }
    }
}

impl SourceContext {
    fn publish_assigned(&self, state: &State) {
        let list = state
            .partitions
            .iter()
            .map(|p| (p.topic.to_string(), p.partition))
            .collect();
        *self.assigned.lock().expect("assigned lock") = list;
    }
}

/// Refresh the high watermarks of assigned partitions every `period`, on a client of its
/// own: paused partitions are not fetched, so the consumer itself stops learning how far
/// the log has grown exactly when lag matters most.
fn spawn_watermarks(
    client: ClientConfig,
    assigned: Arc<Mutex<Vec<(String, i32)>>>,
    watermarks: Watermarks,
    stop: Arc<AtomicBool>,
) {
    let consumer: BaseConsumer = match client.create() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create the watermark client; lag in records will not be reported");
            return;
        }
    };
    let _ = std::thread::Builder::new()
        .name("kafka-watermarks".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let list = assigned.lock().expect("assigned lock").clone();
                for (topic, partition) in list {
                    if let Ok((_low, high)) =
                        consumer.fetch_watermarks(&topic, partition, Duration::from_secs(2))
                    {
                        watermarks
                            .lock()
                            .expect("hw lock")
                            .insert((topic, partition), high);
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
}

fn labels(topic: &str, partition: i32) -> PartitionLabels {
    PartitionLabels {
        topic: topic.to_string(),
        partition,
    }
}

fn add_commit(
    tpl: &mut TopicPartitionList,
    topic: &str,
    partition: i32,
    offset: i64,
    metadata: String,
) {
    if tpl
        .add_partition_offset(topic, partition, Offset::Offset(offset))
        .is_ok()
        && let Some(mut elem) = tpl.find_partition(topic, partition)
    {
        elem.set_metadata(metadata);
    }
}

/// The pool of batch payload chunks ([`crate::batch::CHUNK_BYTES`] each). The budget
/// bounds the payload bytes held by open and in-flight batches; the pool owns as many
/// chunks as that fills, plus one partly filled chunk per open batch, so its memory is
/// the budget's plus a little. Chunks past that are plain allocations, freed after use.
fn batch_pool(budget: &Budget) -> BufPool {
    BufPool::new(
        budget.max.div_ceil(CHUNK_BYTES) + BATCH_POOL_SLACK_CHUNKS,
        CHUNK_BYTES,
    )
}

/// Handle to the running source thread.
#[derive(Debug)]
pub struct Source {
    pub thread: std::thread::JoinHandle<()>,
    pub stop: Arc<AtomicBool>,
}

/// Liveness: the source loop's last iteration (unix ms), for `/healthz`.
pub type Heartbeat = Arc<AtomicU64>;

/// Start the source thread.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    cfg: SourceConfig,
    metrics: Arc<Metrics>,
    budget: Arc<Budget>,
    batches: crossbeam_channel::Sender<RecordBatch>,
    acks: crossbeam_channel::Receiver<Ack>,
    heartbeat: Heartbeat,
) -> Result<Source, rdkafka::error::KafkaError> {
    let watermarks: Watermarks = Arc::default();
    let assigned: Arc<Mutex<Vec<(String, i32)>>> = Arc::default();
    let ctx = SourceContext {
        state: Mutex::new(State::default()),
        high_watermarks: watermarks.clone(),
        assigned: assigned.clone(),
        metrics: metrics.clone(),
        budget: budget.clone(),
        pool: batch_pool(&budget),
    };
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &cfg.brokers)
        .set("group.id", &cfg.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("fetch.max.bytes", "8388608")
        .set("max.partition.fetch.bytes", "2097152")
        .set("queued.max.messages.kbytes", "8192")
        .set("session.timeout.ms", "30000")
        .set("max.poll.interval.ms", "300000");
    for (k, v) in &cfg.properties {
        client.set(k, v);
    }
    let consumer: BaseConsumer<SourceContext> = client.create_with_context(ctx)?;
    let mut wm_client = ClientConfig::new();
    wm_client.set("bootstrap.servers", &cfg.brokers);
    for (k, v) in &cfg.properties {
        wm_client.set(k, v);
    }
    let topics: Vec<&str> = cfg.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    spawn_watermarks(wm_client, assigned, watermarks, stop.clone());
    let thread = std::thread::Builder::new()
        .name("kafka-source".into())
        .spawn(move || {
            let mut run = SourceLoop {
                cfg,
                consumer,
                metrics,
                budget,
                batches,
                acks,
                stop: stop2,
                heartbeat,
            };
            run.run();
        })
        .expect("spawn kafka source thread");
    Ok(Source { thread, stop })
}

struct SourceLoop {
    cfg: SourceConfig,
    consumer: BaseConsumer<SourceContext>,
    metrics: Arc<Metrics>,
    budget: Arc<Budget>,
    batches: crossbeam_channel::Sender<RecordBatch>,
    acks: crossbeam_channel::Receiver<Ack>,
    stop: Arc<AtomicBool>,
    heartbeat: Heartbeat,
}

/// Resume paused partitions once the budget drops below this fraction.
const RESUME_FRACTION: f64 = 0.75;

impl SourceLoop {
    fn run(&mut self) {
        let mut last_metrics = Instant::now();
        let mut errors = RateLimit::new(Duration::from_secs(10));
        while !self.stop.load(Ordering::Relaxed) {
            self.beat();
            self.drain_acks();
            self.apply_budget();
            match self.consumer.poll(Duration::from_millis(50)) {
                Some(Ok(msg)) => {
                    let ts = msg.timestamp().to_millis().unwrap_or_else(now_ms);
                    self.on_record(
                        msg.topic(),
                        msg.partition(),
                        msg.offset(),
                        ts,
                        msg.payload(),
                    );
                }
                Some(Err(e)) if errors.allow() => {
                    tracing::warn!(error = %e, "kafka consumer error")
                }
                Some(Err(_)) => {}
                None => {}
            }
            self.flush_lingering();
            if last_metrics.elapsed() >= Duration::from_millis(500) {
                self.update_lag();
                last_metrics = Instant::now();
            }
        }
        self.shutdown();
    }

    fn beat(&self) {
        self.heartbeat.store(now_ms() as u64, Ordering::Relaxed);
    }

    fn on_record(&self, topic: &str, partition: i32, offset: i64, ts: i64, payload: Option<&[u8]>) {
        let need_init = {
            let mut state = self.consumer.context().state.lock().expect("state lock");
            match state.find(topic, partition) {
                None => return, // revoked between fetch and delivery: the next owner reads it
                Some(p) => {
                    // Counter handles resolved at assignment: no label allocation per record.
                    p.records_consumed.inc();
                    p.bytes_consumed
                        .inc_by(payload.map_or(0, <[u8]>::len) as u64);
                    p.ledger.is_none()
                }
            }
        };
        let ledger = if need_init {
            Some(self.load_ledger(topic, partition, offset))
        } else {
            None
        };

        let mut closed = Vec::new();
        {
            let keep = self.cfg.keep_skipped_payloads;
            let max_record = self.cfg.max_record_bytes;
            let cut = self.cfg.cut;
            let mut state = self.consumer.context().state.lock().expect("state lock");
            let Some(p) = state.find(topic, partition) else {
                return;
            };
            if let Some(l) = ledger {
                p.ledger = Some(l);
            }
            let l = p.ledger.as_mut().expect("ledger initialised");
            // A recorded cut that lies before this record closes the open batch first.
            if let Some(first) = p.builder.first_offset()
                && l.forced_end(first).is_some_and(|end| end < offset)
            {
                closed.extend(p.builder.take());
            }
            let added = match payload {
                Some(bytes) if bytes.len() > max_record => p.builder.push_skipped(
                    offset,
                    ts,
                    Skipped {
                        offset,
                        reason: SkipReason::Oversized,
                        detail: format!(
                            "record of {} bytes exceeds limits.max_record_bytes = {max_record}",
                            bytes.len()
                        ),
                        payload: keep.then(|| bytes.to_vec()),
                    },
                ),
                Some(bytes) if !bytes.is_empty() => p.builder.push(offset, ts, bytes),
                _ => p.builder.push_skipped(
                    offset,
                    ts,
                    Skipped {
                        offset,
                        reason: SkipReason::Empty,
                        detail: "record has no payload".into(),
                        payload: None,
                    },
                ),
            };
            self.budget.acquire(added);
            let first = p.builder.first_offset().expect("just pushed");
            let forced = l.forced_end(first);
            if forced == Some(offset) || (forced.is_none() && p.builder.is_full(cut)) {
                closed.extend(p.builder.take());
            }
        }
        for batch in closed {
            self.dispatch(batch, false);
        }
    }

    /// Read the committed offset and the previous owner's recorded cuts for a partition.
    fn load_ledger(&self, topic: &str, partition: i32, first_seen: i64) -> PartitionLedger {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        match self
            .consumer
            .committed_offsets(tpl, Duration::from_secs(10))
        {
            Ok(list) => {
                if let Some(elem) = list.find_partition(topic, partition)
                    && let Offset::Offset(committed) = elem.offset()
                {
                    let metadata = elem.metadata().to_string();
                    tracing::info!(topic, partition, committed, cuts = %metadata, "resuming from committed offset");
                    return PartitionLedger::new(committed, Some(&metadata));
                }
                PartitionLedger::new(first_seen, None)
            }
            Err(e) => {
                tracing::warn!(topic, partition, error = %e, "cannot read committed offset; starting without recorded cuts");
                PartitionLedger::new(first_seen, None)
            }
        }
    }

    /// Record the batch's cut as intent metadata, then hand it to the workers.
    fn dispatch(&self, batch: RecordBatch, lingered: bool) {
        let commit = {
            let mut state = self.consumer.context().state.lock().expect("state lock");
            let Some(p) = state.find(&batch.topic, batch.partition) else {
                self.budget.release(batch.budget_bytes);
                return;
            };
            let l = p
                .ledger
                .as_mut()
                .expect("ledger exists for a partition with records");
            let metadata = l.open(batch.range);
            p.pending_ts
                .push_back((batch.range.first, batch.first_timestamp_ms));
            let mut tpl = TopicPartitionList::new();
            add_commit(
                &mut tpl,
                &batch.topic,
                batch.partition,
                l.committed(),
                metadata,
            );
            tpl
        };
        // A cut made by the linger timer is not reproducible from the data alone: make sure
        // Kafka has it before the rows can reach ClickHouse. Size cuts are reproducible, so
        // their intent is recorded asynchronously.
        let mode = if lingered {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if let Err(e) = self.consumer.commit(&commit, mode) {
            self.metrics.commit_errors.inc();
            tracing::warn!(error = %e, topic = %batch.topic, partition = batch.partition, "recording a batch cut failed; a replay may re-insert it");
        }
        if let Err(e) = self.batches.send(batch) {
            // Workers are gone (shutdown): the records stay uncommitted and are replayed.
            self.budget.release(e.0.budget_bytes);
        }
    }

    fn flush_lingering(&self) {
        let linger = self.cfg.linger;
        let now = Instant::now();
        let due: Vec<RecordBatch> = {
            let mut state = self.consumer.context().state.lock().expect("state lock");
            state
                .partitions
                .iter_mut()
                .filter_map(|p| {
                    let replay_end = p.replay_end();
                    if !linger_due(&p.builder, replay_end, linger, now) {
                        return None;
                    }
                    if let Some(end) = replay_end {
                        tracing::warn!(
                            topic = %p.topic,
                            partition = p.partition,
                            recorded_end = end,
                            "a replayed batch did not reach its recorded end in {REPLAY_LINGER:?}; \
                             closing it early, its rows may be inserted twice"
                        );
                    }
                    p.builder.take()
                })
                .collect()
        };
        for batch in due {
            self.dispatch(batch, true);
        }
    }

    fn drain_acks(&self) {
        let mut commit = TopicPartitionList::new();
        {
            let mut state = self.consumer.context().state.lock().expect("state lock");
            while let Ok(ack) = self.acks.try_recv() {
                let Some(p) = state.find(&ack.topic, ack.partition) else {
                    continue;
                };
                if p.generation != ack.generation {
                    continue; // acknowledgement from before a revoke: the new owner replays it
                }
                if let Some(l) = p.ledger.as_mut()
                    && l.ack(ack.range)
                {
                    while p
                        .pending_ts
                        .front()
                        .is_some_and(|(first, _)| *first < l.committed())
                    {
                        p.pending_ts.pop_front();
                    }
                }
            }
            for p in &mut state.partitions {
                if let Some((offset, metadata)) =
                    p.ledger.as_mut().and_then(PartitionLedger::take_commit)
                {
                    add_commit(&mut commit, &p.topic, p.partition, offset, metadata);
                }
            }
        }
        if commit.count() > 0 {
            match self.consumer.commit(&commit, CommitMode::Async) {
                Ok(()) => {
                    self.metrics.commits.inc();
                }
                Err(e) => {
                    self.metrics.commit_errors.inc();
                    tracing::warn!(error = %e, "offset commit failed; retried with the next acknowledgement");
                }
            }
        }
    }

    /// Pause every partition while the byte budget is exhausted; resume below 75 %.
    fn apply_budget(&self) {
        let used = self.budget.used();
        self.metrics.inflight_bytes.set(used as i64);
        let over = used >= self.budget.max;
        let under = (used as f64) < self.budget.max as f64 * RESUME_FRACTION;
        let mut tpl = TopicPartitionList::new();
        let mut pausing = false;
        let mut to_flush = Vec::new();
        {
            let mut state = self.consumer.context().state.lock().expect("state lock");
            for p in &mut state.partitions {
                if over && !p.paused {
                    tpl.add_partition(&p.topic, p.partition);
                    p.paused = true;
                    pausing = true;
                    // Send what is open, so memory can drain even at low traffic.
                    to_flush.extend(p.close_early());
                } else if under && p.paused {
                    tpl.add_partition(&p.topic, p.partition);
                    p.paused = false;
                }
            }
            self.metrics
                .paused_partitions
                .set(state.partitions.iter().filter(|p| p.paused).count() as i64);
        }
        if tpl.count() > 0 {
            let result = if pausing {
                self.consumer.pause(&tpl)
            } else {
                self.consumer.resume(&tpl)
            };
            match result {
                Ok(()) => tracing::info!(
                    partitions = tpl.count(),
                    used_bytes = used,
                    budget_bytes = self.budget.max,
                    "{}",
                    if pausing {
                        "paused partitions: in-flight byte budget exhausted"
                    } else {
                        "resumed partitions"
                    }
                ),
                Err(e) => tracing::warn!(error = %e, "pause/resume failed"),
            }
        }
        for batch in to_flush {
            self.dispatch(batch, true);
        }
    }

    fn update_lag(&self) {
        let hw = self
            .consumer
            .context()
            .high_watermarks
            .lock()
            .expect("hw lock")
            .clone();
        let state = self.consumer.context().state.lock().expect("state lock");
        let now = now_ms();
        for p in &state.partitions {
            let l = labels(&p.topic, p.partition);
            if let (Some(ledger), Some(high)) =
                (&p.ledger, hw.get(&(p.topic.to_string(), p.partition)))
            {
                self.metrics
                    .lag_records
                    .get_or_create(&l)
                    .set((high - ledger.committed()).max(0));
            }
            let oldest = p
                .pending_ts
                .front()
                .map(|(_, ts)| *ts)
                .or(p.builder.first_timestamp_ms());
            let age = oldest.map_or(0.0, |ts| ((now - ts).max(0) as f64) / 1000.0);
            self.metrics.lag_seconds.get_or_create(&l).set(age);
        }
        self.metrics.inflight_bytes.set(self.budget.used() as i64);
    }

    /// Send open batches, wait (bounded) for their acknowledgements, commit, leave the group.
    fn shutdown(&mut self) {
        let open: Vec<RecordBatch> = {
            let mut state = self.consumer.context().state.lock().expect("state lock");
            state
                .partitions
                .iter_mut()
                .filter_map(PartitionState::close_early)
                .collect()
        };
        for batch in open {
            self.dispatch(batch, false);
        }
        let deadline = Instant::now() + self.cfg.drain_deadline;
        loop {
            self.beat();
            self.drain_acks();
            let in_flight: usize = {
                let state = self.consumer.context().state.lock().expect("state lock");
                state
                    .partitions
                    .iter()
                    .filter_map(|p| p.ledger.as_ref())
                    .map(PartitionLedger::in_flight)
                    .sum()
            };
            if in_flight == 0 {
                tracing::info!("all batches acknowledged");
                break;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    in_flight,
                    "shutdown deadline reached; unacknowledged batches will be replayed (deduplicated) by the next owner"
                );
                break;
            }
            // Serve callbacks (commit results) while waiting.
            let _ = self.consumer.poll(Duration::from_millis(20));
        }
        // Final synchronous commit of everything acknowledged, then leave the group.
        let mut commit = TopicPartitionList::new();
        {
            let state = self.consumer.context().state.lock().expect("state lock");
            for p in &state.partitions {
                if let Some(l) = &p.ledger {
                    let (offset, metadata) = l.current_commit();
                    add_commit(&mut commit, &p.topic, p.partition, offset, metadata);
                }
            }
        }
        if commit.count() > 0 {
            match self.consumer.commit(&commit, CommitMode::Sync) {
                Ok(()) => tracing::info!(partitions = commit.count(), "final offsets committed"),
                Err(e) => {
                    tracing::warn!(error = %e, "final commit failed; the next owner replays (deduplicated)")
                }
            }
        }
        self.consumer.unsubscribe();
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Lets one event through per period (for logs that could flood).
#[derive(Debug)]
pub struct RateLimit {
    period: Duration,
    last: Option<Instant>,
    pub suppressed: u64,
}

impl RateLimit {
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            last: None,
            suppressed: 0,
        }
    }
    pub fn allow(&mut self) -> bool {
        if self.last.is_none_or(|t| t.elapsed() >= self.period) {
            self.last = Some(Instant::now());
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linger_timer_waits_for_a_recorded_cut() {
        let linger = Duration::from_millis(200);
        let mut b = BatchBuilder::new("spans".into(), 0, 1);
        b.push(20, 0, b"record 20");
        let opened = b.opened_at().expect("a pushed record opens the batch");
        let due = |end: Option<i64>, after: Duration| linger_due(&b, end, linger, opened + after);

        // No recorded cut: the timer closes the batch after `linger`.
        let mut fresh = PartitionLedger::new(20, None);
        let end = recorded_end(&b, Some(&mut fresh));
        assert_eq!(end, None);
        assert!(!due(end, Duration::from_millis(100)));
        assert!(due(end, Duration::from_secs(1)));
        assert_eq!(recorded_end(&b, None), None);

        // The previous owner cut at 19, 29 and 37 and was committed up to 10: a batch
        // opened at 20 must reach 29, whatever the timer says, for a while.
        let mut replay = PartitionLedger::new(10, Some("th1:19,29,37"));
        let end = recorded_end(&b, Some(&mut replay));
        assert_eq!(end, Some(29));
        assert!(!due(end, Duration::from_secs(1)));
        assert!(!due(end, REPLAY_LINGER / 2));
        assert!(due(end, REPLAY_LINGER));

        // Past the recorded cuts the timer is back to `linger`.
        let mut past = PartitionLedger::new(10, Some("th1:19"));
        let end = recorded_end(&b, Some(&mut past));
        assert_eq!(end, None);
        assert!(due(end, Duration::from_secs(1)));

        // An empty builder replays nothing and is never due.
        let empty = BatchBuilder::new("spans".into(), 0, 1);
        assert_eq!(recorded_end(&empty, Some(&mut replay)), None);
        assert!(!linger_due(
            &empty,
            Some(29),
            linger,
            opened + REPLAY_LINGER * 2
        ));
    }
}
