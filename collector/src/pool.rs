//! Recycled byte buffers: a batch's payloads and an insert's body go back to a small
//! bounded pool when the last owner drops them, instead of back to the allocator.
//!
//! Why: a batch buffer is filled on the Kafka thread and freed on the runtime thread that
//! saw its insert acknowledged, megabytes at a time. The allocator hands such memory back to
//! the kernel, and the next batch then page-faults on fresh zeroed pages and re-grows its
//! vector step by step (copying it at every doubling). A recycled buffer keeps its pages and
//! its capacity.
//!
//! A pool is bounded in count ([`BufPool::new`]'s `max_buffers`) and drops buffers larger
//! than its `max_capacity`. What it keeps was in use at once before, so it retains at most
//! the peak memory the in-flight budget already allowed — held instead of returned.

use crossbeam_channel::{Receiver, Sender};

/// A bounded pool of empty `Vec<u8>`s. Cloning shares the pool.
#[derive(Debug, Clone)]
pub struct BufPool {
    tx: Sender<Vec<u8>>,
    rx: Receiver<Vec<u8>>,
    max_capacity: usize,
}

impl BufPool {
    /// A pool keeping at most `max_buffers` buffers, none larger than `max_capacity`.
    pub fn new(max_buffers: usize, max_capacity: usize) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(max_buffers.max(1));
        Self {
            tx,
            rx,
            max_capacity,
        }
    }

    /// An empty buffer: a recycled one (capacity kept) when there is one, else a new one.
    pub fn get(&self) -> Vec<u8> {
        self.rx.try_recv().unwrap_or_default()
    }

    /// Give a buffer back. It is cleared and kept unless the pool is full or the buffer is
    /// over `max_capacity` (or never allocated), in which case it is freed.
    pub fn put(&self, mut buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > self.max_capacity {
            return;
        }
        buf.clear();
        // Full: this one is freed. (Never disconnected: the pool holds its receiver.)
        let _ = self.tx.try_send(buf);
    }

    /// Buffers waiting in the pool.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// Wraps `buf` so that it returns to this pool when dropped.
    pub fn wrap(&self, buf: Vec<u8>) -> PooledBuf {
        PooledBuf {
            buf,
            pool: Some(self.clone()),
        }
    }
}

/// Bytes that return their buffer to a [`BufPool`] when dropped (or are simply freed when
/// made from a plain `Vec`). Read-only once built.
#[derive(Debug, Default)]
pub struct PooledBuf {
    buf: Vec<u8>,
    pool: Option<BufPool>,
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
            pool.put(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_buffer_comes_back_empty_with_its_capacity() {
        let pool = BufPool::new(4, 1 << 20);
        let mut v = pool.get();
        assert_eq!(v.capacity(), 0);
        v.extend_from_slice(&[7; 1000]);
        let ptr = v.as_ptr();
        let cap = v.capacity();
        let wrapped = pool.wrap(v);
        assert_eq!(&wrapped[..3], &[7, 7, 7]);
        assert!(pool.is_empty());
        drop(wrapped);
        assert_eq!(pool.len(), 1);
        let again = pool.get();
        assert!(again.is_empty());
        assert_eq!((again.as_ptr(), again.capacity()), (ptr, cap));
        assert!(pool.is_empty());
    }

    #[test]
    fn the_pool_stays_bounded_in_count_and_size() {
        let pool = BufPool::new(2, 4096);
        for _ in 0..5 {
            drop(pool.wrap(Vec::with_capacity(100)));
        }
        assert_eq!(pool.len(), 2);
        // Too large: freed, not kept.
        let _ = pool.get();
        drop(pool.wrap(Vec::with_capacity(8192)));
        assert_eq!(pool.len(), 1);
        // Never allocated: nothing to keep.
        drop(pool.wrap(Vec::new()));
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn a_plain_buffer_belongs_to_no_pool() {
        let b = PooledBuf::from(b"abc".to_vec());
        assert_eq!(&*b, b"abc");
        drop(b);
    }

    #[test]
    fn buffers_come_back_from_other_threads() {
        let pool = BufPool::new(4, 1 << 20);
        let b = pool.wrap(vec![1; 10]);
        std::thread::spawn(move || drop(b)).join().unwrap();
        assert_eq!(pool.len(), 1);
    }
}
