//! Native: the resource's columns, worked out once per resource. Every span of a resource
//! carries the same attributes (and the same keys), so their dictionary indexes, value bytes
//! and JSON path indexes are found for its first span and reused for the others, until the
//! resource changes or the block's dictionaries and paths do (a cut, a record taken back).

use super::super::Rendered;
use super::super::native_json::RepeatPaths;
use super::{Builder, close_row};
use crate::decode::proto;
use crate::wire::put_str;

/// What the resource's columns last wrote, for the next span of the same resource.
#[derive(Debug, Default)]
pub(in crate::encode) struct RepeatCache {
    /// Map: [`crate::rows::MapAttrs::generation`] and the keys' dictionary epoch it is for.
    key: Option<(u64, u64)>,
    key_indexes: Vec<u32>,
    /// Map: the values, already as `String` column bytes.
    values: Vec<u8>,
    /// JSON: the path indexes of the resource's attributes.
    json: RepeatPaths,
    /// JSON: `ResourceAttributesKeys`' dictionary indexes, for the resource generation and
    /// the dictionary epoch in `keys_key`.
    keys_key: Option<(u64, u64)>,
    keys_indexes: Vec<u32>,
}

impl Builder {
    /// [`Self::push_attrs`] for the resource's attributes; `generation` changes with the
    /// resource.
    pub(in crate::encode) fn push_repeated_attrs(
        &mut self,
        attrs: &Rendered,
        generation: u64,
        cache: &mut RepeatCache,
    ) -> proto::Result<()> {
        if let (Builder::Json(column), Rendered::Json(j)) = (&mut *self, attrs) {
            return column
                .push_repeated(j, generation, &mut cache.json)
                .map_err(|_| proto::Unusual);
        }
        if let (Some((offsets, keys, values)), Rendered::Map(m)) = (self.map_parts(), attrs)
            && let (Builder::Lc(lc), Builder::Str { data, rows }) = (keys, values)
        {
            let key = (m.generation(), lc.epoch);
            if cache.key != Some(key) {
                cache.key_indexes.clear();
                cache.values.clear();
                for (k, v) in m.iter() {
                    cache.key_indexes.push(lc.index_of(k));
                    put_str(&mut cache.values, v);
                }
                cache.key = Some(key);
            }
            lc.indexes.extend_from_slice(&cache.key_indexes);
            data.extend_from_slice(&cache.values);
            *rows += m.len();
            close_row(offsets, m.len());
            return Ok(());
        }
        self.push_attrs(attrs)
    }

    /// The keys of the resource's JSON attributes into `ResourceAttributesKeys`
    /// (`Array(LowCardinality(String))`); `generation` changes with the resource.
    pub(in crate::encode) fn push_repeated_keys(
        &mut self,
        attrs: &Rendered,
        generation: u64,
        cache: &mut RepeatCache,
    ) {
        let Rendered::Json(j) = attrs else {
            self.end_array(0);
            return;
        };
        if let Builder::Array { offsets, inner } = self
            && let Builder::Lc(lc) = &mut **inner
        {
            let key = (generation, lc.epoch);
            if cache.keys_key != Some(key) {
                cache.keys_indexes.clear();
                for k in j.keys() {
                    cache.keys_indexes.push(lc.index_of(k));
                }
                cache.keys_key = Some(key);
            }
            lc.indexes.extend_from_slice(&cache.keys_indexes);
            close_row(offsets, cache.keys_indexes.len());
            return;
        }
        let inner = self.inner();
        for k in j.keys() {
            inner.push_str(k);
        }
        self.end_array(j.keys().len());
    }
}
