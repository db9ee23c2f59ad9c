//! The decision over recorded series, produced by the fluid model of the gateway in
//! `gateway_model.rs`: the tests see the closed loop — how fast it scales out, and that it
//! does not flap.

use k8s_openapi::jiff::SignedDuration;

use super::gateway_model::*;
use super::*;
use crate::crd::AutoscalingSpec;
#[test]
fn steady_load_settles_on_the_fitting_rung_and_stays() {
    // 2.5 replicas' worth of load on 8 partitions: 3 replicas would be uneven, so 4.
    let mut g = Gateway::new(8, 1, 1_000.0);
    g.run(3_600, |_| 2_500.0);
    let steps = g.steps();
    assert_eq!(g.replicas, 4, "{steps:?}");
    assert!(steps.len() <= 2, "{steps:?}");
    assert!(
        steps.iter().all(|s| s.0 < 600 && s.3 == "LagAboveTarget"),
        "settled within 10 minutes, then no step: {steps:?}"
    );
    assert!(g.lag_seconds() < 5.0, "caught up: {}", g.lag_seconds());
    let (_, last) = g.log.last().unwrap();
    assert_eq!(last.reason, Reason::Steady);
}

#[test]
fn a_burst_scales_out_at_once_and_back_in_only_after_the_stabilization_window() {
    let mut g = Gateway::new(8, 1, 1_000.0);
    let (burst_start, burst_end) = (600, 900);
    g.run(2_400, |t| {
        if (burst_start..burst_end).contains(&t) {
            6_000.0
        } else {
            500.0
        }
    });
    let steps = g.steps();
    let ups: Vec<_> = steps.iter().filter(|s| s.2 > s.1).collect();
    let downs: Vec<_> = steps.iter().filter(|s| s.2 < s.1).collect();
    assert!(!ups.is_empty(), "{steps:?}");
    assert!(
        ups[0].0 - burst_start <= 60,
        "first step out within a minute: {steps:?}"
    );
    assert!(ups.iter().all(|s| s.3 == "LagAboveTarget"), "{steps:?}");
    assert_eq!(
        ups.iter().map(|s| s.2).max(),
        Some(8),
        "6 replicas' worth on 8 partitions: 8 {steps:?}"
    );
    assert!(
        ups.iter().all(|s| s.0 < burst_end + 60),
        "no step out once the burst is over: {steps:?}"
    );
    assert!(!downs.is_empty(), "{steps:?}");
    let stabilization = i64::from(g.spec.scale_down_stabilization_seconds);
    assert!(
        downs[0].0 >= burst_end + stabilization,
        "scale-in waits for the window: {steps:?}"
    );
    assert!(downs.iter().all(|s| s.3 == "LoadDeclined"), "{steps:?}");
    assert_eq!(g.replicas, 1, "{steps:?}");
    // Steps go up then down, never back and forth.
    let last_up = ups.iter().map(|s| s.0).max().unwrap();
    assert!(downs.iter().all(|s| s.0 > last_up), "{steps:?}");
}

#[test]
fn a_slow_decline_only_ever_scales_in() {
    let mut g = Gateway::new(8, 8, 1_000.0);
    g.history.replica_capacity = Some(1_000.0);
    // From 6 replicas' worth down to half of one, over an hour.
    g.run(3_600, |t| 6_000.0 - 5_500.0 * (t as f64 / 3_600.0));
    g.run(900, |_| 500.0);
    let steps = g.steps();
    assert!(steps.iter().all(|s| s.2 < s.1), "{steps:?}");
    assert!(steps.iter().all(|s| s.3 == "LoadDeclined"), "{steps:?}");
    assert_eq!(g.replicas, 1, "{steps:?}");
    assert!(
        g.log
            .iter()
            .all(|(_, d)| d.reason.reason() != "LagAboveTarget"),
        "never fell behind on the way down"
    );
}

#[test]
fn an_oscillating_load_does_not_flap() {
    // Two minutes at 3 replicas' worth, two at 1.2, for two hours.
    let mut g = Gateway::new(8, 1, 1_000.0);
    g.run(
        7_200,
        |t| if (t / 120) % 2 == 0 { 3_000.0 } else { 1_200.0 },
    );
    let steps = g.steps();
    assert!(steps.len() <= 2, "{steps:?}");
    assert!(
        steps.iter().all(|s| s.2 > s.1),
        "only out, never back: {steps:?}"
    );
    assert_eq!(g.replicas, 4, "{steps:?}");
}

#[test]
fn a_load_at_a_rungs_edge_does_not_flap() {
    // 1.95 and 1.7 replicas' worth, alternating every five minutes: 2 replicas keep up
    // (97.5 % busy at the top), so the lag never crosses the target and nothing goes up; 1
    // replica would be far above 80 % busy, so nothing goes down either.
    let mut g = Gateway::new(8, 2, 1_000.0);
    g.history.replica_capacity = Some(1_000.0);
    g.run(
        7_200,
        |t| if (t / 300) % 2 == 0 { 1_950.0 } else { 1_700.0 },
    );
    let steps = g.steps();
    assert!(steps.is_empty(), "{steps:?}");
}

#[test]
fn added_partitions_move_an_off_ladder_count_to_the_new_ladder() {
    // 4 replicas on 8 partitions, then 10 partitions: 4 of 10 is worth what 3 is (the
    // busiest replica holds 3 partitions), so 4 is no rung of 1, 2, 3, 5, 10.
    let mut g = Gateway::new(8, 4, 1_000.0);
    g.history.replica_capacity = Some(1_000.0);
    g.run(600, |_| 2_300.0);
    assert!(g.steps().is_empty(), "{:?}", g.steps());
    g.add_partitions(2);
    g.run(900, |_| 2_300.0);
    let steps = g.steps();
    assert_eq!(steps.len(), 1, "{steps:?}");
    let (t, from, to, reason) = steps[0];
    assert_eq!((from, to, reason), (4, 5, "PartitionsChanged"), "{steps:?}");
    assert!(t <= 600 + 120, "{steps:?}");
    let d = &g.log.iter().find(|(_, d)| d.replicas != d.from).unwrap().1;
    assert!(
        d.message().contains("partitions went from 8 to 10"),
        "{}",
        d.message()
    );
}

#[test]
fn added_partitions_leave_an_on_ladder_count_alone() {
    let mut g = Gateway::new(8, 4, 1_000.0);
    g.history.replica_capacity = Some(1_000.0);
    g.run(600, |_| 2_300.0);
    g.add_partitions(8);
    g.run(900, |_| 2_300.0);
    assert!(g.steps().is_empty(), "{:?}", g.steps());
    assert_eq!(g.replicas, 4);
}

#[test]
fn memory_pressure_without_lag_scales_out_one_rung_and_holds_the_way_back() {
    // 1.4 replicas' worth: 2 replicas, and 1 would run above 80 %.
    let mut g = Gateway::new(8, 2, 1_000.0);
    g.history.replica_capacity = Some(1_000.0);
    g.run(600, |_| 1_400.0);
    assert!(g.steps().is_empty(), "{:?}", g.steps());
    // One pod near its limit, the lag fine.
    g.rss_of = Some((1, 900 << 20));
    let d = g.tick(1_400.0).clone();
    assert!(g.lag_seconds() < 5.0);
    assert_eq!((d.from, d.replicas), (2, 4));
    assert_eq!(d.event_reason(), Some("ScaledUp"));
    assert_eq!(d.reason.reason(), "MemoryPressure");
    assert!(
        d.message().contains(
            "traces-collector-1: resident memory 900 MiB of 1024 MiB, above the 85% high-water mark"
        ),
        "{}",
        d.message()
    );
    g.rss_of = None;
    g.run(200, |_| 1_400.0);
    // The load alone would go back to 2 replicas, but not while the pod's memory in the
    // window says 2 could not carry it.
    assert_eq!(g.replicas, 4);
    assert!(
        g.log
            .iter()
            .rev()
            .take(5)
            .all(|(_, d)| d.reason.reason() == "MemoryHeadroom"
                || d.reason.reason() == "Stabilizing"),
        "{:?}",
        g.log.last()
    );
    assert!(
        g.log
            .iter()
            .any(|(_, d)| d.reason.reason() == "MemoryHeadroom"),
        "{:?}",
        g.steps()
    );
    g.run(600, |_| 1_400.0);
    assert_eq!(g.replicas, 2, "back in once the spike left the window");
}

/// Samples of a gateway falling behind at `replicas` (held there by `max`), and a spec
/// without that bound: on these samples, as they are, the decision scales out.
fn behind_at(replicas: u32) -> (Vec<Sample>, AutoscalingSpec) {
    let mut g = Gateway::new(8, replicas, 1_000.0);
    g.spec.max = Some(i32::try_from(replicas).unwrap());
    g.run(300, |_| 5_000.0);
    let spec = AutoscalingSpec {
        max: None,
        ..g.spec.clone()
    };
    let newest = g.window.last().unwrap().at;
    let fresh = decide(&spec, &g.window, replicas, 8, &History::default(), newest);
    assert_eq!(fresh.reason.reason(), "LagAboveTarget");
    assert!(fresh.replicas > replicas);
    (g.window, spec)
}

#[test]
fn stale_samples_hold_whatever_they_say() {
    let (window, spec) = behind_at(1);
    // Two minutes after the last sample, the same samples say nothing.
    let later = window.last().unwrap().at + SignedDuration::from_secs(120);
    let d = decide(&spec, &window, 1, 8, &History::default(), later);
    assert_eq!(d.replicas, 1);
    assert_eq!(
        d.reason,
        Reason::Hold(Hold::StaleMetrics { age_seconds: 120.0 })
    );
    assert_eq!(d.event_reason(), None);
}

#[test]
fn a_missing_scrape_holds() {
    let (mut window, spec) = behind_at(2);
    let newest = window.last_mut().unwrap();
    newest.pods[1].metrics = None;
    let now = newest.at;
    let d = decide(&spec, &window, 2, 8, &History::default(), now);
    assert_eq!(d.replicas, 2);
    assert_eq!(
        d.reason,
        Reason::Hold(Hold::MetricsMissing {
            pod: "traces-collector-1".into()
        })
    );
    assert!(
        d.signals.is_some(),
        "what could be measured is still reported"
    );
}

#[test]
fn a_single_sample_gives_no_rate_and_holds() {
    let mut g = Gateway::new(8, 1, 1_000.0);
    let d = g.tick(5_000.0).clone();
    assert_eq!(d.reason, Reason::Hold(Hold::TooFewSamples { samples: 1 }));
    assert_eq!(d.replicas, 1);
}

#[test]
fn a_pod_not_ready_holds_even_when_lagging() {
    let (mut window, spec) = behind_at(2);
    let newest = window.last_mut().unwrap();
    newest.pods[0].ready = false;
    let now = newest.at;
    let d = decide(&spec, &window, 2, 8, &History::default(), now);
    assert_eq!(d.replicas, 2);
    assert_eq!(
        d.reason,
        Reason::Hold(Hold::PodNotReady {
            ready: 1,
            pods: 2,
            replicas: 2
        })
    );
    // A third pod still starting after a step: the same.
    let newest = window.last_mut().unwrap();
    newest.pods[0].ready = true;
    let d = decide(&spec, &window, 3, 8, &History::default(), now);
    assert_eq!(d.reason.reason(), "PodNotReady");
}

#[test]
fn a_step_is_followed_by_a_cooldown() {
    let mut g = Gateway::new(8, 1, 1_000.0);
    g.run(600, |_| 8_000.0);
    let steps = g.steps();
    assert!(steps.len() >= 2, "{steps:?}");
    for pair in steps.windows(2) {
        assert!(
            pair[1].0 - pair[0].0 >= i64::from(g.spec.cooldown_seconds),
            "{steps:?}"
        );
    }
    assert!(g.log.iter().any(|(_, d)| d.reason.reason() == "Cooldown"));
}

#[test]
fn one_step_moves_at_most_max_step_rungs() {
    // 24 partitions: 1 2 3 4 6 8 12 24; a load of 20 replicas' worth.
    let mut g = Gateway::new(24, 1, 1_000.0);
    g.spec.max_step = 2;
    g.run(1_200, |_| 20_000.0);
    let steps = g.steps();
    let ladder = Ladder::new(24, 1, None);
    let rung = |k| ladder.rungs().iter().position(|&r| r == k).unwrap();
    assert!(!steps.is_empty());
    for s in &steps {
        assert!(rung(s.2) - rung(s.1) <= 2, "{steps:?}");
    }
    assert_eq!(g.replicas, 24, "{steps:?}");
}

#[test]
fn a_stuck_sink_does_not_scale_out() {
    let mut g = Gateway::new(8, 2, 1_000.0);
    g.run(300, |_| 1_000.0);
    g.capacity = 0.0; // ClickHouse stops answering: nothing is committed.
    g.run(600, |_| 1_000.0);
    assert!(g.lag_seconds() > 300.0);
    assert_eq!(g.replicas, 2, "{:?}", g.steps());
    let (_, last) = g.log.last().unwrap();
    assert_eq!(last.reason.reason(), "NotConsuming");
}

#[test]
fn lagging_at_the_maximum_holds_and_says_so() {
    let mut g = Gateway::new(8, 1, 1_000.0);
    g.spec.max = Some(2);
    g.run(900, |_| 5_000.0);
    assert_eq!(g.replicas, 2);
    let (_, last) = g.log.last().unwrap();
    assert!(
        matches!(
            &last.reason,
            Reason::Hold(Hold::AtMaximum {
                replicas: 2,
                wanted,
            }) if wanted.reason() == "LagAboveTarget" && wanted.to_string().starts_with("lag ")
        ),
        "{:?}",
        last.reason
    );
}

#[test]
fn a_count_outside_the_bounds_moves_inside_at_once() {
    let spec = AutoscalingSpec {
        min: 2,
        max: Some(6),
        ..Default::default()
    };
    let none = History::default();
    for (current, partitions, want) in [(0, 8, 2), (1, 8, 2), (7, 8, 6), (12, 4, 4), (3, 1, 1)] {
        let d = decide(&spec, &[], current, partitions, &none, at(0));
        assert_eq!(d.replicas, want, "{current} on {partitions}");
        assert_eq!(d.reason.reason(), "OutOfBounds");
    }
    let d = decide(&spec, &[], 3, 8, &none, at(0));
    assert_eq!(d.reason, Reason::Hold(Hold::TooFewSamples { samples: 0 }));
    let d = decide(&spec, &[], 3, 0, &none, at(0));
    assert_eq!(d.reason, Reason::Hold(Hold::NoPartitions));
}

#[test]
fn without_a_measured_capacity_it_does_not_guess_a_scale_in() {
    // Started at 4 replicas under a light load: never behind, so never measured.
    let mut g = Gateway::new(8, 4, 1_000.0);
    g.run(1_200, |_| 400.0);
    assert_eq!(g.replicas, 4);
    let (_, last) = g.log.last().unwrap();
    assert_eq!(last.reason, Reason::Hold(Hold::CapacityUnknown));
}

#[test]
fn signals_carry_the_numbers_for_the_status() {
    let mut g = Gateway::new(8, 2, 1_000.0);
    g.history.replica_capacity = Some(1_000.0);
    g.run(300, |_| 1_600.0);
    let (_, last) = g.log.last().unwrap();
    let s = last.signals.unwrap();
    assert!(
        (s.incoming_records_per_second - 1_600.0).abs() < 20.0,
        "{s:?}"
    );
    assert!(
        (s.consumed_records_per_second - 1_600.0).abs() < 50.0,
        "{s:?}"
    );
    let spans = s.incoming_spans_per_second.unwrap();
    assert!((spans - 16_000.0).abs() < 300.0, "{s:?}");
    assert!(s.lag_records > 0 && s.lag_records < 8_000, "{s:?}");
    assert!(s.lag_seconds.unwrap() < 5.0, "{s:?}");
    assert!((s.need.unwrap() - 1.6).abs() < 0.05, "{s:?}");
}

#[test]
fn nothing_arriving_is_zero_spans_per_second() {
    let mut g = Gateway::new(8, 2, 1_000.0);
    g.run(300, |_| 0.0);
    let (_, last) = g.log.last().unwrap();
    let s = last.signals.unwrap();
    assert_eq!(s.incoming_records_per_second, 0.0, "{s:?}");
    assert_eq!(s.incoming_spans_per_second, Some(0.0), "{s:?}");
}

#[test]
fn scale_events_carry_the_numbers_that_caused_them() {
    let mut g = Gateway::new(8, 1, 1_000.0);
    g.run(300, |_| 3_000.0);
    let (_, d) = g.log.iter().find(|(_, d)| d.replicas > d.from).unwrap();
    assert_eq!(d.event_reason(), Some("ScaledUp"));
    let m = d.message();
    assert!(m.starts_with("1 → "), "{m}");
    assert!(m.contains("above the 30s target"), "{m}");
    assert!(m.contains("records/s each"), "{m}");
}

#[test]
fn an_idle_window_scales_in_without_a_measured_capacity() {
    // Left at 4 replicas with nothing arriving (an external owner gave the count back):
    // nothing to measure, and nothing that needs measuring.
    let mut g = Gateway::new(8, 4, 1_000.0);
    g.run(1_200, |_| 0.0);
    assert_eq!(g.replicas, 1);
    let idle = g
        .log
        .iter()
        .find(|(_, d)| matches!(d.reason, Reason::Idle { .. }))
        .expect("an Idle step");
    assert!(idle.1.replicas < 4, "{idle:?}");
}

#[test]
fn reasons_are_stable_identifiers() {
    let reasons = [
        Reason::Steady,
        Reason::OutOfBounds { min: 1, max: 2 },
        Reason::LoadDeclined {
            peak_need: 1.0,
            window_seconds: 300,
            replica_capacity: 1.0,
        },
        Reason::Hold(Hold::Cooldown {
            remaining_seconds: 1.0,
        }),
        Reason::Hold(Hold::AtMaximum {
            replicas: 8,
            wanted: Box::new(Reason::MemoryPressure {
                pod: "p".to_owned(),
                kind: MemoryKind::Resident,
                used_bytes: 450 << 20,
                limit_bytes: 512 << 20,
                high_water_percent: 80,
            }),
        }),
        Reason::Hold(Hold::CapacityUnknown),
        Reason::Idle {
            window_seconds: 300,
        },
    ];
    let mut labels = Vec::new();
    for r in &reasons {
        let reason = r.reason();
        assert!(
            reason.chars().next().unwrap().is_ascii_uppercase(),
            "{reason}"
        );
        assert!(
            reason.chars().all(|c| c.is_ascii_alphanumeric()),
            "{reason}"
        );
        let label = r.metric_label();
        assert!(
            label.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{label}"
        );
        assert_eq!(
            label.replace('_', ""),
            reason.to_ascii_lowercase(),
            "{reason}"
        );
        labels.push(label);
    }
    labels.dedup();
    assert_eq!(labels.len(), reasons.len());
}

#[test]
fn a_full_inflight_budget_scales_out_only_when_asked_to() {
    let mut g = Gateway::new(8, 2, 1_000.0);
    g.history.replica_capacity = Some(1_000.0);
    g.run(600, |_| 1_400.0);
    let mut window = g.window.clone();
    let newest = window.last_mut().unwrap();
    for pod in &mut newest.pods {
        pod.metrics.as_mut().unwrap().inflight_bytes = 63 << 20;
    }
    let now = newest.at;
    let d = decide(&g.spec, &window, 2, 8, &g.history, now);
    assert_eq!(d.replicas, 2, "off by default: {:?}", d.reason);
    let spec = AutoscalingSpec {
        inflight_high_water_percent: Some(90),
        ..g.spec.clone()
    };
    let d = decide(&spec, &window, 2, 8, &g.history, now);
    assert_eq!(d.replicas, 4);
    assert!(
        matches!(
            d.reason,
            Reason::MemoryPressure {
                kind: MemoryKind::Inflight,
                high_water_percent: 90,
                ..
            }
        ),
        "{:?}",
        d.reason
    );
}

#[test]
fn history_keeps_the_last_step_time_and_the_last_measured_capacity() {
    let mut g = Gateway::new(8, 1, 1_000.0);
    g.run(120, |_| 3_000.0);
    let (t, step) = g
        .log
        .iter()
        .find(|(_, d)| d.replicas != d.from)
        .map(|(t, d)| (*t, d.clone()))
        .unwrap();
    assert_eq!(step.reason.reason(), "LagAboveTarget");
    // Measured while behind: about 1000 records/s per replica.
    let c = step.signals.unwrap().replica_capacity.unwrap();
    assert!((c - 1_000.0).abs() < 100.0, "{c}");
    let after = step.history(&History::default(), at(t));
    assert_eq!(after.last_scale, Some(at(t)));
    assert_eq!(after.replica_capacity, Some(c));
    // A hold keeps both.
    let hold = Decision {
        from: 4,
        replicas: 4,
        reason: Reason::Steady,
        signals: None,
    };
    assert_eq!(hold.history(&after, at(t + 500)), after);
}

/// A small deterministic generator (xorshift), so the random series are the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn every_step_over_random_series_keeps_the_rules() {
    for seed in 1..=80u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let partitions = 1 + rng.below(36) as usize;
        let p = u32::try_from(partitions).unwrap();
        let start = 1 + u32::try_from(rng.below(u64::from(p))).unwrap();
        let mut g = Gateway::new(partitions, start, 500.0 + rng.below(1_500) as f64);
        g.spec.min = 1 + i32::try_from(rng.below(4)).unwrap();
        g.spec.max =
            (rng.below(2) == 0).then(|| g.spec.min + i32::try_from(rng.below(12)).unwrap());
        g.spec.max_step = 1 + i32::try_from(rng.below(3)).unwrap();
        if rng.below(3) == 0 {
            g.history.replica_capacity = Some(g.capacity);
        }
        // Piecewise-constant load: a new level every 1–10 minutes.
        let levels: Vec<(i64, f64)> = (0..12)
            .map(|_| {
                (
                    60 * (1 + i64::try_from(rng.below(10)).unwrap()),
                    rng.below(u64::from(p) * 1_200) as f64,
                )
            })
            .collect();
        let load = move |t: i64| {
            let mut at = 0;
            for &(len, level) in &levels {
                at += len;
                if t < at {
                    return level;
                }
            }
            levels[levels.len() - 1].1
        };
        g.run(3_600, load);

        let ladder = Ladder::new(
            p,
            u32::try_from(g.spec.min).unwrap(),
            g.spec.max.map(|m| u32::try_from(m).unwrap()),
        );
        let max_step = usize::try_from(g.spec.max_step).unwrap();
        let mut last_step: Option<i64> = None;
        let mut last_up: Option<(i64, u32)> = None;
        let window = i64::from(g.spec.scale_down_stabilization_seconds);
        for (t, d) in &g.log {
            let case = format!("seed {seed}, P={p}, t={t}: {d:?}");
            assert!(d.replicas <= p, "{case}");
            if d.replicas == d.from {
                continue;
            }
            assert!(ladder.contains(d.replicas), "a rung: {case}");
            if d.reason.reason() == "OutOfBounds" {
                continue;
            }
            let (lo, hi) = (d.from.min(d.replicas), d.from.max(d.replicas));
            let crossed = ladder
                .rungs()
                .iter()
                .filter(|&&r| r > lo && r <= hi)
                .count();
            let crossed = if d.replicas < d.from {
                // Going down, the rung arrived at counts, the one left does not.
                ladder
                    .rungs()
                    .iter()
                    .filter(|&&r| r >= lo && r < hi)
                    .count()
            } else {
                crossed
            };
            assert!(crossed <= max_step, "at most maxStep rungs: {case}");
            if let Some(prev) = last_step {
                assert!(
                    t - prev >= i64::from(g.spec.cooldown_seconds),
                    "cooldown: {case}"
                );
            }
            if d.replicas > d.from {
                last_up = Some((*t, d.from));
            } else if let Some((up_at, before)) = last_up
                && t - up_at < window
            {
                assert!(d.replicas > before, "no way back within the window: {case}");
            }
            last_step = Some(*t);
        }
    }
}
