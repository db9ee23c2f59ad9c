//! The sampling draw: the OpenTelemetry Collector's `probabilistic_sampler` in its default
//! `hash_seed` mode (v0.155.0, `fail_closed: true`), so that tracehouse gateways and
//! Collectors with the same percentage and seed keep the same spans and write the same
//! `TraceState` (`e2e/otelcol/PROCESSORS.md` §1; the vectors of
//! `collector/tests/fixtures/otel_processing_vectors.json` hold us to it).
//!
//! - The hash: FNV-1a (32 bits) over the seed's four bytes (little-endian), then the trace
//!   id's sixteen; its low 14 bits are the trace's bucket among 16 384. The trace is kept when
//!   the bucket is below `percent × 163.84` computed in `f32` and truncated.
//! - `sampling.priority` (a span attribute: int, double or numeric text) overrides the draw:
//!   0 drops, above 0 keeps, anything else defers.
//! - A kept span's tracestate gets the OTEP 235 member first: `ot=rv:<R>;th:<T>` (R the
//!   56-bit randomness built from the hash, T the threshold), then the other members as they
//!   came.
//! - Fail closed, as the Collector by default: an all-zero trace id, a tracestate that does
//!   not parse, or one that already carries `ot` randomness or a threshold (`rv:`/`th:`, from a
//!   consistent sampler upstream) drops the span unless `sampling.priority` keeps it.
//!
//! The process module's rule 4: the trace id, the tracestate and that one attribute are all
//! it reads.

/// 2¹⁴ buckets, as the Collector's `numHashBuckets`.
const BUCKETS: u32 = 0x4000;
/// 2⁵⁶: thresholds and randomness are 56-bit.
const NEVER: u64 = 1 << 56;

/// What `sampling.priority` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    Defer,
    Drop,
    Keep,
}

/// The outcome of a draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draw {
    Drop,
    /// Kept, with the new tracestate written to the caller's buffer.
    KeepWith,
    /// Kept, tracestate unchanged (kept by `sampling.priority` despite an error).
    Keep,
}

#[derive(Debug, Clone)]
pub struct Sampler {
    seed: u32,
    /// Buckets below this are kept.
    scaled: u32,
}

impl Sampler {
    pub fn new(percent: f64, seed: u32) -> Self {
        let pct = (percent as f32).min(100.0);
        Self {
            seed,
            scaled: (pct * (BUCKETS as f32 / 100.0)) as u32,
        }
    }

    /// Whether a trace id with an empty tracestate and no priority is kept.
    pub fn keeps(&self, trace_id: &[u8]) -> bool {
        let mut out = Vec::new();
        self.draw(trace_id, b"", Priority::Defer, &mut out) != Draw::Drop
    }

    /// The threshold T (kept when T ≤ R).
    fn threshold(&self) -> u64 {
        if self.scaled == 0 {
            NEVER
        } else {
            u64::from(BUCKETS - self.scaled.min(BUCKETS)) << 42
        }
    }

    /// Draws for one span; on [`Draw::KeepWith`], `out` holds its new tracestate.
    pub fn draw(
        &self,
        trace_id: &[u8],
        tracestate: &[u8],
        priority: Priority,
        out: &mut Vec<u8>,
    ) -> Draw {
        let parsed = TraceState::parse(tracestate);
        let zero_id = trace_id.iter().all(|&b| b == 0);
        let (randomness, error) = if zero_id {
            // The Collector writes the largest randomness when it has none.
            (NEVER - 1, true)
        } else {
            (
                randomness(fnv1a32(&self.seed.to_le_bytes(), trace_id)),
                false,
            )
        };
        let error = error
            || match &parsed {
                None => true,
                Some(ts) => ts.has_rv_or_th(),
            };
        let mut threshold = if error { NEVER } else { self.threshold() };
        match priority {
            Priority::Drop => threshold = NEVER,
            Priority::Keep => threshold = 0,
            Priority::Defer => {}
        }
        if threshold > randomness {
            return Draw::Drop;
        }
        // Not covered by the vectors: a span kept by its priority whose tracestate could not
        // take the member keeps its tracestate as it came.
        let Some(ts) = parsed.filter(|ts| !ts.has_rv_or_th()) else {
            return Draw::Keep;
        };
        out.clear();
        out.extend_from_slice(b"ot=rv:");
        push_hex14(randomness, out);
        out.extend_from_slice(b";th:");
        push_th(threshold, out);
        for sub in &ts.ot_rest {
            out.push(b';');
            out.extend_from_slice(sub);
        }
        for m in &ts.others {
            out.push(b',');
            out.extend_from_slice(m);
        }
        Draw::KeepWith
    }
}

/// The 56-bit randomness the Collector derives from the hash (PROCESSORS.md §1): R' = the
/// bucket counted down in the top 14 bits, a mix of the hash's top 14 bits in the middle,
/// the bucket in the low 14.
fn randomness(h: u32) -> u64 {
    let hashed = u64::from(h & (BUCKETS - 1));
    let top = u64::from(h >> 18);
    let mixed = top ^ (top << 10);
    ((u64::from(BUCKETS) - 1 - hashed) << 42) | (mixed << 14) | hashed
}

fn fnv1a32(a: &[u8], b: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &byte in a.iter().chain(b) {
        h ^= byte as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex14(v: u64, out: &mut Vec<u8>) {
    for i in (0..14).rev() {
        out.push(HEX[((v >> (4 * i)) & 15) as usize]);
    }
}

/// A threshold as a th-value: 14 hex digits without trailing zeros; 0 is `0`.
fn push_th(v: u64, out: &mut Vec<u8>) {
    if v == 0 {
        out.push(b'0');
        return;
    }
    let start = out.len();
    push_hex14(v, out);
    while out.len() > start + 1 && out.last() == Some(&b'0') {
        out.pop();
    }
}

/// A W3C tracestate, as far as the draw needs it: the `ot` member's sub-keys, and the other
/// members in their order.
#[derive(Debug, Default)]
struct TraceState<'a> {
    ot_rv: bool,
    ot_th: bool,
    /// `ot` sub-keys other than `rv` and `th` (`key:value`), in order.
    ot_rest: Vec<&'a [u8]>,
    others: Vec<&'a [u8]>,
}

impl<'a> TraceState<'a> {
    fn has_rv_or_th(&self) -> bool {
        self.ot_rv || self.ot_th
    }

    /// `None`: the tracestate does not parse (the Collector's `NewW3CTraceState`).
    fn parse(text: &'a [u8]) -> Option<Self> {
        let mut ts = TraceState::default();
        if text.is_empty() {
            return Some(ts);
        }
        if text.len() > 1024 {
            return None;
        }
        let mut members = 0;
        for raw in text.split(|&b| b == b',') {
            let m = trim(raw);
            if m.is_empty() {
                continue;
            }
            members += 1;
            if members > 32 {
                return None;
            }
            let eq = m.iter().position(|&b| b == b'=')?;
            let (key, value) = (&m[..eq], &m[eq + 1..]);
            if !w3c_key(key) || !w3c_value(value) {
                return None;
            }
            if key == b"ot" {
                for sub in value.split(|&b| b == b';') {
                    let colon = sub.iter().position(|&b| b == b':')?;
                    let (k, v) = (&sub[..colon], &sub[colon + 1..]);
                    if k.is_empty() || !k.iter().all(u8::is_ascii_lowercase) || !ot_value(v) {
                        return None;
                    }
                    match k {
                        b"rv" if v.len() == 14 && v.iter().all(is_lower_hex) => ts.ot_rv = true,
                        b"th" if (1..=14).contains(&v.len()) && v.iter().all(is_lower_hex) => {
                            ts.ot_th = true
                        }
                        b"rv" | b"th" => return None,
                        _ => ts.ot_rest.push(sub),
                    }
                }
            } else {
                ts.others.push(m);
            }
        }
        Some(ts)
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let is_ows = |c: &u8| *c == b' ' || *c == b'\t';
    let start = b.iter().position(|c| !is_ows(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !is_ows(c)).map_or(start, |e| e + 1);
    &b[start..end]
}

fn is_lower_hex(c: &u8) -> bool {
    c.is_ascii_digit() || (b'a'..=b'f').contains(c)
}

/// W3C trace-context key: `lcalpha/digit` then up to 255 of `lcalpha digit _ - * /`, or a
/// multi-tenant `tenant@system`.
fn w3c_key(k: &[u8]) -> bool {
    let first = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let rest = |c: &u8| first(c) || matches!(c, b'_' | b'-' | b'*' | b'/');
    match k.iter().position(|&b| b == b'@') {
        None => !k.is_empty() && k.len() <= 256 && first(&k[0]) && k[1..].iter().all(rest),
        Some(at) => {
            let (tenant, system) = (&k[..at], &k[at + 1..]);
            !tenant.is_empty()
                && tenant.len() <= 241
                && first(&tenant[0])
                && tenant[1..].iter().all(rest)
                && !system.is_empty()
                && system.len() <= 14
                && system[0].is_ascii_lowercase()
                && system[1..].iter().all(rest)
        }
    }
}

/// W3C value: up to 256 printable characters but `,` and `=`, not ending in a space.
fn w3c_value(v: &[u8]) -> bool {
    let ok = |c: &u8| (0x20..=0x7e).contains(c) && *c != b',' && *c != b'=';
    !v.is_empty() && v.len() <= 256 && v.iter().all(ok) && v[v.len() - 1] != b' '
}

fn ot_value(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= 256
        && v.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}
