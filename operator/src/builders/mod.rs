//! Pure desired-state builders: a `TracePipeline` (plus the partition count the reconciler
//! read from Kafka) in, the objects the gateway needs out — the collector ConfigMap, the
//! Deployment, the metrics Service and the PodDisruptionBudget, all owned by the pipeline.
//!
//! Nothing here does IO, so every object is snapshot-tested without a cluster (see the tests
//! at the bottom and `operator/snapshots/`). One file per role:
//! - this file: names, labels, ownership, the replica rule of the partitions, and
//!   [`desired`], which puts the parts together;
//! - [`config`]: the collector's configuration, rendered with the collector's own `Config`
//!   type and checked with its own `validate()` (the operator can never write a file the
//!   collector refuses), and its hash;
//! - [`crate::kafka::security`] (a floor down, shared with the operator's own Kafka client):
//!   librdkafka TLS/SASL settings implied by `spec.kafka.tls`/`sasl`;
//! - [`clickhouse_tls`]: the collector's ClickHouse TLS files implied by `spec.clickhouse.tls`;
//! - [`table`]: the traces table's options for the schema crate (`spec.clickhouse`);
//! - [`gateway`]: the Kubernetes objects — the Deployment (container, env, volumes,
//!   probes, security), the metrics Service and the PodDisruptionBudget;
//! - [`owned`]: each of those objects as the apply takes it ([`Owned`]), in the order
//!   [`Desired::objects`] gives them;
//! - [`revision`]: the pipeline as an older collector can take it (version skew): the
//!   settings newer than its config revision left out, and named.

mod clickhouse_tls;
mod config;
mod gateway;
mod owned;
mod revision;
mod table;
mod volumes;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use tracehouse_contract::yaml;

use crate::crd::{ReplicasSpec, TracePipeline};
use crate::defaults::{self, CollectorDefaults};

pub use config::{collector_config, config_hash};
pub use owned::Owned;
pub use revision::{NotApplied, restricted};
pub use table::table_options;

/// Pod-template annotation with the hash of the collector configuration: a new config
/// changes the template, so the Deployment rolls its pods.
pub const CONFIG_HASH_ANNOTATION: &str = "tracehouse.dev/config-hash";
/// Pod-template annotation with the fingerprint of the Secrets the pods use (credentials,
/// certificates): a rotated Secret changes the template, so the Deployment rolls its pods
/// (env vars from Secrets are read only at container start).
pub const SECRETS_HASH_ANNOTATION: &str = "tracehouse.dev/secrets-hash";
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
/// Environment variables the collector reads the Kafka SASL credentials from.
pub const ENV_KAFKA_SASL_USERNAME: &str = "KAFKA_SASL_USERNAME";
pub const ENV_KAFKA_SASL_PASSWORD: &str = "KAFKA_SASL_PASSWORD";

/// Why a spec cannot be turned into objects (the CRD's validation should have caught it;
/// this is the backstop for clients that bypass it, e.g. older CRD versions).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    #[error("invalid spec field `{field}`: {reason}")]
    InvalidField {
        field: std::borrow::Cow<'static, str>,
        reason: String,
    },
    #[error("the pipeline has no {0} (it was never stored by the API server)")]
    MissingMetadata(&'static str),
}

pub(crate) fn invalid(
    field: impl Into<std::borrow::Cow<'static, str>>,
    reason: impl ToString,
) -> BuildError {
    BuildError::InvalidField {
        field: field.into(),
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

/// Everything the gateway of one pipeline consists of.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub partitions: i32,
    pub replicas: i32,
    pub config_hash: String,
    /// The collector image the pods run.
    pub image: String,
    /// A newer default image the gateway is held back from (`upgradePolicy: Manual`).
    pub upgrade_available: Option<String>,
    /// The config revision the rendered `collector.yaml` needs.
    pub required_revision: u32,
    /// Spec settings left out: the gateway's collector does not know them.
    pub not_applied: Vec<NotApplied>,
    /// `status.processing` of the rendered configuration (`None`: no rules).
    pub processing: Option<String>,
    /// Every Secret the pods read ([`referenced_secrets`] of what was rendered).
    pub referenced_secrets: std::collections::BTreeSet<String>,
    pub config_map: ConfigMap,
    pub deployment: Deployment,
    pub service: Service,
    pub pdb: PodDisruptionBudget,
}

/// The gateway for `tp` over `partitions` partitions, without chart defaults.
pub fn desired(tp: &TracePipeline, partitions: i32) -> Result<Desired, BuildError> {
    desired_with(tp, partitions, &CollectorDefaults::default())
}

/// The gateway for `tp` over `partitions` partitions, with the chart's `defaults` under the
/// pipeline's own `spec.collector`.
pub fn desired_with(
    tp: &TracePipeline,
    partitions: i32,
    defaults: &CollectorDefaults,
) -> Result<Desired, BuildError> {
    desired_for(tp, partitions, defaults, None)
}

/// The collector image the gateway of `tp` runs, and whether it is the operator's own
/// release (no version skew to mind: `CollectorDefaults::is_own_release`).
pub fn collector_image(tp: &TracePipeline, defaults: &CollectorDefaults) -> (String, bool) {
    let image = defaults::resolve(tp, defaults, &selector_labels(tp)).image;
    let own = defaults.is_own_release(&image);
    (image, own)
}

/// [`desired_with`] for a gateway whose collector knows config revision `revision` (`None`:
/// everything this operator renders): newer settings are left out ([`restricted`]) and listed
/// in [`Desired::not_applied`].
pub fn desired_for(
    tp: &TracePipeline,
    partitions: i32,
    defaults: &CollectorDefaults,
    revision: Option<u32>,
) -> Result<Desired, BuildError> {
    let (tp, not_applied) = match revision {
        Some(r) => restricted(tp, r)?,
        None => (std::borrow::Cow::Borrowed(tp), Vec::new()),
    };
    let tp = tp.as_ref();
    let names = Names::of(&tp.name_any());
    let pod = defaults::resolve(tp, defaults, &selector_labels(tp));
    let (config, required_revision) = revision::config_for(tp, revision)?;
    let rendered = yaml::to_string(&config)
        .map_err(|e| invalid("spec", format!("cannot render the collector config: {e}")))?;
    let hash = config_hash(&rendered);
    let replicas = desired_replicas(partitions, &tp.spec.replicas);
    Ok(Desired {
        partitions,
        replicas,
        required_revision,
        not_applied,
        processing: tp.spec.processing.as_ref().and_then(|p| p.label()),
        referenced_secrets: referenced_secrets(tp),
        config_map: ConfigMap {
            metadata: meta(tp, &names.config_map)?,
            data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), rendered)])),
            ..Default::default()
        },
        deployment: gateway::deployment(tp, &names, replicas, &hash, &pod)?,
        service: gateway::service(tp, &names)?,
        pdb: gateway::pdb(tp, &names)?,
        config_hash: hash,
        image: pod.image,
        upgrade_available: pod.upgrade_available,
    })
}

impl Desired {
    /// The objects to apply, in the order they must be applied: the Deployment last, so its
    /// pods find their ConfigMap (and Service, and budget) in place.
    pub fn objects(&self) -> Result<Vec<Owned>, serde_json::Error> {
        Ok(vec![
            Owned::of(&self.config_map)?,
            Owned::of(&self.service)?,
            Owned::of(&self.pdb)?,
            Owned::of(&self.deployment)?,
        ])
    }

    /// The same gateway at `replicas` (another owner of the count decided it, see
    /// `crate::autoscale::owner`); the partitions still cap it.
    pub fn with_replicas(mut self, replicas: i32) -> Self {
        let replicas = replicas.clamp(0, self.partitions.max(0));
        self.replicas = replicas;
        if let Some(spec) = self.deployment.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
        self
    }

    /// Stamps the fingerprint of the referenced Secrets on the pod template.
    pub fn with_secrets_hash(mut self, hash: String) -> Self {
        if let Some(t) = self.deployment.spec.as_mut().map(|s| &mut s.template) {
            t.metadata
                .get_or_insert_with(Default::default)
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(SECRETS_HASH_ANNOTATION.to_owned(), hash);
        }
        self
    }
}

/// Names of every Secret the gateway pods read (credentials, CA bundles, client
/// certificates, the processing hash key), whose change must roll them.
pub fn referenced_secrets(tp: &TracePipeline) -> std::collections::BTreeSet<String> {
    let s = &tp.spec;
    let k = s.kafka.tls.as_ref();
    let c = s.clickhouse.tls.as_ref();
    [
        s.clickhouse.credentials.as_ref().map(|r| &r.name),
        s.kafka
            .sasl
            .as_ref()
            .and_then(|r| r.credentials.as_ref())
            .map(|r| &r.name),
        s.kafka
            .sasl
            .as_ref()
            .and_then(|r| r.oauth.as_ref())
            .map(|o| &o.credentials.name),
        k.and_then(|t| t.ca.as_ref()).map(|r| &r.name),
        k.and_then(|t| t.client_cert_secret_name.as_ref()),
        c.and_then(|t| t.ca.as_ref()).map(|r| &r.name),
        c.and_then(|t| t.client_cert_secret_name.as_ref()),
        s.processing
            .as_ref()
            .and_then(|p| p.hash_key.as_ref())
            .map(|r| &r.name),
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::fixtures::{sample, secured};
    use crate::crd::{CredentialsSecretRef, KafkaSasl, SaslMechanism, SecretKeyRef, TlsSpec};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use std::path::PathBuf;

    fn spec_replicas(per: i32, min: i32, max: i32) -> ReplicasSpec {
        ReplicasSpec {
            partitions_per_replica: per,
            count: None,
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
    fn secrets_never_reach_the_config_map() {
        let mut tp = sample();
        tp.spec.kafka.sasl = Some(KafkaSasl {
            mechanism: SaslMechanism::ScramSha512,
            credentials: Some(CredentialsSecretRef {
                name: "kafka-user".into(),
                username: None,
                username_key: "user".into(),
                password_key: "pass".into(),
            }),
            oauth: None,
        });
        tp.spec.kafka.tls = Some(TlsSpec {
            ca: Some(SecretKeyRef {
                name: "kafka-ca".into(),
                key: "ca.pem".into(),
            }),
            client_cert_secret_name: Some("kafka-client".into()),
            insecure_skip_verify: false,
            ..Default::default()
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
    fn the_disruption_budget_takes_one_ready_gateway_at_a_time_and_any_unready_one() {
        let d = desired(&sample(), 4).unwrap();
        let spec = d.pdb.spec.as_ref().unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        // During a ClickHouse outage every gateway is unready: drains must still proceed.
        assert_eq!(
            spec.unhealthy_pod_eviction_policy.as_deref(),
            Some("AlwaysAllow")
        );
        assert_eq!(
            spec.selector.as_ref().unwrap().match_labels,
            Some(selector_labels(&sample()))
        );
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
    fn another_owner_sets_the_replicas_the_partitions_still_cap() {
        let d = desired(&sample(), 8).unwrap();
        assert_eq!(d.replicas, 4);
        let scaled = d.clone().with_replicas(5);
        assert_eq!(scaled.replicas, 5);
        assert_eq!(scaled.deployment.spec.as_ref().unwrap().replicas, Some(5));
        assert_eq!(d.with_replicas(12).replicas, 8);
    }

    #[test]
    fn snapshot_of_the_sample_gateway() {
        let d = desired(&sample(), 8).unwrap();
        assert_snapshot("configmap", &yaml::to_string(&d.config_map).unwrap());
        assert_snapshot("deployment", &yaml::to_string(&d.deployment).unwrap());
        assert_snapshot("service", &yaml::to_string(&d.service).unwrap());
        assert_snapshot("pdb", &yaml::to_string(&d.pdb).unwrap());
    }

    #[test]
    fn every_referenced_secret_feeds_the_roll_annotation() {
        let tp = secured();
        let names: Vec<String> = referenced_secrets(&tp).into_iter().collect();
        assert_eq!(
            names,
            [
                "clickhouse-ca",
                "clickhouse-client",
                "clickhouse-writer",
                "kafka-ca",
                "kafka-scram"
            ]
        );
        let d = desired(&tp, 2)
            .unwrap()
            .with_secrets_hash("sha256:ab".into());
        let annotations = d
            .deployment
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap();
        assert_eq!(annotations[SECRETS_HASH_ANNOTATION], "sha256:ab");
    }
}
