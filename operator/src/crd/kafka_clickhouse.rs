//! `spec.kafka` and `spec.clickhouse` of a `TracePipeline`: the Kafka side (brokers, topics,
//! group, encoding, TLS and SASL), the ClickHouse side (URL, table, credentials, TLS) and the
//! schema options (engine, TTL, deduplication window); Secrets only ever referenced.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;
use tracehouse_contract::config::CommitFormat;

/// The Kafka side: brokers, topics, consumer group and record encoding.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.deadLetterTopic) || !(self.deadLetterTopic in self.topics)",
        "message": "spec.kafka.deadLetterTopic must differ from every topic in spec.kafka.topics",
        "fieldPath": ".deadLetterTopic"
    }
]))]
pub struct KafkaSpec {
    /// Bootstrap servers, `host:port[,host:port…]`.
    #[schemars(regex(pattern = r"^[^,\s]+:[0-9]{1,5}(,[^,\s]+:[0-9]{1,5})*$"))]
    pub bootstrap_servers: String,
    /// Topics to consume; their partitions, summed, size the gateway.
    #[serde(default = "default_topics")]
    #[schemars(
        length(min = 1, max = 64),
        inner(
            length(min = 1, max = 249),
            regex(pattern = r"^[a-zA-Z0-9._-]{1,249}$")
        )
    )]
    #[schemars(extend(
        "x-kubernetes-list-type" = "set",
        "x-kubernetes-validations" = [{
            "rule": "self.all(t, t != '.' && t != '..')",
            "message": "spec.kafka.topics: '.' and '..' are not valid topic names"
        }]
    ))]
    pub topics: Vec<String>,
    /// Consumer group of the gateway. Default: `tracehouse.<namespace>.<name>`, so two
    /// pipelines never share offsets by accident.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 249))]
    pub consumer_group: Option<String>,
    /// Record encoding, as the OpenTelemetry Collector's kafka exporter names it:
    /// `otlp_proto` (default) or `otlp_json`.
    #[serde(default)]
    pub encoding: Encoding,
    /// Undecodable or oversized records are copied here before being skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-zA-Z0-9._-]{1,249}$"))]
    pub dead_letter_topic: Option<String>,
    /// Extra librdkafka properties (e.g. `fetch.max.bytes`). Connection, group and commit
    /// settings are managed by the operator, and secrets go through `tls`/`sasl`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 128, "x-kubernetes-validations" = [{
        "rule": "self.all(k, !(k in ['group.id', 'bootstrap.servers', 'enable.auto.commit', 'enable.auto.offset.store', 'security.protocol']) && !k.startsWith('sasl.') && !k.startsWith('ssl.'))",
        "message": "spec.kafka.properties must not set group.id, bootstrap.servers, enable.auto.commit, enable.auto.offset.store, security.protocol, sasl.* or ssl.*: use spec.kafka.consumerGroup, spec.kafka.bootstrapServers, spec.kafka.tls and spec.kafka.sasl"
    }]))]
    pub properties: BTreeMap<String, String>,
    /// How the collectors record batch cuts in the group's commit metadata
    /// (docs/upgrade.md): `th3` (default) names the topic's log in every cut and token;
    /// `th2` writes what collectors from before th3 read. Set `th2`, wait until
    /// `tracehouse_commit_metadata_named_partitions` is 0 on every gateway pod, and only then
    /// roll back to such a release: it then takes every partition over exactly.
    #[serde(default, skip_serializing_if = "CommitFormat::is_default")]
    pub commit_format: CommitFormat,
    /// TLS to the brokers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// SASL authentication to the brokers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<KafkaSasl>,
}

fn default_topics() -> Vec<String> {
    vec!["otlp_spans".to_owned()]
}

/// TLS to the brokers (`spec.kafka.tls`) or to ClickHouse (`spec.clickhouse.tls`): one shape
/// for both. Certificates come from Secrets mounted into the collector pods; the operator
/// reads them itself for its own connections (metadata, offsets, schema migrations).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// CA bundle that signs the server's certificates (default: the system roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<SecretKeyRef>,
    /// A Secret with the client certificate and key for mutual TLS: a `kubernetes.io/tls`
    /// Secret (`tls.crt`, `tls.key`), or any other, e.g. a Strimzi KafkaUser's (`user.crt`,
    /// `user.key`: set `clientCertKey` and `clientKeyKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub client_cert_secret_name: Option<String>,
    /// Key of the client certificate (PEM) in `clientCertSecretName`. Default `tls.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub client_cert_key: Option<String>,
    /// Key of the client private key (PEM) in `clientCertSecretName`. Default `tls.key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub client_key_key: Option<String>,
    /// Skip verifying the server's certificates. Only for testing.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// SASL authentication to the brokers.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.mechanism != 'OAUTHBEARER' || has(self.oauth)",
        "message": "spec.kafka.sasl.oauth is required when spec.kafka.sasl.mechanism is OAUTHBEARER: the token endpoint and the Secret with the client id and secret",
        "fieldPath": ".oauth"
    },
    {
        "rule": "self.mechanism == 'OAUTHBEARER' || has(self.credentials)",
        "message": "spec.kafka.sasl.credentials is required when spec.kafka.sasl.mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
        "fieldPath": ".credentials"
    },
    {
        "rule": "self.mechanism == 'OAUTHBEARER' || !has(self.oauth)",
        "message": "spec.kafka.sasl.oauth is only for spec.kafka.sasl.mechanism OAUTHBEARER",
        "fieldPath": ".oauth"
    },
    {
        "rule": "self.mechanism != 'OAUTHBEARER' || !has(self.credentials)",
        "message": "spec.kafka.sasl.credentials is not read with OAUTHBEARER: the client id and secret are spec.kafka.sasl.oauth.credentials",
        "fieldPath": ".credentials"
    }
]))]
pub struct KafkaSasl {
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`.
    pub mechanism: SaslMechanism,
    /// The Secret holding the user name and password (`PLAIN`, `SCRAM-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsSecretRef>,
    /// `OAUTHBEARER`: tokens from an OIDC provider's token endpoint (client credentials),
    /// fetched and refreshed by the collectors and the operator alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<KafkaOAuth>,
}

/// SASL mechanism.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    #[serde(rename = "OAUTHBEARER")]
    OAuthBearer,
}

impl SaslMechanism {
    /// librdkafka's `sasl.mechanism` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OAuthBearer => tracehouse_contract::oauth::MECHANISM,
        }
    }
}

/// OIDC client credentials for `OAUTHBEARER` (`spec.kafka.sasl.oauth`): a token from
/// `tokenEndpoint` for the client id and secret in a Secret, refreshed before it expires. The
/// endpoint is trusted through the system roots and `spec.kafka.tls.ca`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaOAuth {
    /// The provider's token endpoint, e.g. `https://login.example.com/oauth2/token`.
    #[schemars(length(min = 1, max = 2048))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('https://') || self.startsWith('http://')",
        "message": "spec.kafka.sasl.oauth.tokenEndpoint must start with https:// (or http://)"
    }]))]
    pub token_endpoint: String,
    /// The Secret with the client id and secret.
    pub credentials: OAuthCredentialsRef,
    /// `scope` of the token request (default: the provider's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub scope: Option<String>,
    /// SASL extensions sent with the token (RFC 7628: keys are letters, values printable
    /// ASCII), e.g. Confluent Cloud's `logicalCluster` and `identityPoolId`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16, "x-kubernetes-validations" = [{
        "rule": "self.all(k, k != 'auth')",
        "message": "spec.kafka.sasl.oauth.extensions must not set `auth`: it carries the token itself"
    }]))]
    pub extensions: BTreeMap<String, String>,
}

/// The Secret in the pipeline's namespace with an OAuth client's id and secret.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OAuthCredentialsRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key holding the client id.
    #[serde(default = "default_client_id_key")]
    #[schemars(length(min = 1, max = 253))]
    pub client_id_key: String,
    /// Key holding the client secret.
    #[serde(default = "default_client_secret_key")]
    #[schemars(length(min = 1, max = 253))]
    pub client_secret_key: String,
}

fn default_client_id_key() -> String {
    "clientId".to_owned()
}

fn default_client_secret_key() -> String {
    "clientSecret".to_owned()
}

/// One key of a Secret in the pipeline's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A Secret in the pipeline's namespace with a password and, unless `username` is given, a
/// user name. A Strimzi KafkaUser's Secret is used as it is: `{name: <user>, username: <user>}`
/// (it holds `password`; the user name is the KafkaUser's, which is the Secret's name).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsSecretRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The user name itself, when the Secret does not hold it (Strimzi's KafkaUser Secrets
    /// do not). Set, `usernameKey` is not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub username: Option<String>,
    /// Key holding the user name.
    #[serde(default = "default_username_key")]
    #[schemars(length(min = 1, max = 253))]
    pub username_key: String,
    /// Key holding the password.
    #[serde(default = "default_password_key")]
    #[schemars(length(min = 1, max = 253))]
    pub password_key: String,
}

fn default_username_key() -> String {
    "username".to_owned()
}

fn default_password_key() -> String {
    "password".to_owned()
}

/// The default keys of a client certificate Secret (`kubernetes.io/tls`).
pub const CLIENT_CERT_KEY: &str = "tls.crt";
pub const CLIENT_KEY_KEY: &str = "tls.key";

impl TlsSpec {
    /// Keys of the client certificate and key in `clientCertSecretName`.
    pub fn client_keys(&self) -> (&str, &str) {
        (
            self.client_cert_key.as_deref().unwrap_or(CLIENT_CERT_KEY),
            self.client_key_key.as_deref().unwrap_or(CLIENT_KEY_KEY),
        )
    }
}

/// The ClickHouse side: endpoint, traces table and how it is shaped.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(self.schema.attributes == oldSelf.schema.attributes && self.schema.attributeKeysColumns == oldSelf.schema.attributeKeysColumns && self.schema.engine == oldSelf.schema.engine && self.schema.dedupWindow == oldSelf.schema.dedupWindow && (has(self.schema.cluster) ? (has(oldSelf.schema.cluster) && self.schema.cluster == oldSelf.schema.cluster) : !has(oldSelf.schema.cluster))) || self.table != oldSelf.table || self.database != oldSelf.database",
    "message": "spec.clickhouse.schema can only change together with spec.clickhouse.table or spec.clickhouse.database: applied migrations are never edited (spec.clickhouse.schema.ttl and spec.clickhouse.schema.layouts are the exceptions: they change in place)",
    "fieldPath": ".schema"
}]))]
pub struct ClickHouseSpec {
    /// HTTP(S) endpoint of ClickHouse, e.g. `http://clickhouse.db:8123`.
    #[schemars(length(min = 1, max = 2048))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('http://') || self.startsWith('https://')",
        "message": "spec.clickhouse.endpoint must start with http:// or https://"
    }]))]
    pub endpoint: String,
    /// Database of the traces table (created if missing).
    #[serde(default = "default_database")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_]{1,64}$"))]
    pub database: String,
    /// Traces table. The lookup table and view are named after it (`<table>_trace_id_ts`,
    /// `<table>_trace_id_ts_mv`), hence the shorter limit.
    #[serde(default = "default_table")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_]{1,49}$"))]
    pub table: String,
    /// The Secret with the ClickHouse user name and password (default: user `default`, no
    /// password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsSecretRef>,
    /// Credentials of the operator's schema step (migrations, or the check of `Verify`), when
    /// they differ from the collectors' `credentials`: the writer then needs only `INSERT`
    /// (and `SELECT` on the table), the schema owner `CREATE`/`ALTER`. Never given to the
    /// collector pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddl_credentials: Option<CredentialsSecretRef>,
    /// `Apply` (default): the operator applies the schema migrations. `Verify`: it only checks
    /// that every migration is recorded and the table is as the spec asks, runs no DDL, and
    /// until then reports `SchemaReady=False/SchemaNotApplied` naming what is missing (and
    /// rolls out no gateway), for teams whose schema is owned elsewhere
    /// (`tracehouse-collector schema apply` in their pipeline).
    #[serde(default)]
    pub schema_mode: SchemaMode,
    /// Shape of the traces table. Fixed once applied: change it only together with a new
    /// table or database, except `ttl`, which the operator changes in place
    /// (`ALTER TABLE … MODIFY TTL`, recorded in the migration ledger, `status.retention`).
    #[serde(default)]
    pub schema: SchemaSpec,
    /// Input format of inserts: `auto` (default, the measured best), `native` or
    /// `row_binary`.
    #[serde(default)]
    pub insert_format: InsertFormat,
    /// How insert bodies travel: `lz4` (default: ClickHouse's LZ4 block framing) or `none`
    /// (12–15 % less collector CPU per span, 6 to 7 times the bytes on the wire and about
    /// twice the collector's peak memory: for a ClickHouse whose network bytes cost nothing).
    #[serde(default)]
    pub compression: Compression,
    /// The largest insert body to send (`1Mi`, `1000000`; unset: no limit): a larger insert
    /// is split before it goes out. For a proxy or ingress with a body limit in front of
    /// ClickHouse (nginx's `client_max_body_size` is 1 MiB by default; an ingress-nginx
    /// `proxy-body-size` annotation). Without it the collector still splits an insert the
    /// proxy refuses with 413, after the fact. At least 64 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<ByteSize>,
    /// `insert_quorum` for replicated tables: `auto` (a majority of replicas) or a replica
    /// count. A 200 then means that many replicas hold the rows, so losing the replica that
    /// answered right after the collector committed its Kafka offset loses none. Unset: one
    /// replica (the server's default). Slower inserts; no effect on a plain MergeTree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == 'auto' || self.matches('^[1-9][0-9]{0,2}$')",
        "message": "spec.clickhouse.insertQuorum must be `auto` or a replica count"
    }]))]
    pub insert_quorum: Option<String>,
    /// TLS to an `https://` endpoint: the CA, a client certificate (mutual TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
}

/// Who changes the traces table's schema.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SchemaMode {
    /// The operator applies the migrations.
    #[default]
    Apply,
    /// The operator only checks them.
    Verify,
}

fn default_database() -> String {
    tracehouse_schema::model::DEFAULT_DATABASE.to_owned()
}

fn default_table() -> String {
    tracehouse_schema::model::DEFAULT_TABLE.to_owned()
}

/// Shape of the traces table, as the schema migrations render it.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.engine != 'ReplicatedMergeTree' || has(self.cluster)",
    "message": "spec.clickhouse.schema.cluster is required when spec.clickhouse.schema.engine is ReplicatedMergeTree",
    "fieldPath": ".cluster"
}, {
    "rule": "!has(self.layouts) || !has(self.layouts.attributeItems) || !self.layouts.attributeItems || (self.attributes == 'map' && self.engine != 'Null')",
    "message": "spec.clickhouse.schema.layouts.attributeItems needs spec.clickhouse.schema.attributes map on a stored engine (not Null): the items are built from the Map columns",
    "fieldPath": ".layouts.attributeItems"
}, {
    "rule": "!has(self.layouts) || !has(self.layouts.mapSerialization) || self.layouts.mapSerialization == 'Default' || (self.attributes == 'map' && self.engine != 'Null')",
    "message": "spec.clickhouse.schema.layouts.mapSerialization Buckets needs spec.clickhouse.schema.attributes map on a stored engine (not Null): it changes how Map columns are stored",
    "fieldPath": ".layouts.mapSerialization"
}]))]
pub struct SchemaSpec {
    /// Attribute columns: `map` (`Map(LowCardinality(String), String)`, the OpenTelemetry
    /// exporter's default) or `json`.
    #[serde(default)]
    pub attributes: Attributes,
    /// `json` attributes only: add the sorted attribute-key columns newer exporters have.
    #[serde(default = "default_true")]
    pub attribute_keys_columns: bool,
    /// Table engine: `MergeTree` (default), `ReplicatedMergeTree` (every statement runs
    /// `ON CLUSTER`; needs `cluster`) or `Null` (stores nothing; for benchmarks).
    #[serde(default)]
    pub engine: EngineKind,
    /// Cluster of `ReplicatedMergeTree` tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{1,64}$"))]
    pub cluster: Option<String>,
    /// Retention: days (`30`) or a duration (`30d`, `72h`, `90m`, `3600s`). Default: keep.
    /// May change on an existing table: applied in place (`MODIFY TTL` / `REMOVE TTL` on the
    /// traces and lookup tables, which also rewrites existing parts in the background).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{1,9}[dhms]?$"))]
    pub ttl: Option<String>,
    /// How many recent insert blocks MergeTree remembers so a retried insert is not
    /// stored twice, at least: the operator raises it to what the topics' partitions need
    /// (360 per partition at a 1 s linger) and raises the table's window as they grow
    /// (never lowers it); the window in effect is in `status.dedupWindow`. 0 creates the
    /// table without deduplication.
    #[serde(default = "default_dedup_window")]
    #[schemars(range(min = 0, max = 1_000_000))]
    pub dedup_window: i64,
    /// Opt-in layouts of the `map` table, each measured by the query benchmark
    /// (docs/querybench.md) and off by default. Turning one on adds it to the existing table in
    /// place (an additive migration, recorded in the ledger; needs a newer ClickHouse, named in
    /// the status otherwise); turning it off later drops nothing: the table keeps it and the
    /// `SchemaReady` condition says so. What the table has is in `status.layouts`.
    #[serde(default, skip_serializing_if = "Layouts::is_default")]
    pub layouts: Layouts,
}

impl Default for SchemaSpec {
    fn default() -> Self {
        Self {
            attributes: Attributes::default(),
            attribute_keys_columns: true,
            engine: EngineKind::default(),
            cluster: None,
            ttl: None,
            dedup_window: default_dedup_window(),
            layouts: Layouts::default(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_dedup_window() -> i64 {
    i64::try_from(tracehouse_schema::model::DEFAULT_DEDUP_WINDOW).unwrap_or(1000)
}
