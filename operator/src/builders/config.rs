//! The collector's configuration for a pipeline, rendered with the collector's own `Config`
//! type and validated by its own `validate()`, so the operator can never write a
//! `collector.yaml` the collector refuses; and the hash that rolls the pods when it changes.

use sha2::{Digest, Sha256};
use tracehouse_contract::config as collector;

use super::clickhouse_tls::clickhouse_tls_files;
use super::{BuildError, METRICS_PORT, invalid};
use crate::crd::{ByteSize, TracePipeline};
use crate::kafka::security::{kafka_oauth_files, kafka_security_properties};

/// The collector drains for this long on SIGTERM (must stay below the grace period).
const SHUTDOWN_DEADLINE_MS: u64 = 25_000;
/// Where `spec.processing.hashKey`'s Secret key is mounted in the collector container.
pub(super) const HASH_KEY_DIR: &str = "/etc/tracehouse/processing";
const HASH_KEY_FILE: &str = "/etc/tracehouse/processing/hash.key";

fn usize_field(field: &'static str, v: i64) -> Result<usize, BuildError> {
    usize::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| invalid(field, format!("must be a positive number, got {v}")))
}

fn bytes_field(field: &'static str, v: &ByteSize) -> Result<usize, BuildError> {
    usize_field(field, v.bytes().unwrap_or(0))
}

/// The collector's configuration for this pipeline, validated by the collector's own rules.
pub fn collector_config(tp: &TracePipeline) -> Result<collector::Config, BuildError> {
    let s = &tp.spec;
    let c = &s.collector;
    let mut cfg = collector::Config::default();
    cfg.kafka.brokers = s.kafka.bootstrap_servers.clone();
    cfg.kafka.topics = s.kafka.topics.clone();
    cfg.kafka.group_id = tp.consumer_group();
    cfg.kafka.encoding = s.kafka.encoding;
    cfg.kafka.dead_letter_topic = s.kafka.dead_letter_topic.clone();
    cfg.kafka.commit_format = s.kafka.commit_format;
    cfg.kafka.properties = s.kafka.properties.clone();
    cfg.kafka.properties.extend(kafka_security_properties(
        s.kafka.tls.as_ref(),
        s.kafka.sasl.as_ref(),
    ));
    // OAUTHBEARER: the client id and secret are mounted files, only their paths here.
    cfg.kafka.oauth = kafka_oauth_files(s.kafka.tls.as_ref(), s.kafka.sasl.as_ref());
    let ch = &s.clickhouse;
    cfg.clickhouse.url = ch.endpoint.clone();
    cfg.clickhouse.database = ch.database.clone();
    cfg.clickhouse.table = ch.table.clone();
    cfg.clickhouse.attributes = ch.schema.attributes;
    cfg.clickhouse.attribute_keys = ch.schema.attribute_keys_columns;
    cfg.clickhouse.insert_format = ch.insert_format;
    cfg.clickhouse.compression = ch.compression;
    if let Some(max) = &ch.max_body_bytes {
        cfg.clickhouse.max_body_bytes = bytes_field("spec.clickhouse.maxBodyBytes", max)? as u64;
    }
    cfg.clickhouse.insert_quorum = ch.insert_quorum.clone();
    // Certificates are files mounted from the Secrets; only their paths are written here.
    cfg.clickhouse.tls = clickhouse_tls_files(ch.tls.as_ref());
    // Credentials come from the environment (CLICKHOUSE_USER / CLICKHOUSE_PASSWORD, filled
    // from the Secret), never from this file.
    cfg.clickhouse.user = None;
    cfg.clickhouse.password_file = None;
    cfg.clickhouse.max_inflight_inserts = usize::try_from(c.max_inflight_inserts)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| invalid("spec.collector.maxInflightInserts", "must be at least 1"))?;
    cfg.batch.max_bytes = bytes_field("spec.collector.batch.maxBytes", &c.batch.max_bytes)?;
    cfg.batch.max_records = usize_field("spec.collector.batch.maxRecords", c.batch.max_records)?;
    cfg.batch.linger_ms = u64::try_from(c.batch.linger_ms)
        .map_err(|_| invalid("spec.collector.batch.lingerMs", "must not be negative"))?;
    cfg.limits.max_inflight_bytes =
        bytes_field("spec.collector.maxInflightBytes", &c.max_inflight_bytes)?;
    cfg.limits.max_record_bytes =
        bytes_field("spec.collector.maxRecordBytes", &c.max_record_bytes)?;
    // The pod's `--metrics-addr` says where (`defaults::MetricsBind`); every address here.
    cfg.metrics_addr =
        std::net::SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, METRICS_PORT as u16));
    cfg.shutdown_deadline_ms = SHUTDOWN_DEADLINE_MS;
    if let Some(p) = &s.processing {
        cfg.processing.rules = p.rules.clone();
        cfg.processing.hash_key_file = p.hash_key.as_ref().map(|_| HASH_KEY_FILE.into());
    }
    cfg.validate().map_err(|e| match e {
        collector::ConfigError::Invalid { field, reason } => invalid(spec_field(field), reason),
        collector::ConfigError::Processing(e) => invalid(format!("spec.{}", e.field), e.reason),
        other => invalid("spec", other),
    })?;
    Ok(cfg)
}

/// The spec field a collector config field comes from, for error messages.
fn spec_field(collector_field: &str) -> &'static str {
    match collector_field {
        "kafka.brokers" => "spec.kafka.bootstrapServers",
        "kafka.topics" => "spec.kafka.topics",
        "kafka.dead_letter_topic" => "spec.kafka.deadLetterTopic",
        "kafka.commit_format" => "spec.kafka.commitFormat",
        "kafka.group_id" => "spec.kafka.consumerGroup",
        "kafka.properties" => "spec.kafka.properties",
        "kafka.oauth" => "spec.kafka.sasl.oauth",
        "kafka.oauth.token_endpoint" => "spec.kafka.sasl.oauth.tokenEndpoint",
        "kafka.oauth.scope" => "spec.kafka.sasl.oauth.scope",
        "kafka.oauth.extensions" => "spec.kafka.sasl.oauth.extensions",
        "clickhouse.url" => "spec.clickhouse.endpoint",
        "clickhouse.database" => "spec.clickhouse.database",
        "clickhouse.table" => "spec.clickhouse.table",
        "clickhouse.tls" => "spec.clickhouse.tls",
        "clickhouse.max_inflight_inserts" => "spec.collector.maxInflightInserts",
        "clickhouse.max_body_bytes" => "spec.clickhouse.maxBodyBytes",
        "clickhouse.insert_quorum" => "spec.clickhouse.insertQuorum",
        "batch.max_bytes" => "spec.collector.batch.maxBytes",
        "batch.max_records" => "spec.collector.batch.maxRecords",
        "limits.max_record_bytes" => "spec.collector.maxRecordBytes",
        "limits.max_inflight_bytes" => "spec.collector.maxInflightBytes",
        _ => "spec.collector",
    }
}

/// `sha256:<hex>` of the rendered configuration (first 16 bytes: plenty to tell configs apart).
pub fn config_hash(rendered: &str) -> String {
    let digest = Sha256::digest(rendered.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::fixtures::sample;

    /// What CEL leaves to the collector's own rules is refused here, naming the spec field.
    #[test]
    fn an_oauth_setting_the_collector_refuses_names_its_spec_field() {
        for (what, change) in [
            (
                "spec.kafka.sasl.oauth.extensions",
                ("logical_cluster", "https://idp/token"),
            ),
            (
                "spec.kafka.sasl.oauth.tokenEndpoint",
                ("logicalCluster", "https:///token"),
            ),
        ] {
            let mut tp = crate::crd::fixtures::oauth();
            let o = tp.spec.kafka.sasl.as_mut().unwrap().oauth.as_mut().unwrap();
            o.extensions = [(change.0.to_owned(), "x".to_owned())].into();
            o.token_endpoint = change.1.into();
            match collector_config(&tp) {
                Err(crate::builders::BuildError::InvalidField { field, .. }) => {
                    assert_eq!(field, what)
                }
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    #[test]
    fn collector_config_is_valid_for_the_collector_and_carries_the_spec() {
        let tp = sample();
        let cfg = collector_config(&tp).unwrap();
        assert_eq!(cfg.kafka.brokers, "kafka-0.kafka:9092,kafka-1.kafka:9092");
        assert_eq!(cfg.kafka.group_id, "tracehouse.shop.orders");
        assert_eq!(cfg.clickhouse.url, "http://clickhouse.db:8123");
        assert_eq!(cfg.clickhouse.database, "otel");
        assert_eq!(cfg.clickhouse.user, None);
        // What the collector would read back from the ConfigMap is what we rendered.
        let yaml = tracehouse_contract::yaml::to_string(&cfg).unwrap();
        let back: collector::Config = tracehouse_contract::yaml::from_str(&yaml).unwrap();
        back.validate().unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn compression_reaches_the_collector_and_the_default_leaves_the_config_as_it_was() {
        let tp = sample();
        let default =
            tracehouse_contract::yaml::to_string(&collector_config(&tp).unwrap()).unwrap();
        assert!(!default.contains("compression"), "{default}");
        let mut tp = sample();
        tp.spec.clickhouse.compression = crate::crd::Compression::None;
        let cfg = collector_config(&tp).unwrap();
        assert_eq!(cfg.clickhouse.compression, crate::crd::Compression::None);
        let yaml = tracehouse_contract::yaml::to_string(&cfg).unwrap();
        assert!(yaml.contains("compression: none"), "{yaml}");
        assert_ne!(config_hash(&yaml), config_hash(&default));
    }

    /// Version skew: what this operator renders for a pipeline that sets nothing new holds
    /// only keys the previous release's collector knows (its own `--print-config`, recorded in
    /// `operator/snapshots/previous-release-collector-config.yaml`), so an older collector image
    /// under this operator starts (it refuses unknown keys). A newer setting, such as
    /// `spec.kafka.commitFormat`, is rendered only for a collector that knows it
    /// (`builders/revision.rs`; docs/upgrade.md).
    #[test]
    fn the_default_config_holds_only_keys_the_previous_release_knows() {
        fn paths(v: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
            if let serde_json::Value::Object(m) = v {
                for (k, v) in m {
                    let k = format!("{prefix}{k}");
                    paths(v, &format!("{k}."), out);
                    out.push(k);
                }
            }
        }
        let previous: serde_json::Value = tracehouse_contract::yaml::from_str(include_str!(
            "../../snapshots/previous-release-collector-config.yaml"
        ))
        .unwrap();
        let rendered =
            tracehouse_contract::yaml::to_string(&collector_config(&sample()).unwrap()).unwrap();
        let rendered: serde_json::Value = tracehouse_contract::yaml::from_str(&rendered).unwrap();
        let (mut known, mut ours) = (Vec::new(), Vec::new());
        paths(&previous, "", &mut known);
        paths(&rendered, "", &mut ours);
        let unknown: Vec<&String> = ours.iter().filter(|k| !known.contains(k)).collect();
        assert!(
            unknown.is_empty(),
            "keys the previous release refuses: {unknown:?}"
        );
    }

    /// The staged rollback's first step: `th2` reaches the collector (a rollout: the hash
    /// changes); the default leaves the rendered config as older collectors knew it.
    #[test]
    fn commit_format_reaches_the_collector_and_the_default_leaves_the_config_as_it_was() {
        use tracehouse_contract::config::CommitFormat;
        let default =
            tracehouse_contract::yaml::to_string(&collector_config(&sample()).unwrap()).unwrap();
        assert!(!default.contains("commit_format"), "{default}");
        let mut tp = sample();
        tp.spec.kafka.commit_format = CommitFormat::Th2;
        let cfg = collector_config(&tp).unwrap();
        assert_eq!(cfg.kafka.commit_format, CommitFormat::Th2);
        let yaml = tracehouse_contract::yaml::to_string(&cfg).unwrap();
        assert!(yaml.contains("commit_format: th2"), "{yaml}");
        assert_ne!(config_hash(&yaml), config_hash(&default));
    }

    /// `spec.processing` reaches the collector as written, the hash key as the mounted
    /// file's path (never its value); a rule the collector refuses names the spec field.
    #[test]
    fn processing_reaches_the_collector_and_a_bad_rule_names_its_spec_field() {
        let default =
            tracehouse_contract::yaml::to_string(&collector_config(&sample()).unwrap()).unwrap();
        assert!(!default.contains("processing"), "{default}");
        let mut tp = sample();
        tp.spec.processing = Some(
            tracehouse_contract::yaml::from_str(
                "rules:\n\
                 - {name: health, action: drop, when: [{attribute: http.route, equals: /healthz}]}\n\
                 - {name: users, action: redact, redact: {keys: [enduser.id], with: hash}}\n\
                 hashKey: {name: pii-key, key: key}\n",
            )
            .unwrap(),
        );
        let cfg = collector_config(&tp).unwrap();
        assert_eq!(cfg.processing.rules.len(), 2);
        assert_eq!(
            cfg.processing.hash_key_file.as_deref(),
            Some(std::path::Path::new(HASH_KEY_FILE))
        );
        let yaml = tracehouse_contract::yaml::to_string(&cfg).unwrap();
        assert!(
            yaml.contains("hash_key_file: /etc/tracehouse/processing/hash.key"),
            "{yaml}"
        );
        assert!(!yaml.contains("pii-key"), "{yaml}");
        assert!(super::super::referenced_secrets(&tp).contains("pii-key"));
        let mut bad = tp.clone();
        bad.spec.processing.as_mut().unwrap().rules[0].when[0].regex = Some("(".into());
        bad.spec.processing.as_mut().unwrap().rules[0].when[0].equals = None;
        let err = collector_config(&bad).unwrap_err().to_string();
        assert!(
            err.contains("spec.processing.rules[0].when[0].regex"),
            "{err}"
        );
    }

    #[test]
    fn body_limit_and_quorum_reach_the_collector_and_unset_leave_the_config_as_it_was() {
        let default =
            tracehouse_contract::yaml::to_string(&collector_config(&sample()).unwrap()).unwrap();
        assert!(!default.contains("max_body_bytes") && !default.contains("insert_quorum"));
        let mut tp = sample();
        tp.spec.clickhouse.max_body_bytes = Some(crate::crd::ByteSize::Quantity("1Mi".into()));
        tp.spec.clickhouse.insert_quorum = Some("auto".into());
        let cfg = collector_config(&tp).unwrap();
        assert_eq!(cfg.clickhouse.max_body_bytes, 1 << 20);
        assert_eq!(cfg.clickhouse.insert_quorum.as_deref(), Some("auto"));
        // The collector's own rule, named by the spec field.
        tp.spec.clickhouse.max_body_bytes = Some(crate::crd::ByteSize::Int(1000));
        let e = collector_config(&tp).unwrap_err().to_string();
        assert!(
            e.contains("spec.clickhouse.maxBodyBytes") && e.contains("64 KiB"),
            "{e}"
        );
    }

    #[test]
    fn collector_rules_the_crd_cannot_express_name_the_spec_field() {
        let mut tp = sample();
        tp.spec.collector.max_inflight_bytes = 1.into();
        let err = collector_config(&tp).unwrap_err();
        assert!(
            matches!(
                &err,
                BuildError::InvalidField { field, .. } if field == "spec.collector.maxInflightBytes"
            ),
            "{err}"
        );
        let mut tp = sample();
        tp.spec.clickhouse.endpoint = "clickhouse:8123".into();
        let err = collector_config(&tp).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.endpoint"), "{err}");
    }
}
