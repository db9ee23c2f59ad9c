//! The in-flight byte budget: how many record bytes may be held between Kafka and
//! ClickHouse at once, and the permits that hold them.
//!
//! Why a permit: the budget is what keeps a slow or absent ClickHouse from turning into
//! unbounded memory (the source pauses its partitions when it is spent). Accounting it by
//! hand at every place a batch can end — inserted, dead-lettered, dropped on revoke,
//! abandoned at shutdown, refused by a closed channel — works only while every one of those
//! places is right. A [`BudgetPermit`] travels with the batch instead and gives its bytes
//! back when it is dropped, wherever that happens, so the budget cannot leak.
//!
//! The budget is a gauge, not a gate: acquiring never blocks (the Kafka thread must keep
//! polling to heartbeat and to pause); the source reads [`Budget::used`] and pauses.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Shared account of record bytes held by open and in-flight batches.
#[derive(Debug)]
pub struct Budget {
    used: AtomicUsize,
    max: usize,
}

impl Budget {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            max,
        })
    }

    /// The configured limit (`limits.max_inflight_bytes`).
    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes held by live permits now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether the holders of permits have spent the budget.
    pub fn spent(&self) -> bool {
        self.used() >= self.max
    }

    /// An empty permit that draws on this budget as it grows.
    pub fn permit(self: &Arc<Self>) -> BudgetPermit {
        BudgetPermit {
            budget: Some(self.clone()),
            bytes: 0,
        }
    }
}

/// Bytes held against a [`Budget`], given back when dropped.
#[derive(Debug, Default)]
pub struct BudgetPermit {
    /// None: a permit that counts but draws on no budget (tests, benches).
    budget: Option<Arc<Budget>>,
    bytes: usize,
}

impl BudgetPermit {
    /// Hold `n` more bytes.
    pub fn grow(&mut self, n: usize) {
        if let Some(b) = &self.budget {
            b.used.fetch_add(n, Ordering::Relaxed);
        }
        self.bytes += n;
    }

    /// The bytes this permit holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Move everything this permit holds into a new permit, leaving this one empty (on
    /// the same budget): how an open batch hands its bytes to the batch it closes into.
    pub fn take(&mut self) -> BudgetPermit {
        BudgetPermit {
            budget: self.budget.clone(),
            bytes: std::mem::take(&mut self.bytes),
        }
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.used.fetch_sub(self.bytes, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_give_their_bytes_back_when_dropped_wherever_that_happens() {
        let budget = Budget::new(100);
        let mut open = budget.permit();
        open.grow(60);
        assert_eq!(budget.used(), 60);
        assert!(!budget.spent());

        let closed = open.take();
        assert_eq!((open.bytes(), closed.bytes()), (0, 60));
        assert_eq!(
            budget.used(),
            60,
            "taking moves bytes, it does not copy them"
        );

        open.grow(50);
        assert!(budget.spent());
        // Sent through a channel nobody reads any more: dropped with it, bytes come back.
        let (tx, rx) = crossbeam_channel::unbounded::<BudgetPermit>();
        tx.send(closed).unwrap();
        drop(rx);
        drop(tx);
        assert_eq!(budget.used(), 50);
        drop(open);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_detached_permit_counts_without_a_budget() {
        let mut p = BudgetPermit::default();
        p.grow(7);
        assert_eq!(p.bytes(), 7);
    }
}
