//! Recycled byte buffers: a batch's payloads and an insert's body go back to a small
//! bounded pool when their last owner drops them, instead of back to the allocator.
//!
//! Why: a batch buffer is filled on the Kafka thread and freed on the runtime thread that
//! saw its insert acknowledged, megabytes at a time. The allocator hands such memory back
//! to the kernel, and the next batch then page-faults on fresh zeroed pages and re-grows
//! its vector step by step (copying it at every doubling). A recycled buffer keeps its
//! pages and its capacity.
//!
//! The cost: a recycled buffer keeps the pages of the fullest batch it ever held, also
//! while it holds a small one, so a pool's memory is not bounded by the bytes its buffers
//! hold now. A pool therefore bounds the buffers it *owns* — idle in the pool or out in a
//! [`PooledBuf`] — to `max_buffers`, each at most `max_capacity`: once that many exist,
//! [`BufPool::take`] hands out plain buffers (freed on drop, as before pooling).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender};

/// A bounded pool of byte buffers. Cloning shares the pool.
#[derive(Clone)]
pub struct BufPool(Arc<Inner>);

struct Inner {
    idle_tx: Sender<Vec<u8>>,
    idle_rx: Receiver<Vec<u8>>,
    max_buffers: usize,
    max_capacity: usize,
    /// Buffers this pool owns: idle plus out in `PooledBuf`s. Never above `max_buffers`.
    owned: AtomicUsize,
}

impl std::fmt::Debug for BufPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufPool")
            .field("owned", &self.owned())
            .field("idle", &self.idle())
            .field("max_buffers", &self.0.max_buffers)
            .field("max_capacity", &self.0.max_capacity)
            .finish()
    }
}

impl BufPool {
    /// A pool owning at most `max_buffers` buffers (at least one), none kept past
    /// `max_capacity` bytes of capacity.
    pub fn new(max_buffers: usize, max_capacity: usize) -> Self {
        let max_buffers = max_buffers.max(1);
        let (idle_tx, idle_rx) = crossbeam_channel::bounded(max_buffers);
        Self(Arc::new(Inner {
            idle_tx,
            idle_rx,
            max_buffers,
            max_capacity,
            owned: AtomicUsize::new(0),
        }))
    }

    /// An empty buffer that comes back here when dropped: an idle one (capacity and pages
    /// kept) when there is one, else a new one while the pool owns fewer than
    /// `max_buffers`, else a plain one that belongs to no pool.
    pub fn take(&self) -> PooledBuf {
        if let Ok(buf) = self.0.idle_rx.try_recv() {
            return PooledBuf {
                buf,
                pool: Some(self.clone()),
            };
        }
        let claimed = self
            .0
            .owned
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.0.max_buffers).then_some(n + 1)
            })
            .is_ok();
        PooledBuf {
            buf: Vec::new(),
            pool: claimed.then(|| self.clone()),
        }
    }

    /// Buffers the pool owns (idle or out).
    pub fn owned(&self) -> usize {
        self.0.owned.load(Ordering::Acquire)
    }

    /// Buffers waiting in the pool.
    pub fn idle(&self) -> usize {
        self.0.idle_rx.len()
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() <= self.0.max_capacity {
            buf.clear();
            // Cannot be full (it holds at most the `max_buffers` the pool owns) nor
            // disconnected (the pool holds the receiver); if it were, the buffer is freed.
            if self.0.idle_tx.try_send(buf).is_ok() {
                return;
            }
        }
        self.0.owned.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A byte buffer that returns to its [`BufPool`] when dropped (or is simply freed when it
/// belongs to none: made from a `Vec`, by `Default`, or handed out by a full pool).
#[derive(Default)]
pub struct PooledBuf {
    buf: Vec<u8>,
    pool: Option<BufPool>,
}

impl PooledBuf {
    /// The buffer, to fill.
    pub fn vec_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Whether it goes back to a pool when dropped.
    pub fn is_pooled(&self) -> bool {
        self.pool.is_some()
    }
}

impl std::fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuf")
            .field("len", &self.buf.len())
            .field("capacity", &self.buf.capacity())
            .field("pooled", &self.is_pooled())
            .finish()
    }
}

impl From<Vec<u8>> for PooledBuf {
    /// A buffer that belongs to no pool.
    fn from(buf: Vec<u8>) -> Self {
        Self { buf, pool: None }
    }
}

impl std::ops::Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give_back(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_buffer_comes_back_empty_with_its_capacity() {
        let pool = BufPool::new(4, 1 << 20);
        let mut b = pool.take();
        assert!(b.is_pooled() && b.is_empty());
        b.vec_mut().extend_from_slice(&[7; 1000]);
        let (ptr, cap) = (b.as_ptr(), b.capacity());
        assert_eq!(&b[..3], &[7, 7, 7]);
        assert_eq!((pool.owned(), pool.idle()), (1, 0));
        drop(b);
        assert_eq!((pool.owned(), pool.idle()), (1, 1));
        let again = pool.take();
        assert!(again.is_empty() && again.is_pooled());
        assert_eq!((again.as_ptr(), again.capacity()), (ptr, cap));
        assert_eq!((pool.owned(), pool.idle()), (1, 0));
    }

    #[test]
    fn the_pool_owns_at_most_max_buffers_in_use_or_idle() {
        let pool = BufPool::new(2, 4096);
        let mut out: Vec<PooledBuf> = (0..5).map(|_| pool.take()).collect();
        let pooled = out.iter().filter(|b| b.is_pooled()).count();
        assert_eq!((pooled, pool.owned()), (2, 2));
        for b in &mut out {
            b.vec_mut().extend_from_slice(&[1; 100]);
        }
        drop(out);
        // The three plain ones were freed; the two pooled ones wait.
        assert_eq!((pool.owned(), pool.idle()), (2, 2));
        // Over max_capacity: freed, and the pool may make another.
        let mut big = pool.take();
        big.vec_mut().reserve(8192);
        drop(big);
        assert_eq!((pool.owned(), pool.idle()), (1, 1));
        let (a, b, c) = (pool.take(), pool.take(), pool.take());
        assert!(a.is_pooled() && b.is_pooled() && !c.is_pooled());
    }

    #[test]
    fn a_plain_buffer_belongs_to_no_pool() {
        let b = PooledBuf::from(b"abc".to_vec());
        assert!(!b.is_pooled());
        assert_eq!(&*b, b"abc");
        assert!(!PooledBuf::default().is_pooled());
    }

    #[test]
    fn buffers_come_back_from_other_threads() {
        let pool = BufPool::new(4, 1 << 20);
        let mut b = pool.take();
        b.vec_mut().push(1);
        std::thread::spawn(move || drop(b)).join().unwrap();
        assert_eq!((pool.owned(), pool.idle()), (1, 1));
    }
}
