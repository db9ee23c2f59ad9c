//! The bundle replayer: rebuilds a bundle a previous owner recorded ([`crate::bundle`]) by
//! reading every member's records again, and hands it to the workers, who insert it under
//! the same token (ClickHouse drops it if the first attempt had landed).
//!
//! IO shell on its own thread with a consumer of its own: assigned the members' ranges,
//! never a group member, never committing, so the group's assignment and offsets are the
//! source's alone. Records are batched by the source's own rule
//! ([`super::machine::push_record`]). Each member batch covers exactly its recorded range.
//! A replay waits for every record of it (reading again when none came for [`STALL`]);
//! only records Kafka says it no longer holds (retention, a topic made anew) are given up,
//! logged, and the bundle goes in with the rest: it never acknowledges less than Kafka has. Only the member this
//! process holds carries its generation, so only its acknowledgement counts; the other
//! members' owners replay the bundle themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::machine::{MachineConfig, PartitionId, Record, push_record};
use crate::batch::{BatchBuilder, RecordBatch};
use crate::budget::Budget;
use crate::bundle::{Bundle, BundleDesc};
use crate::kafka_clients::{TokenSource, WithToken};
use crate::workers::Work;

/// How long a replay waits for a record before it asks Kafka what it still holds and reads again.
const STALL: Duration = Duration::from_secs(10);

/// A bundle to replay, and the member this process holds.
#[derive(Debug)]
pub struct Request {
    pub desc: Arc<BundleDesc>,
    pub partition: PartitionId,
    pub generation: u64,
}

/// Start the replayer thread; it ends when the request channel closes or `stop` is set.
pub fn spawn(
    client: ClientConfig,
    oauth: Option<Arc<TokenSource>>,
    cfg: MachineConfig,
    budget: Arc<Budget>,
    work: crossbeam_channel::Sender<Work>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<crossbeam_channel::Sender<Request>> {
    let consumer = WithToken::new(client.create::<BaseConsumer>()?, oauth.as_ref());
    let (tx, rx) = crossbeam_channel::unbounded::<Request>();
    std::thread::Builder::new()
        .name("bundle-replay".into())
        .spawn(move || {
            while let Ok(req) = rx.recv() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let bundle = read(&consumer, &req, &cfg, &budget, &stop);
                let _ = consumer.unassign();
                let Some(bundle) = bundle else { return };
                if work.send(Work::Bundle(bundle)).is_err() {
                    return;
                }
            }
        })?;
    Ok(tx)
}

/// Read every member's range; `None` when stopped.
fn read(
    consumer: &BaseConsumer,
    req: &Request,
    cfg: &MachineConfig,
    budget: &Arc<Budget>,
    stop: &AtomicBool,
) -> Option<Bundle> {
    let desc = &req.desc;
    let topic = desc.topic.clone();
    // Only the member this process holds carries its generation (0 is never held): only the
    // member's owner acknowledges it.
    let generations: Vec<u64> = desc
        .members
        .iter()
        .map(|(p, _)| {
            if *p == req.partition.partition {
                req.generation
            } else {
                0
            }
        })
        .collect();
    let mut builders: Vec<BatchBuilder> = desc
        .members
        .iter()
        .zip(&generations)
        .map(|((p, _), g)| BatchBuilder::new(topic.clone(), *p, *g).with_budget(budget))
        .collect();
    let mut done = vec![false; desc.members.len()];
    // The next offset each member needs.
    let mut next: Vec<i64> = desc.members.iter().map(|(_, r)| r.first).collect();
    let mut progress = Instant::now();
    assign(consumer, desc, &done, &next);
    while done.iter().any(|d| !d) {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        if progress.elapsed() >= STALL {
            // Nothing came for a while: records Kafka no longer holds end their member
            // (retention, a topic made anew); anything else is read again from where it
            // stopped. Never acknowledged short of what Kafka still has.
            for (i, (p, range)) in desc.members.iter().enumerate() {
                if done[i] {
                    continue;
                }
                match consumer.fetch_watermarks(&desc.topic, *p, Duration::from_secs(5)) {
                    Ok((low, high)) if low > range.last || high <= next[i] => {
                        tracing::error!(bundle = %desc.render(), partition = p, from = next[i], to = range.last, low, high, "a replayed bundle's records are gone from Kafka; inserting the rest");
                        done[i] = true;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, partition = p, "bundle replay: cannot read the partition's offsets; still waiting")
                    }
                }
            }
            tracing::warn!(bundle = %desc.render(), "a replayed bundle's records are slow to come; reading them again");
            assign(consumer, desc, &done, &next);
            progress = Instant::now();
            continue;
        }
        let msg = match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => msg,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "bundle replay: consumer error");
                continue;
            }
            None => continue,
        };
        let Some(i) = desc.members.iter().position(|(p, _)| *p == msg.partition()) else {
            continue;
        };
        let range = desc.members[i].1;
        if done[i] || msg.offset() < next[i] {
            continue;
        }
        progress = Instant::now();
        if msg.offset() > range.last {
            done[i] = true;
            continue;
        }
        next[i] = msg.offset() + 1;
        let record = Record {
            topic: &topic,
            partition: msg.partition(),
            offset: msg.offset(),
            timestamp_ms: msg.timestamp().to_millis().unwrap_or(0),
            payload: msg.payload(),
        };
        push_record(&mut builders[i], &record, cfg);
        done[i] = msg.offset() >= range.last;
    }
    let batches: Vec<RecordBatch> = builders
        .into_iter()
        .zip(desc.members.iter().zip(&generations))
        .map(|(mut b, ((p, range), generation))| {
            let generation = *generation;
            match b.take() {
                Some(mut batch) => {
                    batch.range = *range;
                    batch.log = desc.log.clone();
                    batch
                }
                None => RecordBatch::empty(topic.clone(), desc.log.clone(), *p, generation, *range),
            }
        })
        .collect();
    Some(Bundle {
        desc: desc.clone(),
        batches,
    })
}

/// Assign the members not yet read, each at the next offset it needs.
fn assign(consumer: &BaseConsumer, desc: &BundleDesc, done: &[bool], next: &[i64]) {
    let mut tpl = TopicPartitionList::new();
    for (i, (p, _)) in desc.members.iter().enumerate() {
        if !done[i] {
            let _ = tpl.add_partition_offset(&desc.topic, *p, Offset::Offset(next[i]));
        }
    }
    if let Err(e) = consumer.assign(&tpl) {
        tracing::error!(error = %e, bundle = %desc.render(), "cannot assign the bundle's partitions for its replay; retrying");
    }
}
