//! Pure desired-state builders: a `TracePipeline` (plus the partition count the reconciler
//! read from Kafka) in, the objects the gateway needs out — the collector ConfigMap, the
//! Deployment, the metrics Service and the PodDisruptionBudget, all owned by the pipeline.
//!
//! Nothing here does IO, so every object is snapshot-tested without a cluster (see the tests
//! at the bottom and `operator/snapshots/`). The collector's configuration is rendered with
//! the collector's own `Config` type and checked with its own `validate()`, so the operator
//! can never write a file the collector refuses.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, KeyToPath, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec,
    Probe, ResourceRequirements, SeccompProfile, SecretKeySelector, SecretVolumeSource,
    SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use tracehouse_collector::config as collector;
use tracehouse_schema::{Engine, Ident, Replication, TableOptions, Ttl};

use crate::crd::{self, EngineKind, KafkaSasl, KafkaTls, ReplicasSpec, TracePipeline};

/// Pod-template annotation with the hash of the collector configuration: a new config
/// changes the template, so the Deployment rolls its pods.
pub const CONFIG_HASH_ANNOTATION: &str = "tracehouse.dev/config-hash";
/// Label naming the pipeline an object belongs to.
pub const PIPELINE_LABEL: &str = "tracehouse.dev/pipeline";
/// Key of the collector configuration in the ConfigMap.
pub const CONFIG_KEY: &str = "collector.yaml";
/// Where the ConfigMap is mounted in the collector container. A directory of its own:
/// the TLS Secrets are mounted beside it, never inside the read-only ConfigMap volume.
pub const CONFIG_DIR: &str = "/etc/tracehouse/config";
/// Port of the collector's `/metrics`, `/healthz` and `/readyz`.
pub const METRICS_PORT: i32 = 8888;
/// Name of the collector container.
pub const CONTAINER: &str = "collector";
const KAFKA_CA_DIR: &str = "/etc/tracehouse/kafka-tls/ca";
const KAFKA_CLIENT_CERT_DIR: &str = "/etc/tracehouse/kafka-tls/client";
/// Environment variables the collector reads the Kafka SASL credentials from.
pub const ENV_KAFKA_SASL_USERNAME: &str = "KAFKA_SASL_USERNAME";
pub const ENV_KAFKA_SASL_PASSWORD: &str = "KAFKA_SASL_PASSWORD";
/// The collector's own shutdown deadline plus a margin before the kubelet kills it.
const TERMINATION_GRACE_SECONDS: i64 = 35;
/// The collector drains for this long on SIGTERM (must stay below the grace period).
const SHUTDOWN_DEADLINE_MS: u64 = 25_000;

/// Why a spec cannot be turned into objects (the CRD's validation should have caught it;
/// this is the backstop for clients that bypass it, e.g. older CRD versions).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    #[error("invalid spec field `{field}`: {reason}")]
    InvalidField { field: &'static str, reason: String },
    #[error("the pipeline has no {0} (it was never stored by the API server)")]
    MissingMetadata(&'static str),
}

fn invalid(field: &'static str, reason: impl ToString) -> BuildError {
    BuildError::InvalidField {
        field,
        reason: reason.to_string(),
    }
}

/// Gateway replicas for `partitions`: one per `partitionsPerReplica` partitions, rounded
/// up, clamped to `[min, max]`, and never more than the partitions (a consumer beyond the
/// partition count would get no partition and sit idle). No partitions, no replicas.
pub fn desired_replicas(partitions: i32, spec: &ReplicasSpec) -> i32 {
    if partitions <= 0 {
        return 0;
    }
    // Both positive here, so the unsigned ceiling division is exact.
    let per = spec.partitions_per_replica.max(1).unsigned_abs();
    let wanted = i32::try_from(partitions.unsigned_abs().div_ceil(per)).unwrap_or(i32::MAX);
    let (lo, hi) = (spec.min.max(1), spec.max.max(spec.min.max(1)));
    wanted.clamp(lo, hi).min(partitions)
}

/// Names of the owned objects, derived from the pipeline's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub config_map: String,
    pub deployment: String,
    pub service: String,
    pub pdb: String,
}

impl Names {
    pub fn of(pipeline: &str) -> Self {
        let base = format!("{pipeline}-collector");
        Self {
            config_map: base.clone(),
            deployment: base.clone(),
            service: format!("{base}-metrics"),
            pdb: base,
        }
    }
}

/// Labels that select the gateway pods of one pipeline (immutable in a Deployment).
pub fn selector_labels(tp: &TracePipeline) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "tracehouse-collector".to_owned(),
        ),
        (PIPELINE_LABEL.to_owned(), tp.name_any()),
    ])
}

/// The selector as the scale subresource reports it (`k=v,k=v`).
pub fn selector_string(tp: &TracePipeline) -> String {
    selector_labels(tp)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Every label of the owned objects.
pub fn labels(tp: &TracePipeline) -> BTreeMap<String, String> {
    let mut l = selector_labels(tp);
    for (k, v) in [
        ("app.kubernetes.io/instance", tp.name_any()),
        ("app.kubernetes.io/component", "gateway".to_owned()),
        ("app.kubernetes.io/part-of", "tracehouse".to_owned()),
        (
            "app.kubernetes.io/managed-by",
            crate::FIELD_MANAGER.to_owned(),
        ),
    ] {
        l.insert(k.to_owned(), v);
    }
    l
}

fn owner(tp: &TracePipeline) -> Result<OwnerReference, BuildError> {
    tp.controller_owner_ref(&())
        .filter(|o| !o.uid.is_empty())
        .ok_or(BuildError::MissingMetadata("uid"))
}

fn meta(tp: &TracePipeline, name: &str) -> Result<ObjectMeta, BuildError> {
    Ok(ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(
            tp.namespace()
                .ok_or(BuildError::MissingMetadata("namespace"))?,
        ),
        labels: Some(labels(tp)),
        owner_references: Some(vec![owner(tp)?]),
        ..Default::default()
    })
}

/// The table the migrations create, from the spec's ClickHouse section.
pub fn table_options(spec: &crd::ClickHouseSpec) -> Result<TableOptions, BuildError> {
    let database = Ident::new("database", spec.database.as_str())
        .map_err(|e| invalid("spec.clickhouse.database", e))?;
    let table = Ident::new("table", spec.table.as_str())
        .map_err(|e| invalid("spec.clickhouse.table", e))?;
    let s = &spec.schema;
    let mut opts = TableOptions::new(database, table);
    opts.attributes = match s.attributes {
        crd::Attributes::Map => tracehouse_schema::Attributes::Map,
        crd::Attributes::Json => tracehouse_schema::Attributes::Json,
    };
    opts.attribute_keys_columns = s.attribute_keys_columns;
    opts.engine = match s.engine {
        EngineKind::MergeTree => Engine::MergeTree,
        EngineKind::Null => Engine::Null,
        EngineKind::ReplicatedMergeTree => {
            let cluster = s.cluster.as_deref().ok_or_else(|| {
                invalid(
                    "spec.clickhouse.schema.cluster",
                    "required when engine is ReplicatedMergeTree",
                )
            })?;
            Engine::Replicated(Replication::new(
                Ident::new("cluster", cluster)
                    .map_err(|e| invalid("spec.clickhouse.schema.cluster", e))?,
            ))
        }
    };
    opts.ttl = s
        .ttl
        .as_deref()
        .map(str::parse::<Ttl>)
        .transpose()
        .map_err(|e| invalid("spec.clickhouse.schema.ttl", e))?;
    opts.dedup_window = u64::try_from(s.dedup_window)
        .map_err(|_| invalid("spec.clickhouse.schema.dedupWindow", "must not be negative"))?;
    opts.validate()
        .map_err(|e| invalid("spec.clickhouse.table", e))?;
    Ok(opts)
}

/// librdkafka security settings implied by `tls`/`sasl`, with certificate paths as the
/// collector pods see them. Secrets never appear here: SASL credentials reach the collector
/// through environment variables filled from the Secret.
pub fn kafka_security_properties(
    tls: Option<&KafkaTls>,
    sasl: Option<&KafkaSasl>,
) -> BTreeMap<String, String> {
    let mut p = BTreeMap::new();
    let protocol = match (tls.is_some(), sasl.is_some()) {
        (false, false) => return p,
        (true, false) => "SSL",
        (false, true) => "SASL_PLAINTEXT",
        (true, true) => "SASL_SSL",
    };
    p.insert("security.protocol".to_owned(), protocol.to_owned());
    if let Some(sasl) = sasl {
        p.insert(
            "sasl.mechanism".to_owned(),
            sasl.mechanism.as_str().to_owned(),
        );
    }
    if let Some(tls) = tls {
        if tls.ca.is_some() {
            p.insert(
                "ssl.ca.location".to_owned(),
                format!("{KAFKA_CA_DIR}/ca.crt"),
            );
        }
        if tls.client_cert_secret_name.is_some() {
            p.insert(
                "ssl.certificate.location".to_owned(),
                format!("{KAFKA_CLIENT_CERT_DIR}/tls.crt"),
            );
            p.insert(
                "ssl.key.location".to_owned(),
                format!("{KAFKA_CLIENT_CERT_DIR}/tls.key"),
            );
        }
        if tls.insecure_skip_verify {
            p.insert(
                "enable.ssl.certificate.verification".to_owned(),
                "false".to_owned(),
            );
        }
    }
    p
}

fn usize_field(field: &'static str, v: i64) -> Result<usize, BuildError> {
    usize::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| invalid(field, format!("must be a positive number, got {v}")))
}

/// The collector's configuration for this pipeline, validated by the collector's own rules.
pub fn collector_config(tp: &TracePipeline) -> Result<collector::Config, BuildError> {
    let s = &tp.spec;
    let c = &s.collector;
    let mut cfg = collector::Config::default();
    cfg.kafka.brokers = s.kafka.bootstrap_servers.clone();
    cfg.kafka.topics = s.kafka.topics.clone();
    cfg.kafka.group_id = tp.consumer_group();
    cfg.kafka.encoding = match s.kafka.encoding {
        crd::Encoding::OtlpProto => collector::Encoding::OtlpProto,
        crd::Encoding::OtlpJson => collector::Encoding::OtlpJson,
    };
    cfg.kafka.dead_letter_topic = s.kafka.dead_letter_topic.clone();
    cfg.kafka.properties = s.kafka.properties.clone();
    cfg.kafka.properties.extend(kafka_security_properties(
        s.kafka.tls.as_ref(),
        s.kafka.sasl.as_ref(),
    ));
    let ch = &s.clickhouse;
    cfg.clickhouse.url = ch.endpoint.clone();
    cfg.clickhouse.database = ch.database.clone();
    cfg.clickhouse.table = ch.table.clone();
    cfg.clickhouse.attributes = match ch.schema.attributes {
        crd::Attributes::Map => collector::AttributesKind::Map,
        crd::Attributes::Json => collector::AttributesKind::Json,
    };
    cfg.clickhouse.attribute_keys = ch.schema.attribute_keys_columns;
    cfg.clickhouse.insert_format = match ch.insert_format {
        crd::InsertFormat::Auto => collector::InsertFormat::Auto,
        crd::InsertFormat::Native => collector::InsertFormat::Native,
        crd::InsertFormat::RowBinary => collector::InsertFormat::RowBinary,
    };
    // Credentials come from the environment (CLICKHOUSE_USER / CLICKHOUSE_PASSWORD, filled
    // from the Secret), never from this file.
    cfg.clickhouse.user = None;
    cfg.clickhouse.password_file = None;
    cfg.clickhouse.max_inflight_inserts = usize::try_from(c.max_inflight_inserts)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| invalid("spec.collector.maxInflightInserts", "must be at least 1"))?;
    cfg.batch.max_bytes = usize_field("spec.collector.batch.maxBytes", c.batch.max_bytes)?;
    cfg.batch.max_records = usize_field("spec.collector.batch.maxRecords", c.batch.max_records)?;
    cfg.batch.linger_ms = u64::try_from(c.batch.linger_ms)
        .map_err(|_| invalid("spec.collector.batch.lingerMs", "must not be negative"))?;
    cfg.limits.max_inflight_bytes =
        usize_field("spec.collector.maxInflightBytes", c.max_inflight_bytes)?;
    cfg.limits.max_record_bytes = usize_field("spec.collector.maxRecordBytes", c.max_record_bytes)?;
    // Every pod overrides this with its own address (`--metrics-addr=$(POD_IP):PORT`).
    cfg.metrics_addr = std::net::SocketAddr::from(([0, 0, 0, 0], METRICS_PORT as u16));
    cfg.shutdown_deadline_ms = SHUTDOWN_DEADLINE_MS;
    cfg.validate().map_err(|e| match e {
        collector::ConfigError::Invalid { field, reason } => invalid(spec_field(field), reason),
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
        "kafka.group_id" => "spec.kafka.consumerGroup",
        "kafka.properties" => "spec.kafka.properties",
        "clickhouse.url" => "spec.clickhouse.endpoint",
        "clickhouse.database" => "spec.clickhouse.database",
        "clickhouse.table" => "spec.clickhouse.table",
        "clickhouse.max_inflight_inserts" => "spec.collector.maxInflightInserts",
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

/// Everything the gateway of one pipeline consists of.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub partitions: i32,
    pub replicas: i32,
    pub config_hash: String,
    pub config_map: ConfigMap,
    pub deployment: Deployment,
    pub service: Service,
    pub pdb: PodDisruptionBudget,
}

/// The gateway for `tp` over `partitions` partitions.
pub fn desired(tp: &TracePipeline, partitions: i32) -> Result<Desired, BuildError> {
    let names = Names::of(&tp.name_any());
    let rendered = serde_yaml::to_string(&collector_config(tp)?)
        .map_err(|e| invalid("spec", format!("cannot render the collector config: {e}")))?;
    let hash = config_hash(&rendered);
    let replicas = desired_replicas(partitions, &tp.spec.replicas);
    Ok(Desired {
        partitions,
        replicas,
        config_map: ConfigMap {
            metadata: meta(tp, &names.config_map)?,
            data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), rendered)])),
            ..Default::default()
        },
        deployment: deployment(tp, &names, replicas, &hash)?,
        service: service(tp, &names)?,
        pdb: pdb(tp, &names)?,
        config_hash: hash,
    })
}

fn env_value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: path.to_owned(),
            }),
            ..Default::default()
        }),
    }
}

fn env_secret(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: None,
            }),
            ..Default::default()
        }),
    }
}

fn container_env(tp: &TracePipeline) -> Vec<EnvVar> {
    let s = &tp.spec;
    let mut env = vec![
        env_field("POD_NAME", "metadata.name"),
        env_field("POD_NAMESPACE", "metadata.namespace"),
        env_field("POD_IP", "status.podIP"),
        env_value(
            "RUST_LOG",
            s.collector
                .log_level
                .clone()
                .unwrap_or_else(|| "info,librdkafka=warn".to_owned()),
        ),
    ];
    if let Some(c) = &s.clickhouse.credentials {
        env.push(env_secret("CLICKHOUSE_USER", &c.name, &c.username_key));
        env.push(env_secret("CLICKHOUSE_PASSWORD", &c.name, &c.password_key));
    }
    if let Some(sasl) = &s.kafka.sasl {
        let c = &sasl.credentials;
        env.push(env_secret(
            ENV_KAFKA_SASL_USERNAME,
            &c.name,
            &c.username_key,
        ));
        env.push(env_secret(
            ENV_KAFKA_SASL_PASSWORD,
            &c.name,
            &c.password_key,
        ));
    }
    // The user's entries come last so they win, as later entries do for the kubelet.
    env.extend(s.collector.env.iter().cloned());
    env
}

fn volumes(tp: &TracePipeline, names: &Names) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = vec![Volume {
        name: "config".to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: names.config_map.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "config".to_owned(),
        mount_path: CONFIG_DIR.to_owned(),
        read_only: Some(true),
        ..Default::default()
    }];
    let tls = tp.spec.kafka.tls.as_ref();
    if let Some(ca) = tls.and_then(|t| t.ca.as_ref()) {
        volumes.push(Volume {
            name: "kafka-ca".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(ca.name.clone()),
                items: Some(vec![KeyToPath {
                    key: ca.key.clone(),
                    path: "ca.crt".to_owned(),
                    mode: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "kafka-ca".to_owned(),
            mount_path: KAFKA_CA_DIR.to_owned(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if let Some(secret) = tls.and_then(|t| t.client_cert_secret_name.as_ref()) {
        volumes.push(Volume {
            name: "kafka-client-cert".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "kafka-client-cert".to_owned(),
            mount_path: KAFKA_CLIENT_CERT_DIR.to_owned(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    (volumes, mounts)
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// Requests that fit the default in-flight budget (256 MiB) with room for librdkafka's
/// fetch buffers and the encoders.
fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(quantities(&[("cpu", "500m"), ("memory", "512Mi")])),
        limits: Some(quantities(&[("memory", "1Gi")])),
        ..Default::default()
    }
}

fn http_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("metrics".to_owned()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(2),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

fn deployment(
    tp: &TracePipeline,
    names: &Names,
    replicas: i32,
    config_hash: &str,
) -> Result<Deployment, BuildError> {
    let c = &tp.spec.collector;
    let (volumes, mounts) = volumes(tp, names);
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(c.image()),
        image_pull_policy: c.image_pull_policy.map(|p| p.as_str().to_owned()),
        args: Some(vec![
            "run".to_owned(),
            "--config".to_owned(),
            format!("{CONFIG_DIR}/{CONFIG_KEY}"),
            // Each pod listens on its own address: the kubelet (and the local node agent)
            // expand $(POD_IP) from the env entry above.
            format!("--metrics-addr=$(POD_IP):{METRICS_PORT}"),
            "--log-format=json".to_owned(),
        ]),
        env: Some(container_env(tp)),
        ports: Some(vec![ContainerPort {
            name: Some("metrics".to_owned()),
            container_port: METRICS_PORT,
            protocol: Some("TCP".to_owned()),
            ..Default::default()
        }]),
        // Ready once running and ClickHouse answers; alive while the consume loop turns.
        readiness_probe: Some(http_probe("/readyz", 5, 3)),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(10),
            ..http_probe("/healthz", 10, 6)
        }),
        resources: Some(c.resources.clone().unwrap_or_else(default_resources)),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        ..Default::default()
    };
    let mut template_meta = ObjectMeta {
        labels: Some(labels(tp)),
        annotations: Some(BTreeMap::from([(
            CONFIG_HASH_ANNOTATION.to_owned(),
            config_hash.to_owned(),
        )])),
        ..Default::default()
    };
    template_meta
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            "kubectl.kubernetes.io/default-container".to_owned(),
            CONTAINER.to_owned(),
        );
    Ok(Deployment {
        metadata: meta(tp, &names.deployment)?,
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(tp)),
                match_expressions: None,
            },
            // One extra pod at a time and none taken away: throughput holds during a
            // rollout, and the group rebalances once per replaced pod.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            revision_history_limit: Some(5),
            template: PodTemplateSpec {
                metadata: Some(template_meta),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(volumes),
                    // The collector never talks to the Kubernetes API.
                    automount_service_account_token: Some(false),
                    termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65_532),
                        run_as_group: Some(65_532),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

fn service(tp: &TracePipeline, names: &Names) -> Result<Service, BuildError> {
    let mut metadata = meta(tp, &names.service)?;
    metadata.annotations = Some(BTreeMap::from([
        ("prometheus.io/scrape".to_owned(), "true".to_owned()),
        ("prometheus.io/port".to_owned(), METRICS_PORT.to_string()),
        ("prometheus.io/path".to_owned(), "/metrics".to_owned()),
    ]));
    Ok(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector_labels(tp)),
            ports: Some(vec![ServicePort {
                name: Some("metrics".to_owned()),
                port: METRICS_PORT,
                target_port: Some(IntOrString::String("metrics".to_owned())),
                protocol: Some("TCP".to_owned()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

fn pdb(tp: &TracePipeline, names: &Names) -> Result<PodDisruptionBudget, BuildError> {
    Ok(PodDisruptionBudget {
        metadata: meta(tp, &names.pdb)?,
        spec: Some(PodDisruptionBudgetSpec {
            // Voluntary disruptions (drains) take one collector at a time.
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(tp)),
                match_expressions: None,
            }),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{
        CredentialsSecretRef, KafkaSasl, KafkaTls, SaslMechanism, SecretKeyRef, TracePipelineSpec,
    };
    use std::path::PathBuf;

    fn pipeline(spec: serde_json::Value) -> TracePipeline {
        let spec: TracePipelineSpec = serde_json::from_value(spec).unwrap();
        let mut tp = TracePipeline::new("orders", spec);
        tp.metadata.namespace = Some("shop".into());
        tp.metadata.uid = Some("0b7c0c3e-3c1d-4a8e-9a57-1f5f2f4c6d10".into());
        tp
    }

    fn sample() -> TracePipeline {
        pipeline(serde_json::json!({
            "kafka": { "bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092", "topics": ["otlp_spans"] },
            "clickhouse": {
                "endpoint": "http://clickhouse.db:8123",
                "credentials": { "name": "clickhouse-writer" }
            },
            "collector": {
                "image": "ghcr.io/tracehouse/collector:0.1.0",
                "env": [{ "name": "EXTRA", "value": "1" }]
            },
            "replicas": { "partitionsPerReplica": 2, "min": 1, "max": 6 }
        }))
    }

    fn spec_replicas(per: i32, min: i32, max: i32) -> ReplicasSpec {
        ReplicasSpec {
            partitions_per_replica: per,
            min,
            max,
        }
    }

    #[test]
    fn replicas_are_partitions_over_partitions_per_replica_rounded_up() {
        let s = spec_replicas(4, 1, 100);
        assert_eq!(desired_replicas(1, &s), 1);
        assert_eq!(desired_replicas(4, &s), 1);
        assert_eq!(desired_replicas(5, &s), 2);
        assert_eq!(desired_replicas(8, &s), 2);
        assert_eq!(desired_replicas(9, &s), 3);
        assert_eq!(desired_replicas(64, &s), 16);
    }

    #[test]
    fn replicas_are_clamped_to_min_and_max() {
        assert_eq!(desired_replicas(64, &spec_replicas(1, 1, 10)), 10);
        assert_eq!(desired_replicas(8, &spec_replicas(8, 3, 10)), 3);
        assert_eq!(desired_replicas(100, &spec_replicas(1, 2, 2)), 2);
    }

    #[test]
    fn replicas_never_exceed_the_partition_count_even_above_min() {
        // min 5 but only 3 partitions: two of five consumers would idle.
        assert_eq!(desired_replicas(3, &spec_replicas(1, 5, 10)), 3);
        assert_eq!(desired_replicas(1, &spec_replicas(1, 4, 4)), 1);
        assert_eq!(desired_replicas(0, &spec_replicas(1, 1, 4)), 0);
    }

    #[test]
    fn replica_math_tolerates_nonsense_that_validation_should_have_refused() {
        assert_eq!(desired_replicas(10, &spec_replicas(0, 0, 0)), 1);
        assert_eq!(desired_replicas(10, &spec_replicas(1, 4, 2)), 4);
        assert_eq!(desired_replicas(-3, &spec_replicas(1, 1, 1)), 0);
    }

    #[test]
    fn replicas_grow_monotonically_with_partitions() {
        let s = spec_replicas(3, 2, 9);
        let mut last = 0;
        for p in 1..200 {
            let r = desired_replicas(p, &s);
            assert!(r >= last, "{p}: {r} < {last}");
            assert!(r <= p && r <= 9);
            last = r;
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
        let yaml = serde_yaml::to_string(&cfg).unwrap();
        let back: collector::Config = serde_yaml::from_str(&yaml).unwrap();
        back.validate().unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn collector_rules_the_crd_cannot_express_name_the_spec_field() {
        let mut tp = sample();
        tp.spec.collector.max_inflight_bytes = 1;
        let err = collector_config(&tp).unwrap_err();
        assert!(
            matches!(
                &err,
                BuildError::InvalidField {
                    field: "spec.collector.maxInflightBytes",
                    ..
                }
            ),
            "{err}"
        );
        let mut tp = sample();
        tp.spec.clickhouse.endpoint = "clickhouse:8123".into();
        let err = collector_config(&tp).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.endpoint"), "{err}");
    }

    #[test]
    fn secrets_never_reach_the_config_map() {
        let mut tp = sample();
        tp.spec.kafka.sasl = Some(KafkaSasl {
            mechanism: SaslMechanism::ScramSha512,
            credentials: CredentialsSecretRef {
                name: "kafka-user".into(),
                username_key: "user".into(),
                password_key: "pass".into(),
            },
        });
        tp.spec.kafka.tls = Some(KafkaTls {
            ca: Some(SecretKeyRef {
                name: "kafka-ca".into(),
                key: "ca.pem".into(),
            }),
            client_cert_secret_name: Some("kafka-client".into()),
            insecure_skip_verify: false,
        });
        let d = desired(&tp, 4).unwrap();
        let yaml = &d.config_map.data.as_ref().unwrap()[CONFIG_KEY];
        assert!(yaml.contains("security.protocol: SASL_SSL"), "{yaml}");
        assert!(yaml.contains("sasl.mechanism: SCRAM-SHA-512"), "{yaml}");
        assert!(!yaml.contains("sasl.password"), "{yaml}");
        let env = d
            .deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .env
            .clone()
            .unwrap();
        let from_secret = |name: &str| {
            env.iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value_from.as_ref()?.secret_key_ref.clone())
                .unwrap_or_else(|| panic!("{name} is not from a secret"))
        };
        assert_eq!(from_secret(ENV_KAFKA_SASL_PASSWORD).key, "pass");
        assert_eq!(from_secret("CLICKHOUSE_PASSWORD").name, "clickhouse-writer");
        assert!(env.iter().all(|e| e.value.as_deref() != Some("pass")));
    }

    #[test]
    fn config_changes_change_the_pod_template_hash_and_nothing_else_does() {
        let tp = sample();
        let a = desired(&tp, 4).unwrap();
        let same = desired(&tp, 4).unwrap();
        assert_eq!(a, same, "builders are deterministic");
        let mut changed = tp.clone();
        changed.spec.collector.batch.linger_ms = 500;
        let b = desired(&changed, 4).unwrap();
        assert_ne!(a.config_hash, b.config_hash);
        let hash_of = |d: &Desired| {
            d.deployment
                .spec
                .as_ref()
                .unwrap()
                .template
                .metadata
                .as_ref()
                .unwrap()
                .annotations
                .as_ref()
                .unwrap()[CONFIG_HASH_ANNOTATION]
                .clone()
        };
        assert_eq!(hash_of(&b), b.config_hash);
        assert_ne!(hash_of(&a), hash_of(&b));
        // Scaling is not a config change.
        assert_eq!(desired(&tp, 12).unwrap().config_hash, a.config_hash);
    }

    #[test]
    fn every_object_is_owned_by_the_pipeline_as_controller() {
        let d = desired(&sample(), 4).unwrap();
        let metas = [
            &d.config_map.metadata,
            &d.deployment.metadata,
            &d.service.metadata,
            &d.pdb.metadata,
        ];
        for m in metas {
            let o = &m.owner_references.as_ref().unwrap()[0];
            assert_eq!(o.kind, "TracePipeline");
            assert_eq!(o.name, "orders");
            assert_eq!(o.controller, Some(true));
            assert_eq!(m.namespace.as_deref(), Some("shop"));
        }
    }

    #[test]
    fn a_pipeline_without_uid_is_refused() {
        let mut tp = sample();
        tp.metadata.uid = None;
        assert_eq!(
            desired(&tp, 1).unwrap_err(),
            BuildError::MissingMetadata("uid")
        );
    }

    #[test]
    fn table_options_follow_the_schema_spec() {
        let mut tp = sample();
        tp.spec.clickhouse.schema.attributes = crd::Attributes::Json;
        tp.spec.clickhouse.schema.ttl = Some("30d".into());
        let o = table_options(&tp.spec.clickhouse).unwrap();
        assert_eq!(o.attributes, tracehouse_schema::Attributes::Json);
        assert_eq!(o.ttl.unwrap().to_string(), "30d");
        tp.spec.clickhouse.schema.engine = EngineKind::ReplicatedMergeTree;
        let err = table_options(&tp.spec.clickhouse).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.schema.cluster"), "{err}");
        tp.spec.clickhouse.schema.ttl = Some("3 weeks".into());
        tp.spec.clickhouse.schema.cluster = Some("main".into());
        let err = table_options(&tp.spec.clickhouse).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.schema.ttl"), "{err}");
    }

    /// Compares `actual` with the committed snapshot; `UPDATE_SNAPSHOTS=1` rewrites it.
    fn assert_snapshot(name: &str, actual: &str) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("snapshots")
            .join(format!("{name}.yaml"));
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `UPDATE_SNAPSHOTS=1 cargo test -p tracehouse-operator --lib` and review",
                path.display()
            )
        });
        assert!(
            expected == actual,
            "{} is stale; run `UPDATE_SNAPSHOTS=1 cargo test -p tracehouse-operator --lib`, \
             review the diff and commit.\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        );
    }

    #[test]
    fn snapshot_of_the_sample_gateway() {
        let d = desired(&sample(), 8).unwrap();
        assert_eq!(d.replicas, 4);
        assert_snapshot("configmap", &serde_yaml::to_string(&d.config_map).unwrap());
        assert_snapshot("deployment", &serde_yaml::to_string(&d.deployment).unwrap());
        assert_snapshot("service", &serde_yaml::to_string(&d.service).unwrap());
        assert_snapshot("pdb", &serde_yaml::to_string(&d.pdb).unwrap());
    }
}
