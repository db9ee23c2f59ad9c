//! The machine's bundling (rule 6 of [`super`]): the time cuts of several partitions of a
//! topic closed together and registered as one bundle in each member's ledger, and a bundle
//! Kafka did not record dissolved into time cuts of their own. A child module of the
//! machine, so it works on the machine's partitions directly.

use std::sync::Arc;

use super::{Command, CommitOffset, Machine};
use crate::batch::RecordBatch;
use crate::bundle::{self, Bundle, BundleDesc};

/// How finely [`Machine::check_bundle_size`] follows the open batches' total.
const BUNDLE_CHECK_STEPS: usize = 64;

impl Machine {
    /// Rule 6's size cut: once the open batches a bundle would take (those replaying a
    /// recorded cut stay out, as in [`Self::close_together`]) hold a batch's worth between
    /// them, they are closed together. So one insert carries at most about `batch.max_bytes`
    /// however many partitions fill at once, and the open batches never hold more than
    /// that of the in-flight budget: with many partitions and a backlog they would
    /// otherwise fill it together, none full on its own, and wait for the budget's pause.
    /// A single open batch is left to its own size cut, which replays from the data.
    ///
    /// Summing every held partition at every record would cost a pass over 256 partitions
    /// per small record, so the sum is taken each time another 1/[`BUNDLE_CHECK_STEPS`] of a
    /// batch's bytes or records has been batched: a bundle overshoots the policy by at most
    /// that much plus one record (the cut is durable, so where exactly it falls is free).
    pub(super) fn check_bundle_size(&mut self, bytes: usize, out: &mut Vec<Command>) {
        let cut = self.cfg.cut;
        self.unchecked.0 += bytes;
        self.unchecked.1 += 1;
        if self.unchecked.0.saturating_mul(BUNDLE_CHECK_STEPS) < cut.max_bytes
            && self.unchecked.1.saturating_mul(BUNDLE_CHECK_STEPS) < cut.max_records
        {
            return;
        }
        self.unchecked = (0, 0);
        self.close_full_bundle(out);
    }

    fn close_full_bundle(&mut self, out: &mut Vec<Command>) {
        let (mut bytes, mut records, mut open) = (0, 0, 0);
        for p in &mut self.partitions {
            if !p.builder.is_empty() && p.recorded_cut().is_none() {
                let (b, r) = p.builder.held();
                bytes += b;
                records += r;
                open += 1;
            }
        }
        // Rule 8: while the bundle's partitions are behind, it grows to the backlog cut.
        let cut = if self.cfg.backlog_cut.max_bytes > self.cfg.cut.max_bytes && self.bundle_behind()
        {
            self.cfg.backlog_cut
        } else {
            self.cfg.cut
        };
        if open > 1 && cut.full_at(bytes, records) {
            let all: Vec<usize> = (0..self.partitions.len()).collect();
            self.close_together(&all, out);
        }
    }

    /// Close the open batches of `indexes` by time (durably; batches replaying a recorded
    /// cut stay open), bundled per topic when bundling is on (rule 6): members join a bundle
    /// while its description stays under [`bundle::MAX_DESCRIPTION_BYTES`] and their own
    /// metadata can hold it; a batch alone is sent as before.
    pub(super) fn close_together(&mut self, indexes: &[usize], out: &mut Vec<Command>) {
        let mut closed: Vec<(usize, RecordBatch)> = Vec::new();
        for &i in indexes {
            let p = &mut self.partitions[i];
            if p.recorded_cut().is_some() {
                continue;
            }
            if let Some(batch) = p.builder.take() {
                closed.push((i, batch));
            }
        }
        if !self.cfg.bundle {
            for (i, batch) in closed {
                out.push(self.partitions[i].send(batch, true));
            }
            return;
        }
        // Per topic, in the order the partitions are held.
        while !closed.is_empty() {
            let topic = self.partitions[closed[0].0].id.topic.clone();
            let (mine, rest): (Vec<_>, Vec<_>) = closed
                .into_iter()
                .partition(|(i, _)| self.partitions[*i].id.topic == topic);
            closed = rest;
            let mut members: Vec<(usize, RecordBatch)> = Vec::new();
            let mut bytes = 0;
            for (i, batch) in mine {
                let add = bundle::member_bytes(self.partitions[i].id.partition, batch.range);
                if bytes + add > bundle::MAX_DESCRIPTION_BYTES && !members.is_empty() {
                    self.send_bundle(std::mem::take(&mut members), out);
                    bytes = 0;
                }
                // The description's final length is unknown yet: reserve the largest.
                let fits = self.partitions[i]
                    .ledger
                    .as_ref()
                    .is_some_and(|l| l.fits_bundle(bundle::MAX_DESCRIPTION_BYTES));
                if fits {
                    bytes += add;
                    members.push((i, batch));
                } else {
                    out.push(self.partitions[i].send(batch, true));
                }
            }
            if !members.is_empty() {
                self.send_bundle(members, out);
            }
        }
    }

    /// Register `members` as one bundle in their ledgers and send it (one member: alone).
    pub(super) fn send_bundle(
        &mut self,
        mut members: Vec<(usize, RecordBatch)>,
        out: &mut Vec<Command>,
    ) {
        if members.len() == 1 {
            let (i, batch) = members.pop().expect("one member");
            out.push(self.partitions[i].send(batch, true));
            return;
        }
        // One log per bundle (its token names it): a member in another (a partition that
        // still replays a recorded cut of the legacy log cannot be here) goes alone.
        let log = self.partitions[members[0].0]
            .ledger
            .as_ref()
            .map(|l| l.writes().clone())
            .unwrap_or_default();
        let (members, others): (Vec<_>, Vec<_>) = members.into_iter().partition(|(i, _)| {
            self.partitions[*i]
                .ledger
                .as_ref()
                .is_some_and(|l| *l.writes() == log)
        });
        for (i, batch) in others {
            out.push(self.partitions[i].send(batch, true));
        }
        let desc = Arc::new(BundleDesc {
            topic: self.partitions[members[0].0].id.topic.clone(),
            log: log.clone(),
            members: members
                .iter()
                .map(|(i, b)| (self.partitions[*i].id.partition, b.range))
                .collect(),
        });
        let mut intents = Vec::with_capacity(members.len());
        let mut batches = Vec::with_capacity(members.len());
        for (i, mut batch) in members {
            batch.log = log.clone();
            let p = &mut self.partitions[i];
            let ledger = p
                .ledger
                .as_mut()
                .expect("a partition with records has a ledger");
            let metadata = ledger.open_bundled(batch.range, desc.clone());
            p.pending_ts.push_back((
                batch.range.first,
                batch.first_timestamp_ms,
                std::time::Instant::now(),
            ));
            intents.push(CommitOffset {
                partition: p.id.clone(),
                offset: ledger.committed(),
                metadata,
            });
            batches.push(batch);
        }
        out.push(Command::SendBundle {
            intents,
            bundle: Bundle { desc, batches },
        });
    }

    /// Kafka did not take a bundle's intents: its batches go out one by one, each a time
    /// cut of its own partition (rule 2 of [`crate::bundle`]). Returns the intent and batch
    /// of each member still held, for the shell's unsent queue.
    pub fn dissolve(&mut self, bundle: Bundle) -> Vec<(CommitOffset, RecordBatch)> {
        let mut out = Vec::new();
        for batch in bundle.batches {
            let Some(p) = self.find(&batch.topic, batch.partition) else {
                continue;
            };
            if p.generation != batch.generation {
                continue;
            }
            let Some(ledger) = p.ledger.as_mut() else {
                continue;
            };
            let metadata = ledger.dissolve(batch.range);
            out.push((
                CommitOffset {
                    partition: p.id.clone(),
                    offset: ledger.committed(),
                    metadata,
                },
                batch,
            ));
        }
        out
    }
}
