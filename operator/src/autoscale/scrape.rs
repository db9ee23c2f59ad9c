//! A collector's /metrics text → the [`PodMetrics`] the autoscaler reads. Pure: the shell
//! ([`super::sampler`]) fetches the text.
//!
//! Only the handful of series the decision needs are read, summed over their label sets
//! (the lag is the largest over them: the oldest unwritten record anywhere in the pod). A
//! series that is missing makes the whole scrape `None`: the decision holds on missing
//! metrics rather than guess from a partial sample.

use super::sample::PodMetrics;

use tracehouse_contract::metric_names as names;

/// The series read, by their exposition names (the collector registers them under the
/// contract's [`names`], so the two cannot drift).
pub const LAG_SECONDS: &str = names::CONSUMER_LAG_SECONDS.exposed;
pub const RECORDS_CONSUMED: &str = names::RECORDS_CONSUMED.exposed;
pub const SPANS_DECODED: &str = names::SPANS_DECODED.exposed;
pub const INFLIGHT_BYTES: &str = names::INFLIGHT_BYTES.exposed;
pub const RESIDENT_MEMORY: &str = names::RESIDENT_MEMORY_BYTES.exposed;

/// Why a scrape gave nothing usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScrapeError {
    #[error("/metrics has no {0} series")]
    Missing(&'static str),
}

/// The autoscaler's numbers from one exposition `text`. `budget` and `limit` come from the
/// pod spec, not from the text.
pub fn pod_metrics(
    text: &str,
    inflight_budget_bytes: u64,
    memory_limit_bytes: Option<u64>,
) -> Result<PodMetrics, ScrapeError> {
    let mut lag: Option<f64> = None;
    let (mut records, mut spans, mut inflight, mut rss) = (None, None, None, None);
    for (name, value) in samples(text) {
        let add = |slot: &mut Option<f64>| *slot = Some(slot.unwrap_or(0.0) + value);
        match name {
            LAG_SECONDS => lag = Some(lag.map_or(value, |l| l.max(value))),
            RECORDS_CONSUMED => add(&mut records),
            SPANS_DECODED => add(&mut spans),
            INFLIGHT_BYTES => add(&mut inflight),
            RESIDENT_MEMORY => add(&mut rss),
            _ => {}
        }
    }
    let need = |v: Option<f64>, name| v.ok_or(ScrapeError::Missing(name));
    Ok(PodMetrics {
        // A pod with no partition assigned yet exports no lag series: nothing is behind.
        lag_seconds: lag.unwrap_or(0.0).max(0.0),
        records_total: whole(need(records, RECORDS_CONSUMED)?),
        spans_total: whole(need(spans, SPANS_DECODED)?),
        inflight_bytes: whole(need(inflight, INFLIGHT_BYTES)?),
        inflight_budget_bytes,
        rss_bytes: whole(need(rss, RESIDENT_MEMORY)?),
        memory_limit_bytes,
    })
}

fn whole(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v as u64
    } else {
        0
    }
}

/// `(name, value)` of every sample line; comments, blank and unreadable lines skipped.
fn samples(text: &str) -> impl Iterator<Item = (&str, f64)> {
    text.lines().filter_map(|line| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        // `name{labels} value [timestamp]`: label values may hold spaces, so the value is
        // what follows the closing brace.
        let (name, rest) = match line.find('{') {
            Some(open) => {
                let close = line.rfind('}')?;
                (&line[..open], &line[close + 1..])
            }
            None => line.split_once(char::is_whitespace)?,
        };
        let value = rest.split_whitespace().next()?.parse().ok()?;
        Some((name, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP tracehouse_consumer_lag_seconds Age of the oldest record not yet written.
# TYPE tracehouse_consumer_lag_seconds gauge
tracehouse_consumer_lag_seconds{topic="otlp_spans",partition="0"} 1.5
tracehouse_consumer_lag_seconds{topic="otlp_spans",partition="3"} 12.25
# TYPE tracehouse_records_consumed_total counter
tracehouse_records_consumed_total{topic="otlp_spans"} 1000
tracehouse_records_consumed_total{topic="other"} 24
tracehouse_spans_decoded_total 51200
tracehouse_inflight_bytes 1048576
tracehouse_process_resident_memory_bytes 2.5e8
tracehouse_insert_errors_total{reason="a b}c"} 3
# EOF
"#;

    #[test]
    fn reads_the_series_summed_and_the_lag_as_the_largest() {
        let m = pod_metrics(TEXT, 64 << 20, Some(512 << 20)).unwrap();
        assert_eq!(m.lag_seconds, 12.25);
        assert_eq!(m.records_total, 1024);
        assert_eq!(m.spans_total, 51_200);
        assert_eq!(m.inflight_bytes, 1 << 20);
        assert_eq!(m.rss_bytes, 250_000_000);
        assert_eq!(m.inflight_budget_bytes, 64 << 20);
        assert_eq!(m.memory_limit_bytes, Some(512 << 20));
    }

    #[test]
    fn no_partition_yet_means_no_lag() {
        let text: String = TEXT
            .lines()
            .filter(|l| !l.contains("lag_seconds"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(pod_metrics(&text, 1, None).unwrap().lag_seconds, 0.0);
    }

    #[test]
    fn a_missing_series_names_it() {
        let text = "tracehouse_records_consumed_total 1\ntracehouse_spans_decoded_total 2\n";
        assert_eq!(
            pod_metrics(text, 1, None),
            Err(ScrapeError::Missing(INFLIGHT_BYTES))
        );
        assert_eq!(
            pod_metrics("garbage line\n{ 1\n", 1, None),
            Err(ScrapeError::Missing(RECORDS_CONSUMED))
        );
    }
}
