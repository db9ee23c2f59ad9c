//! At start: keep the cluster's TracePipeline CRD at this build's revision or newer.
//!
//! The chart installs the CRD once from its `crds/` directory (Helm never upgrades, rolls back
//! or deletes those); from then on the operator is what moves it forward: each replica, before
//! it competes for the Lease, reads the CRD and, when the cluster's revision is older than its
//! own, applies its CRD (server-side apply, forced: the fields Helm or an older operator wrote
//! become ours). A newer revision is left as it is, so `helm rollback` to an older operator
//! never takes a field away from the CRD (`crd::revision::plan` holds the rules).
//!
//! Needs `get` and `patch` on this one CRD (`config/rbac/role.yaml`, the `-crd` ClusterRole;
//! the chart's `crds.enabled`, never in namespaced mode). Without them it says what to run and
//! goes on: an older CRD still serves, and a missing one fails the start right after
//! (`reconcile::check_crd`).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::FIELD_MANAGER;
use crate::crd::{self, CRD_NAME, revision};

/// What the start did with the CRD (logged; returned for the tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Applied this build's revision over `from`.
    Applied { from: u32, to: u32 },
    /// Left as it is (`installed` is this build's revision or newer).
    Kept { installed: u32, ours: u32 },
    /// Not installed: `check_crd` names the command that installs it.
    Missing,
    /// Not allowed to read or write it (the error, with what to run instead).
    NotAllowed(String),
}

/// This build's CRD with the chart's extra annotations (`crds.annotations`).
fn desired(annotations: &BTreeMap<String, String>) -> CustomResourceDefinition {
    let mut ours = crd::crd();
    ours.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(annotations.clone());
    ours
}

/// Reads the CRD once and applies this build's when the plan says so.
pub async fn keep_current(client: &Client, annotations: &BTreeMap<String, String>) -> Outcome {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ours = crd::crd_revision();
    let by_hand = "apply it yourself: `kubectl apply --server-side --force-conflicts -f \
                   crds/tracepipelines.yaml` (from this release's chart or repository)";
    let installed = match api.get_opt(CRD_NAME).await {
        Ok(Some(installed)) => installed,
        Ok(None) => return Outcome::Missing,
        Err(e) => {
            return Outcome::NotAllowed(format!(
                "cannot read CustomResourceDefinition {CRD_NAME} ({e}); if it is older than \
                 revision {ours}, {by_hand}"
            ));
        }
    };
    match revision::plan(&installed, ours, annotations) {
        revision::Plan::Keep { installed, .. } => Outcome::Kept { installed, ours },
        revision::Plan::Apply { installed } => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match api
                .patch(CRD_NAME, &params, &Patch::Apply(&desired(annotations)))
                .await
            {
                Ok(_) => Outcome::Applied {
                    from: installed,
                    to: ours,
                },
                Err(e) => Outcome::NotAllowed(format!(
                    "cannot apply revision {ours} of CustomResourceDefinition {CRD_NAME} over \
                     revision {installed} ({e}); {by_hand}"
                )),
            }
        }
    }
}

/// Logs what [`keep_current`] did, in the words an operator's user reads.
pub fn log(outcome: &Outcome) {
    match outcome {
        Outcome::Applied { from, to } => tracing::info!(
            "CustomResourceDefinition {CRD_NAME}: applied revision {to} over revision {from}"
        ),
        Outcome::Kept { installed, ours } if installed > ours => tracing::warn!(
            "CustomResourceDefinition {CRD_NAME} is at revision {installed}, newer than this \
             operator's {ours} (a rollback?): left as it is; fields this operator does not \
             know are kept and ignored"
        ),
        Outcome::Kept { installed, .. } => {
            tracing::info!("CustomResourceDefinition {CRD_NAME} is current (revision {installed})")
        }
        Outcome::Missing => {}
        Outcome::NotAllowed(message) => tracing::warn!("{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_applied_crd_carries_the_revision_and_the_charts_annotations() {
        let extra = BTreeMap::from([(
            "argocd.argoproj.io/sync-options".to_owned(),
            "Prune=false".to_owned(),
        )]);
        let applied = desired(&extra);
        let annotations = applied.metadata.annotations.unwrap();
        assert_eq!(
            annotations[revision::ANNOTATION],
            crd::crd_revision().to_string()
        );
        assert_eq!(
            annotations["argocd.argoproj.io/sync-options"],
            "Prune=false"
        );
        assert_eq!(applied.metadata.name.as_deref(), Some(CRD_NAME));
    }
}
