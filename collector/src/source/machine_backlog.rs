//! The machine's backlog cut (rule 8): while a partition is behind — the records already
//! waiting in Kafka past its open batch are at least as many as the batch holds — its batch
//! grows past `batch.max_bytes`/`max_records` up to `batch.backlog_max_bytes` (and the
//! records in proportion), and with bundling so does the bundle's size cut. A backlog is
//! then inserted as fewer, larger parts: ClickHouse pays a part's fixed cost (its files, its
//! sort, its later merges) once per more rows, and at ClickHouse's one insert per second per
//! table it catches up sooner. When the partition is caught up, batches close at
//! `batch.max_bytes` again, so the freshness of a live stream is unchanged.
//!
//! Such a cut depends on how far behind the partition was when its records arrived, not on
//! the records alone, so a successor could not make it again from the data: it is durable
//! like a time cut (rule 3: Kafka has it before the rows can reach ClickHouse), and a batch
//! replaying it ends exactly at it whatever its size (rule 2). The budget bounds it as any
//! batch: past the in-flight budget intake holds, then the partitions pause and the open
//! batches close by time.
//!
//! A child module of the machine, so it works on the machine's partitions directly. How far
//! behind comes from the shell's watermark thread, once a second
//! ([`Machine::high_watermarks`]).

use std::collections::HashMap;

use super::{Machine, Partition, PartitionId};
use crate::batch::CutPolicy;

/// What the size rules make of a partition's open batch after a record (no recorded cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SizeCut {
    /// Not full, or full and growing while its partition is behind.
    Open,
    /// Close it; `durable` when it grew past the live cut (its size depended on the
    /// backlog).
    Close { durable: bool },
}

impl Machine {
    /// The high watermark of each held partition as the shell last read it. Only the
    /// backlog cut reads them; a partition without one is never behind.
    pub fn high_watermarks(&mut self, high: &HashMap<PartitionId, i64>) {
        for p in &mut self.partitions {
            p.high_watermark = high.get(&p.id).copied();
        }
    }

    /// Whether the open batches a bundle would take are behind together: the records
    /// waiting past them at least as many as they hold (see [`Partition::behind`]).
    pub(super) fn bundle_behind(&self) -> bool {
        let (mut waiting, mut held) = (0i64, 0i64);
        for p in &self.partitions {
            if let (Some(last), Some(high)) = (p.builder.last_offset(), p.high_watermark) {
                waiting += (high - (last + 1)).max(0);
                held += p.builder.held().1 as i64;
            }
        }
        held > 0 && waiting >= held
    }
}

impl Partition {
    /// Whether the records waiting in Kafka past `offset` (the open batch's last) are at
    /// least as many as the open batch holds: another batch of this size is ready to read.
    pub(super) fn behind(&self, offset: i64) -> bool {
        self.high_watermark
            .is_some_and(|high| high - (offset + 1) >= self.builder.held().1 as i64)
    }

    /// Rules 2 (no recorded cut here: the caller checked), the size cut and rule 8.
    pub(super) fn size_cut(&mut self, offset: i64, live: CutPolicy, backlog: CutPolicy) -> SizeCut {
        if !self.builder.is_full(live) {
            self.grown = false;
            return SizeCut::Open;
        }
        if !self.builder.is_full(backlog) && self.behind(offset) {
            self.grown = true;
            return SizeCut::Open;
        }
        SizeCut::Close {
            durable: std::mem::take(&mut self.grown),
        }
    }
}

/// The cut of a backlog: `live` scaled to `backlog_max_bytes` (records in proportion; never
/// below `live`).
pub fn backlog_policy(live: CutPolicy, backlog_max_bytes: usize) -> CutPolicy {
    let bytes = backlog_max_bytes.max(live.max_bytes);
    let scale = bytes as f64 / live.max_bytes.max(1) as f64;
    CutPolicy {
        max_bytes: bytes,
        max_records: ((live.max_records as f64 * scale) as usize).max(live.max_records),
    }
}
