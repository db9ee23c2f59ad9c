//! Native: `JSON` columns in ClickHouse's `FLATTENED` serialization — every path of the
//! block a `Dynamic` column of its own ([`super::native_dynamic`]).
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

use super::native::FastMap;
use super::native_dynamic::{DynamicColumn, FLATTENED, Malformed, Result, string, varint};
use crate::rows::JsonObject;
use crate::wire::{put_str, put_u64, put_varint};

/// A `JSON` column of one block.
#[derive(Debug, Default)]
pub(super) struct JsonColumn {
    /// Path → its index in `paths`.
    index: FastMap,
    /// The paths met in this block, in order of appearance, each with its values.
    paths: Vec<(Box<[u8]>, DynamicColumn)>,
    rows: usize,
}

impl JsonColumn {
    /// Adds a row holding `obj`'s stored paths.
    pub(super) fn push_object(&mut self, obj: &JsonObject) -> Result<()> {
        for (path, mut value) in obj.stored() {
            self.push_path(path, &mut value)?;
        }
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

    /// Adds a row without paths.
    pub(super) fn push_empty(&mut self) {
        self.rows += 1;
    }

    /// Adds the current row's value of `path`, read off the front of `r`.
    fn push_path(&mut self, path: &[u8], r: &mut &[u8]) -> Result<()> {
        let i = match self.index.get(path) {
            Some(&i) => i as usize,
            None => {
                let i = self.paths.len();
                self.index
                    .insert(path.into(), u32::try_from(i).map_err(|_| Malformed)?);
                self.paths.push((path.into(), DynamicColumn::default()));
                i
            }
        };
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
        }
        for (_, c) in &mut self.paths {
            c.rollback(marks);
        }
    }
}

#[cfg(test)]
#[path = "native_json_tests.rs"]
mod tests;
