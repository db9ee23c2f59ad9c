//! What the benches share: CPU-time clocks and the table they encode for.
//!
//! Criterion reports wall-clock time, which on a shared 2-core machine also counts the
//! turns other processes took; CPU time gives the work of one core regardless of the load
//! around.
#![allow(dead_code)] // each bench uses what it needs

use tracehouse_schema::{Attributes, Ident, TableOptions};

/// `otel.otel_traces` with `attributes` and the `*Keys` columns.
pub fn table(attributes: Attributes) -> TableOptions {
    let mut t = TableOptions::new(
        Ident::new("database", "otel").unwrap(),
        Ident::new("table", "otel_traces").unwrap(),
    );
    t.attributes = attributes;
    t.attribute_keys_columns = true;
    t
}

/// CPU time this thread has used, in seconds: `/proc/thread-self/schedstat` (nanoseconds
/// on a CPU), else `/proc/thread-self/stat` (utime + stime, 10 ms ticks).
pub fn thread_cpu_secs() -> f64 {
    if let Some(ns) = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split(' ').next()?.parse::<u64>().ok())
    {
        return ns as f64 / 1e9;
    }
    stat_ticks("/proc/thread-self/stat")
}

/// CPU time of the whole process (all threads, user + system), in seconds (10 ms ticks).
pub fn process_cpu_secs() -> f64 {
    stat_ticks("/proc/self/stat")
}

/// utime + stime of a `/proc/…/stat` file, in seconds.
fn stat_ticks(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let rest = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let ticks: u64 = rest
        .split(' ')
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}
