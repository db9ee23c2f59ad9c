//! Redaction of one attribute list: `KeyValue` bodies removed, or replaced by new ones
//! written in the record's arena (the process module's rule 5).

use std::ops::Range;

use bumpalo::Bump;
use hmac::{Hmac, Mac};
use regex::bytes::Regex;
use sha2::{Digest, Sha256};
use tracehouse_contract::processing::{AttributeList, Redact, Redaction, RuleError};

use crate::decode::proto::{self, Value};
use crate::rows;
use crate::wire::put_str;

/// What `mask` writes, as the OpenTelemetry Collector's `redaction` processor does.
pub const MASK: &[u8] = b"****";

/// `with: hash`: lower-case hex SHA-256, or HMAC-SHA256 under the processing's key.
#[derive(Clone)]
pub struct Hasher {
    key: Option<Hmac<Sha256>>,
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hasher")
            .field("keyed", &self.key.is_some())
            .finish()
    }
}

impl Hasher {
    pub fn is_keyed(&self) -> bool {
        self.key.is_some()
    }

    pub fn new(key: Option<&[u8]>) -> Self {
        Self {
            key: key.map(|k| Hmac::<Sha256>::new_from_slice(k).expect("HMAC takes any key length")),
        }
    }

    /// Appends the hex digest of `value` to `out`.
    pub fn push_hex(&self, value: &[u8], out: &mut Vec<u8>) {
        let digest: [u8; 32] = match &self.key {
            Some(mac) => {
                let mut mac = mac.clone();
                mac.update(value);
                mac.finalize().into_bytes().into()
            }
            None => Sha256::digest(value).into(),
        };
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.reserve(64);
        for b in digest {
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        }
    }
}

/// One compiled `redact`.
#[derive(Debug)]
pub(super) struct Redactor {
    keys: Vec<Vec<u8>>,
    patterns: Vec<Regex>,
    values: Vec<Regex>,
    with: Redaction,
    lists: [bool; 4],
    hasher: Hasher,
}

impl Redactor {
    pub(super) fn new(r: &Redact, at: &str, hasher: Hasher) -> Result<Self, RuleError> {
        let (patterns, values) = r.compile(at)?;
        let lists = [
            AttributeList::Resource,
            AttributeList::Span,
            AttributeList::Events,
            AttributeList::Links,
        ]
        .map(|l| r.covers(l));
        Ok(Self {
            keys: r.keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
            patterns,
            values,
            with: r.with,
            lists,
            hasher,
        })
    }

    pub(super) fn covers(&self, list: AttributeList) -> bool {
        self.lists[list as usize]
    }

    fn key_hit(&self, key: &[u8]) -> bool {
        self.keys.iter().any(|k| k == key) || self.patterns.iter().any(|p| p.is_match(key))
    }

    /// Redacts the bodies in each of `ranges` (consecutive, in order, together the start of
    /// `bodies`' live part), compacting `bodies` and updating the ranges. Whether anything
    /// changed.
    pub(super) fn redact<'r>(
        &self,
        bodies: &mut Vec<&'r [u8]>,
        ranges: &mut [Range<usize>],
        arena: &'r Bump,
        text: &mut Vec<u8>,
    ) -> proto::Result<bool> {
        let mut changed = false;
        let mut write = 0;
        let end = ranges.last().map_or(0, |r| r.end);
        for range in ranges.iter_mut() {
            let start = write;
            for read in range.clone() {
                let body = bodies[read];
                match self.one(body, arena, text)? {
                    Outcome::Same => {
                        // Nothing moves until the first change.
                        if write != read {
                            bodies[write] = body;
                        }
                        write += 1;
                    }
                    Outcome::Removed => changed = true,
                    Outcome::Replaced(new) => {
                        bodies[write] = new;
                        write += 1;
                        changed = true;
                    }
                }
            }
            *range = start..write;
        }
        if changed {
            // Anything after the ranges (none today) keeps its place after them.
            bodies.drain(write..end);
        }
        Ok(changed)
    }

    /// Redacts the attribute lists of `items` (events or links: each names its range of
    /// `bodies` through `range`), updating their ranges. Whether anything changed.
    pub(super) fn redact_each<'r, T>(
        &self,
        items: &mut [T],
        range: impl Fn(&mut T) -> &mut Range<usize>,
        bodies: &mut Vec<&'r [u8]>,
        arena: &'r Bump,
        ranges: &mut Vec<Range<usize>>,
        text: &mut Vec<u8>,
    ) -> proto::Result<bool> {
        if items.is_empty() {
            return Ok(false);
        }
        ranges.clear();
        ranges.extend(items.iter_mut().map(|i| range(i).clone()));
        let changed = self.redact(bodies, ranges, arena, text)?;
        if changed {
            for (item, r) in items.iter_mut().zip(ranges.drain(..)) {
                *range(item) = r;
            }
        }
        Ok(changed)
    }

    fn one<'r>(
        &self,
        body: &[u8],
        arena: &'r Bump,
        text: &mut Vec<u8>,
    ) -> proto::Result<Outcome<'r>> {
        let kv = proto::kv(body)?;
        if self.key_hit(kv.key) {
            let mut value = Vec::new();
            match self.with {
                Redaction::Remove => return Ok(Outcome::Removed),
                Redaction::Mask => {
                    let s = match kv.value {
                        Value::Str(s) => s,
                        _ => b"",
                    };
                    per_line(s, &mut value, |_, out| out.extend_from_slice(MASK));
                }
                Redaction::Hash => self.hash_value(kv.value, &mut value)?,
            }
            return Ok(Outcome::Replaced(key_value(arena, kv.key, &value, text)));
        }
        let Value::Str(s) = kv.value else {
            return Ok(Outcome::Same);
        };
        if !self.values.iter().any(|re| re.is_match(s)) {
            return Ok(Outcome::Same);
        }
        if self.with == Redaction::Remove {
            return Ok(Outcome::Removed);
        }
        // Each match is replaced, pattern after pattern (the `redaction` processor's
        // `blocked_values`): by `****`, or by the hash of the matched text.
        let mut value = s.to_vec();
        for re in &self.values {
            if re.is_match(&value) {
                value = match self.with {
                    Redaction::Hash => re
                        .replace_all(&value, |c: &regex::bytes::Captures<'_>| {
                            let mut hex = Vec::with_capacity(64);
                            self.hasher.push_hex(&c[0], &mut hex);
                            hex
                        })
                        .into_owned(),
                    _ => re.replace_all(&value, MASK).into_owned(),
                };
            }
        }
        Ok(Outcome::Replaced(key_value(arena, kv.key, &value, text)))
    }

    /// `with: hash` of a whole value. Unkeyed, the `attributes` processor's `hash`: SHA-256 of
    /// a string's bytes, of an int's or a double's eight little-endian bytes, of a bool's one
    /// byte; other values become the empty string. Keyed, the `redaction` processor's
    /// `hmac-sha256` with `redact_all_types`: HMAC of the value's text, line by line.
    fn hash_value(&self, v: Value<'_>, out: &mut Vec<u8>) -> proto::Result<()> {
        if self.hasher.is_keyed() {
            let mut text = Vec::new();
            rows::push_value_as_string(v, &mut text, proto::EVENT_LINK_VALUE_DEPTH)?;
            per_line(&text, out, |line, out| self.hasher.push_hex(line, out));
            return Ok(());
        }
        let mut number = [0u8; 8];
        let bytes: &[u8] = match v {
            Value::Str(s) => s,
            Value::Int(i) => {
                number = i.to_le_bytes();
                &number
            }
            Value::Double(d) => {
                number = d.to_bits().to_le_bytes();
                &number
            }
            Value::Bool(b) => {
                number[0] = u8::from(b);
                &number[..1]
            }
            _ => return Ok(()),
        };
        self.hasher.push_hex(bytes, out);
        Ok(())
    }
}

/// Each line of `s` (split on `\n`, an empty one included) through `f`, the `\n`s kept: what
/// Go's `regexp.ReplaceAllString(s, ".*")` does, which the `redaction` processor uses to mask
/// or hash a blocked key's whole value.
fn per_line(s: &[u8], out: &mut Vec<u8>, mut f: impl FnMut(&[u8], &mut Vec<u8>)) {
    for (i, line) in s.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        f(line, out);
    }
}

enum Outcome<'r> {
    Same,
    Removed,
    Replaced(&'r [u8]),
}

/// A `KeyValue` body with a string value, in the arena.
fn key_value<'r>(arena: &'r Bump, key: &[u8], value: &[u8], scratch: &mut Vec<u8>) -> &'r [u8] {
    let mut any_value = Vec::with_capacity(value.len() + 6);
    any_value.push(0x0a);
    put_str(&mut any_value, value);
    scratch.clear();
    scratch.push(0x0a);
    put_str(scratch, key);
    scratch.push(0x12);
    put_str(scratch, &any_value);
    arena.alloc_slice_copy(scratch)
}
