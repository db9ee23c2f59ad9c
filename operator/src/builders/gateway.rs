//! The Kubernetes objects of a pipeline's gateway: the collector Deployment (container,
//! env, probes, security context; its volumes from `volumes.rs`), the metrics Service and the
//! PodDisruptionBudget. Pure; the snapshots in `operator/snapshots/` pin their shape.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, SecretKeySelector, SecurityContext, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::volumes::volumes;
use super::{
    BuildError, CONFIG_DIR, CONFIG_HASH_ANNOTATION, CONFIG_KEY, CONTAINER, ENV_KAFKA_SASL_PASSWORD,
    ENV_KAFKA_SASL_USERNAME, METRICS_PORT, Names, labels, meta, selector_labels,
};
use crate::crd::TracePipeline;
use crate::defaults::{MetricsBind, PodSettings};

/// The collector's own shutdown deadline plus a margin before the kubelet kills it.
const TERMINATION_GRACE_SECONDS: i64 = 35;

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
    // The user name from the Secret, or given in the spec (a Strimzi KafkaUser's Secret holds
    // only the password; the user is the Secret's name).
    let user = |env_name: &str, c: &crate::crd::CredentialsSecretRef| match &c.username {
        Some(u) => env_value(env_name, u.clone()),
        None => env_secret(env_name, &c.name, &c.username_key),
    };
    if let Some(c) = &s.clickhouse.credentials {
        env.push(user("CLICKHOUSE_USER", c));
        env.push(env_secret("CLICKHOUSE_PASSWORD", &c.name, &c.password_key));
    }
    // PLAIN and SCRAM; OAUTHBEARER's client id and secret are files (`volumes.rs`).
    if let Some(c) = s.kafka.sasl.as_ref().and_then(|s| s.credentials.as_ref()) {
        env.push(user(ENV_KAFKA_SASL_USERNAME, c));
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

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
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

/// Non-root as the image's user (65532, distroless `nonroot`), the runtime's seccomp profile.
/// A pipeline or the chart replaces it whole (OpenShift assigns the UID itself).
fn default_pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(65_532),
        run_as_group: Some(65_532),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// What the collector needs and no more: no privilege escalation, no capabilities, a
/// read-only root (its only writes are to the mounted volumes).
fn default_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
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

pub(super) fn deployment(
    tp: &TracePipeline,
    names: &Names,
    replicas: i32,
    config_hash: &str,
    pod: &PodSettings,
) -> Result<Deployment, BuildError> {
    let c = &tp.spec.collector;
    let (volumes, mounts) = volumes(tp, names);
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(pod.image.clone()),
        image_pull_policy: c.image_pull_policy.map(|p| p.as_str().to_owned()),
        args: Some(vec![
            "run".to_owned(),
            "--config".to_owned(),
            format!("{CONFIG_DIR}/{CONFIG_KEY}"),
            // Every address by default (port-forward, IPv6); on nodes whose pods share one
            // network, each pod's own (the kubelet expands $(POD_IP) from the env above).
            match pod.metrics_bind {
                MetricsBind::All => format!("--metrics-addr=[::]:{METRICS_PORT}"),
                MetricsBind::PodIp => format!("--metrics-addr=$(POD_IP):{METRICS_PORT}"),
            },
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
        resources: Some(pod.resources.clone().unwrap_or_else(default_resources)),
        security_context: Some(
            pod.security_context
                .clone()
                .unwrap_or_else(default_security_context),
        ),
        volume_mounts: Some(mounts),
        // A crash's last log lines become its termination message, which the operator
        // shows in the status (CrashLoopBackOff).
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Default::default()
    };
    // The user's labels and annotations first: ours win on the same key (the selector
    // labels must never change).
    let mut template_labels = pod.pod_labels.clone();
    template_labels.extend(labels(tp));
    let mut annotations = pod.pod_annotations.clone();
    annotations.extend([
        (CONFIG_HASH_ANNOTATION.to_owned(), config_hash.to_owned()),
        (
            "kubectl.kubernetes.io/default-container".to_owned(),
            CONTAINER.to_owned(),
        ),
    ]);
    let template_meta = ObjectMeta {
        labels: Some(template_labels),
        annotations: Some(annotations),
        ..Default::default()
    };
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
                    image_pull_secrets: non_empty(pod.image_pull_secrets.clone()),
                    service_account_name: pod.service_account_name.clone(),
                    node_selector: (!pod.node_selector.is_empty())
                        .then(|| pod.node_selector.clone()),
                    tolerations: non_empty(pod.tolerations.clone()),
                    affinity: pod.affinity.clone(),
                    topology_spread_constraints: non_empty(pod.topology_spread_constraints.clone()),
                    priority_class_name: pod.priority_class_name.clone(),
                    // The collector never talks to the Kubernetes API.
                    automount_service_account_token: Some(false),
                    termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
                    security_context: Some(
                        pod.pod_security_context
                            .clone()
                            .unwrap_or_else(default_pod_security_context),
                    ),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

pub(super) fn service(tp: &TracePipeline, names: &Names) -> Result<Service, BuildError> {
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

/// The PDB's `unhealthyPodEvictionPolicy`: a pod that is running but not ready may always
/// be evicted, whatever the budget says.
///
/// Why: a gateway is ready only while ClickHouse answers (`/readyz`), so during a ClickHouse
/// outage every gateway turns unready at once. Under the default policy (`IfHealthyBudget`)
/// unready pods may be evicted only while the budget still has room, and with every gateway
/// unready it has none: each eviction is refused and a node drain (a node-pool upgrade, a
/// cluster-autoscaler scale-down) stalls for as long as the database is away, exactly when the
/// cluster is already in trouble. Evicting an unready gateway loses nothing: offsets are
/// committed only after ClickHouse acknowledges, so whatever it held is read again by its
/// replacement or the group's other members. Ready gateways are still taken one at a time.
const UNHEALTHY_POD_EVICTION_POLICY: &str = "AlwaysAllow";

pub(super) fn pdb(tp: &TracePipeline, names: &Names) -> Result<PodDisruptionBudget, BuildError> {
    Ok(PodDisruptionBudget {
        metadata: meta(tp, &names.pdb)?,
        spec: Some(PodDisruptionBudgetSpec {
            // Voluntary disruptions (drains) take one ready collector at a time.
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(tp)),
                match_expressions: None,
            }),
            unhealthy_pod_eviction_policy: Some(UNHEALTHY_POD_EVICTION_POLICY.to_owned()),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::desired;
    use super::*;
    use crate::crd::fixtures::{pipeline, secured};
    use crate::kafka::security::{KAFKA_CLIENT_CERT_DIR, kafka_security_properties};

    /// Strimzi's KafkaUser Secrets as they are: a SCRAM user's holds only `password` (the
    /// user is the Secret's name), a TLS user's `user.crt`/`user.key`/`ca.crt`.
    /// The gateway's pod template spec.
    fn pod_spec(d: super::super::Desired) -> k8s_openapi::api::core::v1::PodSpec {
        d.deployment.spec.unwrap().template.spec.unwrap()
    }

    #[test]
    fn strimzi_kafka_user_secrets_are_used_as_they_are() {
        let tp = pipeline(serde_json::json!({
            "kafka": {
                "bootstrapServers": "my-cluster-kafka-bootstrap:9093",
                "tls": {
                    "ca": { "name": "my-cluster-cluster-ca-cert", "key": "ca.crt" },
                    "clientCertSecretName": "tls-user",
                    "clientCertKey": "user.crt",
                    "clientKeyKey": "user.key"
                },
                "sasl": {
                    "mechanism": "SCRAM-SHA-512",
                    "credentials": { "name": "scram-user", "username": "scram-user" }
                }
            },
            "clickhouse": { "endpoint": "http://clickhouse.db:8123" }
        }));
        let d = desired(&tp, 2).unwrap();
        let pod = d.deployment.spec.unwrap().template.spec.unwrap();
        let env = pod.containers[0].env.clone().unwrap();
        let user = env
            .iter()
            .find(|e| e.name == "KAFKA_SASL_USERNAME")
            .unwrap();
        assert_eq!(user.value.as_deref(), Some("scram-user"));
        let password = env
            .iter()
            .find(|e| e.name == "KAFKA_SASL_PASSWORD")
            .unwrap();
        let from = password
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (from.name.as_str(), from.key.as_str()),
            ("scram-user", "password")
        );
        let cert = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "kafka-client-cert")
            .and_then(|v| v.secret)
            .unwrap();
        let items: Vec<(String, String)> = cert
            .items
            .unwrap()
            .into_iter()
            .map(|i| (i.key, i.path))
            .collect();
        assert_eq!(
            items,
            [
                ("user.crt".to_owned(), "tls.crt".to_owned()),
                ("user.key".to_owned(), "tls.key".to_owned())
            ]
        );
        // The collector reads the same paths as with a kubernetes.io/tls Secret.
        let p = kafka_security_properties(tp.spec.kafka.tls.as_ref(), tp.spec.kafka.sasl.as_ref());
        assert_eq!(
            p["ssl.certificate.location"],
            format!("{KAFKA_CLIENT_CERT_DIR}/tls.crt")
        );
        // A kubernetes.io/tls Secret is mounted whole, as before (no rollout on upgrade).
        let plain = secured();
        let d = desired(&plain, 2).unwrap();
        let v = d
            .deployment
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .volumes
            .unwrap();
        let c = v
            .iter()
            .find(|v| v.name == "clickhouse-client-cert")
            .unwrap();
        assert_eq!(c.secret.as_ref().unwrap().items, None);
    }

    /// OpenShift's restricted SCC assigns a UID from the namespace's range and refuses a pod
    /// that names another: a pipeline's pod security context without `runAsUser` must reach
    /// the pod without one, not merged with the default's 65532.
    #[test]
    fn a_security_context_without_run_as_user_reaches_the_pod_as_it_is() {
        let tp = pipeline(serde_json::json!({
            "kafka": { "bootstrapServers": "k:9092" },
            "clickhouse": { "endpoint": "http://ch:8123" },
            "collector": {
                "podSecurityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
                "securityContext": { "allowPrivilegeEscalation": false, "capabilities": { "drop": ["ALL"] } }
            }
        }));
        let pod = pod_spec(desired(&tp, 1).unwrap());
        let psc = pod.security_context.unwrap();
        assert_eq!(psc.run_as_user, None);
        assert_eq!(psc.run_as_group, None);
        assert_eq!(psc.run_as_non_root, Some(true));
        let sc = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(
            sc.read_only_root_filesystem, None,
            "replaced whole, not merged"
        );
        assert_eq!(sc.allow_privilege_escalation, Some(false));
    }

    #[test]
    fn without_a_security_context_the_pod_runs_as_the_images_user_read_only() {
        let pod = pod_spec(desired(&secured(), 1).unwrap());
        assert_eq!(pod.security_context.unwrap().run_as_user, Some(65_532));
        let sc = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_owned()]));
    }

    /// The chart's `collector.resources` and security contexts apply where the pipeline is
    /// silent; a pipeline's own win whole.
    #[test]
    fn the_charts_resources_and_security_contexts_apply_unless_the_pipeline_sets_its_own() {
        let chart = crate::defaults::CollectorDefaults::from_json(
            &serde_json::json!({
                "resources": { "requests": { "cpu": "2", "memory": "1Gi" }, "limits": { "cpu": "2", "memory": "2Gi" } },
                "podSecurityContext": { "runAsNonRoot": true },
                "securityContext": {}
            })
            .to_string(),
        )
        .unwrap();
        let silent = super::super::desired_with(&secured(), 1, &chart).unwrap();
        let pod = silent.deployment.spec.unwrap().template.spec.unwrap();
        let limits = pod.containers[0].resources.clone().unwrap().limits.unwrap();
        assert_eq!(limits["cpu"].0, "2");
        assert_eq!(pod.security_context.unwrap().run_as_user, None);
        assert_eq!(
            pod.containers[0]
                .security_context
                .clone()
                .unwrap()
                .read_only_root_filesystem,
            Some(true),
            "an empty map from Helm is the operator's default"
        );
        let mut own = secured();
        own.spec.collector.resources = Some(ResourceRequirements {
            limits: Some(quantities(&[("memory", "3Gi")])),
            ..Default::default()
        });
        let pod = pod_spec(super::super::desired_with(&own, 1, &chart).unwrap());
        let r = pod.containers[0].resources.clone().unwrap();
        assert_eq!(r.requests, None);
        assert_eq!(r.limits.unwrap()["memory"].0, "3Gi");
    }
}
