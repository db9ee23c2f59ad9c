//! The decision: a window of samples → the replica count and why.
//!
//! Pure: the time is passed in, and what the decision needs to remember (when it last
//! scaled, what one replica was last measured to sustain) comes back in [`Decision`] for the
//! caller to keep in the status.

use k8s_openapi::jiff::Timestamp;

use super::ladder::Ladder;
pub use super::reason::{Hold, MemoryKind, Reason};
use super::sample::{Rates, Sample, rates, spans_per_record};
use crate::crd::AutoscalingSpec;

/// A lower rung is taken only if, at the peak need of the stabilization window, it would run
/// at most this busy; with scale-out triggered by the lag target itself, the gap between the
/// two is the hysteresis that keeps a load near a rung's edge from flapping.
pub const SCALE_IN_UTILIZATION: f64 = 0.8;

/// What the autoscaler remembers between decisions (kept in `status.autoscaling`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct History {
    /// When it last changed the replica count.
    pub last_scale: Option<Timestamp>,
    /// Records per second one replica's worth of the gateway sustained the last time it had
    /// a backlog ([`Signals::replica_capacity`] of the previous decision).
    pub replica_capacity: Option<f64>,
}

/// The numbers a decision saw, for the status, the Event and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Signals {
    /// Records behind, summed over the partitions.
    pub lag_records: i64,
    /// The oldest unwritten record's age (largest over the pods).
    pub lag_seconds: Option<f64>,
    /// Records per second produced to the topics, over the lookback.
    pub incoming_records_per_second: f64,
    /// Records per second the group committed, over the lookback.
    pub consumed_records_per_second: f64,
    /// Incoming records times the spans per record the pods decoded.
    pub incoming_spans_per_second: Option<f64>,
    /// Records per second one replica sustains: measured while the gateway had a backlog
    /// within the lookback, else remembered.
    pub replica_capacity: Option<f64>,
    /// Replicas' worth of throughput the load needs now to hold the lag target.
    pub need: Option<f64>,
}

/// The replica count to run, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The count the decision started from.
    pub from: u32,
    pub replicas: u32,
    pub reason: Reason,
    /// `None` when there were not enough samples to measure anything.
    pub signals: Option<Signals>,
}

impl Decision {
    /// `ScaledUp` or `ScaledDown` when the count changes.
    pub fn event_reason(&self) -> Option<&'static str> {
        match self.replicas.cmp(&self.from) {
            std::cmp::Ordering::Greater => Some("ScaledUp"),
            std::cmp::Ordering::Less => Some("ScaledDown"),
            std::cmp::Ordering::Equal => None,
        }
    }

    /// The Event's note: the change and the numbers that caused it.
    pub fn message(&self) -> String {
        format!(
            "{} → {} replicas: {}",
            self.from, self.replicas, self.reason
        )
    }

    /// What to remember for the next decision.
    pub fn history(&self, previous: &History, now: Timestamp) -> History {
        History {
            last_scale: if self.replicas == self.from {
                previous.last_scale
            } else {
                Some(now)
            },
            replica_capacity: self
                .signals
                .and_then(|s| s.replica_capacity)
                .or(previous.replica_capacity),
        }
    }
}

fn seconds(s: i32) -> f64 {
    f64::from(s.max(0))
}

fn non_negative(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The replica count for the gateway, from `window` (samples, any order; those after `now`
/// are ignored), the `current` count, the `partitions` of the topics now and what the
/// previous decisions left in `history`.
///
/// The caller keeps samples back to `scaleDownStabilizationSeconds + lookbackSeconds`
/// before now: the stabilization window looks at the need at every sample within it, and
/// each of those needs a lookback of its own.
pub fn decide(
    spec: &AutoscalingSpec,
    window: &[Sample],
    current: u32,
    partitions: u32,
    history: &History,
    now: Timestamp,
) -> Decision {
    let mut samples: Vec<&Sample> = window.iter().filter(|o| o.at <= now).collect();
    samples.sort_by_key(|o| o.at);
    let d = Decider {
        spec,
        samples,
        current,
        partitions,
        history,
        now,
        lookback: seconds(spec.lookback_seconds).max(1.0),
        target: seconds(spec.target_lag_seconds).max(1.0),
    };
    d.decide()
}

struct Decider<'a> {
    spec: &'a AutoscalingSpec,
    samples: Vec<&'a Sample>,
    current: u32,
    partitions: u32,
    history: &'a History,
    now: Timestamp,
    lookback: f64,
    target: f64,
}

/// What the newest sample says, once there is one with a lookback behind it.
struct Present<'a> {
    newest: &'a Sample,
    ladder: Ladder,
    rates: Rates,
    signals: Signals,
}

impl Decider<'_> {
    fn decision(&self, replicas: u32, reason: Reason, signals: Option<Signals>) -> Decision {
        Decision {
            from: self.current,
            replicas,
            reason,
            signals,
        }
    }

    fn hold(&self, hold: Hold, signals: Option<Signals>) -> Decision {
        self.decision(self.current, Reason::Hold(hold), signals)
    }

    fn decide(&self) -> Decision {
        if self.partitions == 0 {
            return self.hold(Hold::NoPartitions, None);
        }
        let ladder = Ladder::new(
            self.partitions,
            non_negative(self.spec.min),
            self.spec.max.map(non_negative),
        );
        // The bounds hold whatever the metrics say (or whether there are any).
        if self.current < ladder.lowest() || self.current > ladder.highest() {
            let replicas = self.current.clamp(ladder.lowest(), ladder.highest());
            let reason = Reason::OutOfBounds {
                min: ladder.lowest(),
                max: ladder.highest(),
            };
            return self.decision(replicas, reason, None);
        }
        let present = match self.present(ladder) {
            Ok(p) => p,
            Err(hold) => return self.hold(hold, None),
        };
        let signals = Some(present.signals);
        if let Some(hold) = self.gate(present.newest) {
            return self.hold(hold, signals);
        }
        match self.scale_out(&present) {
            Ok(Some(d)) => d,
            Ok(None) => self.scale_in(&present),
            Err(hold) => self.hold(hold, signals),
        }
    }

    /// The newest sample and its numbers, or why there are none to trust.
    fn present(&self, ladder: Ladder) -> Result<Present<'_>, Hold> {
        let Some(&newest) = self.samples.last() else {
            return Err(Hold::TooFewSamples { samples: 0 });
        };
        let age = self.since(newest.at);
        if age > self.lookback / 2.0 {
            return Err(Hold::StaleMetrics { age_seconds: age });
        }
        let Some(base) = self.lookback_base(newest) else {
            let samples = self
                .samples
                .iter()
                .filter(|o| newest.at.duration_since(o.at).as_secs_f64() <= self.lookback)
                .count();
            return Err(Hold::TooFewSamples { samples });
        };
        let rates = rates(base, newest).ok_or(Hold::TooFewSamples { samples: 1 })?;
        let capacity = self
            .measured_capacity(newest)
            .or(self.history.replica_capacity);
        let signals = Signals {
            lag_records: newest.backlog(),
            lag_seconds: newest.lag_seconds(),
            incoming_records_per_second: rates.incoming,
            consumed_records_per_second: rates.consumed,
            // Nothing arriving is zero spans, whether or not the pods decoded anything to
            // tell spans per record from.
            incoming_spans_per_second: if rates.incoming > 0.0 {
                spans_per_record(base, newest).map(|r| r * rates.incoming)
            } else {
                Some(0.0)
            },
            replica_capacity: capacity,
            need: capacity.map(|c| self.need_at(newest, rates.incoming, c)),
        };
        Ok(Present {
            newest,
            ladder,
            rates,
            signals,
        })
    }

    /// Holds that come before any arithmetic: a gateway in motion, a pod unheard, a cooldown.
    fn gate(&self, newest: &Sample) -> Option<Hold> {
        let (ready, pods) = (count(newest.ready_pods()), count(newest.pods.len()));
        if ready < pods || pods != self.current {
            return Some(Hold::PodNotReady {
                ready,
                pods,
                replicas: self.current,
            });
        }
        if let Some(pod) = newest.pods.iter().find(|p| p.metrics.is_none()) {
            return Some(Hold::MetricsMissing {
                pod: pod.name.clone(),
            });
        }
        let last = self.history.last_scale?;
        let remaining = seconds(self.spec.cooldown_seconds) - self.since(last);
        (remaining > 0.0).then_some(Hold::Cooldown {
            remaining_seconds: remaining,
        })
    }

    /// Up: the lag target, with memory pressure as a floor of one rung more. `Ok(None)` when
    /// neither asks for more.
    fn scale_out(&self, p: &Present<'_>) -> Result<Option<Decision>, Hold> {
        let ladder = &p.ladder;
        let lag = p
            .signals
            .lag_seconds
            .unwrap_or_else(|| self.estimated_lag(p.newest, p.rates.incoming));
        let lagging = lag > self.target;
        let mut signals = p.signals;
        let mut lag_up = None;
        if lagging {
            if self.last_interval_consumed(p.newest) <= 0.0 {
                return Err(Hold::NotConsuming {
                    lag_records: p.signals.lag_records,
                });
            }
            // Behind, so what the replicas commit now is what they can do.
            let c = p.signals.replica_capacity.unwrap_or_else(|| {
                p.rates.consumed / ladder.worth(self.current).max(f64::MIN_POSITIVE)
            });
            let need = self.need_at(p.newest, p.rates.incoming, c);
            signals.replica_capacity = Some(c);
            signals.need = Some(need);
            // At or below what the count is worth, the backlog drains within the target.
            if need > ladder.worth(self.current) {
                let reason = Reason::LagAboveTarget {
                    lag_seconds: lag,
                    lag_records: p.signals.lag_records,
                    target_seconds: non_negative(self.spec.target_lag_seconds),
                    incoming_records_per_second: p.rates.incoming,
                    need,
                    replica_capacity: c,
                };
                lag_up = Some((ladder.fitting(need), reason));
            }
        }
        let memory_up = self
            .memory_pressure(p.newest)
            .map(|reason| (ladder.step(self.current, ladder.highest(), 1), reason));
        let up = match (lag_up, memory_up) {
            (Some(l), Some(m)) => Some(if m.0 > l.0 { m } else { l }),
            (l, m) => l.or(m),
        };
        match up {
            Some((_, reason)) if self.current >= ladder.highest() => Err(Hold::AtMaximum {
                replicas: self.current,
                wanted: Box::new(reason),
            }),
            Some((want, reason)) => {
                let max_step = non_negative(self.spec.max_step);
                let replicas = ladder.step(self.current, want, max_step);
                Ok(Some(self.decision(replicas, reason, Some(signals))))
            }
            // Behind but draining in time: no scale-in while behind.
            None if lagging => Ok(Some(self.decision(
                self.current,
                Reason::Steady,
                Some(signals),
            ))),
            None => Ok(None),
        }
    }

    /// Down, or across to the new ladder after partitions were added: only with a known
    /// capacity, and only at the peak need of the stabilization window; without one, only
    /// after a window with no load at all (`Idle`: zero need whatever the capacity).
    fn scale_in(&self, p: &Present<'_>) -> Decision {
        let ladder = &p.ladder;
        let signals = Some(p.signals);
        let Some(c) = p.signals.replica_capacity else {
            if self.current <= ladder.lowest() {
                return self.decision(self.current, Reason::Steady, signals);
            }
            // Any capacity gives zero need when nothing arrives and nothing is behind.
            let (peak, covered) = self.peak_need(1.0);
            if covered && peak == 0.0 && p.signals.need.unwrap_or(0.0) == 0.0 {
                let max_step = non_negative(self.spec.max_step);
                let reason = Reason::Idle {
                    window_seconds: non_negative(self.spec.scale_down_stabilization_seconds),
                };
                let lowest = ladder.lowest();
                return self.decision(ladder.step(self.current, lowest, max_step), reason, signals);
            }
            return self.hold(Hold::CapacityUnknown, signals);
        };
        let max_step = non_negative(self.spec.max_step);
        let need_now = p.signals.need.unwrap_or(0.0);
        let (peak, covered) = self.peak_need(c);
        let peak = peak.max(need_now);
        let want = ladder.fitting(peak / SCALE_IN_UTILIZATION);
        // Kafka has just rebalanced the group for the new partitions anyway, so an off-ladder
        // count moves to the new ladder at once, either way.
        if self.partitions_changed(p.newest)
            && !ladder.contains(self.current)
            && want != self.current
        {
            let from = self
                .samples
                .first()
                .map_or(0, |o| count(o.partition_count()));
            let reason = Reason::PartitionsChanged {
                from,
                to: self.partitions,
                need: peak,
            };
            return self.decision(ladder.step(self.current, want, max_step), reason, signals);
        }
        if want >= self.current {
            return if ladder.fitting(need_now / SCALE_IN_UTILIZATION) < self.current {
                self.hold(
                    Hold::Stabilizing {
                        need: need_now,
                        peak_need: peak,
                    },
                    signals,
                )
            } else {
                self.decision(self.current, Reason::Steady, signals)
            };
        }
        if !covered {
            let hold = Hold::Stabilizing {
                need: need_now,
                peak_need: peak,
            };
            return self.hold(hold, signals);
        }
        let replicas = ladder.step(self.current, want, max_step);
        if let Some(projected) =
            self.projected_memory_percent(ladder.worth(self.current), ladder.worth(replicas))
            && projected >= f64::from(self.spec.memory_high_water_percent)
        {
            let hold = Hold::MemoryHeadroom {
                projected_percent: projected,
            };
            return self.hold(hold, signals);
        }
        let reason = Reason::LoadDeclined {
            peak_need: peak,
            window_seconds: non_negative(self.spec.scale_down_stabilization_seconds),
            replica_capacity: c,
        };
        self.decision(replicas, reason, signals)
    }

    /// The partition count differs between the samples, or from the topics' now.
    fn partitions_changed(&self, newest: &Sample) -> bool {
        count(newest.partition_count()) != self.partitions
            || self
                .samples
                .iter()
                .any(|o| o.partition_count() != newest.partition_count())
    }

    fn since(&self, t: Timestamp) -> f64 {
        self.now.duration_since(t).as_secs_f64()
    }

    /// Records per second committed between the two newest samples.
    fn last_interval_consumed(&self, newest: &Sample) -> f64 {
        let n = self.samples.len();
        (n >= 2)
            .then(|| rates(self.samples[n - 2], newest))
            .flatten()
            .map_or(0.0, |r| r.consumed)
    }

    /// The oldest sample within the lookback before `at`.
    fn lookback_base(&self, at: &Sample) -> Option<&Sample> {
        self.samples
            .iter()
            .copied()
            .find(|o| o.at < at.at && at.at.duration_since(o.at).as_secs_f64() <= self.lookback)
    }

    /// Replicas' worth of throughput needed at sample `o` to hold the target: keep up with the
    /// incoming records and drain the backlog within the target, whichever is more.
    fn need_at(&self, o: &Sample, incoming: f64, capacity: f64) -> f64 {
        let drain = o.backlog() as f64 / self.target;
        incoming.max(drain) / capacity.max(f64::MIN_POSITIVE)
    }

    /// The lag in seconds from the records behind, when no pod reports it.
    fn estimated_lag(&self, o: &Sample, incoming: f64) -> f64 {
        if incoming > 0.0 {
            o.backlog() as f64 / incoming
        } else {
            0.0
        }
    }

    /// Records per second per replica's worth, over the intervals of the lookback in which
    /// the group never ran out of work (the backlog at the start was more than it committed
    /// over the interval) and the same pods, all ready, did the work: the median of those
    /// intervals, so one interval spent rebalancing does not drag it down.
    fn measured_capacity(&self, newest: &Sample) -> Option<f64> {
        let recent: Vec<&Sample> = self
            .samples
            .iter()
            .copied()
            .filter(|o| newest.at.duration_since(o.at).as_secs_f64() <= self.lookback)
            .collect();
        let mut per_replica: Vec<f64> = recent
            .windows(2)
            .filter_map(|pair| {
                let (a, b) = (pair[0], pair[1]);
                let r = rates(a, b)?;
                let pods = b.pods.len();
                let steady =
                    a.pods.len() == pods && a.ready_pods() == pods && b.ready_pods() == pods;
                let busy = a.backlog() as f64 >= r.consumed * r.seconds;
                let worth = super::ladder::worth(count(b.partition_count()), count(pods));
                (steady && busy && r.consumed > 0.0 && worth > 0.0).then(|| r.consumed / worth)
            })
            .collect();
        per_replica.sort_by(f64::total_cmp);
        let n = per_replica.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(per_replica[n / 2]),
            _ => Some((per_replica[n / 2 - 1] + per_replica[n / 2]) / 2.0),
        }
    }

    /// The highest need at any sample of the stabilization window, and whether the samples
    /// reach back to its start.
    fn peak_need(&self, capacity: f64) -> (f64, bool) {
        let window = seconds(self.spec.scale_down_stabilization_seconds);
        let mut peak: f64 = 0.0;
        let mut covered = false;
        for &o in &self.samples {
            let age = self.since(o.at);
            if age >= window {
                covered = true;
                if age > window {
                    continue;
                }
            }
            if let Some(base) = self.lookback_base(o)
                && let Some(r) = rates(base, o)
            {
                peak = peak.max(self.need_at(o, r.incoming, capacity));
            }
        }
        (peak, covered)
    }

    /// The first pod above a high-water mark in `o`.
    fn memory_pressure(&self, o: &Sample) -> Option<Reason> {
        let rss_mark = f64::from(self.spec.memory_high_water_percent) / 100.0;
        let inflight_mark = self
            .spec
            .inflight_high_water_percent
            .map(|p| f64::from(p) / 100.0);
        o.pods.iter().find_map(|p| {
            let m = p.metrics?;
            let pressure = |kind, used: u64, limit: u64, percent| Reason::MemoryPressure {
                pod: p.name.clone(),
                kind,
                used_bytes: used,
                limit_bytes: limit,
                high_water_percent: percent,
            };
            if let Some(limit) = m.memory_limit_bytes
                && limit > 0
                && m.rss_bytes as f64 >= rss_mark * limit as f64
            {
                return Some(pressure(
                    MemoryKind::Resident,
                    m.rss_bytes,
                    limit,
                    non_negative(self.spec.memory_high_water_percent),
                ));
            }
            match (inflight_mark, self.spec.inflight_high_water_percent) {
                (Some(mark), Some(percent))
                    if m.inflight_budget_bytes > 0
                        && m.inflight_bytes as f64 >= mark * m.inflight_budget_bytes as f64 =>
                {
                    Some(pressure(
                        MemoryKind::Inflight,
                        m.inflight_bytes,
                        m.inflight_budget_bytes,
                        non_negative(percent),
                    ))
                }
                _ => None,
            }
        })
    }

    /// The highest share of its memory limit any pod of the stabilization window would reach
    /// after the step, in percent: the in-flight records grow with the load each replica
    /// carries (up to the budget), the rest of the resident memory is taken as fixed.
    fn projected_memory_percent(&self, worth_now: f64, worth_after: f64) -> Option<f64> {
        let window = seconds(self.spec.scale_down_stabilization_seconds);
        let growth = worth_now / worth_after.max(f64::MIN_POSITIVE);
        self.samples
            .iter()
            .filter(|o| self.since(o.at) <= window)
            .flat_map(|o| o.pods.iter())
            .filter_map(|p| {
                let m = p.metrics?;
                let limit = m.memory_limit_bytes.filter(|&l| l > 0)? as f64;
                let inflight = m.inflight_bytes as f64;
                let after = (inflight * growth).min((m.inflight_budget_bytes as f64).max(inflight));
                Some(100.0 * (m.rss_bytes as f64 - inflight + after) / limit)
            })
            .reduce(f64::max)
    }
}
