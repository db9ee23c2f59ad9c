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

/// `with: hash`: lower-case hex SHA-256 of the value's text, or HMAC-SHA256 under the
/// processing's key.
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
                        bodies[write] = body;
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

    fn one<'r>(
        &self,
        body: &[u8],
        arena: &'r Bump,
        text: &mut Vec<u8>,
    ) -> proto::Result<Outcome<'r>> {
        let kv = proto::kv(body)?;
        if self.key_hit(kv.key) {
            return Ok(match self.with {
                Redaction::Remove => Outcome::Removed,
                Redaction::Mask => Outcome::Replaced(key_value(arena, kv.key, MASK, text)),
                Redaction::Hash => {
                    let mut value = Vec::new();
                    rows::push_value_as_string(
                        kv.value,
                        &mut value,
                        proto::EVENT_LINK_VALUE_DEPTH,
                    )?;
                    let mut hex = Vec::with_capacity(64);
                    self.hasher.push_hex(&value, &mut hex);
                    Outcome::Replaced(key_value(arena, kv.key, &hex, text))
                }
            });
        }
        let Value::Str(s) = kv.value else {
            return Ok(Outcome::Same);
        };
        if !self.values.iter().any(|re| re.is_match(s)) {
            return Ok(Outcome::Same);
        }
        Ok(match self.with {
            Redaction::Remove => Outcome::Removed,
            Redaction::Hash => {
                let mut hex = Vec::with_capacity(64);
                self.hasher.push_hex(s, &mut hex);
                Outcome::Replaced(key_value(arena, kv.key, &hex, text))
            }
            Redaction::Mask => {
                let mut masked = s.to_vec();
                for re in &self.values {
                    if re.is_match(&masked) {
                        masked = re.replace_all(&masked, MASK).into_owned();
                    }
                }
                Outcome::Replaced(key_value(arena, kv.key, &masked, text))
            }
        })
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
