//! Operator ↔ collector version skew, pure: which configuration revision the collector a
//! gateway runs knows (`tracehouse_contract::revision`), and what the status says of the
//! settings it cannot take (docs/upgrade.md, *Operator ↔ collector version skew*).
//!
//! A gateway on the operator's own default image, tagged with its version, runs the collector
//! of this operator's release: nothing to ask. One on another image (`upgradePolicy: Manual`
//! holding it back, a pinned `spec.collector.image`, the chart's `collector.image` pinned to
//! another tag or a digest: `CollectorDefaults::is_own_release`) is asked, through the reconcile's one door to the pods
//! (`reconcile::Backends`), for its `tracehouse_build_info` on one ready pod of that image
//! ([`pod_to_ask`], [`revision_in`]); the answer is kept in `status.collectorConfigRevision`
//! with the image it was read from, so a scrape that fails later, or an operator restart,
//! finds it again ([`known`]). `builders::desired_for` then renders only what that revision
//! knows and names what it left out ([`NotApplied`]); [`verdict`] is the `ConfigApplied`
//! condition. Unknown (no ready pod of the image yet), everything is rendered, as before.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tracehouse_contract::metric_names::{BUILD_INFO, CONFIG_REVISION_LABEL, PREFIX};
use tracehouse_contract::revision::{BASELINE_REVISION, CONFIG_REVISION};

use crate::builders::CONTAINER;
pub use crate::builders::NotApplied;
use crate::crd::TracePipelineStatus;
use crate::gateway_pods;

/// `ConfigApplied` reasons.
pub const APPLIED: &str = "Applied";
pub const COLLECTOR_TOO_OLD: &str = "CollectorTooOld";
pub const REVISION_UNKNOWN: &str = "RevisionUnknown";

/// What the operator knows of the configuration revision of the collector a gateway runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// The operator's own default image: this release's collector.
    Own,
    /// Read from the collector's `tracehouse_build_info` (now, or stored for this image).
    Read(u32),
    /// Another image, and no ready pod of it has said yet.
    Unknown,
}

impl Known {
    /// The revision to render for: `None`, everything this operator knows.
    pub fn revision(self) -> Option<u32> {
        match self {
            Self::Read(r) => Some(r),
            Self::Own | Self::Unknown => None,
        }
    }
}

/// The skew check of one reconcile: the gateway's image, what is known of its collector,
/// and what the rendered configuration needs and left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub image: String,
    pub known: Known,
    /// The revision the rendered `collector.yaml` needs.
    pub required: u32,
    pub not_applied: Vec<NotApplied>,
}

/// The configuration revision a collector's /metrics `text` reports: `tracehouse_build_info`'s
/// `config_revision`, or the baseline for a collector that serves tracehouse metrics but no
/// build_info (releases before it); `None` when the text is no tracehouse collector's.
pub fn revision_in(text: &str) -> Option<u32> {
    let label = format!("{CONFIG_REVISION_LABEL}=\"");
    let mut tracehouse = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix(BUILD_INFO.exposed)
            && rest.starts_with('{')
            && let Some((_, after)) = rest.split_once(label.as_str())
            && let Some((value, _)) = after.split_once('"')
            && let Ok(revision) = value.parse()
        {
            return Some(revision);
        }
        tracehouse |= line
            .strip_prefix(PREFIX)
            .is_some_and(|rest| rest.starts_with('_'));
    }
    tracehouse.then_some(BASELINE_REVISION)
}

/// The IP of the pod to ask: the first ready one (by name) whose collector container runs
/// `image`.
pub fn pod_to_ask<'a>(pods: &'a [Pod], image: &str) -> Option<&'a str> {
    let mut ready: Vec<&Pod> = pods
        .iter()
        .filter(|p| gateway_pods::is_ready(p))
        .filter(|p| {
            p.spec.as_ref().is_some_and(|s| {
                s.containers
                    .iter()
                    .any(|c| c.name == CONTAINER && c.image.as_deref() == Some(image))
            })
        })
        .collect();
    ready.sort_by_key(|p| p.name_any());
    ready
        .into_iter()
        .find_map(|p| p.status.as_ref()?.pod_ip.as_deref())
}

/// What is known of the collector on `image`: what a pod said now (`read`), else what the
/// stored status recorded for this same image, else nothing.
pub fn known(read: Option<u32>, stored: Option<&TracePipelineStatus>, image: &str) -> Known {
    let recorded = stored
        .filter(|s| s.collector_image.as_deref() == Some(image))
        .and_then(|s| s.collector_config_revision)
        .and_then(|r| u32::try_from(r).ok());
    read.or(recorded).map_or(Known::Unknown, Known::Read)
}

fn listed(fields: &[NotApplied]) -> String {
    fields
        .iter()
        .map(|f| format!("{} (config revision {})", f.field, f.revision))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `ConfigApplied` condition of `seen`: `(status, reason, message)`.
pub fn verdict(seen: &Seen) -> (bool, &'static str, String) {
    let image = &seen.image;
    match seen.known {
        Known::Read(r) if !seen.not_applied.is_empty() => (
            false,
            COLLECTOR_TOO_OLD,
            format!(
                "the gateway's collector ({image}) knows config revision {r}: {} not in \
                 collector.yaml; upgrade the collector (upgradePolicy: Auto, or a newer \
                 spec.collector.image) or remove the setting",
                listed(&seen.not_applied)
            ),
        ),
        Known::Read(r) => (
            true,
            APPLIED,
            format!(
                "collector.yaml holds every setting of the spec; the gateway's collector \
                 ({image}) knows config revision {r}"
            ),
        ),
        Known::Own => (
            true,
            APPLIED,
            format!(
                "collector.yaml holds every setting of the spec; the gateway runs the \
                 operator's collector image ({image}, config revision {CONFIG_REVISION})"
            ),
        ),
        // Every collector reads the baseline: nothing to know.
        Known::Unknown if seen.required <= BASELINE_REVISION => (
            true,
            APPLIED,
            format!(
                "collector.yaml holds every setting of the spec, all of config revision \
                 {BASELINE_REVISION}, which every collector knows ({image})"
            ),
        ),
        Known::Unknown => (
            true,
            REVISION_UNKNOWN,
            format!(
                "collector.yaml holds every setting of the spec and needs config revision {}; \
                 no ready pod of {image} has reported its revision yet, and a collector \
                 older than that refuses the configuration at start (docs/upgrade.md)",
                seen.required
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_collector_reports_its_revision_and_one_without_build_info_is_the_baseline() {
        let now = "# HELP tracehouse_build_info Always 1\n# TYPE tracehouse_build_info gauge\n\
                   tracehouse_build_info{version=\"0.1.0\",config_revision=\"2\"} 1\n\
                   tracehouse_inflight_bytes 0\n# EOF\n";
        assert_eq!(revision_in(now), Some(2));
        let later = "tracehouse_build_info{config_revision=\"7\",version=\"0.3.0\"} 1\n";
        assert_eq!(revision_in(later), Some(7));
        // d00aafd: tracehouse metrics, no build_info.
        let before = "# TYPE tracehouse_inflight_bytes gauge\ntracehouse_inflight_bytes 0\n";
        assert_eq!(revision_in(before), Some(BASELINE_REVISION));
        // Not a tracehouse collector at all (or an empty answer): nothing known.
        assert_eq!(revision_in("up 1\nprocess_cpu_seconds_total 3\n"), None);
        assert_eq!(revision_in(""), None);
        assert_eq!(revision_in("tracehousex_thing 1\n"), None);
    }

    fn pod(name: &str, image: &str, ready: bool, ip: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "containers": [{ "name": CONTAINER, "image": image }] },
            "status": {
                "podIP": ip,
                "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }]
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_pod_asked_is_a_ready_one_running_the_image() {
        let pods = [
            pod("gw-c", "old:1", true, "10.0.0.3"),
            pod("gw-a", "new:2", true, "10.0.0.1"),
            pod("gw-b", "old:1", false, "10.0.0.2"),
            pod("gw-0", "old:1", true, "10.0.0.9"),
        ];
        assert_eq!(pod_to_ask(&pods, "old:1"), Some("10.0.0.9"));
        assert_eq!(pod_to_ask(&pods, "new:2"), Some("10.0.0.1"));
        assert_eq!(pod_to_ask(&pods[2..3], "old:1"), None, "not ready");
        assert_eq!(pod_to_ask(&pods, "other:3"), None);
    }

    #[test]
    fn what_is_known_is_read_now_else_stored_for_the_same_image() {
        let stored = TracePipelineStatus {
            collector_image: Some("old:1".into()),
            collector_config_revision: Some(1),
            ..Default::default()
        };
        assert_eq!(known(Some(2), Some(&stored), "old:1"), Known::Read(2));
        assert_eq!(known(None, Some(&stored), "old:1"), Known::Read(1));
        // Stored for another image: says nothing of this one.
        assert_eq!(known(None, Some(&stored), "new:2"), Known::Unknown);
        assert_eq!(known(None, None, "old:1"), Known::Unknown);
        assert_eq!(Known::Read(1).revision(), Some(1));
        assert_eq!(Known::Own.revision(), None);
        assert_eq!(Known::Unknown.revision(), None);
    }

    fn seen(known: Known, required: u32, not_applied: Vec<NotApplied>) -> Seen {
        Seen {
            image: "old:1".into(),
            known,
            required,
            not_applied,
        }
    }

    #[test]
    fn the_condition_names_each_setting_left_out_and_the_revision_it_needs() {
        let left_out = vec![
            NotApplied {
                field: "spec.kafka.commitFormat".into(),
                revision: 2,
            },
            NotApplied {
                field: "spec.processing".into(),
                revision: 2,
            },
        ];
        let (ok, reason, message) = verdict(&seen(Known::Read(1), 1, left_out));
        assert!(!ok);
        assert_eq!(reason, COLLECTOR_TOO_OLD);
        assert!(
            message.contains("(old:1) knows config revision 1")
                && message.contains(
                    "spec.kafka.commitFormat (config revision 2), spec.processing (config revision 2)"
                ),
            "{message}"
        );
        let (ok, reason, _) = verdict(&seen(Known::Read(2), 2, Vec::new()));
        assert!(ok && reason == APPLIED);
        let (ok, reason, _) = verdict(&seen(Known::Own, 2, Vec::new()));
        assert!(ok && reason == APPLIED);
        // Unknown: fine while the configuration is the baseline, said when it is not.
        let (ok, reason, _) = verdict(&seen(Known::Unknown, 1, Vec::new()));
        assert!(ok && reason == APPLIED);
        let (ok, reason, message) = verdict(&seen(Known::Unknown, 2, Vec::new()));
        assert!(ok && reason == REVISION_UNKNOWN, "{message}");
        assert!(message.contains("needs config revision 2"), "{message}");
    }
}
