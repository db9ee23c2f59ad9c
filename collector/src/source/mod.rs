//! Kafka source: cuts batches from the records of the held partitions, applies
//! back-pressure, and commits what ClickHouse acknowledged.
//!
//! Two parts, as the rest of the collector: a pure core and a thin IO shell.
//! - [`machine`]: the partition state machine (events in, [`Command`]s out), where every
//!   at-least-once rule lives; unit-tested without a broker.
//! - [`kafka`]: the thread that owns the rdkafka consumer, feeds the machine and carries
//!   out its commands; [`watermarks`]: the thread that reads high watermarks for lag.
//!
//! Channels: batches leave through an unbounded channel and acknowledgements come back
//! through another; both are bounded in bytes rather than in count, by type: a
//! [`RecordBatch`] carries its [`crate::budget::BudgetPermit`] and an [`Ack`] takes over its
//! permit, and the machine pauses every partition while the budget is spent. A count bound
//! would block the Kafka thread instead — and a blocked Kafka thread can neither pause nor
//! heartbeat.

mod context;
mod holdings;
mod kafka;
pub mod linger;
mod logs;
pub mod machine;
mod replay;
mod topic_id;
pub mod unsent;
mod watermarks;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

pub use holdings::Holdings;
pub use machine::{Ack, Command, MachineConfig, PartitionId, backlog_policy};

use crate::batch::CHUNK_BYTES;
use crate::budget::Budget;
use crate::kafka_clients::{TokenSource, WithToken};
use crate::metrics::Metrics;
use crate::pool::BufPool;
use context::SourceContext;
use kafka::SourceLoop;
use machine::Machine;

/// Payload chunks the pool owns beyond those the in-flight budget can fill: one
/// partly filled chunk per open batch.
const BATCH_POOL_SLACK_CHUNKS: usize = 8;

/// What the source needs to know.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// The group consumer's settings ([`crate::kafka_clients::consumer`]).
    pub consumer: ClientConfig,
    /// The watermark reader's ([`crate::kafka_clients::watermarks`]).
    pub watermarks: ClientConfig,
    /// The bundle replayer's ([`crate::kafka_clients::replayer`]).
    pub replayer: ClientConfig,
    /// The OAUTHBEARER token source every client takes its tokens from (`kafka.oauth`).
    pub oauth: Option<Arc<TokenSource>>,
    pub topics: Vec<String>,
    pub machine: MachineConfig,
    /// New cuts named in the legacy log (`kafka.commit_format: th2`; `offsets.rs` rule 5).
    pub write_legacy: bool,
    /// How long shutdown may wait for in-flight batches before giving up on them.
    pub drain_deadline: Duration,
}

/// Handle to the running source thread.
#[derive(Debug)]
pub struct Source {
    pub thread: std::thread::JoinHandle<()>,
    pub stop: Arc<AtomicBool>,
}

/// Liveness: the source loop's last iteration (unix ms), for `/healthz`.
pub type Heartbeat = Arc<AtomicU64>;

/// The pool of batch payload chunks ([`CHUNK_BYTES`] each). The budget bounds the payload
/// bytes held by open and in-flight batches; the pool owns as many chunks as that fills,
/// plus one partly filled chunk per open batch, so its memory is the budget's plus a
/// little. Chunks past that are plain allocations, freed after use.
fn batch_pool(budget: &Budget) -> BufPool {
    BufPool::new(
        budget.max().div_ceil(CHUNK_BYTES) + BATCH_POOL_SLACK_CHUNKS,
        CHUNK_BYTES,
    )
}

/// Start the source thread (and the watermark thread beside it).
pub fn spawn(
    cfg: SourceConfig,
    metrics: Arc<Metrics>,
    budget: Arc<Budget>,
    batches: crossbeam_channel::Sender<crate::workers::Work>,
    acks: crossbeam_channel::Receiver<Ack>,
    heartbeat: Heartbeat,
    holdings: Holdings,
) -> anyhow::Result<Source> {
    let watermarks: watermarks::Watermarks = Arc::default();
    let machine = Machine::new(cfg.machine, budget.clone(), Some(batch_pool(&budget)));
    let ctx = SourceContext {
        machine: Mutex::new(machine),
        metrics: metrics.clone(),
        holdings: holdings.clone(),
    };
    let consumer: BaseConsumer<SourceContext> = cfg.consumer.create_with_context(ctx)?;
    let consumer = WithToken::new(consumer, cfg.oauth.as_ref());
    let wm_client = cfg.watermarks.clone();
    let topics: Vec<&str> = cfg.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    let stop = Arc::new(AtomicBool::new(false));
    watermarks::spawn(
        wm_client,
        cfg.oauth.clone(),
        holdings,
        watermarks.clone(),
        stop.clone(),
    );
    let replays = replay::spawn(
        cfg.replayer.clone(),
        cfg.oauth.clone(),
        cfg.machine,
        budget.clone(),
        batches.clone(),
        stop.clone(),
    )?;
    let run = SourceLoop {
        cfg,
        consumer,
        metrics,
        budget,
        batches,
        replays,
        acks,
        stop: stop.clone(),
        heartbeat,
        watermarks,
        unsent: Default::default(),
        logs: Default::default(),
    };
    let thread = std::thread::Builder::new()
        .name("kafka-source".into())
        .spawn(move || run.run())
        .expect("spawn kafka source thread");
    Ok(Source { thread, stop })
}
