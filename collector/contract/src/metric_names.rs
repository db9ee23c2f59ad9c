//! The names of the collector's metrics that another program reads: the operator's
//! autoscaler scrapes these from every gateway pod, and its skew check reads
//! [`BUILD_INFO`] (which config revision a gateway's collector knows, `crate::revision`). The collector registers each family under
//! its [`MetricName::stem`] (after [`PREFIX`]); a reader matches [`MetricName::exposed`], the
//! name the family has in the exposition text. One definition for both sides, and the test
//! below encodes each family as the collector registers it, so neither side can drift.

/// Every family the collector registers is under this prefix.
pub const PREFIX: &str = "tracehouse";

/// What kind of family: a counter's exposition name gains `_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One metric family, as registered and as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricName {
    /// What the collector registers, under [`PREFIX`].
    pub stem: &'static str,
    /// What a scraper reads in the exposition text.
    pub exposed: &'static str,
    pub kind: Kind,
}

/// Per-partition lag in records (high watermark − committed offset).
pub const CONSUMER_LAG_RECORDS: MetricName = MetricName {
    stem: "consumer_lag_records",
    exposed: "tracehouse_consumer_lag_records",
    kind: Kind::Gauge,
};
/// Per-partition lag in seconds: age of the oldest record not yet acknowledged by ClickHouse.
pub const CONSUMER_LAG_SECONDS: MetricName = MetricName {
    stem: "consumer_lag_seconds",
    exposed: "tracehouse_consumer_lag_seconds",
    kind: Kind::Gauge,
};
/// Kafka records consumed, per topic.
pub const RECORDS_CONSUMED: MetricName = MetricName {
    stem: "records_consumed",
    exposed: "tracehouse_records_consumed_total",
    kind: Kind::Counter,
};
/// Spans decoded from records.
pub const SPANS_DECODED: MetricName = MetricName {
    stem: "spans_decoded",
    exposed: "tracehouse_spans_decoded_total",
    kind: Kind::Counter,
};
/// Record payload bytes held between Kafka and ClickHouse.
pub const INFLIGHT_BYTES: MetricName = MetricName {
    stem: "inflight_bytes",
    exposed: "tracehouse_inflight_bytes",
    kind: Kind::Gauge,
};
/// Resident set size of the process.
pub const RESIDENT_MEMORY_BYTES: MetricName = MetricName {
    stem: "process_resident_memory_bytes",
    exposed: "tracehouse_process_resident_memory_bytes",
    kind: Kind::Gauge,
};

/// Always 1, labelled with the build: `version` (the crate's) and `config_revision`
/// ([`crate::revision::CONFIG_REVISION`]). Collectors from before it (d00aafd and its kin)
/// serve none: revision 1.
pub const BUILD_INFO: MetricName = MetricName {
    stem: "build_info",
    exposed: "tracehouse_build_info",
    kind: Kind::Gauge,
};
/// The label of [`BUILD_INFO`] that carries the config revision.
pub const CONFIG_REVISION_LABEL: &str = "config_revision";

/// Every name above: what the test holds to the exposition.
pub const ALL: [MetricName; 7] = [
    CONSUMER_LAG_RECORDS,
    CONSUMER_LAG_SECONDS,
    RECORDS_CONSUMED,
    SPANS_DECODED,
    INFLIGHT_BYTES,
    RESIDENT_MEMORY_BYTES,
    BUILD_INFO,
];

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::Registry;

    use super::*;

    /// Registered as the collector registers them (a sub-registry under the prefix), each
    /// family appears in the exposition under its `exposed` name.
    #[test]
    fn each_stem_is_exposed_under_its_name() {
        let mut registry = Registry::default();
        let r = registry.sub_registry_with_prefix(PREFIX);
        for m in ALL {
            match m.kind {
                Kind::Counter => {
                    let c = Counter::<u64>::default();
                    c.inc();
                    r.register(m.stem, "test", c);
                }
                Kind::Gauge => {
                    let g = Gauge::<i64>::default();
                    g.set(1);
                    r.register(m.stem, "test", g);
                }
            }
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for m in ALL {
            assert!(
                text.lines().any(|l| l == format!("{} 1", m.exposed)),
                "{} not exposed as {}:\n{text}",
                m.stem,
                m.exposed
            );
        }
    }
}
