//! The Kafka source's IO shell: one thread owns the rdkafka consumer, feeds what it
//! delivers to the [`Machine`] and carries out the [`Command`]s it answers.
//!
//! Everything that touches the consumer happens on this thread (rdkafka's rebalance
//! callbacks run inside `poll`, on this thread too), so the machine's mutex is never
//! contended: it only satisfies rdkafka's `Sync` bound on the context, which forwards
//! rebalances to the machine. The thread never blocks on ClickHouse: batches leave through
//! a channel and acknowledgements come back through another.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;

use super::context::{self, SourceContext};
use super::logs::{self, TopicLogs};
use super::machine::{Ack, Command, Fed, Machine, Record};
use super::replay;
use super::topic_id;
use super::unsent::Unsent;
use super::watermarks::Watermarks;
use super::{Heartbeat, SourceConfig};
use crate::batch::{LogId, RecordBatch};
use crate::budget::Budget;
use crate::kafka_clients::WithToken;
use crate::log_limit::RateLimit;
use crate::metrics::{Metrics, TopicLabels};
use crate::offsets::PartitionLedger;
use crate::workers::Work;

pub(super) struct SourceLoop {
    pub(super) cfg: SourceConfig,
    pub(super) consumer: WithToken<BaseConsumer<SourceContext>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) budget: Arc<Budget>,
    pub(super) batches: crossbeam_channel::Sender<Work>,
    /// Bundles a previous owner recorded, to be read again ([`replay`]).
    pub(super) replays: crossbeam_channel::Sender<replay::Request>,
    pub(super) acks: crossbeam_channel::Receiver<Ack>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) heartbeat: Heartbeat,
    pub(super) watermarks: Watermarks,
    /// Batches held until Kafka takes their cut ([`Unsent`]).
    pub(super) unsent: RefCell<Unsent<RecordBatch>>,
    /// The log each topic names, as last read ([`TopicLogs`]).
    pub(super) logs: RefCell<TopicLogs>,
}

/// Consumed-records and -bytes counters per topic, resolved once (no label allocation per
/// record).
type TopicCounters = HashMap<String, (Counter, Counter)>;

impl SourceLoop {
    fn machine(&self) -> std::sync::MutexGuard<'_, Machine> {
        self.consumer
            .context()
            .machine
            .lock()
            .expect("machine lock")
    }

    pub(super) fn run(&self) {
        // Commands the machine answered, carried out right after each event (one vector,
        // reused).
        let mut out = Vec::new();
        let mut counters = TopicCounters::new();
        let mut last_metrics = Instant::now();
        let mut errors = RateLimit::new(Duration::from_secs(10));
        while !self.stop.load(Ordering::Relaxed) {
            self.beat();
            self.drain_acks(&mut out);
            if self.check_budget(&mut out) {
                // The budget is spent: take no records, wait for an acknowledgement to free
                // it (librdkafka keeps what it prefetched; see machine_budget.rs). The next
                // drain_acks commits what it moved.
                let held = Instant::now();
                if let Ok(ack) = self.acks.recv_timeout(Duration::from_millis(50)) {
                    self.machine().acknowledged(ack);
                }
                self.metrics
                    .intake_held_seconds
                    .inc_by(held.elapsed().as_secs_f64());
            } else {
                self.poll_one(&mut out, &mut counters, &mut errors);
            }
            self.machine().linger(Instant::now(), &mut out);
            self.execute(&mut out);
            self.send_unsent(false);
            if last_metrics.elapsed() >= Duration::from_millis(500) {
                self.update_lag();
                last_metrics = Instant::now();
            }
        }
        self.shutdown(&mut out);
    }

    /// Takes one record (or a consumer error) from the consumer, waiting up to 50 ms.
    fn poll_one(
        &self,
        out: &mut Vec<Command>,
        counters: &mut TopicCounters,
        errors: &mut RateLimit,
    ) {
        match self.consumer.poll(Duration::from_millis(50)) {
            Some(Ok(msg)) => {
                let ts = msg.timestamp().to_millis().unwrap_or_else(now_ms);
                let record = Record {
                    topic: msg.topic(),
                    partition: msg.partition(),
                    offset: msg.offset(),
                    timestamp_ms: ts,
                    payload: msg.payload(),
                };
                self.on_record(record, out, counters);
            }
            Some(Err(e)) if errors.allow() => {
                tracing::warn!(error = %e, "kafka consumer error")
            }
            Some(Err(_)) | None => {}
        }
    }

    fn beat(&self) {
        self.heartbeat.store(now_ms() as u64, Ordering::Relaxed);
    }

    /// Carry out the machine's commands in order.
    fn execute(&self, out: &mut Vec<Command>) {
        for cmd in out.drain(..) {
            match cmd {
                Command::Send {
                    intent,
                    batch,
                    durable,
                } => {
                    // The hold rule is `Unsent::must_hold`'s.
                    let hold = self.unsent.borrow().must_hold(durable);
                    if hold {
                        self.unsent.borrow_mut().push(intent, batch);
                        self.send_unsent(true);
                    } else {
                        // Size cuts are reproducible: their intent is recorded asynchronously.
                        context::commit(
                            &self.consumer,
                            &self.metrics,
                            std::slice::from_ref(&intent),
                            false,
                            "recording a batch cut",
                        );
                        self.send(batch);
                    }
                }
                Command::SendBundle { intents, bundle } => {
                    // Every member's intent names the whole bundle; Kafka takes them all
                    // in one request (a refusal is the group's, for all of them) before
                    // the insert goes out. Refused — or behind a held batch — the bundle
                    // is dissolved into time cuts of their own, held until recorded.
                    let recorded = !self.unsent.borrow().is_holding()
                        && context::commit(
                            &self.consumer,
                            &self.metrics,
                            &intents,
                            true,
                            "recording a bundle",
                        );
                    if recorded {
                        self.metrics.bundles.inc();
                        self.send_work(Work::Bundle(bundle));
                    } else {
                        self.metrics.bundles_dissolved.inc();
                        let solo = self.machine().dissolve(bundle);
                        let mut unsent = self.unsent.borrow_mut();
                        for (intent, batch) in solo {
                            unsent.push(intent, batch);
                        }
                        drop(unsent);
                        self.send_unsent(false);
                    }
                }
                Command::Replay {
                    desc,
                    partition,
                    generation,
                } => {
                    self.metrics.bundle_replays.inc();
                    let _ = self.replays.send(replay::Request {
                        desc,
                        partition,
                        generation,
                    });
                }
                Command::Commit { offsets, sync } => {
                    context::commit(
                        &self.consumer,
                        &self.metrics,
                        &offsets,
                        sync,
                        "offset commit",
                    );
                }
                Command::Pause(ids) | Command::Resume(ids) if ids.is_empty() => {}
                Command::Pause(ids) => match self.consumer.pause(&context::tpl_of(&ids)) {
                    Ok(()) => tracing::info!(
                        partitions = ids.len(),
                        used_bytes = self.budget.used(),
                        budget_bytes = self.budget.max(),
                        "paused partitions: in-flight byte budget exhausted"
                    ),
                    Err(e) => tracing::warn!(error = %e, "pause failed"),
                },
                Command::Resume(ids) => match self.consumer.resume(&context::tpl_of(&ids)) {
                    Ok(()) => tracing::info!(
                        partitions = ids.len(),
                        used_bytes = self.budget.used(),
                        "resumed partitions"
                    ),
                    Err(e) => tracing::warn!(error = %e, "resume failed"),
                },
            }
        }
    }

    /// Workers gone (shutdown): the batch is dropped with its permit; its records stay
    /// uncommitted and are replayed.
    fn send(&self, batch: RecordBatch) {
        self.send_work(Work::Batch(batch));
    }

    fn send_work(&self, work: Work) {
        let _ = self.batches.send(work);
    }

    /// Records the held batches' cuts and sends those Kafka took ([`Unsent::flush`]);
    /// `force` ignores the retry time.
    fn send_unsent(&self, force: bool) {
        let mut unsent = self.unsent.borrow_mut();
        if !unsent.is_holding() {
            return;
        }
        unsent.flush(
            Instant::now(),
            force,
            |intent, batch| {
                let ours = self.machine().holds(&intent.partition, batch.generation);
                if !ours {
                    tracing::info!(topic = %intent.partition.topic, partition = intent.partition.partition, first = batch.range.first, "dropping an unsent batch of a partition given away; its new owner replays it");
                }
                ours
            },
            |intent| {
                // Recorded with the ledger as it is now, not as it was at the cut: the
                // acknowledged offset may have moved since, and must not move back.
                let now = self.machine().current_commit(&intent.partition);
                context::commit(
                    &self.consumer,
                    &self.metrics,
                    std::slice::from_ref(now.as_ref().unwrap_or(intent)),
                    true,
                    "recording a batch cut",
                )
            },
            |batch| self.send(batch),
        );
    }

    fn on_record(&self, r: Record<'_>, out: &mut Vec<Command>, counters: &mut TopicCounters) {
        if self.machine().needs_ledger(r.topic, r.partition) {
            // Without the previous owner's cuts this record cannot be batched safely (a
            // partition started without its recorded cuts would cut anew, and a replayed
            // batch would go in under another token): ask until Kafka answers. The
            // consumer's heartbeats go on in librdkafka's own thread meanwhile.
            let Some(ledger) =
                self.until_answered(|| self.read_ledger(r.topic, r.partition, r.offset))
            else {
                return; // never batched, never committed: the next owner reads it
            };
            self.machine()
                .load_ledger(r.topic, r.partition, ledger, out);
        }
        let mut fed = self.machine().record(r, out);
        if let Fed::Rewound { committed } = fed {
            fed = self.on_rewound(r, committed, out);
        }
        if fed == Fed::Taken {
            if !counters.contains_key(r.topic) {
                let labels = TopicLabels {
                    topic: r.topic.to_string(),
                };
                let pair = (
                    self.metrics.records_consumed.get_or_create(&labels).clone(),
                    self.metrics.bytes_consumed.get_or_create(&labels).clone(),
                );
                counters.insert(r.topic.to_string(), pair);
            }
            let (records, bytes) = &counters[r.topic];
            records.inc();
            bytes.inc_by(r.payload.map_or(0, <[u8]>::len) as u64);
        }
        self.execute(out);
    }

    /// Ask `f` until it answers (Kafka did), beating the heartbeat meanwhile; `None` at
    /// shutdown. The consumer's own heartbeats go on in librdkafka's thread.
    fn until_answered<T>(&self, mut f: impl FnMut() -> Option<T>) -> Option<T> {
        let mut wait = Duration::from_millis(250);
        loop {
            if let Some(v) = f() {
                return Some(v);
            }
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            self.beat();
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    }

    /// The log `topic` names: as last read, or read now when never read or `fresh`;
    /// `None` when Kafka could not say.
    fn topic_log(&self, topic: &str, fresh: bool) -> Option<LogId> {
        if !fresh && let Some(t) = self.logs.borrow().get(topic) {
            return Some(t.log.clone());
        }
        match topic_id::log_id(self.consumer.client(), topic, Duration::from_secs(10)) {
            Ok(log) => {
                if self.logs.borrow_mut().observe(topic, &log) {
                    self.metrics.topic_recreations.inc();
                }
                Some(log)
            }
            Err(e) => {
                tracing::warn!(topic, error = %e, "cannot read the topic's id; holding its records until Kafka answers");
                None
            }
        }
    }

    /// The consumer delivered a record below its partition's committed offset ([`Fed::Rewound`]):
    /// if the topic names another log now, every partition of it starts over and the record
    /// is fed again as the new log's; if not, it was acknowledged in this log and is passed
    /// over (counted).
    fn on_rewound(&self, r: Record<'_>, committed: i64, out: &mut Vec<Command>) -> Fed {
        let in_run = self
            .logs
            .borrow()
            .in_rewound_run(r.topic, r.partition, r.offset);
        let before = self.logs.borrow().get(r.topic).map(|t| t.log.clone());
        let now = if in_run {
            before.clone()
        } else {
            self.until_answered(|| self.topic_log(r.topic, true))
        };
        let Some(now) = now else {
            return Fed::NotHeld; // shutdown: never batched, the next owner reads it
        };
        if before.as_ref() == Some(&now) {
            self.logs
                .borrow_mut()
                .note_rewound(r.topic, r.partition, r.offset);
            self.metrics.records_rewound.inc();
            if !in_run {
                tracing::warn!(
                    topic = r.topic,
                    partition = r.partition,
                    offset = r.offset,
                    committed,
                    "a record below the committed offset of an unchanged log: it was acknowledged already, passing over it"
                );
            }
            self.machine().pass(r.topic, r.partition, r.offset);
            return Fed::Taken;
        }
        let ids = {
            let mut machine = self.machine();
            let ids = machine.reincarnate(r.topic);
            self.consumer.context().published(&machine);
            ids
        };
        tracing::warn!(
            topic = r.topic,
            partitions = ids.len(),
            offset = r.offset,
            committed,
            "the topic was recreated: its partitions start over in the new log (the old log's batches in flight no longer count)"
        );
        let Some(ledger) = self.until_answered(|| self.read_ledger(r.topic, r.partition, r.offset))
        else {
            return Fed::NotHeld;
        };
        self.machine()
            .load_ledger(r.topic, r.partition, ledger, out);
        match self.machine().record(r, out) {
            Fed::Rewound { .. } => {
                debug_assert!(false, "a fresh ledger starts at the record");
                Fed::NotHeld
            }
            fed => fed,
        }
    }

    /// Read the committed offset and the previous owner's recorded cuts for a partition,
    /// checked against the log they claim to describe ([`logs::read_ledger`]); `None` when
    /// Kafka could not say.
    fn read_ledger(&self, topic: &str, partition: i32, first_seen: i64) -> Option<PartitionLedger> {
        let log = self.topic_log(topic, false)?;
        let trust_unnamed = self.logs.borrow().trust_unnamed(topic);
        let at = logs::LedgerAt {
            topic,
            partition,
            first_seen,
            log: &log,
            trust_unnamed,
            write_legacy: self.cfg.write_legacy,
        };
        logs::read_ledger(&self.consumer, &at, &self.metrics)
    }

    fn drain_acks(&self, out: &mut Vec<Command>) {
        {
            let mut machine = self.machine();
            for ack in self.acks.try_iter() {
                machine.acknowledged(ack);
            }
            machine.take_commits(out);
        }
        self.execute(out);
    }

    /// Carries out what the budget asks; true while it holds intake (take no records).
    fn check_budget(&self, out: &mut Vec<Command>) -> bool {
        let now = Instant::now();
        let (paused, holding) = {
            let mut machine = self.machine();
            machine.check_budget(now, out);
            (machine.paused(), machine.holding(now))
        };
        self.metrics.inflight_bytes.set(self.budget.used() as i64);
        self.metrics.paused_partitions.set(paused as i64);
        self.execute(out);
        holding
    }

    fn update_lag(&self) {
        let hw = self.watermarks.lock().expect("hw lock").clone();
        let now = now_ms();
        let mut machine = self.machine();
        machine.high_watermarks(&hw);
        self.metrics
            .linger_seconds
            .set(machine.current_linger().as_secs_f64());
        self.metrics
            .commit_metadata_named
            .set(machine.named_while_legacy() as i64);
        for lag in machine.lag() {
            let l = context::labels(lag.partition);
            if let (Some(committed), Some(high)) = (lag.committed, hw.get(lag.partition)) {
                self.metrics
                    .lag_records
                    .get_or_create(&l)
                    .set((high - committed).max(0));
            }
            let age = lag
                .oldest_unacknowledged_ms
                .map_or(0.0, |ts| ((now - ts).max(0) as f64) / 1000.0);
            self.metrics.lag_seconds.get_or_create(&l).set(age);
            let in_flight = lag
                .oldest_sent
                .map_or(0.0, |sent| sent.elapsed().as_secs_f64());
            self.metrics
                .oldest_in_flight_seconds
                .get_or_create(&l)
                .set(in_flight);
        }
        self.metrics.inflight_bytes.set(self.budget.used() as i64);
    }

    /// Send open batches, wait (bounded) for their acknowledgements, commit, leave the group.
    fn shutdown(&self, out: &mut Vec<Command>) {
        self.machine().close_for_shutdown(out);
        self.execute(out);
        self.send_unsent(true);
        let dropped = self.unsent.borrow_mut().abandon();
        if dropped > 0 {
            tracing::warn!(
                batches = dropped,
                "batches whose cut Kafka never took stay unsent and uncommitted; the next owner replays them"
            );
        }
        let deadline = Instant::now() + self.cfg.drain_deadline;
        loop {
            self.beat();
            self.drain_acks(out);
            let in_flight = self.machine().in_flight();
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
        let last = self.machine().final_commit();
        if let Some(Command::Commit { offsets, .. }) = last
            && context::commit(
                &self.consumer,
                &self.metrics,
                &offsets,
                true,
                "final commit",
            )
        {
            tracing::info!(partitions = offsets.len(), "final offsets committed");
        }
        self.consumer.unsubscribe();
    }
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
