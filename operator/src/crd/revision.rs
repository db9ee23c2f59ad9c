//! The CRD's revision: a number that grows with every change of its schema, written on the
//! CRD object as `tracehouse.dev/crd-revision`, so an operator at start can tell an older CRD
//! on the cluster (it applies its own) from a newer one (a later release's, which it leaves as
//! it is; `crate::crd_apply`). That is what keeps the CRD out of `helm rollback`'s reach: the
//! chart installs it once from `crds/`, and from then on only an operator with a higher
//! revision changes it.
//!
//! The numbers live in `revisions.txt`, one line per schema the CRD has had: `N <fingerprint>`,
//! the fingerprint being the SHA-256 of the CRD as generated without the annotation.
//! `operator/gen-crds` appends a line when the schema changes (`tracehouse-operator crd
//! --fingerprint`), and a unit test fails while the generated schema is not the last line.
//!
//! Pure: [`plan`] decides from the installed CRD alone.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use sha2::{Digest, Sha256};

/// The annotation on the CRD object that holds its revision.
pub const ANNOTATION: &str = "tracehouse.dev/crd-revision";

/// One line per schema the CRD has had, oldest first.
const HISTORY: &str = include_str!("revisions.txt");

/// SHA-256 (hex) of a CRD's YAML: what `revisions.txt` records for each revision.
pub fn fingerprint(crd: &CustomResourceDefinition) -> String {
    let yaml = tracehouse_contract::yaml::to_string(crd).expect("a CRD always serializes");
    Sha256::digest(yaml.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `(revision, fingerprint)` of each line of `history`.
fn lines(history: &str) -> impl Iterator<Item = (u32, &str)> {
    history.lines().filter_map(|line| {
        let (n, hash) = line.trim().split_once(' ')?;
        Some((n.parse().ok()?, hash.trim()))
    })
}

/// The revision of a schema with this fingerprint: its line in `history`, or one past the last
/// line for a schema not recorded yet (a change `operator/gen-crds` has not recorded).
pub fn revision_in(history: &str, fingerprint: &str) -> u32 {
    let mut last = 0;
    for (n, hash) in lines(history) {
        if hash == fingerprint {
            return n;
        }
        last = last.max(n);
    }
    last + 1
}

/// The revision of this build's schema (see [`revision_in`]).
pub fn revision_of(fingerprint: &str) -> u32 {
    revision_in(HISTORY, fingerprint)
}

/// Whether `fingerprint` is the last line of `revisions.txt` (the unit test's check, and
/// `operator/gen-crds`' question before it appends).
pub fn is_recorded_last(fingerprint: &str) -> bool {
    lines(HISTORY)
        .last()
        .is_some_and(|(_, hash)| hash == fingerprint)
}

/// The revision written on an installed CRD: 0 when it has none (installed before revisions
/// existed: by an older chart's template or by hand) or one that is not a number.
pub fn installed(crd: &CustomResourceDefinition) -> u32 {
    crd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// What to do with the CRD found on the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Apply this build's CRD: the cluster's is older (or lacks an annotation we are asked to
    /// set, at the same revision).
    Apply { installed: u32 },
    /// Leave it: the same revision with every annotation in place, or a newer one.
    Keep { installed: u32, newer: bool },
}

/// Rules, in order:
/// 1. an older revision on the cluster (0: none recorded) is replaced by ours;
/// 2. a newer one is left as it is, whatever it holds: a later release wrote it, and a
///    rollback must not take its fields away (the API server would prune them from every
///    pipeline on its next write);
/// 3. the same revision is left as it is unless an annotation the chart asks for
///    (`crds.annotations`) is missing or different — nothing is written when nothing changed.
pub fn plan(
    installed_crd: &CustomResourceDefinition,
    ours: u32,
    annotations: &BTreeMap<String, String>,
) -> Plan {
    let installed = installed(installed_crd);
    if installed < ours {
        return Plan::Apply { installed };
    }
    if installed > ours {
        return Plan::Keep {
            installed,
            newer: true,
        };
    }
    let current = installed_crd.metadata.annotations.as_ref();
    let missing = annotations
        .iter()
        .any(|(k, v)| current.and_then(|c| c.get(k)) != Some(v));
    if missing {
        Plan::Apply { installed }
    } else {
        Plan::Keep {
            installed,
            newer: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_cluster(revision: Option<&str>, extra: &[(&str, &str)]) -> CustomResourceDefinition {
        let mut crd = CustomResourceDefinition::default();
        let mut annotations: BTreeMap<String, String> = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if let Some(r) = revision {
            annotations.insert(ANNOTATION.to_owned(), r.to_owned());
        }
        crd.metadata.annotations = Some(annotations);
        crd
    }

    #[test]
    fn the_generated_schema_is_the_last_recorded_revision() {
        let fp = fingerprint(&super::super::crd_unrevised());
        assert!(
            is_recorded_last(&fp),
            "the CRD's schema changed and operator/src/crd/revisions.txt does not record it: \
             run `operator/gen-crds` (it appends `{} {fp}`) and commit",
            revision_of(&fp)
        );
    }

    #[test]
    fn revisions_are_numbered_one_up_without_gaps() {
        let numbers: Vec<u32> = lines(HISTORY).map(|(n, _)| n).collect();
        assert_eq!(numbers, (1..=numbers.len() as u32).collect::<Vec<_>>());
    }

    #[test]
    fn a_schema_is_found_by_its_fingerprint_or_numbered_after_the_last() {
        let history = "1 aaa\n2 bbb\n";
        assert_eq!(revision_in(history, "aaa"), 1);
        assert_eq!(revision_in(history, "bbb"), 2);
        assert_eq!(revision_in(history, "ccc"), 3);
        assert_eq!(revision_in("", "ccc"), 1);
    }

    #[test]
    fn rule_1_an_older_or_unrevised_crd_is_replaced() {
        let none = BTreeMap::new();
        assert_eq!(
            plan(&on_cluster(None, &[]), 3, &none),
            Plan::Apply { installed: 0 }
        );
        assert_eq!(
            plan(&on_cluster(Some("2"), &[]), 3, &none),
            Plan::Apply { installed: 2 }
        );
        assert_eq!(
            plan(&on_cluster(Some("not a number"), &[]), 3, &none),
            Plan::Apply { installed: 0 }
        );
        assert_eq!(
            plan(&CustomResourceDefinition::default(), 1, &none),
            Plan::Apply { installed: 0 }
        );
    }

    #[test]
    fn rule_2_a_newer_crd_is_left_whatever_it_lacks() {
        let wanted = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
        assert_eq!(
            plan(&on_cluster(Some("4"), &[]), 3, &wanted),
            Plan::Keep {
                installed: 4,
                newer: true
            }
        );
    }

    #[test]
    fn rule_3_the_same_revision_is_written_only_for_a_missing_annotation() {
        let wanted = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
        assert_eq!(
            plan(&on_cluster(Some("3"), &[("a", "b")]), 3, &wanted),
            Plan::Keep {
                installed: 3,
                newer: false
            }
        );
        assert_eq!(
            plan(&on_cluster(Some("3"), &[("a", "c")]), 3, &wanted),
            Plan::Apply { installed: 3 }
        );
        assert_eq!(
            plan(&on_cluster(Some("3"), &[]), 3, &BTreeMap::new()),
            Plan::Keep {
                installed: 3,
                newer: false
            }
        );
    }
}
