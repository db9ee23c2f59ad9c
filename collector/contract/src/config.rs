//! What the user writes: the collector's configuration (YAML file, then flags on top).
//!
//! `validate()` is pure and names the offending field; nothing here does IO except
//! reading the files the user pointed at (`load`, `read_password`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How records on the topic are encoded (the OTel Collector kafka exporter's names).
pub use crate::Encoding;
/// How attribute columns are typed in the table, and the ClickHouse input format of
/// inserts: the schema crate's definitions.
pub use tracehouse_schema::{Attributes, InsertFormat};

pub use crate::oauth::OAuthConfig;
pub use crate::processing::{ProcessingConfig, RuleError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub clickhouse: ClickHouseConfig,
    pub batch: BatchConfig,
    pub limits: LimitsConfig,
    pub metrics_addr: SocketAddr,
    /// How long SIGTERM may take: drain in-flight inserts, commit, leave the group.
    pub shutdown_deadline_ms: u64,
    /// Drop, redact and sample rules applied to every span before it is written.
    #[serde(skip_serializing_if = "ProcessingConfig::is_empty")]
    pub processing: ProcessingConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    pub brokers: String,
    pub topics: Vec<String>,
    pub group_id: String,
    pub encoding: Encoding,
    /// Extra librdkafka properties (security.protocol, sasl.*, ssl.*, …).
    pub properties: std::collections::BTreeMap<String, String>,
    /// Copy undecodable or oversized records to this topic before skipping them.
    pub dead_letter_topic: Option<String>,
    /// A copy in the dead-letter topic is cut to this many payload bytes (its headers say
    /// so); the default fits Kafka's default `max.message.bytes`. See the collector's `insert/dead_letter.rs`.
    #[serde(skip_serializing_if = "is_default_dead_letter_max_bytes")]
    pub dead_letter_max_bytes: usize,
    /// The format of the batch cuts recorded in the commit metadata (docs/upgrade.md): `th3`
    /// names the topic's log (KIP-516 topic id) in every cut and token; `th2` writes what
    /// collectors from before `th3` read, for a rollout or a rollback across that change,
    /// so a partition handed to such a collector is taken over exactly.
    #[serde(skip_serializing_if = "CommitFormat::is_default")]
    pub commit_format: CommitFormat,
    /// OAUTHBEARER tokens from an OIDC provider (client credentials), for every Kafka client
    /// of the collector (`crate::oauth`). Left out when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthConfig>,
}

/// `kafka.commit_format`: how batch cuts are recorded and named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CommitFormat {
    /// Cuts and tokens name the topic's log (`th3:<topic id>;`).
    #[default]
    Th3,
    /// Cuts and tokens as before logs had names (`th1:`/`th2:`): what an older collector
    /// reads. Cuts recorded as `th3` still replay under their names until acknowledged.
    Th2,
}

impl CommitFormat {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The default of `kafka.dead_letter_max_bytes`: under Kafka's default `max.message.bytes`
/// (1 048 588) with room for the headers and the record batch overhead.
pub const DEFAULT_DEAD_LETTER_MAX_BYTES: usize = 1_000_000;

fn is_default_dead_letter_max_bytes(v: &usize) -> bool {
    *v == DEFAULT_DEAD_LETTER_MAX_BYTES
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClickHouseConfig {
    pub url: String,
    pub database: String,
    pub table: String,
    pub attributes: Attributes,
    /// JSON variant: the table has `ResourceAttributesKeys`/`SpanAttributesKeys` to fill.
    pub attribute_keys: bool,
    /// Input format of inserts.
    pub insert_format: InsertFormat,
    /// User name; `CLICKHOUSE_USER` when unset.
    pub user: Option<String>,
    /// File holding the password; `CLICKHOUSE_PASSWORD` when unset. Never logged.
    pub password_file: Option<PathBuf>,
    /// Inserts in flight at once.
    pub max_inflight_inserts: usize,
    pub request_timeout_ms: u64,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    /// TLS for `https://` URLs. Left out when default, so configs (and their hashes)
    /// without TLS stay as they were.
    #[serde(skip_serializing_if = "ClickHouseTlsConfig::is_default")]
    pub tls: ClickHouseTlsConfig,
    /// After this many records in a row refused alone with no insert succeeding, the
    /// configuration is suspect: stop skipping refused records, retry them (0: never).
    /// See the collector's `insert/breaker.rs`.
    #[serde(skip_serializing_if = "is_default_reject_breaker_records")]
    pub reject_breaker_records: u64,
    /// How insert bodies travel: `lz4` (default, ClickHouse's block framing, sent with
    /// `decompress=1`) or `none`. Left out when default, so existing configs (and their
    /// hashes) stay as they were.
    #[serde(skip_serializing_if = "Compression::is_default")]
    pub compression: Compression,
    /// The largest insert body to send, in bytes (0: no limit): a larger insert is split
    /// before it goes out. For a proxy or ingress with a body limit in front of ClickHouse
    /// (nginx's `client_max_body_size` is 1 MiB by default); without it a proxy's 413 splits
    /// the insert after the fact. Left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_body_bytes: u64,
    /// `insert_quorum` for replicated tables: `auto` (a majority) or a replica count; a 200
    /// then means that many replicas have the rows, so a replica lost right after the commit
    /// loses none. Unset: the server's (one replica). Left out when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insert_quorum: Option<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// How insert bodies are compressed on the way to ClickHouse. Measured on 1 M loadgen full
/// and 2 M minimal spans (`docs/benchmarks.md`, "LZ4 or no compression"): without LZ4 the
/// collector spends 12–15 % less CPU per span and the server 1–5 % less, for 6 to 7 times
/// the bytes on the wire and about twice the peak memory at the default budget (the bodies
/// in flight are that much larger). `none` suits a ClickHouse on the same host or a network
/// whose bytes cost nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// ClickHouse's LZ4 block framing (`decompress=1`).
    #[default]
    Lz4,
    /// The body as encoded.
    None,
}

impl Compression {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The default of `clickhouse.reject_breaker_records`.
pub const DEFAULT_REJECT_BREAKER_RECORDS: u64 = 16;

fn is_default_reject_breaker_records(v: &u64) -> bool {
    *v == DEFAULT_REJECT_BREAKER_RECORDS
}

/// TLS to ClickHouse: files the collector reads at start (the operator mounts them from
/// Secrets). Without `ca_file` the system roots are trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClickHouseTlsConfig {
    /// PEM CA bundle that signs the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (mutual TLS); needs `client_key_file`.
    pub client_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate. Never logged.
    pub client_key_file: Option<PathBuf>,
    /// Accept any server certificate. Only for tests.
    pub insecure_skip_verify: bool,
}

impl ClickHouseTlsConfig {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchConfig {
    /// Close a batch when its records' payloads reach this many bytes.
    pub max_bytes: usize,
    /// … or when it holds this many records.
    pub max_records: usize,
    /// … or when its oldest record has waited this long.
    pub linger_ms: u64,
    /// How far the linger stretches while time cuts are small (less than 1 MiB of records
    /// over every partition): it doubles per small cut up to this, and halves per larger one
    /// back to `linger_ms`. At low rates this makes about one insert (and one synchronous
    /// commit) per `max_linger_ms` instead of per `linger_ms`; the freshness bound is this
    /// value plus the insert's own time. At or below `linger_ms`: never stretches.
    #[serde(skip_serializing_if = "is_default_max_linger_ms")]
    pub max_linger_ms: u64,
    /// Close every partition's batch together when one lingered long enough and insert
    /// them as one bundle (one insert per linger whatever the partition count; see the
    /// collector's `bundle.rs`). Off: each partition's batch is its own insert.
    #[serde(skip_serializing_if = "is_true")]
    pub bundle: bool,
    /// While a partition is behind (another batch's worth of records already waiting in
    /// Kafka), its batch — or the bundle — grows past `max_bytes` up to this (`max_records`
    /// in proportion): a backlog goes in as fewer, larger parts. Used up to half of
    /// `limits.max_inflight_bytes`; at or below `max_bytes` (a pipeline that raised
    /// `max_bytes` past it, say): never grows.
    #[serde(skip_serializing_if = "is_default_backlog_max_bytes")]
    pub backlog_max_bytes: usize,
}

fn is_true(v: &bool) -> bool {
    *v
}

/// The default of `batch.backlog_max_bytes`: twice the default `max_bytes`, half the default
/// in-flight budget.
pub const DEFAULT_BACKLOG_MAX_BYTES: usize = 16 << 20;

fn is_default_backlog_max_bytes(v: &usize) -> bool {
    *v == DEFAULT_BACKLOG_MAX_BYTES
}

/// The default of `batch.max_linger_ms`: at low rates about one insert per second, as
/// ClickHouse asks of a table, with the record's last span queryable within ~1.1 s.
pub const DEFAULT_MAX_LINGER_MS: u64 = 1000;

fn is_default_max_linger_ms(v: &u64) -> bool {
    *v == DEFAULT_MAX_LINGER_MS
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Record payloads held (batching, encoding, inserting) before intake stops (a hold,
    /// then a pause of the partitions).
    pub max_inflight_bytes: usize,
    /// Larger records are skipped as oversized (and dead-lettered when configured).
    pub max_record_bytes: usize,
    /// Threads decoding and encoding batches (0: one per CPU the cgroup quota allows, else
    /// one per core; the collector's `cpu_quota.rs`).
    pub encode_threads: usize,
    /// A record whose rows take more than this many (uncompressed) bytes is skipped as
    /// `expanded`: every span row repeats its resource's attributes, so a small record can
    /// expand a thousandfold. Bounds each encoder's memory per record.
    #[serde(skip_serializing_if = "is_default_max_expanded_record_bytes")]
    pub max_expanded_record_bytes: usize,
}

/// The default of `limits.max_expanded_record_bytes`.
pub const DEFAULT_MAX_EXPANDED_RECORD_BYTES: usize = 64 << 20;

fn is_default_max_expanded_record_bytes(v: &usize) -> bool {
    *v == DEFAULT_MAX_EXPANDED_RECORD_BYTES
}

impl Default for Config {
    fn default() -> Self {
        Self {
            kafka: KafkaConfig::default(),
            clickhouse: ClickHouseConfig::default(),
            batch: BatchConfig::default(),
            limits: LimitsConfig::default(),
            // Every address, IPv4 and IPv6 (`http::bind`).
            metrics_addr: "[::]:8888".parse().expect("static address"),
            shutdown_deadline_ms: 25_000,
            processing: ProcessingConfig::default(),
        }
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            brokers: "localhost:9092".into(),
            topics: vec!["otlp_spans".into()],
            group_id: "tracehouse".into(),
            encoding: Encoding::OtlpProto,
            properties: Default::default(),
            dead_letter_topic: None,
            dead_letter_max_bytes: DEFAULT_DEAD_LETTER_MAX_BYTES,
            commit_format: CommitFormat::default(),
            oauth: None,
        }
    }
}

impl Default for ClickHouseConfig {
    fn default() -> Self {
        Self {
            url: "http://localhost:8123".into(),
            database: "otel".into(),
            table: "otel_traces".into(),
            attributes: Attributes::Map,
            attribute_keys: true,
            insert_format: InsertFormat::Auto,
            user: None,
            password_file: None,
            max_inflight_inserts: 4,
            request_timeout_ms: 60_000,
            retry_initial_ms: 200,
            retry_max_ms: 30_000,
            tls: ClickHouseTlsConfig::default(),
            reject_breaker_records: DEFAULT_REJECT_BREAKER_RECORDS,
            compression: Compression::Lz4,
            max_body_bytes: 0,
            insert_quorum: None,
        }
    }
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_bytes: 8 << 20,
            max_records: 50_000,
            // With bundles a gateway makes about one insert per linger whatever its
            // partitions, so the linger can be short: 200 ms (as the OpenTelemetry
            // Collector's batch timeout) made tracehouse the freshest of the three in
            // docs/benchmarks.md's live run.
            linger_ms: 200,
            max_linger_ms: DEFAULT_MAX_LINGER_MS,
            bundle: true,
            backlog_max_bytes: DEFAULT_BACKLOG_MAX_BYTES,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            // Four 8 MiB inserts in flight: with bundles cut by size and a spent budget
            // holding intake before it pauses (collector/src/source/machine_budget.rs),
            // 32 MiB moved pre-filled topics as fast as 64 MiB did, with less memory
            // (the runs: commit 3913ff3's message and docs/benchmarks.md).
            max_inflight_bytes: 32 << 20,
            max_record_bytes: 16 << 20,
            encode_threads: 0,
            max_expanded_record_bytes: DEFAULT_MAX_EXPANDED_RECORD_BYTES,
        }
    }
}

/// A configuration problem, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: crate::yaml::Error,
    },
    #[error("invalid `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// A processing rule, named by its path (`processing.rules[2].when[0].regex`).
    #[error(transparent)]
    Processing(#[from] RuleError),
}

impl From<crate::oauth::SettingError> for ConfigError {
    fn from(e: crate::oauth::SettingError) -> Self {
        match e {
            crate::oauth::SettingError::Invalid { field, reason } => {
                Self::Invalid { field, reason }
            }
            crate::oauth::SettingError::Read { path, source } => Self::Read { path, source },
        }
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

impl Config {
    /// Read a YAML file (unknown fields are errors, so typos are caught).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        crate::yaml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.into(),
            source,
        })
    }

    /// Check every field; the first problem is reported with the field's path.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = &self.kafka;
        if k.brokers.trim().is_empty() {
            return Err(invalid("kafka.brokers", "must list at least one host:port"));
        }
        if k.topics.is_empty() {
            return Err(invalid("kafka.topics", "must name at least one topic"));
        }
        for t in &k.topics {
            validate_topic(t).map_err(|r| invalid("kafka.topics", r))?;
        }
        if let Some(t) = &k.dead_letter_topic {
            validate_topic(t).map_err(|r| invalid("kafka.dead_letter_topic", r))?;
            if k.topics.contains(t) {
                return Err(invalid(
                    "kafka.dead_letter_topic",
                    "must differ from the consumed topics",
                ));
            }
        }
        if k.group_id.trim().is_empty() {
            return Err(invalid("kafka.group_id", "must not be empty"));
        }
        for key in [
            "group.id",
            "bootstrap.servers",
            "enable.auto.commit",
            "enable.auto.offset.store",
        ] {
            if k.properties.contains_key(key) {
                return Err(invalid(
                    "kafka.properties",
                    format!("`{key}` is managed by the collector"),
                ));
            }
        }
        if let Some(o) = &k.oauth {
            crate::oauth::validate(o, &k.properties).map_err(ConfigError::from)?;
        }
        let c = &self.clickhouse;
        if !(c.url.starts_with("http://") || c.url.starts_with("https://")) {
            return Err(invalid(
                "clickhouse.url",
                format!("must start with http:// or https://, got {:?}", c.url),
            ));
        }
        tracehouse_schema::Ident::new("clickhouse.database", c.database.as_str())
            .map_err(|e| invalid("clickhouse.database", e.to_string()))?;
        tracehouse_schema::Ident::new("clickhouse.table", c.table.as_str())
            .map_err(|e| invalid("clickhouse.table", e.to_string()))?;
        if c.tls.client_cert_file.is_some() != c.tls.client_key_file.is_some() {
            return Err(invalid(
                "clickhouse.tls",
                "client_cert_file and client_key_file go together: set both or neither",
            ));
        }
        if c.max_inflight_inserts == 0 {
            return Err(invalid(
                "clickhouse.max_inflight_inserts",
                "must be at least 1",
            ));
        }
        if c.retry_initial_ms == 0 || c.retry_max_ms < c.retry_initial_ms {
            return Err(invalid(
                "clickhouse.retry_max_ms",
                "must be ≥ retry_initial_ms > 0",
            ));
        }
        if c.max_body_bytes != 0 && c.max_body_bytes < 64 * 1024 {
            return Err(invalid(
                "clickhouse.max_body_bytes",
                format!(
                    "{} is below 64 KiB: a proxy that small cannot take one record's rows (0 means no limit)",
                    c.max_body_bytes
                ),
            ));
        }
        if let Some(q) = &c.insert_quorum
            && q != "auto"
            && !q.parse::<u32>().is_ok_and(|n| n >= 1)
        {
            return Err(invalid(
                "clickhouse.insert_quorum",
                format!("{q:?} is neither `auto` nor a replica count ≥ 1"),
            ));
        }
        let b = &self.batch;
        if b.max_bytes == 0 {
            return Err(invalid("batch.max_bytes", "must be > 0"));
        }
        if b.max_records == 0 {
            return Err(invalid("batch.max_records", "must be > 0"));
        }
        let l = &self.limits;
        if l.max_expanded_record_bytes < 1 << 20 {
            return Err(invalid(
                "limits.max_expanded_record_bytes",
                "must be ≥ 1 MiB",
            ));
        }
        if self.kafka.dead_letter_max_bytes == 0 {
            return Err(invalid("kafka.dead_letter_max_bytes", "must be > 0"));
        }
        if l.max_record_bytes == 0 {
            return Err(invalid("limits.max_record_bytes", "must be > 0"));
        }
        if l.max_inflight_bytes < b.max_bytes.saturating_add(l.max_record_bytes) {
            return Err(invalid(
                "limits.max_inflight_bytes",
                format!(
                    "must hold at least one full batch plus one record ({} bytes)",
                    b.max_bytes.saturating_add(l.max_record_bytes)
                ),
            ));
        }
        self.processing.validate()?;
        Ok(())
    }
}

/// Kafka's own topic name rules (legal characters, length, not `.`/`..`).
fn validate_topic(t: &str) -> Result<(), String> {
    if t.is_empty() || t.len() > 249 || t == "." || t == ".." {
        return Err(format!("{t:?} is not a valid topic name"));
    }
    if let Some(c) = t
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!("{t:?} contains {c:?}; topics use [a-zA-Z0-9._-]"));
    }
    Ok(())
}

/// Credentials for ClickHouse: user and password, from the config or the environment.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"***")
            .finish()
    }
}

impl ClickHouseConfig {
    /// Resolve credentials: `user`/`password_file` first, then `CLICKHOUSE_USER`/`CLICKHOUSE_PASSWORD`.
    pub fn credentials(&self) -> Result<Credentials, ConfigError> {
        let user = self
            .user
            .clone()
            .or_else(|| std::env::var("CLICKHOUSE_USER").ok())
            .unwrap_or_else(|| "default".into());
        let password = match &self.password_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
            None => std::env::var("CLICKHOUSE_PASSWORD").unwrap_or_default(),
        };
        Ok(Credentials { user, password })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
