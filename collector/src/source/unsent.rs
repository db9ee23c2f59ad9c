//! Batches whose cut is not in Kafka yet, and the rule for sending them. Pure: the shell
//! ([`super::kafka`]) passes in how to record a cut, whether a partition is still held and
//! where a batch goes.
//!
//! Why they wait: a cut made by the linger timer cannot be made again from the data, so a
//! new owner of the partition that never saw it would cut elsewhere and insert the same rows
//! under another deduplication token. When the synchronous commit that records such a cut
//! fails (typically `RebalanceInProgress` or `IllegalGeneration` while the group rebalances),
//! the batch is held here. Invariants:
//! 1. a held batch reaches ClickHouse only after Kafka took its cut;
//! 2. while anything is held, every later batch is held behind it, oldest first (a size cut
//!    that starts where an unrecorded time cut ends is not reproducible either);
//! 3. a held batch whose partition was given away is dropped unsent: its records were never
//!    committed, and the new owner replays them;
//! 4. after a failed recording nothing is retried before [`RETRY`] has passed, unless forced.
//!
//! Bounded by the budget: each held batch keeps its permit.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::machine::CommitOffset;

/// How long after a failed recording the next attempt waits.
pub const RETRY: Duration = Duration::from_millis(500);

/// The held batches (`B`: a [`crate::batch::RecordBatch`] in the shell), oldest first.
#[derive(Debug)]
pub struct Unsent<B> {
    queue: VecDeque<(CommitOffset, B)>,
    retry_at: Option<Instant>,
}

impl<B> Default for Unsent<B> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            retry_at: None,
        }
    }
}

/// What one [`Unsent::flush`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    pub sent: usize,
    /// Dropped: their partition was given away.
    pub dropped: usize,
    /// Still held.
    pub held: usize,
}

impl<B> Unsent<B> {
    /// Whether a batch is held: the next one must queue behind it (invariant 2).
    pub fn is_holding(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether a newly cut batch must go through the queue (its cut recorded synchronously
    /// first) rather than straight to the workers: a cut made by time (`durable`) is not
    /// reproducible from the data, nor is any cut behind a held one (invariant 2). Only a
    /// size cut with nothing held goes straight out, its intent recorded asynchronously.
    pub fn must_hold(&self, durable: bool) -> bool {
        durable || self.is_holding()
    }

    pub fn push(&mut self, intent: CommitOffset, batch: B) {
        self.queue.push_back((intent, batch));
    }

    /// Records the held cuts oldest first and hands each batch whose cut Kafka took to
    /// `send`; drops those `holds` says are no longer ours; stops at the first failed
    /// `record` until [`RETRY`] after `now`. `force` ignores the retry time.
    pub fn flush(
        &mut self,
        now: Instant,
        force: bool,
        mut holds: impl FnMut(&CommitOffset, &B) -> bool,
        mut record: impl FnMut(&CommitOffset) -> bool,
        mut send: impl FnMut(B),
    ) -> Flushed {
        let mut done = Flushed::default();
        if self.queue.is_empty() || (!force && self.retry_at.is_some_and(|t| now < t)) {
            done.held = self.queue.len();
            return done;
        }
        while let Some((intent, batch)) = self.queue.pop_front() {
            if !holds(&intent, &batch) {
                done.dropped += 1;
            } else if record(&intent) {
                send(batch);
                done.sent += 1;
            } else {
                self.queue.push_front((intent, batch));
                self.retry_at = Some(now + RETRY);
                done.held = self.queue.len();
                return done;
            }
        }
        self.retry_at = None;
        done
    }

    /// Gives up on every held batch (shutdown): they stay unsent and uncommitted for the next
    /// owner. Returns how many.
    pub fn abandon(&mut self) -> usize {
        std::mem::take(&mut self.queue).len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::machine::PartitionId;
    use super::*;

    fn intent(partition: i32, end: i64) -> CommitOffset {
        CommitOffset {
            partition: PartitionId::new("t", partition),
            offset: 0,
            metadata: format!("th1:{end}"),
        }
    }

    /// A held batch: (partition, generation, first offset).
    type B = (i32, u64, i64);

    #[test]
    fn held_batches_go_out_oldest_first_once_kafka_takes_their_cuts() {
        let t0 = Instant::now();
        let mut u = Unsent::<B>::default();
        u.push(intent(0, 10), (0, 1, 0));
        u.push(intent(1, 5), (1, 1, 0));
        u.push(intent(0, 20), (0, 1, 10));
        assert!(u.is_holding());

        // Kafka refuses: nothing is sent, everything stays in order.
        let (mut sent, mut recorded) = (Vec::new(), 0);
        let f = u.flush(
            t0,
            true,
            |_, _| true,
            |_| {
                recorded += 1;
                false
            },
            |b| sent.push(b),
        );
        assert_eq!((f.sent, f.dropped, f.held), (0, 0, 3));
        assert_eq!(recorded, 1, "stops at the first refusal");
        assert!(
            sent.is_empty(),
            "no batch reaches ClickHouse before its cut is in Kafka"
        );

        // Within the retry time nothing is tried; forced or past it, everything goes.
        let f = u.flush(
            t0 + RETRY / 2,
            false,
            |_, _| true,
            |_| panic!("retried early"),
            |_| {},
        );
        assert_eq!(f.held, 3);
        let mut order = Vec::new();
        let f = u.flush(t0 + RETRY, false, |_, _| true, |_| true, |b| order.push(b));
        assert_eq!((f.sent, f.dropped, f.held), (3, 0, 0));
        assert_eq!(order, [(0, 1, 0), (1, 1, 0), (0, 1, 10)]);
        assert!(!u.is_holding());
    }

    #[test]
    fn batches_of_a_partition_given_away_are_dropped_unsent() {
        let mut u = Unsent::<B>::default();
        u.push(intent(0, 10), (0, 1, 0));
        u.push(intent(1, 5), (1, 1, 0));
        let mut sent = Vec::new();
        let mut recorded = Vec::new();
        // Partition 0 went to another member (or came back in a new generation).
        let f = u.flush(
            Instant::now(),
            true,
            |i, b| !(i.partition.partition == 0 && b.1 == 1),
            |i| {
                recorded.push(i.partition.partition);
                true
            },
            |b| sent.push(b),
        );
        assert_eq!((f.sent, f.dropped, f.held), (1, 1, 0));
        assert_eq!(sent, [(1, 1, 0)]);
        assert_eq!(
            recorded,
            [1],
            "a dropped batch's cut is not recorded either"
        );
    }

    #[test]
    fn shutdown_abandons_what_is_held() {
        let mut u = Unsent::<B>::default();
        u.push(intent(0, 10), (0, 1, 0));
        u.push(intent(0, 20), (0, 1, 10));
        assert_eq!(u.abandon(), 2);
        assert!(!u.is_holding());
        assert_eq!(
            u.flush(Instant::now(), true, |_, _| true, |_| true, |_| {}),
            Flushed::default()
        );
    }

    #[test]
    fn only_a_size_cut_with_nothing_held_skips_the_queue() {
        let mut u: Unsent<B> = Unsent::default();
        assert!(!u.must_hold(false), "a size cut is reproducible");
        assert!(u.must_hold(true), "a time cut must be recorded first");
        u.push(intent(0, 9), (0, 1, 0));
        assert!(u.must_hold(false), "a size cut behind a held one waits too");
    }
}
