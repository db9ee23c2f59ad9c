//! The chart's defaults for every gateway (`collector.*` in the Helm values), and the pure
//! rule that puts them under a pipeline's own `spec.collector`: the image and its upgrade
//! policy, pull secrets, service account, placement, pod metadata, resources and security
//! contexts.
//!
//! The chart hands them over as one JSON document in `TRACEHOUSE_COLLECTOR_DEFAULTS` (an
//! environment variable, so a changed value rolls the operator like any other setting).
//! A pipeline's field wins over the chart's; maps (node selector, labels, annotations) merge
//! key by key with the pipeline's keys winning.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, PodSecurityContext, ResourceRequirements, SecurityContext,
    Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;

use crate::crd::{TracePipeline, UpgradePolicy, default_image};

/// Environment variable the chart sets to the JSON of its `collector` values.
pub const ENV: &str = "TRACEHOUSE_COLLECTOR_DEFAULTS";

/// What the chart says every gateway gets unless its pipeline says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CollectorDefaults {
    /// The default collector image (`repository:tag` or `repository@digest`); empty: this
    /// operator release's `tracehouse/collector:<version>`.
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub upgrade_policy: Option<UpgradePolicy>,
    #[serde(default)]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(default)]
    pub service_account_name: String,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    #[serde(default)]
    pub affinity: Option<Affinity>,
    /// `None`: the operator's default spread (zone and node, `ScheduleAnyway`).
    #[serde(default)]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    #[serde(default)]
    pub priority_class_name: String,
    #[serde(default)]
    pub pod_annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub pod_labels: BTreeMap<String, String>,
    /// Where the collectors serve /metrics, /healthz and /readyz.
    #[serde(default)]
    pub metrics_bind: MetricsBind,
    /// CPU and memory of each collector; `None`: the operator's own default.
    #[serde(default)]
    pub resources: Option<ResourceRequirements>,
    /// The gateway pods' security context, whole; `None`: the operator's own default.
    #[serde(default)]
    pub pod_security_context: Option<PodSecurityContext>,
    /// The collector container's security context, whole; `None`: the operator's default.
    #[serde(default)]
    pub security_context: Option<SecurityContext>,
}

/// Where the collectors listen for /metrics and the probes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum MetricsBind {
    /// Every IPv4 and IPv6 address of the pod (`[::]`): what `kubectl port-forward` and
    /// IPv6-only clusters need.
    #[default]
    All,
    /// Only the pod's IP (`$(POD_IP)`, IPv4): for nodes whose pods share one network, as on
    /// the local stack's node agent, where two pods cannot both bind all addresses.
    #[serde(rename = "PodIP")]
    PodIp,
}

/// Why the chart's defaults cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{ENV} is not a valid collector defaults document: {0}")]
pub struct DefaultsError(#[from] serde_json::Error);

impl CollectorDefaults {
    /// From the JSON the chart renders; an empty document means no defaults.
    pub fn from_json(text: &str) -> Result<Self, DefaultsError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut d: Self = serde_json::from_str(text)?;
        // Helm renders an unset affinity as `{}`: no affinity.
        if d.affinity
            .as_ref()
            .is_some_and(|a| a == &Affinity::default())
        {
            d.affinity = None;
        }
        // Likewise an empty map for the others: the operator's default.
        if d.resources.as_ref() == Some(&ResourceRequirements::default()) {
            d.resources = None;
        }
        if d.pod_security_context.as_ref() == Some(&PodSecurityContext::default()) {
            d.pod_security_context = None;
        }
        if d.security_context.as_ref() == Some(&SecurityContext::default()) {
            d.security_context = None;
        }
        Ok(d)
    }

    /// The image a gateway on the default image runs.
    pub fn default_image(&self) -> String {
        if self.image.is_empty() {
            default_image()
        } else {
            self.image.clone()
        }
    }

    /// Whether `image` is this operator release's own collector: the default image, tagged
    /// with the operator's version (the chart's `appVersion`). A default pinned to another
    /// tag or to a digest may be another release, whose config revision is asked
    /// (`crate::skew`), as for any other image.
    pub fn is_own_release(&self, image: &str) -> bool {
        image == self.default_image() && image_tag(image) == Some(env!("CARGO_PKG_VERSION"))
    }
}

/// The tag of an image reference (`registry:5000/repo:tag`); `None` without one, or when a
/// digest pins it (`repo@sha256:…`, `repo:tag@sha256:…`): the digest, not the tag, says what runs.
fn image_tag(image: &str) -> Option<&str> {
    if image.contains('@') {
        return None;
    }
    let (_, last) = image.rsplit_once('/').unwrap_or(("", image));
    last.rsplit_once(':').map(|(_, tag)| tag)
}

/// The image, placement and metadata of one pipeline's gateway pods.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSettings {
    pub image: String,
    /// The newer default the gateway is held back from (`upgradePolicy: Manual`).
    pub upgrade_available: Option<String>,
    pub image_pull_secrets: Vec<LocalObjectReference>,
    pub service_account_name: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub affinity: Option<Affinity>,
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    pub priority_class_name: Option<String>,
    pub pod_annotations: BTreeMap<String, String>,
    pub pod_labels: BTreeMap<String, String>,
    pub metrics_bind: MetricsBind,
    /// `None`: the builder's default (`builders::gateway`).
    pub resources: Option<ResourceRequirements>,
    pub pod_security_context: Option<PodSecurityContext>,
    pub security_context: Option<SecurityContext>,
}

fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn merged(
    under: &BTreeMap<String, String>,
    over: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut m = under.clone();
    m.extend(over.iter().map(|(k, v)| (k.clone(), v.clone())));
    m
}

/// Spread over zones, then over nodes, as far as the cluster allows: never a reason to leave
/// a pod unscheduled (`ScheduleAnyway`). Only pods of the same rollout count
/// (`pod-template-hash`), so a rollout's surge pod does not skew against old pods.
pub fn default_spread(selector: &BTreeMap<String, String>) -> Vec<TopologySpreadConstraint> {
    ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
        .into_iter()
        .map(|key| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.to_owned(),
            when_unsatisfiable: "ScheduleAnyway".to_owned(),
            label_selector: Some(LabelSelector {
                match_labels: Some(selector.clone()),
                match_expressions: None,
            }),
            match_label_keys: Some(vec!["pod-template-hash".to_owned()]),
            ..Default::default()
        })
        .collect()
}

/// The pipeline's own settings over the chart's. `selector` labels the gateway's pods (for
/// the default spread).
pub fn resolve(
    tp: &TracePipeline,
    defaults: &CollectorDefaults,
    selector: &BTreeMap<String, String>,
) -> PodSettings {
    let c = &tp.spec.collector;
    let default = defaults.default_image();
    let policy = c
        .upgrade_policy
        .or(defaults.upgrade_policy)
        .unwrap_or(UpgradePolicy::Auto);
    let running = tp.status.as_ref().and_then(|s| s.collector_image.clone());
    let (image, upgrade_available) = match (&c.image, policy, running) {
        (Some(image), _, _) => (image.clone(), None),
        (None, UpgradePolicy::Manual, Some(running)) => {
            let newer = (running != default).then_some(default);
            (running, newer)
        }
        (None, _, _) => (default, None),
    };
    PodSettings {
        image,
        upgrade_available,
        image_pull_secrets: if c.image_pull_secrets.is_empty() {
            defaults.image_pull_secrets.clone()
        } else {
            c.image_pull_secrets.clone()
        },
        service_account_name: c
            .service_account_name
            .clone()
            .or_else(|| some(&defaults.service_account_name)),
        node_selector: merged(&defaults.node_selector, &c.node_selector),
        tolerations: if c.tolerations.is_empty() {
            defaults.tolerations.clone()
        } else {
            c.tolerations.clone()
        },
        affinity: c.affinity.clone().or_else(|| defaults.affinity.clone()),
        topology_spread_constraints: c
            .topology_spread_constraints
            .clone()
            .or_else(|| defaults.topology_spread_constraints.clone())
            .unwrap_or_else(|| default_spread(selector)),
        priority_class_name: c
            .priority_class_name
            .clone()
            .or_else(|| some(&defaults.priority_class_name)),
        pod_annotations: merged(&defaults.pod_annotations, &c.pod_annotations),
        pod_labels: merged(&defaults.pod_labels, &c.pod_labels),
        metrics_bind: defaults.metrics_bind,
        // Whole objects, not merged: a pipeline that leaves `runAsUser` out (OpenShift)
        // must not get the chart's back.
        resources: c.resources.clone().or_else(|| defaults.resources.clone()),
        pod_security_context: c
            .pod_security_context
            .clone()
            .or_else(|| defaults.pod_security_context.clone()),
        security_context: c
            .security_context
            .clone()
            .or_else(|| defaults.security_context.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::TracePipelineStatus;
    use crate::crd::fixtures::pipeline;
    use serde_json::json;

    fn tp(collector: serde_json::Value) -> TracePipeline {
        pipeline(json!({
            "kafka": { "bootstrapServers": "k:9092" },
            "clickhouse": { "endpoint": "http://ch:8123" },
            "collector": collector,
        }))
    }

    fn chart() -> CollectorDefaults {
        CollectorDefaults::from_json(
            &json!({
                "image": "registry.example/tracehouse/collector:0.2.0",
                "imagePullSecrets": [{ "name": "registry" }],
                "serviceAccountName": "collectors",
                "nodeSelector": { "pool": "observability", "kubernetes.io/os": "linux" },
                "tolerations": [{ "key": "dedicated", "operator": "Exists", "effect": "NoSchedule" }],
                "affinity": {},
                "priorityClassName": "high",
                "podAnnotations": { "team": "obs" },
                "podLabels": { "cost-center": "42" },
            })
            .to_string(),
        )
        .unwrap()
    }

    #[test]
    fn only_the_default_image_at_the_operators_version_is_its_own_release() {
        let version = env!("CARGO_PKG_VERSION");
        let built_in = CollectorDefaults::default();
        assert!(built_in.is_own_release(&default_image()));
        assert!(!built_in.is_own_release("tracehouse/collector:d00aafd"));
        let chart = |image: &str| CollectorDefaults {
            image: image.to_owned(),
            ..Default::default()
        };
        let at_version = format!("registry.example:5000/tracehouse/collector:{version}");
        assert!(chart(&at_version).is_own_release(&at_version));
        // The chart's tag pinned to another release, or a digest: asked like any other image.
        let older = "registry.example:5000/tracehouse/collector:0.0.9";
        assert!(!chart(older).is_own_release(older));
        let digest = format!("tracehouse/collector:{version}@sha256:abcd");
        assert!(!chart(&digest).is_own_release(&digest));
        assert!(
            !chart("registry.example:5000/collector")
                .is_own_release("registry.example:5000/collector")
        );
        assert_eq!(image_tag("registry.example:5000/collector"), None);
        assert_eq!(image_tag("collector:1.2"), Some("1.2"));
    }

    #[test]
    fn the_charts_defaults_apply_where_the_pipeline_is_silent() {
        let s = resolve(&tp(json!({})), &chart(), &BTreeMap::new());
        assert_eq!(s.image, "registry.example/tracehouse/collector:0.2.0");
        assert_eq!(s.image_pull_secrets[0].name, "registry");
        assert_eq!(s.service_account_name.as_deref(), Some("collectors"));
        assert_eq!(s.node_selector["pool"], "observability");
        assert_eq!(s.tolerations.len(), 1);
        assert_eq!(s.affinity, None, "Helm's {{}} is no affinity");
        assert_eq!(s.priority_class_name.as_deref(), Some("high"));
        assert_eq!(s.pod_labels["cost-center"], "42");
        assert_eq!(s.topology_spread_constraints.len(), 2, "the default spread");
    }

    #[test]
    fn the_pipelines_own_settings_win_and_maps_merge() {
        let s = resolve(
            &tp(json!({
                "image": "mine:1",
                "imagePullSecrets": [{ "name": "other" }],
                "serviceAccountName": "orders-writer",
                "nodeSelector": { "pool": "spot" },
                "tolerations": [],
                "topologySpreadConstraints": [],
                "podAnnotations": { "team": "orders", "x": "1" },
            })),
            &chart(),
            &BTreeMap::new(),
        );
        assert_eq!(s.image, "mine:1");
        assert_eq!(s.image_pull_secrets[0].name, "other");
        assert_eq!(s.service_account_name.as_deref(), Some("orders-writer"));
        assert_eq!(s.node_selector["pool"], "spot");
        assert_eq!(s.node_selector["kubernetes.io/os"], "linux", "merged");
        assert_eq!(s.tolerations.len(), 1, "an empty list is 'not set'");
        assert!(
            s.topology_spread_constraints.is_empty(),
            "[] turns spreading off"
        );
        assert_eq!(s.pod_annotations["team"], "orders");
        assert_eq!(s.pod_annotations["x"], "1");
    }

    #[test]
    fn without_the_chart_the_release_image_and_the_default_spread() {
        let selector = BTreeMap::from([("app".to_owned(), "gw".to_owned())]);
        let s = resolve(
            &tp(json!({})),
            &CollectorDefaults::from_json("").unwrap(),
            &selector,
        );
        assert_eq!(s.image, default_image());
        assert_eq!(s.service_account_name, None);
        let keys: Vec<&str> = s
            .topology_spread_constraints
            .iter()
            .map(|t| t.topology_key.as_str())
            .collect();
        assert_eq!(
            keys,
            ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
        );
        assert!(
            s.topology_spread_constraints
                .iter()
                .all(|t| t.when_unsatisfiable == "ScheduleAnyway")
        );
    }

    #[test]
    fn a_manual_upgrade_policy_holds_the_running_image_and_names_the_newer_one() {
        let mut held = tp(json!({ "upgradePolicy": "Manual" }));
        // First rollout: nothing runs yet, so the default.
        let first = resolve(&held, &chart(), &BTreeMap::new());
        assert_eq!(first.image, "registry.example/tracehouse/collector:0.2.0");
        assert_eq!(first.upgrade_available, None);
        held.status = Some(TracePipelineStatus {
            collector_image: Some("registry.example/tracehouse/collector:0.1.0".into()),
            ..Default::default()
        });
        let s = resolve(&held, &chart(), &BTreeMap::new());
        assert_eq!(s.image, "registry.example/tracehouse/collector:0.1.0");
        assert_eq!(
            s.upgrade_available.as_deref(),
            Some("registry.example/tracehouse/collector:0.2.0")
        );
        // The chart can make Manual the default; Auto on the pipeline still follows.
        let manual = CollectorDefaults {
            upgrade_policy: Some(UpgradePolicy::Manual),
            ..chart()
        };
        let mut auto = tp(json!({ "upgradePolicy": "Auto" }));
        auto.status = held.status.clone();
        assert_eq!(
            resolve(&auto, &manual, &BTreeMap::new()).image,
            "registry.example/tracehouse/collector:0.2.0"
        );
        let mut silent = tp(json!({}));
        silent.status = held.status.clone();
        assert_eq!(
            resolve(&silent, &manual, &BTreeMap::new()).image,
            "registry.example/tracehouse/collector:0.1.0"
        );
    }

    #[test]
    fn an_unknown_key_in_the_charts_document_is_refused() {
        assert!(CollectorDefaults::from_json(r#"{"imagePullSecret": []}"#).is_err());
    }

    /// The chart's goldens carry the JSON the operator parses: the two cannot drift.
    #[test]
    fn the_charts_rendered_defaults_parse() {
        for golden in ["default", "full"] {
            let path = format!(
                "{}/../charts/tracehouse/golden/{golden}.yaml",
                env!("CARGO_MANIFEST_DIR")
            );
            let text = std::fs::read_to_string(&path).unwrap();
            let line = text
                .lines()
                .skip_while(|l| !l.contains(ENV))
                .nth(1)
                .unwrap_or_else(|| panic!("{path} sets no {ENV}"));
            let quoted = line.trim().trim_start_matches("value: ");
            let json: String = serde_json::from_str(quoted).unwrap();
            let d = CollectorDefaults::from_json(&json).unwrap();
            assert!(
                d.image
                    .ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
                "{golden}: {}",
                d.image
            );
            if golden == "full" {
                assert_eq!(d.upgrade_policy, Some(UpgradePolicy::Manual));
                assert_eq!(
                    d.image_pull_secrets.len(),
                    2,
                    "global's and the collector's"
                );
                assert_eq!(d.topology_spread_constraints, Some(vec![]));
            } else {
                assert_eq!(
                    d.image,
                    default_image(),
                    "the chart's default is the release's"
                );
                assert_eq!(d.topology_spread_constraints, None);
            }
        }
    }
}
