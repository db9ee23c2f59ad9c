//! A small fluid model of the gateway and the controller around it, for the decision's tests
//! (`decide_tests.rs`): records arrive evenly over the partitions, each replica commits at
//! most `capacity` records/s from the partitions the group assigned it (round-robin), the last
//! two seconds of records are always in flight (linger), and a step costs a few seconds of
//! rebalance. The model is fed the decision's count every 10 s, like the reconcile would —
//! so the tests see the closed loop: how fast it scales out, and that it does not flap.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::*;
use crate::crd::AutoscalingSpec;
use crate::kafka::PartitionOffsets;

pub(super) const TICK: i64 = 10;
pub(super) const LINGER: f64 = 2.0;
pub(super) const REBALANCE_SECONDS: f64 = 5.0;
pub(super) const GIB: u64 = 1 << 30;

pub(super) fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap() + SignedDuration::from_secs(secs)
}

/// The gateway and the controller around it.
pub(super) struct Gateway {
    pub(super) spec: AutoscalingSpec,
    /// Records per second one replica commits at most.
    pub(super) capacity: f64,
    pub(super) end: Vec<f64>,
    pub(super) committed: Vec<f64>,
    pub(super) replicas: u32,
    /// Seconds since the start.
    pub(super) t: i64,
    pub(super) history: History,
    pub(super) window: Vec<Sample>,
    pub(super) records_total: Vec<f64>,
    /// Resident memory of every pod, unless a test sets one.
    pub(super) rss: u64,
    pub(super) rss_of: Option<(usize, u64)>,
    pub(super) rebalancing: bool,
    /// Every decision, with the time it was taken.
    pub(super) log: Vec<(i64, Decision)>,
}

impl Gateway {
    pub(super) fn new(partitions: usize, replicas: u32, capacity: f64) -> Self {
        Self {
            spec: AutoscalingSpec::default(),
            capacity,
            end: vec![0.0; partitions],
            committed: vec![0.0; partitions],
            replicas,
            t: 0,
            history: History::default(),
            window: Vec::new(),
            records_total: vec![0.0; 64],
            rss: 300 << 20,
            rss_of: None,
            rebalancing: false,
            log: Vec::new(),
        }
    }

    pub(super) fn partitions(&self) -> usize {
        self.end.len()
    }

    pub(super) fn add_partitions(&mut self, n: usize) {
        self.end.extend(std::iter::repeat_n(0.0, n));
        self.committed.extend(std::iter::repeat_n(0.0, n));
        self.rebalancing = true;
    }

    /// One tick of `incoming` records/s, then a sample and a decision.
    pub(super) fn tick(&mut self, incoming: f64) -> &Decision {
        let dt = TICK as f64;
        let p = self.partitions();
        let per_partition = incoming / p as f64;
        for e in &mut self.end {
            *e += per_partition * dt;
        }
        let k = self.replicas.max(1) as usize;
        let busy = if self.rebalancing {
            dt - REBALANCE_SECONDS
        } else {
            dt
        };
        self.rebalancing = false;
        for r in 0..k {
            let mine: Vec<usize> = (0..p).filter(|i| i % k == r).collect();
            let mut budget = self.capacity * busy;
            // Water-filling: the replica shares its throughput over its partitions.
            let mut open: Vec<(usize, f64)> = mine
                .iter()
                .map(|&i| {
                    let available =
                        (self.end[i] - per_partition * LINGER - self.committed[i]).max(0.0);
                    (i, available)
                })
                .collect();
            open.sort_by(|a, b| a.1.total_cmp(&b.1));
            let mut left = open.len();
            for (i, available) in open {
                let share = budget / left as f64;
                let take = available.min(share);
                self.committed[i] += take;
                self.records_total[r] += take;
                budget -= take;
                left -= 1;
            }
        }
        self.t += TICK;
        let obs = self.observe(per_partition);
        self.window.push(obs);
        let keep =
            f64::from(self.spec.scale_down_stabilization_seconds + 2 * self.spec.lookback_seconds);
        let now = at(self.t);
        self.window
            .retain(|o| now.duration_since(o.at).as_secs_f64() <= keep);
        let d = decide(
            &self.spec,
            &self.window,
            self.replicas,
            u32::try_from(p).unwrap(),
            &self.history,
            now,
        );
        self.history = d.history(&self.history, now);
        if d.replicas != self.replicas {
            self.rebalancing = true;
        }
        self.replicas = d.replicas;
        self.log.push((self.t, d));
        &self.log.last().unwrap().1
    }

    pub(super) fn observe(&self, per_partition: f64) -> Sample {
        let p = self.partitions();
        let k = self.replicas.max(1) as usize;
        let partitions = (0..p)
            .map(|i| PartitionOffsets {
                topic: "otlp_spans".into(),
                partition: i32::try_from(i).unwrap(),
                committed: self.committed[i] as i64,
                end: self.end[i] as i64,
            })
            .collect();
        let pods = (0..k)
            .map(|r| {
                let lag = (0..p)
                    .filter(|i| i % k == r)
                    .map(|i| {
                        if per_partition > 0.0 {
                            (self.end[i] - self.committed[i]) / per_partition
                        } else {
                            0.0
                        }
                    })
                    .fold(0.0, f64::max);
                let rss = match self.rss_of {
                    Some((pod, rss)) if pod == r => rss,
                    _ => self.rss,
                };
                PodSample {
                    name: format!("traces-collector-{r}"),
                    ready: true,
                    metrics: Some(PodMetrics {
                        lag_seconds: lag,
                        records_total: self.records_total[r] as u64,
                        spans_total: (self.records_total[r] * 10.0) as u64,
                        inflight_bytes: 8 << 20,
                        inflight_budget_bytes: 64 << 20,
                        rss_bytes: rss,
                        memory_limit_bytes: Some(GIB),
                    }),
                }
            })
            .collect();
        Sample {
            at: at(self.t),
            partitions,
            pods,
        }
    }

    /// Runs `seconds` of `load(t)` records/s.
    pub(super) fn run(&mut self, seconds: i64, load: impl Fn(i64) -> f64) {
        for _ in 0..seconds / TICK {
            let t = self.t;
            self.tick(load(t));
        }
    }

    /// The decisions that changed the count: (time, from, to, reason).
    pub(super) fn steps(&self) -> Vec<(i64, u32, u32, &'static str)> {
        self.log
            .iter()
            .filter(|(_, d)| d.replicas != d.from)
            .map(|(t, d)| (*t, d.from, d.replicas, d.reason.reason()))
            .collect()
    }

    pub(super) fn lag_seconds(&self) -> f64 {
        self.window
            .last()
            .and_then(Sample::lag_seconds)
            .unwrap_or(0.0)
    }
}
