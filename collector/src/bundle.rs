//! A bundle: the batches of several partitions of one topic, cut by time together and
//! inserted as one ClickHouse insert under one deduplication token.
//!
//! Why: a batch per partition ties the insert count to the partition count (a gateway
//! holding 64 partitions made 64 inserts per linger), and each partition waited its own
//! linger. A bundle closes every partition's open batch at once and inserts them together,
//! so a gateway makes about one insert per linger whatever its partitions.
//!
//! How it stays exactly-once: a bundle's cut is made by time, so it cannot be made again
//! from the data. Its description — every member's partition and offsets — is therefore
//! recorded in the commit metadata of *every* member, synchronously, before the insert goes
//! out ([`crate::offsets`]). Whoever later replays any member (this process or the next
//! owner of that partition) finds the whole description there, reads every member's
//! records again (the other members' through a reader of its own,
//! `source::replay`), and inserts the same bundle under the same token, which
//! ClickHouse deduplicates. The token is a function of the description alone.
//!
//! Rules (with [`crate::source::machine`]'s):
//! 1. only time cuts are bundled (size cuts stay per partition: they replay from the data);
//! 2. a bundle is sent only after Kafka took its description for every member in one
//!    commit; when that commit fails, the bundle is dissolved into per-partition time cuts
//!    (the unsent queue's rules then hold each until its own cut is recorded);
//! 3. a description never exceeds [`MAX_DESCRIPTION_BYTES`], and a member joins only if its
//!    partition's metadata still fits Kafka's limit with it: a description is never cut
//!    short (a partition that does not fit makes a batch of its own).

use std::fmt::Write as _;
use std::sync::Arc;

use crate::batch::{BatchRange, LogId, RecordBatch};

/// The longest description a bundle may have (about 50 members): several must fit in one
/// partition's commit metadata beside its other pending cuts.
pub const MAX_DESCRIPTION_BYTES: usize = 1000;

/// Which records of which partitions of one topic a bundle holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BundleDesc {
    pub topic: Arc<str>,
    /// The log the members' offsets count in (part of the token; not of the rendered
    /// description, which the commit metadata of that log carries).
    pub log: LogId,
    /// `(partition, range)`, in the order the rows are inserted; each partition once.
    pub members: Vec<(i32, BatchRange)>,
}

impl BundleDesc {
    /// The description as commit metadata writes it: `p:first-last` joined by `+`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, (p, r)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push('+');
            }
            let _ = write!(out, "{p}:{}-{}", r.first, r.last);
        }
        out
    }

    /// Parse [`BundleDesc::render`]'s text, a bundle of `log`; `None` when damaged.
    pub fn parse_in(topic: &Arc<str>, log: &LogId, text: &str) -> Option<Self> {
        let mut d = Self::parse(topic, text)?;
        d.log = log.clone();
        Some(d)
    }

    /// Parse [`BundleDesc::render`]'s text, a bundle of the legacy log; `None` when damaged.
    pub fn parse(topic: &Arc<str>, text: &str) -> Option<Self> {
        let mut members = Vec::new();
        for m in text.split('+') {
            let (p, range) = m.split_once(':')?;
            let (first, last) = range.split_once('-')?;
            let r = BatchRange {
                first: first.trim().parse().ok()?,
                last: last.trim().parse().ok()?,
            };
            if r.first > r.last {
                return None;
            }
            members.push((p.trim().parse().ok()?, r));
        }
        (!members.is_empty()).then(|| Self {
            topic: topic.clone(),
            log: LogId::legacy(),
            members,
        })
    }

    /// The range of `partition` in this bundle.
    pub fn range_of(&self, partition: i32) -> Option<BatchRange> {
        self.members
            .iter()
            .find(|(p, _)| *p == partition)
            .map(|(_, r)| *r)
    }

    /// The insert deduplication token: a function of the description alone, so every
    /// replay of the bundle, by any process, carries it. `<topic>#<log>-bundle-<hash>-<members>`
    /// (`<topic>-bundle-…` for the legacy log; FNV-1a over the rendered description: stable
    /// across versions and platforms).
    pub fn token(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.render().bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!(
            "{}-bundle-{h:016x}-{}",
            self.log.token_prefix(&self.topic),
            self.members.len()
        )
    }
}

/// A bundle on its way to ClickHouse: its description and its members' batches, in the
/// description's order.
#[derive(Debug)]
pub struct Bundle {
    pub desc: Arc<BundleDesc>,
    pub batches: Vec<RecordBatch>,
}

/// The bytes `(partition, range)` adds to a description (with its separator).
pub fn member_bytes(partition: i32, range: BatchRange) -> usize {
    format!("+{partition}:{}-{}", range.first, range.last).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: i64, last: i64) -> BatchRange {
        BatchRange { first, last }
    }

    fn desc() -> BundleDesc {
        BundleDesc {
            topic: "spans".into(),
            log: LogId::legacy(),
            members: vec![
                (0, r(100, 149)),
                (3, r(7, 7)),
                (12, r(9_000_000_000, 9_000_000_010)),
            ],
        }
    }

    #[test]
    fn a_description_reads_back_as_written() {
        let d = desc();
        assert_eq!(d.render(), "0:100-149+3:7-7+12:9000000000-9000000010");
        assert_eq!(BundleDesc::parse(&d.topic, &d.render()), Some(d.clone()));
        assert_eq!(d.range_of(3), Some(r(7, 7)));
        assert_eq!(d.range_of(4), None);
    }

    #[test]
    fn damaged_descriptions_are_refused() {
        let t: Arc<str> = "t".into();
        for bad in ["", "1", "1:2", "x:1-2", "1:5-4", "1:1-2+", "1:1-2+2:a-3"] {
            assert_eq!(BundleDesc::parse(&t, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_token_depends_on_the_description_only() {
        let d = desc();
        assert_eq!(d.token(), desc().token());
        assert!(d.token().starts_with("spans-bundle-"));
        assert!(d.token().ends_with("-3"));
        let mut other = desc();
        other.members[1].1 = r(7, 8);
        assert_ne!(d.token(), other.token());
        let mut named = desc();
        named.log = LogId::named("AAAAAAAAAAAAAAAAAAAAAQ");
        assert!(
            named
                .token()
                .starts_with("spans#AAAAAAAAAAAAAAAAAAAAAQ-bundle-")
        );
        assert_eq!(
            named.token()["spans#AAAAAAAAAAAAAAAAAAAAAQ".len()..],
            d.token()["spans".len()..],
            "the log names the token's source, the description the rest"
        );
        let mut reordered = desc();
        reordered.members.swap(0, 1);
        assert_ne!(
            d.token(),
            reordered.token(),
            "member order is part of the bundle"
        );
    }

    #[test]
    fn member_bytes_counts_what_render_adds() {
        let d = desc();
        let total: usize = d.members.iter().map(|(p, r)| member_bytes(*p, *r)).sum();
        assert_eq!(
            total,
            d.render().len() + 1,
            "the first member has no separator"
        );
    }
}
