//! The partition ladder: the replica counts worth running over P partitions, and what each
//! is worth.
//!
//! A consumer group spreads P partitions over k replicas, so the busiest replica holds
//! `ceil(P/k)` of them, and the group keeps up only as fast as that replica: k replicas are
//! worth `P / ceil(P/k)` replicas of throughput (8 partitions on 3 replicas: 3, 3, 2 — worth
//! 2.67). So the rungs are, for each `c = ceil(P/k)`, the fewest replicas that reach it
//! (more replicas with the same busiest load add a rebalance and nothing else: with 8
//! partitions, 5 to 7 replicas are worth what 4 are). Of those, a rung whose split is uneven
//! is left out when the next even split (a divisor of P) is only one replica more: one more
//! pod buys a balanced group and spares the rebalance of an intermediate step. With 8
//! partitions: 1, 2, 4, 8; with 10: 1, 2, 3, 5, 10 (3 stays: the next even split, 5, is
//! two more); with 7: 1, 2, 3, 4, 7, so a prime partition count still has steps between
//! 1 and P.

/// Replica counts worth running over `partitions`, ascending (empty for none).
pub fn rungs(partitions: u32) -> Vec<u32> {
    let p = partitions;
    // The fewest replicas for each busiest-replica load c, from c = P (1 replica) down.
    let mut efficient: Vec<u32> = (1..=p).rev().map(|c| p.div_ceil(c)).collect();
    efficient.dedup();
    efficient
        .iter()
        .copied()
        .filter(|&k| {
            p.is_multiple_of(k) || {
                let next_even = (k + 1..=p).find(|d| p.is_multiple_of(*d)).unwrap_or(p);
                next_even - k > 1
            }
        })
        .collect()
}

/// What `replicas` replicas over `partitions` are worth, in replicas of throughput.
pub fn worth(partitions: u32, replicas: u32) -> f64 {
    if partitions == 0 || replicas == 0 {
        return 0.0;
    }
    f64::from(partitions) / f64::from(partitions.div_ceil(replicas))
}

/// The rungs one pipeline may use: the ladder within `[min, max]`, with the bounds
/// themselves as rungs (a bound the user set wins over an even split), never above the
/// partition count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ladder {
    partitions: u32,
    rungs: Vec<u32>,
}

impl Ladder {
    /// `max` defaults to the partition count. `partitions` must be positive.
    pub fn new(partitions: u32, min: u32, max: Option<u32>) -> Self {
        let p = partitions.max(1);
        let lo = min.clamp(1, p);
        let hi = max.unwrap_or(p).clamp(lo, p);
        let mut rungs = vec![lo];
        rungs.extend(rungs_between(p, lo, hi));
        if hi != lo {
            rungs.push(hi);
        }
        Self {
            partitions: p,
            rungs,
        }
    }

    pub fn lowest(&self) -> u32 {
        self.rungs[0]
    }

    pub fn highest(&self) -> u32 {
        self.rungs[self.rungs.len() - 1]
    }

    pub fn rungs(&self) -> &[u32] {
        &self.rungs
    }

    pub fn contains(&self, replicas: u32) -> bool {
        self.rungs.contains(&replicas)
    }

    /// What `replicas` are worth over this ladder's partitions.
    pub fn worth(&self, replicas: u32) -> f64 {
        worth(self.partitions, replicas)
    }

    /// The lowest rung worth at least `need` replicas of throughput; the highest if none is.
    pub fn fitting(&self, need: f64) -> u32 {
        self.rungs
            .iter()
            .copied()
            .find(|&k| self.worth(k) >= need)
            .unwrap_or_else(|| self.highest())
    }

    /// From `from` toward `to` (a rung), at most `max_step` rungs at once.
    pub fn step(&self, from: u32, to: u32, max_step: u32) -> u32 {
        let n = usize::try_from(max_step.max(1)).unwrap_or(usize::MAX);
        if to > from {
            let up: Vec<u32> = self.rungs.iter().copied().filter(|&k| k > from).collect();
            up.get(n - 1).copied().unwrap_or(to).min(to)
        } else if to < from {
            let down: Vec<u32> = self
                .rungs
                .iter()
                .rev()
                .copied()
                .filter(|&k| k < from)
                .collect();
            down.get(n - 1).copied().unwrap_or(to).max(to)
        } else {
            from
        }
    }
}

fn rungs_between(partitions: u32, lo: u32, hi: u32) -> impl Iterator<Item = u32> {
    rungs(partitions)
        .into_iter()
        .filter(move |&k| k > lo && k < hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_splits_are_the_rungs_when_partitions_have_many_divisors() {
        assert_eq!(rungs(8), [1, 2, 4, 8]);
        assert_eq!(rungs(12), [1, 2, 3, 4, 6, 12]);
        assert_eq!(rungs(24), [1, 2, 3, 4, 6, 8, 12, 24]);
        assert_eq!(rungs(16), [1, 2, 4, 6, 8, 16], "6 stays: 8 is two more");
        assert_eq!(rungs(1), [1]);
        assert!(rungs(0).is_empty());
    }

    #[test]
    fn an_uneven_split_stays_only_when_the_next_even_one_costs_two_replicas_or_more() {
        assert_eq!(rungs(10), [1, 2, 3, 5, 10]);
        assert_eq!(rungs(7), [1, 2, 3, 4, 7]);
        assert_eq!(rungs(9), [1, 3, 5, 9]);
        assert_eq!(rungs(3), [1, 3]);
        assert_eq!(rungs(13), [1, 2, 3, 4, 5, 7, 13]);
    }

    #[test]
    fn replicas_are_worth_what_their_busiest_member_allows() {
        assert_eq!(worth(8, 4), 4.0);
        assert!((worth(8, 3) - 8.0 / 3.0).abs() < 1e-9);
        assert_eq!(worth(8, 5), 4.0, "5 to 7 replicas are worth what 4 are");
        assert_eq!(worth(8, 7), 4.0);
        assert_eq!(
            worth(8, 20),
            8.0,
            "past the partitions, extra replicas idle"
        );
        assert_eq!(worth(0, 3), 0.0);
    }

    #[test]
    fn bounds_are_rungs_and_nothing_exceeds_the_partitions() {
        assert_eq!(Ladder::new(8, 1, None).rungs(), [1, 2, 4, 8]);
        assert_eq!(Ladder::new(8, 3, None).rungs(), [3, 4, 8]);
        assert_eq!(Ladder::new(8, 1, Some(6)).rungs(), [1, 2, 4, 6]);
        assert_eq!(Ladder::new(8, 2, Some(100)).rungs(), [2, 4, 8]);
        assert_eq!(Ladder::new(4, 10, Some(20)).rungs(), [4]);
        assert_eq!(
            Ladder::new(8, 5, Some(3)).rungs(),
            [5],
            "max below min: min wins"
        );
    }

    #[test]
    fn the_fitting_rung_is_the_lowest_worth_the_need() {
        let l = Ladder::new(8, 1, None);
        assert_eq!(l.fitting(0.0), 1);
        assert_eq!(l.fitting(1.0), 1);
        assert_eq!(l.fitting(1.01), 2);
        assert_eq!(l.fitting(2.5), 4);
        assert_eq!(l.fitting(4.0), 4);
        assert_eq!(l.fitting(30.0), 8, "beyond the top: the top");
        let l = Ladder::new(10, 1, None);
        assert_eq!(l.fitting(2.4), 3, "3 of 10 are worth 2.5");
        assert_eq!(l.fitting(2.6), 5);
    }

    #[test]
    fn a_step_moves_at_most_max_step_rungs() {
        let l = Ladder::new(24, 1, None); // 1 2 3 4 6 8 12 24
        assert_eq!(l.step(1, 24, 2), 3);
        assert_eq!(l.step(1, 24, 1), 2);
        assert_eq!(l.step(4, 8, 2), 8);
        assert_eq!(l.step(4, 6, 5), 6, "never past the target");
        assert_eq!(l.step(24, 1, 2), 8);
        assert_eq!(l.step(8, 6, 2), 6);
        assert_eq!(l.step(5, 24, 1), 6, "from off the ladder, the next rung up");
        assert_eq!(l.step(5, 1, 1), 4, "… or down");
        assert_eq!(l.step(4, 4, 2), 4);
    }
}
