//! Prometheus metrics of the collector (prometheus-client), and the names dashboards and the
//! operator's autoscaler rely on. Labels stay low-cardinality: topic, partition, reason.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::freshness::Freshness;

use tracehouse_contract::metric_names::{
    self as names, CONSUMER_LAG_RECORDS, CONSUMER_LAG_SECONDS, PREFIX,
};

/// Span end time → insert acknowledged, per span: how fresh the data in ClickHouse is.
pub const SPAN_FRESHNESS_SECONDS: &str = "span_freshness_seconds";

/// Every `reason` of `tracehouse_records_skipped_total` (`batch::SkipReason::label`),
/// exported at 0 from the start so its panels and alert read 0, not "No data".
pub const SKIP_REASONS: [&str; 4] = ["decode_error", "oversized", "rejected", "empty"];

/// Every `reason` of `insert_errors`/`insert_retries` (`sink::InsertError::reason`). Both
/// families start with these at zero, so dashboards and alerts see the series before the
/// first failure (a rate of a series that does not exist is no series at all).
pub const INSERT_FAILURE_REASONS: [&str; 6] = [
    "unreachable",
    "body_too_large",
    "tls",
    "server_busy",
    "rejected_data",
    "config_or_access",
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub topic: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub topic: String,
    pub partition: i32,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// `tracehouse_build_info`'s labels: what this build is, and the config revision it knows
/// (the operator reads it to render only keys an older collector knows).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub config_revision: u32,
}

/// A processing rule (`processing.rules[].name`) and what it did to a span: `dropped`,
/// `sampled_out` or `redacted`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub rule: String,
    pub outcome: &'static str,
}

/// Every metric the collector exports.
pub struct Metrics {
    pub records_consumed: Family<TopicLabels, Counter>,
    pub bytes_consumed: Family<TopicLabels, Counter>,
    pub spans_decoded: Counter,
    /// What each processing rule did: spans dropped, sampled out, or with attributes
    /// redacted (counted when encoded; each rule's three series start at 0).
    pub spans_processed: Family<RuleLabels, Counter>,
    pub rows_inserted: Counter,
    pub bytes_inserted: Counter,
    pub records_skipped: Family<ReasonLabels, Counter>,
    pub records_dead_lettered: Counter,
    /// Dead-letter copies not parked as they were: `truncated` (cut to the bound),
    /// `headers_only` (the topic refused the cut copy), `given_up` (refused even that).
    pub dead_letter_degraded: Family<ReasonLabels, Counter>,
    /// Batches given up without an acknowledgement: `revoked` (the partition went to
    /// another member, which replays them).
    pub batches_dropped: Family<ReasonLabels, Counter>,
    /// 1 while the rejection breaker is open ([`crate::insert::breaker`]): every record is refused,
    /// the configuration is suspect, nothing is skipped.
    pub reject_breaker_open: Gauge,
    /// The traces table's deduplication window at start, and what the topics' partitions
    /// need ([`crate::startup`]).
    pub dedup_window: Gauge,
    pub dedup_window_needed: Gauge,
    /// The time bound of a Keeper-kept window (`replicated_deduplication_window_seconds`);
    /// 0 for a plain MergeTree, whose window has none.
    pub dedup_window_seconds: Gauge,
    pub insert_retries: Family<ReasonLabels, Counter>,
    pub insert_errors: Family<ReasonLabels, Counter>,
    /// Inserts split in two (or a bundle into its members): ClickHouse refused part of the
    /// data (`rejected_data`), a proxy refused the body (`body_too_large`, HTTP 413), or the
    /// body was over `clickhouse.max_body_bytes` before it was sent (`max_body_bytes`).
    pub insert_splits: Family<ReasonLabels, Counter>,
    pub inserts: Counter,
    pub commits: Counter,
    pub commit_errors: Counter,
    /// Recorded commit metadata dropped at load because it cannot describe the partition's
    /// log (`offsets::Dropped`: another log, an offset or cuts beyond the log's end).
    pub commit_metadata_dropped: Family<ReasonLabels, Counter>,
    /// Topics found naming another log while held (deleted and created again).
    pub topic_recreations: Counter,
    /// Records delivered below the committed offset in an unchanged log, passed over.
    pub records_rewound: Counter,
    /// Bundles sent: one insert of several partitions' time cuts (`bundle.rs`).
    pub bundles: Counter,
    /// Bundles a previous owner recorded, read again and re-inserted under their token.
    pub bundle_replays: Counter,
    /// Bundles whose recording Kafka refused, sent as per-partition time cuts instead.
    pub bundles_dissolved: Counter,
    pub insert_duration: Histogram,
    pub batch_rows: Histogram,
    pub batch_bytes: Histogram,
    /// Span end → insert acknowledged, per span ([`crate::freshness`]).
    pub span_freshness: Freshness,
    pub lag_records: Family<PartitionLabels, Gauge>,
    pub lag_seconds: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
    /// Seconds since the oldest batch not yet committed was first sent, per partition: its
    /// token must outlive this in the table's window (`dedup_window_seconds`).
    pub oldest_in_flight_seconds: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
    pub inflight_bytes: Gauge,
    pub inflight_inserts: Gauge,
    pub paused_partitions: Gauge,
    /// The linger timer's length now (stretched at low rates up to batch.max_linger_ms).
    pub linger_seconds: Gauge<f64, AtomicU64>,
    /// Partitions whose commit metadata still names the log while kafka.commit_format is th2.
    pub commit_metadata_named: Gauge,
    /// Seconds the source took no records because the in-flight budget was spent: the hold
    /// before a pause (`source/machine_budget.rs`).
    pub intake_held_seconds: Counter<f64, AtomicU64>,
    pub assigned_partitions: Gauge,
    pub resident_memory_bytes: Gauge,
    /// User + system CPU time of the process, refreshed at each scrape.
    pub cpu_seconds: Counter<f64, AtomicU64>,
    /// Unix time the metrics were created (≈ process start): a change means a restart.
    pub start_time_seconds: Gauge<f64, AtomicU64>,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            records_consumed: Family::default(),
            bytes_consumed: Family::default(),
            spans_decoded: Counter::default(),
            spans_processed: Family::default(),
            rows_inserted: Counter::default(),
            bytes_inserted: Counter::default(),
            records_skipped: Family::default(),
            records_dead_lettered: Counter::default(),
            dead_letter_degraded: Family::default(),
            batches_dropped: Family::default(),
            reject_breaker_open: Gauge::default(),
            dedup_window: Gauge::default(),
            dedup_window_needed: Gauge::default(),
            dedup_window_seconds: Gauge::default(),
            insert_retries: Family::default(),
            insert_errors: Family::default(),
            inserts: Counter::default(),
            commits: Counter::default(),
            commit_errors: Counter::default(),
            commit_metadata_dropped: Family::default(),
            insert_splits: Family::default(),
            topic_recreations: Counter::default(),
            records_rewound: Counter::default(),
            bundles: Counter::default(),
            bundle_replays: Counter::default(),
            bundles_dissolved: Counter::default(),
            insert_duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            batch_rows: Histogram::new(exponential_buckets(64.0, 2.0, 14)),
            batch_bytes: Histogram::new(exponential_buckets(16384.0, 2.0, 14)),
            span_freshness: Freshness::default(),
            lag_records: Family::default(),
            lag_seconds: Family::default(),
            oldest_in_flight_seconds: Family::default(),
            inflight_bytes: Gauge::default(),
            inflight_inserts: Gauge::default(),
            paused_partitions: Gauge::default(),
            linger_seconds: Gauge::default(),
            commit_metadata_named: Gauge::default(),
            intake_held_seconds: Counter::default(),
            assigned_partitions: Gauge::default(),
            resident_memory_bytes: Gauge::default(),
            cpu_seconds: Counter::default(),
            start_time_seconds: Gauge::default(),
        };
        for reason in SKIP_REASONS {
            m.records_skipped
                .get_or_create(&ReasonLabels { reason })
                .inc_by(0);
        }
        for reason in INSERT_FAILURE_REASONS {
            m.insert_errors
                .get_or_create(&ReasonLabels { reason })
                .inc_by(0);
            m.insert_retries
                .get_or_create(&ReasonLabels { reason })
                .inc_by(0);
        }
        for reason in ["truncated", "headers_only", "given_up"] {
            m.dead_letter_degraded
                .get_or_create(&ReasonLabels { reason })
                .inc_by(0);
        }
        m.batches_dropped
            .get_or_create(&ReasonLabels { reason: "revoked" })
            .inc_by(0);
        for reason in ["rejected_data", "body_too_large", "max_body_bytes"] {
            m.insert_splits
                .get_or_create(&ReasonLabels { reason })
                .inc_by(0);
        }
        for reason in crate::offsets::DROPPED_REASONS {
            m.commit_metadata_dropped
                .get_or_create(&ReasonLabels { reason })
                .inc_by(0);
        }
        m.start_time_seconds.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or_default(),
        );
        let r = registry.sub_registry_with_prefix(PREFIX);
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                config_revision: tracehouse_contract::revision::CONFIG_REVISION,
            })
            .set(1);
        r.register(
            names::BUILD_INFO.stem,
            "Always 1: this build's version and the collector configuration revision it knows",
            build_info,
        );
        r.register(
            names::RECORDS_CONSUMED.stem,
            "Kafka records consumed",
            m.records_consumed.clone(),
        );
        r.register(
            "bytes_consumed",
            "Kafka record payload bytes consumed",
            m.bytes_consumed.clone(),
        );
        r.register(
            names::SPANS_DECODED.stem,
            "Spans decoded from records",
            m.spans_decoded.clone(),
        );
        r.register(
            "spans_processed",
            "Spans a processing rule dropped, sampled out or redacted (label rule, outcome); \
             dropped and sampled-out spans are not in spans_decoded",
            m.spans_processed.clone(),
        );
        r.register(
            "rows_inserted",
            "Rows acknowledged by ClickHouse",
            m.rows_inserted.clone(),
        );
        r.register(
            "bytes_inserted",
            "Insert body bytes acknowledged by ClickHouse (as sent: LZ4-compressed unless clickhouse.compression is none)",
            m.bytes_inserted.clone(),
        );
        r.register(
            "records_skipped",
            "Records skipped and committed past, by reason",
            m.records_skipped.clone(),
        );
        r.register(
            "records_dead_lettered",
            "Skipped records copied to the dead-letter topic",
            m.records_dead_lettered.clone(),
        );
        r.register(
            "dead_letter_degraded",
            "Dead-letter copies cut to the bound, sent as headers only, or given up",
            m.dead_letter_degraded.clone(),
        );
        r.register(
            "batches_dropped",
            "Batches given up unacknowledged, by reason (revoked: the new owner replays them)",
            m.batches_dropped.clone(),
        );
        r.register(
            "reject_breaker_open",
            "1 while every record is refused: a configuration problem suspected, nothing skipped",
            m.reject_breaker_open.clone(),
        );
        r.register(
            "dedup_window_blocks",
            "The traces table's insert-deduplication window at start, in blocks",
            m.dedup_window.clone(),
        );
        r.register(
            "dedup_window_needed_blocks",
            "The window the topics' partitions need (partitions x (session timeout + retry horizon) / linger, x4)",
            m.dedup_window_needed.clone(),
        );
        r.register(
            "dedup_window_seconds",
            "The time bound of the table's window (replicated_deduplication_window_seconds on replicated and Cloud tables; 0: none, a plain MergeTree)",
            m.dedup_window_seconds.clone(),
        );
        r.register(
            "insert_retries",
            "Insert attempts retried, by reason",
            m.insert_retries.clone(),
        );
        r.register(
            "insert_errors",
            "Failed insert attempts, by reason",
            m.insert_errors.clone(),
        );
        r.register(
            "inserts",
            "Inserts acknowledged by ClickHouse",
            m.inserts.clone(),
        );
        r.register("commits", "Offset commits issued", m.commits.clone());
        r.register(
            "commit_errors",
            "Offset commits that failed",
            m.commit_errors.clone(),
        );
        r.register(
            "insert_splits",
            "Inserts split in two: ClickHouse refused part of the data (rejected_data), a proxy refused the body (body_too_large, HTTP 413), or it was over clickhouse.max_body_bytes (max_body_bytes)",
            m.insert_splits.clone(),
        );
        r.register(
            "commit_metadata_dropped",
            "Recorded commit metadata dropped at load: it names another log (a recreated topic, another cluster's, a mirror's) or offsets beyond the log's end",
            m.commit_metadata_dropped.clone(),
        );
        r.register(
            "topic_recreations",
            "Held topics found deleted and created again (a new topic id): their partitions start over",
            m.topic_recreations.clone(),
        );
        r.register(
            "records_rewound",
            "Records delivered below the committed offset of an unchanged log, passed over",
            m.records_rewound.clone(),
        );
        r.register(
            "bundles",
            "Bundles sent: one insert of several partitions' time cuts",
            m.bundles.clone(),
        );
        r.register(
            "bundle_replays",
            "Bundles a previous owner recorded, read again and re-inserted under their token",
            m.bundle_replays.clone(),
        );
        r.register(
            "bundles_dissolved",
            "Bundles whose recording Kafka refused, sent as per-partition time cuts instead",
            m.bundles_dissolved.clone(),
        );
        r.register(
            "insert_duration_seconds",
            "Latency of successful inserts",
            m.insert_duration.clone(),
        );
        r.register("batch_rows", "Rows per insert", m.batch_rows.clone());
        r.register(
            "batch_bytes",
            "Compressed bytes per insert",
            m.batch_bytes.clone(),
        );
        r.register(
            SPAN_FRESHNESS_SECONDS,
            "Seconds from a span's end time to ClickHouse acknowledging its row",
            m.span_freshness.clone(),
        );
        r.register(
            CONSUMER_LAG_RECORDS.stem,
            "Records not yet committed per partition (high watermark - committed)",
            m.lag_records.clone(),
        );
        r.register(
            CONSUMER_LAG_SECONDS.stem,
            "Age of the oldest record not yet acknowledged, per partition",
            m.lag_seconds.clone(),
        );
        r.register(
            "oldest_in_flight_seconds",
            "Seconds since the oldest batch not yet committed was first sent, per partition (a replay after dedup_window_seconds is stored twice)",
            m.oldest_in_flight_seconds.clone(),
        );
        r.register(
            names::INFLIGHT_BYTES.stem,
            "Record payload bytes held between Kafka and ClickHouse",
            m.inflight_bytes.clone(),
        );
        r.register(
            "inflight_inserts",
            "Inserts in flight",
            m.inflight_inserts.clone(),
        );
        r.register(
            "commit_metadata_named_partitions",
            "Held partitions whose commit metadata still names the log (th3) while kafka.commit_format is th2: 0 on every collector before a release that knows only th2 may take over (docs/upgrade.md)",
            m.commit_metadata_named.clone(),
        );
        r.register(
            "linger_seconds",
            "The linger timer's length now: batch.linger_ms, stretched up to batch.max_linger_ms while time cuts are small (low rates)",
            m.linger_seconds.clone(),
        );
        r.register(
            "paused_partitions",
            "Partitions paused for back-pressure",
            m.paused_partitions.clone(),
        );
        r.register(
            "intake_held_seconds",
            "Seconds the source took no records because the in-flight budget was spent (the hold before a pause)",
            m.intake_held_seconds.clone(),
        );
        r.register(
            "assigned_partitions",
            "Partitions assigned to this collector",
            m.assigned_partitions.clone(),
        );
        r.register(
            names::RESIDENT_MEMORY_BYTES.stem,
            "Resident set size of the process",
            m.resident_memory_bytes.clone(),
        );
        r.register(
            "process_cpu_seconds",
            "User and system CPU time of the process",
            m.cpu_seconds.clone(),
        );
        r.register(
            "process_start_time_seconds",
            "Unix time the process started",
            m.start_time_seconds.clone(),
        );
        m
    }

    /// Refresh gauges that are read from the OS.
    pub fn refresh_process(&self) {
        if let Some(rss) = resident_memory_bytes() {
            self.resident_memory_bytes.set(rss as i64);
        }
        // A counter only goes up: add what was used since the last refresh.
        if let Some(cpu) = cpu_seconds() {
            let seen = self.cpu_seconds.get();
            if cpu > seen {
                self.cpu_seconds.inc_by(cpu - seen);
            }
        }
    }
}

/// User + system CPU seconds from `/proc/self/stat` (Linux): fields 14 and 15, in USER_HZ
/// ticks, which the kernel reports as 100 per second whatever its own tick rate.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; the fields after it follow its ')'.
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let utime: u64 = rest.nth(11)?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// Resident set size from `/proc/self/statm` (Linux).
pub fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_the_documented_names() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.lag_records
            .get_or_create(&PartitionLabels {
                topic: "t".into(),
                partition: 3,
            })
            .set(7);
        m.lag_seconds
            .get_or_create(&PartitionLabels {
                topic: "t".into(),
                partition: 3,
            })
            .set(1.5);
        m.records_skipped
            .get_or_create(&ReasonLabels {
                reason: "decode_error",
            })
            .inc();
        m.refresh_process();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(
            out.contains(r#"tracehouse_consumer_lag_records{topic="t",partition="3"} 7"#),
            "{out}"
        );
        assert!(
            out.contains(r#"tracehouse_consumer_lag_seconds{topic="t",partition="3"} 1.5"#),
            "{out}"
        );
        assert!(
            out.contains(r#"tracehouse_records_skipped_total{reason="decode_error"} 1"#),
            "{out}"
        );
        assert!(
            out.contains("tracehouse_process_resident_memory_bytes "),
            "{out}"
        );
        assert!(
            out.contains("tracehouse_process_cpu_seconds_total "),
            "{out}"
        );
        assert!(
            out.contains("# TYPE tracehouse_span_freshness_seconds histogram"),
            "{out}"
        );
        assert!(
            out.contains(r#"tracehouse_span_freshness_seconds_bucket{le="2.0"} 0"#),
            "{out}"
        );
        assert!(
            out.contains("tracehouse_process_start_time_seconds "),
            "{out}"
        );
        let build = format!(
            "tracehouse_build_info{{version=\"{}\",{}=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            names::CONFIG_REVISION_LABEL,
            tracehouse_contract::revision::CONFIG_REVISION
        );
        assert!(out.contains(&build), "{build} missing from:\n{out}");
        for reason in INSERT_FAILURE_REASONS {
            for family in ["insert_errors", "insert_retries"] {
                let line = format!("tracehouse_{family}_total{{reason=\"{reason}\"}} 0");
                assert!(out.contains(&line), "{line} missing from:\n{out}");
            }
        }
    }

    #[test]
    fn every_skip_reason_is_exported_at_zero_from_the_start() {
        use crate::batch::SkipReason;
        for r in [
            SkipReason::DecodeError,
            SkipReason::Oversized,
            SkipReason::Rejected,
            SkipReason::Empty,
        ] {
            assert!(SKIP_REASONS.contains(&r.label()), "{}", r.label());
        }
        let mut registry = Registry::default();
        let _m = Metrics::new(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for reason in SKIP_REASONS {
            let line = format!("tracehouse_records_skipped_total{{reason=\"{reason}\"}} 0");
            assert!(out.contains(&line), "{line} missing from:\n{out}");
        }
    }
}
