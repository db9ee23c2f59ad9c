//! The bundle replayer: rebuilds a bundle a previous owner recorded ([`crate::bundle`]) by
//! reading every member's records again, and hands it to the workers, who insert it under
//! the same token (ClickHouse drops it if the first attempt had landed).
//!
//! IO shell on its own thread with a consumer of its own: assigned the members' ranges,
//! never a group member, never committing, so the group's assignment and offsets are the
//! source's alone. Records are batched by the source's own rule
//! ([`super::machine::push_record`]). Each member batch covers exactly its recorded range,
//! records present or not (a range Kafka no longer holds — retention — is inserted with
//! what is left: the bundle then loses what Kafka lost, and says so). Only the member this
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
use crate::workers::Work;

/// How long a replay waits for a member's next record before inserting what it has.
const STALL: Duration = Duration::from_secs(30);

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
    cfg: MachineConfig,
    budget: Arc<Budget>,
    work: crossbeam_channel::Sender<Work>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<crossbeam_channel::Sender<Request>> {
    let consumer: BaseConsumer = client.create()?;
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
    let mut builders: Vec<BatchBuilder> = desc
        .members
        .iter()
        .map(|(p, _)| {
            let generation = if *p == req.partition.partition {
                req.generation
            } else {
                0 // never held: only the member's owner acknowledges it
            };
            BatchBuilder::new(topic.clone(), *p, generation).with_budget(budget)
        })
        .collect();
    let mut done = vec![false; desc.members.len()];
    let mut tpl = TopicPartitionList::new();
    for (p, r) in &desc.members {
        let _ = tpl.add_partition_offset(&topic, *p, Offset::Offset(r.first));
    }
    if let Err(e) = consumer.assign(&tpl) {
        tracing::error!(error = %e, bundle = %desc.render(), "cannot assign the bundle's partitions for its replay");
    }
    let mut progress = Instant::now();
    while done.iter().any(|d| !d) {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        if progress.elapsed() >= STALL {
            let missing: Vec<i32> = desc
                .members
                .iter()
                .zip(&done)
                .filter(|(_, d)| !**d)
                .map(|(m, _)| m.0)
                .collect();
            tracing::error!(bundle = %desc.render(), ?missing, "a replayed bundle's records did not all arrive in {STALL:?}; inserting what Kafka still holds");
            break;
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
        if done[i] || msg.offset() < range.first {
            continue;
        }
        progress = Instant::now();
        if msg.offset() > range.last {
            done[i] = true;
            continue;
        }
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
        .zip(&desc.members)
        .map(|(mut b, (p, range))| {
            let generation = if *p == req.partition.partition {
                req.generation
            } else {
                0
            };
            match b.take() {
                Some(mut batch) => {
                    batch.range = *range;
                    batch
                }
                None => RecordBatch::empty(topic.clone(), *p, generation, *range),
            }
        })
        .collect();
    Some(Bundle {
        desc: desc.clone(),
        batches,
    })
}
