//! The machine's linger timer: which open batches time closes (rules 2, 3 and 6), and how
//! long it waits: the base linger, stretched at low rates ([`super::super::linger::Linger`]).
//! A child module of the machine, so it works on the machine's partitions directly.

use std::time::{Duration, Instant};

use super::{Command, Machine, REPLAY_LINGER};
use crate::batch::BatchBuilder;

impl Machine {
    /// Close batches that have lingered long enough ([`linger_due`]). With bundling, one
    /// partition's due batch closes every partition's open batch with it (rule 6).
    pub fn linger(&mut self, now: Instant, out: &mut Vec<Command>) {
        let linger = self.linger.current();
        let mut due = Vec::new();
        for (i, p) in self.partitions.iter_mut().enumerate() {
            let cut = p.recorded_cut();
            if !linger_due(&p.builder, cut, linger, now) {
                continue;
            }
            let Some(end) = cut else {
                due.push(i);
                continue;
            };
            tracing::warn!(
                topic = %p.id.topic,
                partition = p.id.partition,
                recorded_cut = end,
                "a replayed batch did not reach its recorded cut in {REPLAY_LINGER:?}; \
                 closing it early, its rows may be inserted twice"
            );
            out.extend(p.close(true));
        }
        if due.is_empty() {
            return;
        }
        if self.cfg.bundle {
            due = (0..self.partitions.len()).collect();
        }
        let bytes = due
            .iter()
            .map(|&i| self.partitions[i].builder.held().0)
            .sum();
        self.linger.cut(bytes);
        self.close_together(&due, out);
    }

    /// The linger timer's length now ([`Linger`]).
    pub fn current_linger(&self) -> Duration {
        self.linger.current()
    }
}

/// Whether the linger timer closes `builder`'s open batch at `now`; `recorded_cut` is the
/// cut it replays. A batch that replays a recorded cut waits for the records up to it (the
/// previous owner read them, so they arrive) for up to [`REPLAY_LINGER`].
pub(super) fn linger_due(
    builder: &BatchBuilder,
    recorded_cut: Option<i64>,
    linger: Duration,
    now: Instant,
) -> bool {
    let Some(opened) = builder.opened_at() else {
        return false;
    };
    let age = now.saturating_duration_since(opened);
    if recorded_cut.is_some() {
        age >= REPLAY_LINGER.max(linger)
    } else {
        age >= linger
    }
}
