//! How many decode/encode workers the collector runs when `limits.encode_threads` is 0: one
//! per CPU the container may use, read from its cgroup's CPU quota, not one per core of the
//! node.
//!
//! Why it matters: a gateway pod limited to 2 CPUs on a 64-core node that started 64 busy
//! workers would be throttled by the kernel's CFS quota every period (each thread burning its
//! share of the 2 CPUs, then all stalled until the next period), adding latency to every
//! batch for no throughput. The quota is read from cgroup v2's `cpu.max` (`<quota> <period>`
//! or `max <period>`) of the process's own cgroup (`/proc/self/cgroup`, `0::<path>`), and
//! from the cgroup root as a container sees it under a cgroup namespace; a quota of 2.5 CPUs
//! gives 2 workers (the source thread and the sink need the rest), never fewer than one,
//! never more than [`std::thread::available_parallelism`] (affinity, cpusets), which is also
//! the answer when no quota is set or none can be read (cgroup v1, no `/sys`). The parsing is
//! pure and tested here; [`encode_threads`] is the thin shell that reads the files.

use std::path::{Path, PathBuf};

/// Where a quota came from, for the start-up log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sizing {
    /// `limits.encode_threads` in the configuration.
    Configured,
    /// The cgroup's CPU quota, in CPUs (e.g. 2.5).
    CgroupQuota(f64),
    /// No quota: the CPUs the process may run on.
    AvailableParallelism,
}

/// `cpu.max` → the quota in CPUs; `None` for `max` (no limit) or text that is not
/// `<quota> <period>` with a positive period.
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota = fields.next()?;
    let period: f64 = fields.next().map_or(Some(100_000.0), |p| p.parse().ok())?;
    if quota == "max" || period <= 0.0 {
        return None;
    }
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0).then(|| quota / period)
}

/// `/proc/self/cgroup` → the cgroup v2 path of this process (the `0::` line).
pub fn parse_self_cgroup(text: &str) -> Option<&str> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::trim)
        .filter(|p| p.starts_with('/'))
}

/// Workers for a quota of `cpus` CPUs with `available` CPUs to run on: the whole CPUs of the
/// quota, at least one, at most `available`.
pub fn workers_for(cpus: Option<f64>, available: usize) -> usize {
    let available = available.max(1);
    match cpus {
        // `as` saturates; a quota of 0.5 CPUs still needs one worker.
        Some(cpus) => (cpus.floor() as usize).clamp(1, available),
        None => available,
    }
}

/// The `cpu.max` files to try, nearest first: the process's own cgroup, then the root a
/// container sees under a cgroup namespace.
pub fn cpu_max_candidates(root: &Path, self_cgroup: Option<&str>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(path) = self_cgroup
        .map(|p| p.trim_start_matches('/'))
        .filter(|p| !p.is_empty())
    {
        out.push(root.join(path).join("cpu.max"));
    }
    out.push(root.join("cpu.max"));
    out
}

/// The shell: `configured` (non-zero) wins; otherwise the quota of the first readable
/// `cpu.max`, else the available parallelism.
pub fn encode_threads(configured: usize) -> (usize, Sizing) {
    if configured > 0 {
        return (configured, Sizing::Configured);
    }
    let available = std::thread::available_parallelism().map_or(2, |n| n.get());
    let self_cgroup = std::fs::read_to_string("/proc/self/cgroup").ok();
    let quota = cpu_max_candidates(
        Path::new("/sys/fs/cgroup"),
        self_cgroup.as_deref().and_then(parse_self_cgroup),
    )
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|text| parse_cpu_max(&text));
    match quota {
        Some(cpus) => (
            workers_for(Some(cpus), available),
            Sizing::CgroupQuota(cpus),
        ),
        None => (available, Sizing::AvailableParallelism),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_reads_quota_over_period_and_max_is_no_limit() {
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2.0));
        assert_eq!(parse_cpu_max("250000 100000"), Some(2.5));
        assert_eq!(parse_cpu_max("50000 100000"), Some(0.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(
            parse_cpu_max("150000"),
            Some(1.5),
            "the period defaults to 100 ms"
        );
    }

    #[test]
    fn cpu_max_that_is_not_a_quota_is_no_quota() {
        for text in [
            "",
            "abc 100000",
            "100000 0",
            "100000 x",
            "0 100000",
            "-1 100000",
        ] {
            assert_eq!(parse_cpu_max(text), None, "{text:?}");
        }
    }

    #[test]
    fn workers_are_the_whole_cpus_of_the_quota_within_one_and_the_available_cpus() {
        assert_eq!(
            workers_for(Some(2.0), 64),
            2,
            "a 2-CPU limit on a 64-core node"
        );
        assert_eq!(workers_for(Some(2.5), 64), 2);
        assert_eq!(workers_for(Some(0.5), 64), 1, "never none");
        assert_eq!(
            workers_for(Some(16.0), 4),
            4,
            "never more than the CPUs to run on"
        );
        assert_eq!(workers_for(None, 8), 8, "no quota: every available CPU");
        assert_eq!(workers_for(None, 0), 1);
    }

    #[test]
    fn the_own_cgroup_is_the_v2_line_of_proc_self_cgroup() {
        let text = "12:cpu,cpuacct:/kubepods/old\n0::/kubepods.slice/pod-1.slice/cri-abc.scope\n";
        assert_eq!(
            parse_self_cgroup(text),
            Some("/kubepods.slice/pod-1.slice/cri-abc.scope")
        );
        assert_eq!(parse_self_cgroup("0::/\n"), Some("/"));
        assert_eq!(parse_self_cgroup("3:memory:/x\n"), None, "cgroup v1 only");
    }

    #[test]
    fn the_own_cgroups_file_comes_before_the_namespace_root() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(
            cpu_max_candidates(root, Some("/kubepods.slice/cri-abc.scope")),
            vec![
                root.join("kubepods.slice/cri-abc.scope/cpu.max"),
                root.join("cpu.max")
            ]
        );
        assert_eq!(
            cpu_max_candidates(root, Some("/")),
            vec![root.join("cpu.max")]
        );
        assert_eq!(cpu_max_candidates(root, None), vec![root.join("cpu.max")]);
    }

    #[test]
    fn a_configured_count_wins_over_any_quota() {
        assert_eq!(encode_threads(3), (3, Sizing::Configured));
        let (n, _) = encode_threads(0);
        assert!(n >= 1);
    }
}
