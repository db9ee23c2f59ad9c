//! How far a pipeline's consumer group is behind, from the brokers alone: the committed
//! offsets against the end offsets, and the write time of the oldest record not yet
//! committed. Read at every reconcile of every pipeline, so the lag is known whether or not
//! collectors run (and most needed when they do not) and with or without `spec.autoscaling`
//! (whose own samples add the collectors' view: `status.autoscaling`).
//!
//! [`summary`] is pure, over the offsets the reconcile reads once through its `Backends`
//! (the same read the autoscaler's samples are made of).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::crd::LagStatus;
use crate::kafka::PartitionOffsets;

/// The status of `offsets`, with `oldest_ms` the timestamp of the oldest record not yet
/// committed (when one was read).
pub fn summary(offsets: &[PartitionOffsets], oldest_ms: Option<i64>) -> LagStatus {
    let behind = offsets.iter().filter(|p| p.end > p.committed);
    let records = behind.clone().map(|p| p.end - p.committed).sum();
    let partitions_behind = i32::try_from(behind.count()).unwrap_or(i32::MAX);
    LagStatus {
        records,
        partitions_behind,
        oldest_unconsumed_time: oldest_ms
            .filter(|_| records > 0)
            // Whole seconds: what the API server keeps of a time.
            .and_then(|ms| Timestamp::from_second(ms.div_euclid(1000)).ok())
            .map(Time),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(partition: i32, committed: i64, end: i64) -> PartitionOffsets {
        PartitionOffsets {
            topic: "spans".into(),
            partition,
            committed,
            end,
        }
    }

    #[test]
    fn records_and_partitions_behind_are_summed_and_the_time_kept_to_the_second() {
        let s = summary(
            &[at(0, 10, 10), at(1, 5, 25), at(2, 0, 3)],
            Some(1_800_000_000_999),
        );
        assert_eq!(s.records, 23);
        assert_eq!(s.partitions_behind, 2);
        assert_eq!(
            s.oldest_unconsumed_time,
            Some(Time(Timestamp::from_second(1_800_000_000).unwrap()))
        );
    }

    #[test]
    fn nothing_behind_has_no_time_even_if_one_was_read() {
        let s = summary(&[at(0, 10, 10)], Some(1_800_000_000_000));
        assert_eq!(
            s,
            LagStatus {
                records: 0,
                partitions_behind: 0,
                oldest_unconsumed_time: None
            }
        );
    }

    #[test]
    fn a_stuck_group_reads_the_same_status_again() {
        // Nothing consumed, nothing produced: equal statuses, so no status write.
        let offsets = [at(0, 3, 9)];
        assert_eq!(
            summary(&offsets, Some(1_800_000_000_000)),
            summary(&offsets, Some(1_800_000_000_000))
        );
    }
}
