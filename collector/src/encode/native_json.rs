//! Native: `JSON` columns in ClickHouse's `FLATTENED` serialization — every path of the
//! block a `Dynamic` column of its own ([`dynamic`]).
//!
//! A `JSON` column of a block, flattened:
//! - state prefix: `u64 3`, var-int number of paths, the paths (sorted bytewise, as the
//!   engine writes them: a path past the table's `max_dynamic_paths` goes to the shared data,
//!   which is kept sorted), then each path's `Dynamic` prefix;
//! - data: each path's `Dynamic` data, over every row of the block (NULL where a row does
//!   not have the path).
//!
//! A row's paths and values are [`JsonObject`]'s, the ones RowBinary sends: the top-level
//! attribute columns take a rendered object, and a `JSON` nested in a value (an array of
//! kvlists) is read from its binary encoding.

use super::native_lc::FastMap;
use crate::rows::JsonObject;
use crate::wire::{put_str, put_u64, put_varint};
use dynamic::{DynamicColumn, FLATTENED, Malformed, Result, string, varint};

/// A `JSON` column of one block.
#[derive(Debug, Default)]
pub(super) struct JsonColumn {
    /// Path → its index in `paths`.
    index: FastMap,
    /// The paths met in this block, in order of appearance, each with its values.
    paths: Vec<(Box<[u8]>, DynamicColumn)>,
    rows: usize,
    /// Changes whenever paths go away, so path indexes remembered from before
    /// ([`RepeatPaths`]) are known to be stale.
    epoch: u64,
    /// The path indexes of the last object pushed, in its order: the next span of the same
    /// instrumentation has the same paths, found by comparing each with the path at the same
    /// place instead of hashing it.
    last: Vec<u32>,
}

/// The path indexes of an object pushed row after row (the resource's), found once.
#[derive(Debug, Default)]
pub(super) struct RepeatPaths {
    /// The object's generation and the column's epoch they are for.
    key: Option<(u64, u64)>,
    indexes: Vec<u32>,
}

impl JsonColumn {
    /// Adds a row holding `obj`'s stored paths.
    pub(super) fn push_object(&mut self, obj: &JsonObject) -> Result<()> {
        let mut last = std::mem::take(&mut self.last);
        let mut n = 0;
        for (path, mut value) in obj.stored() {
            // A remembered index is only a guess: it is used when its path is this one.
            let i = match last.get(n) {
                Some(&i)
                    if self
                        .paths
                        .get(i as usize)
                        .is_some_and(|(p, _)| **p == *path) =>
                {
                    i
                }
                _ => self.index_of(path)?,
            };
            match last.get_mut(n) {
                Some(slot) => *slot = i,
                None => last.push(i),
            }
            n += 1;
            self.push_at(i as usize, &mut value)?;
        }
        last.truncate(n);
        self.last = last;
        self.rows += 1;
        Ok(())
    }

    /// Adds a row read off the front of `r` in the binary `JSON` encoding (var-int number
    /// of paths, then each path and its binary `Dynamic` value).
    pub(super) fn push_binary(&mut self, r: &mut &[u8]) -> Result<()> {
        let n = varint(r)?;
        for _ in 0..n {
            let (_, path) = string(r)?;
            self.push_path(path, r)?;
        }
        self.rows += 1;
        Ok(())
    }

    /// [`Self::push_object`] for an object that repeats row after row: `generation` changes
    /// whenever `obj` does.
    pub(super) fn push_repeated(
        &mut self,
        obj: &JsonObject,
        generation: u64,
        cache: &mut RepeatPaths,
    ) -> Result<()> {
        let key = (generation, self.epoch);
        if cache.key != Some(key) {
            cache.indexes.clear();
            for (path, _) in obj.stored() {
                let i = self.index_of(path)?;
                cache.indexes.push(i);
            }
            cache.key = Some(key);
        }
        for ((_, mut value), &i) in obj.stored().zip(&cache.indexes) {
            self.push_at(i as usize, &mut value)?;
        }
        self.rows += 1;
        Ok(())
    }

    /// Adds a row without paths.
    pub(super) fn push_empty(&mut self) {
        self.rows += 1;
    }

    /// The index of `path` in `paths`, added if new.
    fn index_of(&mut self, path: &[u8]) -> Result<u32> {
        if let Some(&i) = self.index.get(path) {
            return Ok(i);
        }
        let i = u32::try_from(self.paths.len()).map_err(|_| Malformed)?;
        self.index.insert(path.into(), i);
        self.paths.push((path.into(), DynamicColumn::default()));
        Ok(i)
    }

    /// Adds the current row's value of `path`, read off the front of `r`.
    fn push_path(&mut self, path: &[u8], r: &mut &[u8]) -> Result<()> {
        let i = self.index_of(path)? as usize;
        self.push_at(i, r)
    }

    /// Adds the current row's value of the path at `i`, read off the front of `r`.
    fn push_at(&mut self, i: usize, r: &mut &[u8]) -> Result<()> {
        let column = &mut self.paths[i].1;
        if column.len() > self.rows {
            // The path twice in one object: JsonObject keeps one.
            return Err(Malformed);
        }
        column.pad_to(self.rows);
        column.push_value(r)
    }

    /// The paths' indexes in bytewise order of the paths.
    fn sorted(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.paths.len()).collect();
        order.sort_unstable_by(|&a, &b| self.paths[a].0.cmp(&self.paths[b].0));
        order
    }

    pub(super) fn write_prefix(&self, out: &mut Vec<u8>) {
        let order = self.sorted();
        put_u64(out, FLATTENED);
        put_varint(out, order.len() as u64);
        for &i in &order {
            put_str(out, &self.paths[i].0);
        }
        for &i in &order {
            self.paths[i].1.write_prefix(out);
        }
    }

    pub(super) fn write_data(&self, out: &mut Vec<u8>) {
        for i in self.sorted() {
            self.paths[i].1.write_data(out, self.rows);
        }
    }

    /// Approximate bytes held, for cutting blocks.
    pub(super) fn data_len(&self) -> usize {
        self.paths.iter().map(|(p, c)| p.len() + c.data_len()).sum()
    }

    /// Empties the column for the next block.
    pub(super) fn clear(&mut self) {
        self.index.clear();
        self.paths.clear();
        self.rows = 0;
        self.epoch += 1;
    }

    pub(super) fn mark(&self, out: &mut Vec<usize>) {
        out.extend([self.rows, self.paths.len()]);
        for (_, c) in &self.paths {
            c.mark(out);
        }
    }

    pub(super) fn rollback(&mut self, marks: &mut impl Iterator<Item = usize>) {
        self.rows = marks.next().unwrap_or(0);
        let paths = marks.next().unwrap_or(0);
        if self.paths.len() > paths {
            // Paths first met after the mark only have values after it.
            self.paths.truncate(paths);
            self.index.retain(|_, i| (*i as usize) < paths);
            self.epoch += 1;
        }
        for (_, c) in &mut self.paths {
            c.rollback(marks);
        }
    }
}

/// The `Dynamic` column of one path, which may hold JSON again: a child, so the two recursive
/// types read each other without a circle between files.
#[path = "native_dynamic.rs"]
pub(super) mod dynamic;

#[cfg(test)]
#[path = "native_json_tests.rs"]
mod tests;
