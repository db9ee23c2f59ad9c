//! The offsets-retention watch, pure: a pipeline whose consumer group has been stopped (the
//! pipeline paused, or no gateway pod ready) longer than the broker's
//! `offsets.retention.minutes` may have lost its committed offsets — Kafka deletes an empty
//! group's offsets that long after its last member left (KIP-211) — and with them the commit
//! metadata the collectors replay their in-flight batches from. The collectors would then
//! start from `auto.offset.reset`: the backlog skipped (`latest`) or the whole retained topic
//! read again (`earliest`, duplicates the deduplication window no longer covers).
//!
//! [`assess`] turns what the reconcile saw ([`Consumers`]) and since when the group has been
//! stopped (the `Consuming` condition's transition time, kept by `status`) into that
//! condition: `True/Consuming`; `False` with the stop's reason (`Paused`, `NoReadyCollector`);
//! from [`WARN_AT`] of the retention `OffsetsExpiringSoon`; past it `OffsetsMayHaveExpired`.
//! Its message names fixed instants (since, expiry), never a duration that grows, so an
//! unchanged world writes no status; the two warnings raise one Event each, from the status
//! diff (`status/events.rs`).
//!
//! "No ready pod" is the operator's view: a collector that is unready because ClickHouse is
//! away can still be a member of the group, whose offsets then do not expire. The warning
//! errs on the side of telling.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Kafka's default `offsets.retention.minutes` (7 days), assumed when the broker's cannot be
/// read.
pub const DEFAULT_RETENTION_MINUTES: u64 = 10_080;

/// The share of the retention after which a stopped group is warned about.
pub const WARN_AT: f64 = 0.8;

/// The condition's reasons.
pub const CONSUMING: &str = "Consuming";
pub const PAUSED: &str = "Paused";
pub const NO_READY_COLLECTOR: &str = "NoReadyCollector";
pub const EXPIRING_SOON: &str = "OffsetsExpiringSoon";
pub const MAY_HAVE_EXPIRED: &str = "OffsetsMayHaveExpired";

/// Why nothing consumes the pipeline's topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// `spec.paused`.
    Paused,
    /// The gateway has no ready pod.
    NoReadyCollector,
}

/// The broker's offsets retention, as far as the operator knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// `offsets.retention.minutes`, read from the broker.
    Read(u64),
    /// Not read (the broker refused or did not say): Kafka's default is assumed.
    Assumed,
}

impl Retention {
    pub fn minutes(self) -> u64 {
        match self {
            Self::Read(m) => m,
            Self::Assumed => DEFAULT_RETENTION_MINUTES,
        }
    }

    fn describe(self) -> String {
        let m = self.minutes();
        let days = m as f64 / 1440.0;
        match self {
            Self::Read(_) => format!("offsets.retention.minutes={m}, {days:.1} days"),
            Self::Assumed => format!(
                "offsets.retention.minutes={m}, {days:.1} days: Kafka's default, the broker's \
                 could not be read"
            ),
        }
    }
}

/// What one reconcile saw of the group's consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consumers {
    /// `None`: a collector is ready and consumes.
    pub stopped: Option<Stopped>,
    /// Read only while stopped.
    pub retention: Retention,
}

/// The `Consuming` condition a reconcile leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub consuming: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Pure: the condition for `seen`, the group stopped since `since` (this reconcile's `now`
/// when it just stopped).
pub fn assess(seen: Consumers, since: Timestamp, now: Timestamp) -> Verdict {
    let Some(stopped) = seen.stopped else {
        return Verdict {
            consuming: true,
            reason: CONSUMING,
            message: "a ready collector consumes the topics: the broker keeps the group's \
                      committed offsets"
                .to_owned(),
        };
    };
    let minutes = seen.retention.minutes();
    let retention =
        SignedDuration::from_secs(i64::try_from(minutes.saturating_mul(60)).unwrap_or(i64::MAX));
    let expiry = since.checked_add(retention).unwrap_or(Timestamp::MAX);
    let stopped_for = now.duration_since(since);
    let share = stopped_for.as_secs_f64() / retention.as_secs_f64().max(1.0);
    let (what, reason) = match stopped {
        Stopped::Paused => ("spec.paused is true", PAUSED),
        Stopped::NoReadyCollector => ("no gateway pod is ready", NO_READY_COLLECTOR),
    };
    let reason = if share >= 1.0 {
        MAY_HAVE_EXPIRED
    } else if share >= WARN_AT {
        EXPIRING_SOON
    } else {
        reason
    };
    let since_s = since.strftime("%Y-%m-%dT%H:%M:%SZ");
    let expiry_s = expiry.strftime("%Y-%m-%dT%H:%M:%SZ");
    let retention_s = seen.retention.describe();
    let message = match reason {
        MAY_HAVE_EXPIRED => format!(
            "nothing has consumed since {since_s} ({what}), longer than the broker keeps an \
             empty group's committed offsets ({retention_s}; expired from {expiry_s}): the \
             collectors may restart from auto.offset.reset, skipping or re-reading records; \
             check the group's offsets (kafka-consumer-groups.sh --describe) before resuming"
        ),
        EXPIRING_SOON => format!(
            "nothing has consumed since {since_s} ({what}); the broker deletes an empty group's \
             committed offsets from {expiry_s} ({retention_s}): resume the pipeline before then"
        ),
        _ => format!(
            "nothing has consumed since {since_s} ({what}); the broker keeps an empty group's \
             committed offsets until {expiry_s} ({retention_s})"
        ),
    };
    Verdict {
        consuming: false,
        reason,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn stopped(why: Stopped, retention: Retention) -> Consumers {
        Consumers {
            stopped: Some(why),
            retention,
        }
    }

    #[test]
    fn a_consuming_group_is_fine_whatever_the_retention() {
        let v = assess(
            Consumers {
                stopped: None,
                retention: Retention::Read(1),
            },
            at(0),
            at(1_000_000),
        );
        assert!(v.consuming);
        assert_eq!(v.reason, CONSUMING);
    }

    #[test]
    fn a_stopped_group_is_warned_at_eighty_percent_and_told_past_the_retention() {
        // 100 minutes of retention: warned from minute 80, expired from minute 100.
        let seen = stopped(Stopped::NoReadyCollector, Retention::Read(100));
        let reason = |minutes: i64| assess(seen, at(0), at(minutes * 60)).reason;
        assert_eq!(reason(0), NO_READY_COLLECTOR);
        assert_eq!(reason(79), NO_READY_COLLECTOR);
        assert_eq!(reason(80), EXPIRING_SOON);
        assert_eq!(reason(99), EXPIRING_SOON);
        assert_eq!(reason(100), MAY_HAVE_EXPIRED);
        assert_eq!(reason(100_000), MAY_HAVE_EXPIRED);
        let paused = stopped(Stopped::Paused, Retention::Read(100));
        assert_eq!(assess(paused, at(0), at(60)).reason, PAUSED);
        assert!(!assess(paused, at(0), at(60)).consuming);
    }

    #[test]
    fn kafkas_default_is_assumed_and_said_when_the_broker_does_not_tell() {
        let seen = stopped(Stopped::Paused, Retention::Assumed);
        let seven_days = 7 * 24 * 3600;
        assert_eq!(
            assess(seen, at(0), at(seven_days - 1)).reason,
            EXPIRING_SOON
        );
        let v = assess(seen, at(0), at(seven_days));
        assert_eq!(v.reason, MAY_HAVE_EXPIRED);
        assert!(
            v.message.contains("10080") && v.message.contains("default"),
            "{}",
            v.message
        );
    }

    #[test]
    fn the_message_names_instants_so_a_stopped_pipeline_writes_its_status_once_per_stage() {
        let seen = stopped(Stopped::Paused, Retention::Read(10_080));
        let early = assess(seen, at(0), at(60));
        let later = assess(seen, at(0), at(3600));
        assert_eq!(early, later);
        assert!(
            early.message.contains("2027-01-15T08:00:00Z"),
            "{}",
            early.message
        );
        assert!(
            early.message.contains("2027-01-22T08:00:00Z"),
            "{}",
            early.message
        );
    }
}
