//! A decision → `status.autoscaling`, and back to the [`History`] the next decision needs.
//!
//! The status is the autoscaler's only memory (when it last stepped, what a replica was last
//! measured to sustain), so an operator restart or a leader change picks up where the last
//! one left off. Pure, like `crate::status`: the reconcile patches the result only when it
//! differs, and the `ScaledUp`/`ScaledDown` Event comes from [`Decision::event_reason`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::decide::{Decision, History};
use crate::crd::AutoscalingStatus;

fn whole(v: f64) -> i64 {
    // Saturating: the numbers are for people and columns, not for arithmetic.
    v.round() as i64
}

/// The status after `decision`, taken at `now`, from the stored `previous` one.
pub fn status(previous: &AutoscalingStatus, decision: &Decision, now: &Time) -> AutoscalingStatus {
    let signals = decision.signals;
    let stepped = decision.replicas != decision.from;
    AutoscalingStatus {
        lag_records: signals.map(|s| s.lag_records).or(previous.lag_records),
        lag_seconds: signals
            .and_then(|s| s.lag_seconds)
            .map(whole)
            .or(previous.lag_seconds),
        incoming_spans_per_second: signals
            .and_then(|s| s.incoming_spans_per_second)
            .map(whole)
            .or(previous.incoming_spans_per_second),
        replica_records_per_second: signals
            .and_then(|s| s.replica_capacity)
            .map(whole)
            .or(previous.replica_records_per_second),
        desired_replicas: i32::try_from(decision.replicas).ok(),
        current_replicas: i32::try_from(decision.from).ok(),
        reason: Some(decision.reason.reason().to_owned()),
        message: Some(if stepped {
            decision.message()
        } else {
            format!("{} replicas: {}", decision.replicas, decision.reason)
        }),
        last_scale_time: if stepped {
            Some(now.clone())
        } else {
            previous.last_scale_time.clone()
        },
        last_scale_reason: if stepped {
            Some(decision.reason.reason().to_owned())
        } else {
            previous.last_scale_reason.clone()
        },
        last_scale_message: if stepped {
            Some(decision.message())
        } else {
            previous.last_scale_message.clone()
        },
    }
}

impl History {
    /// What the stored status remembers.
    pub fn from_status(status: &AutoscalingStatus) -> Self {
        Self {
            last_scale: status.last_scale_time.as_ref().map(|t| t.0),
            replica_capacity: status
                .replica_records_per_second
                .filter(|&c| c > 0)
                .map(|c| c as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::autoscale::decide::{Hold, Reason, Signals};

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    fn signals() -> Signals {
        Signals {
            lag_records: 120_000,
            lag_seconds: Some(47.6),
            incoming_records_per_second: 2_500.0,
            consumed_records_per_second: 1_000.0,
            incoming_spans_per_second: Some(25_000.4),
            replica_capacity: Some(1_000.2),
            need: Some(4.1),
        }
    }

    #[test]
    fn a_step_records_its_time_reason_and_numbers_and_a_hold_keeps_them() {
        let up = Decision {
            from: 1,
            replicas: 4,
            reason: Reason::LagAboveTarget {
                lag_seconds: 47.6,
                lag_records: 120_000,
                target_seconds: 30,
                incoming_records_per_second: 2_500.0,
                need: 4.1,
                replica_capacity: 1_000.2,
            },
            signals: Some(signals()),
        };
        let s1 = status(&AutoscalingStatus::default(), &up, &at(0));
        assert_eq!(s1.lag_records, Some(120_000));
        assert_eq!(s1.lag_seconds, Some(48));
        assert_eq!(s1.incoming_spans_per_second, Some(25_000));
        assert_eq!(s1.replica_records_per_second, Some(1_000));
        assert_eq!(
            (s1.current_replicas, s1.desired_replicas),
            (Some(1), Some(4))
        );
        assert_eq!(s1.reason.as_deref(), Some("LagAboveTarget"));
        assert_eq!(s1.last_scale_time, Some(at(0)));
        assert_eq!(s1.last_scale_reason.as_deref(), Some("LagAboveTarget"));
        assert!(
            s1.last_scale_message
                .as_deref()
                .unwrap()
                .starts_with("1 → 4 replicas: lag 48s (120000 records) above the 30s target"),
            "{s1:?}"
        );
        let history = History::from_status(&s1);
        assert_eq!(history.last_scale, Some(at(0).0));
        assert_eq!(history.replica_capacity, Some(1_000.0));

        let cooling = Decision {
            from: 4,
            replicas: 4,
            reason: Reason::Hold(Hold::Cooldown {
                remaining_seconds: 30.0,
            }),
            signals: None,
        };
        let s2 = status(&s1, &cooling, &at(30));
        assert_eq!(s2.reason.as_deref(), Some("Cooldown"));
        assert!(
            s2.message.as_deref().unwrap().starts_with("4 replicas: "),
            "{s2:?}"
        );
        assert_eq!(s2.last_scale_time, Some(at(0)), "kept");
        assert_eq!(s2.last_scale_message, s1.last_scale_message, "kept");
        assert_eq!(s2.lag_records, Some(120_000), "last known numbers kept");
        assert_eq!(History::from_status(&s2), history);
    }

    #[test]
    fn the_same_decision_twice_gives_the_same_status() {
        let steady = Decision {
            from: 4,
            replicas: 4,
            reason: Reason::Steady,
            signals: Some(signals()),
        };
        let s1 = status(&AutoscalingStatus::default(), &steady, &at(0));
        assert_eq!(
            status(&s1, &steady, &at(30)),
            s1,
            "nothing changed, nothing to write"
        );
        assert_eq!(s1.last_scale_time, None);
    }
}
