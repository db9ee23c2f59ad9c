//! Native: `LowCardinality(String)` columns, a dictionary per block (ClickHouse
//! `SerializationLowCardinality`).
//!
//! Prefix `u64 1` (shared dictionary with additional keys); data `u64 flags` (index width |
//! has additional keys | update dictionary), `u64` key count, the keys as a `String` column,
//! `u64` row count, one index per row (u8/u16/u32 by dictionary size); nothing at all for
//! zero rows.

use std::collections::HashMap;

use crate::wire::{put_str, put_u64};

const LC_SHARED_DICTIONARIES_WITH_ADDITIONAL_KEYS: u64 = 1;
const LC_HAS_ADDITIONAL_KEYS: u64 = 1 << 9;
const LC_NEED_UPDATE_DICTIONARY: u64 = 1 << 10;

pub(super) type FastMap = HashMap<Box<[u8]>, u32, foldhash::fast::FixedState>;

#[derive(Debug, Default)]
pub(super) struct LowCardinality {
    dict: FastMap,
    /// The dictionary, already as a `String` column.
    keys: Vec<u8>,
    pub(super) indexes: Vec<u32>,
    /// Changes whenever dictionary entries go away, so indexes remembered from before
    /// ([`super::native::RepeatCache`]) are known to be stale.
    pub(super) epoch: u64,
}

impl LowCardinality {
    #[inline]
    pub(super) fn index_of(&mut self, s: &[u8]) -> u32 {
        match self.dict.get(s) {
            Some(&i) => i,
            None => {
                let i = u32::try_from(self.dict.len()).unwrap_or(u32::MAX);
                self.dict.insert(s.into(), i);
                put_str(&mut self.keys, s);
                i
            }
        }
    }

    pub(super) fn push(&mut self, s: &[u8]) {
        let index = self.index_of(s);
        self.indexes.push(index);
    }

    pub(super) fn write_prefix(&self, out: &mut Vec<u8>) {
        put_u64(out, LC_SHARED_DICTIONARIES_WITH_ADDITIONAL_KEYS);
    }

    pub(super) fn write_data(&self, out: &mut Vec<u8>) {
        if self.indexes.is_empty() {
            return;
        }
        let keys = self.dict.len();
        let (width, code) = match keys {
            0..=0x100 => (1, 0),
            0x101..=0x1_0000 => (2, 1),
            _ => (4, 2),
        };
        put_u64(
            out,
            code | LC_HAS_ADDITIONAL_KEYS | LC_NEED_UPDATE_DICTIONARY,
        );
        put_u64(out, keys as u64);
        out.extend_from_slice(&self.keys);
        put_u64(out, self.indexes.len() as u64);
        out.reserve(self.indexes.len() * width);
        for &i in &self.indexes {
            out.extend_from_slice(&i.to_le_bytes()[..width]);
        }
    }

    pub(super) fn clear(&mut self) {
        self.dict.clear();
        self.keys.clear();
        self.indexes.clear();
        self.epoch += 1;
    }

    pub(super) fn mark(&self, out: &mut Vec<usize>) {
        out.extend([self.indexes.len(), self.dict.len(), self.keys.len()]);
    }

    pub(super) fn rollback(&mut self, marks: &mut impl Iterator<Item = usize>) {
        let mut next = || marks.next().unwrap_or(0);
        self.indexes.truncate(next());
        let keys = next();
        if self.dict.len() > keys {
            self.dict.retain(|_, i| (*i as usize) < keys);
            self.epoch += 1;
        }
        self.keys.truncate(next());
    }

    /// Approximate size of the column's data, for cutting blocks.
    pub(super) fn data_len(&self) -> usize {
        self.keys.len() + self.indexes.len() * 2
    }
}
