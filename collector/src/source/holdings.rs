//! Which partitions this process holds now, and in which assignment generation: published
//! by the Kafka thread on every rebalance, read by the insert stage before each attempt and
//! by the watermark thread for the partitions whose lag it measures.
//!
//! Why the insert stage asks: a batch's rows may be retried for minutes (ClickHouse slow or
//! down). Once its partition was given away, the new owner replays the same records from
//! the committed offset under the same tokens; an old owner still retrying would land its
//! copy *after* the replay, when the token may have left the server's deduplication window
//! (it counts blocks, table-wide). Invariant: an insert attempt (and a dead-letter copy) of
//! a batch is made only while the batch's (partition, generation) is held; otherwise the
//! batch is dropped unacknowledged — the acknowledgement would be dropped anyway
//! ([`super::machine::Machine::acknowledged`]).
//!
//! A read-mostly lock: written once per rebalance, read once per insert attempt.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::machine::PartitionId;

/// The held partitions and their generations (`None` inside: every batch counts as held,
/// for tests and benchmarks without a source).
#[derive(Debug, Clone, Default)]
pub struct Holdings(Option<Arc<RwLock<HashMap<PartitionId, u64>>>>);

impl Holdings {
    /// An empty set of holdings, filled by [`Holdings::publish`].
    pub fn new() -> Self {
        Self(Some(Arc::default()))
    }

    /// Holdings that hold everything (no source to ask).
    pub fn everything() -> Self {
        Self(None)
    }

    /// Replace the held set.
    pub fn publish(&self, held: impl IntoIterator<Item = (PartitionId, u64)>) {
        if let Some(map) = &self.0 {
            let mut m = map.write().expect("holdings lock");
            m.clear();
            m.extend(held);
        }
    }

    /// The partitions held now (none without a source).
    pub fn partitions(&self) -> Vec<PartitionId> {
        self.0.as_ref().map_or_else(Vec::new, |map| {
            map.read().expect("holdings lock").keys().cloned().collect()
        })
    }

    /// Whether partition `partition` of `topic` is held in assignment `generation`.
    pub fn holds(&self, topic: &str, partition: i32, generation: u64) -> bool {
        let Some(map) = &self.0 else { return true };
        map.read()
            .expect("holdings lock")
            .get(&PartitionId::new(topic, partition))
            .is_some_and(|g| *g == generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_held_only_in_its_current_generation() {
        let h = Holdings::new();
        assert!(!h.holds("t", 0, 1));
        h.publish([(PartitionId::new("t", 0), 1)]);
        assert!(h.holds("t", 0, 1));
        assert!(!h.holds("t", 0, 2));
        assert!(!h.holds("t", 1, 1));
        h.publish([(PartitionId::new("t", 0), 3)]);
        assert!(!h.holds("t", 0, 1), "revoked, then assigned again");
        assert_eq!(h.partitions(), [PartitionId::new("t", 0)]);
        assert!(Holdings::everything().holds("x", 9, 9));
    }
}
